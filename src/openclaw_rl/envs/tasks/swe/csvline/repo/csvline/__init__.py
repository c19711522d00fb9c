"""Minimal comma-separated values, without quoting."""

from csvline.fields import join_fields, parse_table, split_fields

__all__ = ["join_fields", "parse_table", "split_fields"]
