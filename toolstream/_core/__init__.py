"""Private implementation of toolstream's core; import public names from ``toolstream``."""
