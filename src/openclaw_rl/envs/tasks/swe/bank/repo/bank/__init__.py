"""A bank account that never goes below zero."""

from bank.account import Account, InsufficientFunds

__all__ = ["Account", "InsufficientFunds"]
