"""The reference check: the original's functions reshaped onto the project's evaluators."""
