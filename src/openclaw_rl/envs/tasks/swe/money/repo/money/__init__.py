"""Amounts of money kept as integer cents."""

from money.cents import format_cents, parse_cents

__all__ = ["format_cents", "parse_cents"]
