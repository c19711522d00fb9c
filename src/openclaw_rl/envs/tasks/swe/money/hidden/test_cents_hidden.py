import unittest

from money import format_cents, parse_cents


class HiddenFormatTest(unittest.TestCase):
    def test_cases(self):
        for cents, text in [(0, "$0.00"), (7, "$0.07"), (305, "$3.05"), (1000, "$10.00"), (-305, "-$3.05"),
                            (123456789, "$1,234,567.89")]:
            with self.subTest(cents=cents):
                self.assertEqual(format_cents(cents), text)

    def test_symbol(self):
        self.assertEqual(format_cents(250, "€"), "€2.50")

    def test_round_trip(self):
        for cents in (-1, 0, 9, 10, 99, 101, 555555):
            self.assertEqual(parse_cents(format_cents(cents)), cents)


if __name__ == "__main__":
    unittest.main()
