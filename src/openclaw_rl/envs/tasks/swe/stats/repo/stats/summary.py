"""Mean, median and spread; each refuses an empty list rather than guessing."""


def mean(values: list[float]) -> float:
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values: list[float]) -> float:
    """The middle value; for an even count, the mean of the two middle values."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = list(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def spread(values: list[float]) -> float:
    if not values:
        raise ValueError("spread of an empty list")
    return max(values) - min(values)
