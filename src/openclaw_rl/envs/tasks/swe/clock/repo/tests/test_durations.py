import unittest

from clock import format_duration, parse_duration


class DurationTest(unittest.TestCase):
    def test_format(self):
        self.assertEqual(format_duration(3725), "1:02:05")

    def test_parse(self):
        self.assertEqual(parse_duration("1:02:05"), 3725)


if __name__ == "__main__":
    unittest.main()
