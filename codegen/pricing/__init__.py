"""Pricing: the one pricer of layouts, network levels, sensitivity."""
