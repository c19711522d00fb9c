"""Leap years, month lengths and day numbers in the Gregorian calendar."""


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and year % 100 != 0


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1..12, got {month}")
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def day_of_year(year: int, month: int, day: int) -> int:
    """1 for January 1st."""
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"{year}-{month:02d} has no day {day}")
    return sum(days_in_month(year, m) for m in range(1, month)) + day
