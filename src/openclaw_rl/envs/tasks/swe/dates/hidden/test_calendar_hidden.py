import unittest

from dates import day_of_year, days_in_month, is_leap_year


class HiddenCalendarTest(unittest.TestCase):
    def test_leap_years(self):
        for year, leap in [(1900, False), (2000, True), (2023, False), (2024, True), (2100, False), (2400, True)]:
            with self.subTest(year=year):
                self.assertEqual(is_leap_year(year), leap)

    def test_february(self):
        self.assertEqual(days_in_month(2000, 2), 29)
        self.assertEqual(days_in_month(1900, 2), 28)

    def test_last_day(self):
        self.assertEqual(day_of_year(2000, 12, 31), 366)
        self.assertEqual(day_of_year(2001, 12, 31), 365)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            day_of_year(1900, 2, 29)
        with self.assertRaises(ValueError):
            days_in_month(2000, 13)


if __name__ == "__main__":
    unittest.main()
