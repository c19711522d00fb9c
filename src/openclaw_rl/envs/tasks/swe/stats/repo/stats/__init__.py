"""Summary statistics of lists of numbers."""

from stats.summary import mean, median, spread

__all__ = ["mean", "median", "spread"]
