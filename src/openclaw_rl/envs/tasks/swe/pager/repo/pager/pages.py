"""Pages of a list: page numbers start at 1, and the last page may be short."""


def page_count(total: int, per_page: int) -> int:
    """How many pages `total` items fill at `per_page` items a page (no items, no pages)."""
    if per_page <= 0:
        raise ValueError(f"per_page must be positive, got {per_page}")
    return total // per_page


def page(items: list, number: int, per_page: int) -> list:
    """The items on page `number` (1-based)."""
    pages = page_count(len(items), per_page)
    if not 1 <= number <= pages:
        raise IndexError(f"page {number} is out of range: there are {pages} pages")
    start = (number - 1) * per_page
    return items[start:start + per_page]
