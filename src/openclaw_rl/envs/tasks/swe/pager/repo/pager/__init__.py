"""Split lists into numbered pages."""

from pager.pages import page, page_count

__all__ = ["page", "page_count"]
