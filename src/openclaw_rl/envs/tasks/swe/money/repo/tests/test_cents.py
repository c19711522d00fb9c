import unittest

from money import format_cents, parse_cents


class FormatTest(unittest.TestCase):
    def test_thousands(self):
        self.assertEqual(format_cents(123450), "$1,234.50")

    def test_few_cents(self):
        self.assertEqual(format_cents(305), "$3.05")


class ParseTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_cents("$1,234.50"), 123450)


if __name__ == "__main__":
    unittest.main()
