"""Rectangular grids of characters."""

from grid.cells import count_islands, neighbors

__all__ = ["count_islands", "neighbors"]
