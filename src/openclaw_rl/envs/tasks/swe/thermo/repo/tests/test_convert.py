import unittest

from thermo import celsius_to_fahrenheit, celsius_to_kelvin, fahrenheit_to_celsius


class ConvertTest(unittest.TestCase):
    def test_boiling_point(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(100), 212)

    def test_freezing_point_back(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(32), 0)

    def test_kelvin(self):
        self.assertAlmostEqual(celsius_to_kelvin(0), 273.15)


if __name__ == "__main__":
    unittest.main()
