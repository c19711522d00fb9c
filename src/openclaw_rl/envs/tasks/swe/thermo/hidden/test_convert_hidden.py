import unittest

from thermo import celsius_to_fahrenheit, celsius_to_kelvin, fahrenheit_to_celsius


class HiddenConvertTest(unittest.TestCase):
    def test_known_points(self):
        for celsius, fahrenheit in [(0, 32), (100, 212), (-40, -40), (37, 98.6)]:
            with self.subTest(celsius=celsius):
                self.assertAlmostEqual(celsius_to_fahrenheit(celsius), fahrenheit)
                self.assertAlmostEqual(fahrenheit_to_celsius(fahrenheit), celsius)

    def test_round_trip(self):
        for celsius in (-12.5, 3.0, 21.7):
            self.assertAlmostEqual(fahrenheit_to_celsius(celsius_to_fahrenheit(celsius)), celsius)

    def test_below_absolute_zero(self):
        with self.assertRaises(ValueError):
            celsius_to_kelvin(-300)


if __name__ == "__main__":
    unittest.main()
