"""Calendar arithmetic for the Gregorian calendar."""

from dates.calendar import day_of_year, days_in_month, is_leap_year

__all__ = ["day_of_year", "days_in_month", "is_leap_year"]
