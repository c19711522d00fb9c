"""Batching helpers: consecutive chunks of a fixed size, the last one possibly shorter."""


def chunked(items: list, size: int) -> list[list]:
    """Consecutive chunks of `size` items; nothing is dropped."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    return [items[start:start + size] for start in range(0, len(items) - size + 1, size)]


def flatten(chunks: list[list]) -> list:
    return [item for chunk in chunks for item in chunk]
