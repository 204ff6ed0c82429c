"""Model configs and parallel layouts."""
