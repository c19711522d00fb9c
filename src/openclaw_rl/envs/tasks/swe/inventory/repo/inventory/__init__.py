"""A small stock-keeping inventory."""

from inventory.stock import Inventory

__all__ = ["Inventory"]
