import unittest

from clock import format_duration, parse_duration


class HiddenDurationTest(unittest.TestCase):
    def test_format(self):
        for seconds, text in [(0, "0:00:00"), (59, "0:00:59"), (60, "0:01:00"), (3600, "1:00:00"),
                              (90061, "25:01:01")]:
            with self.subTest(seconds=seconds):
                self.assertEqual(format_duration(seconds), text)

    def test_round_trip(self):
        for seconds in (1, 599, 3599, 7322, 86400):
            self.assertEqual(parse_duration(format_duration(seconds)), seconds)

    def test_errors(self):
        with self.assertRaises(ValueError):
            format_duration(-1)
        with self.assertRaises(ValueError):
            parse_duration("1:60:00")


if __name__ == "__main__":
    unittest.main()
