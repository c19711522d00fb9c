import unittest

from dates import day_of_year, days_in_month, is_leap_year


class LeapYearTest(unittest.TestCase):
    def test_ordinary_leap_year(self):
        self.assertTrue(is_leap_year(2024))

    def test_year_2000(self):
        self.assertTrue(is_leap_year(2000))


class DaysTest(unittest.TestCase):
    def test_april(self):
        self.assertEqual(days_in_month(2023, 4), 30)

    def test_day_of_year(self):
        self.assertEqual(day_of_year(2023, 3, 1), 60)


if __name__ == "__main__":
    unittest.main()
