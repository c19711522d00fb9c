import unittest

from stats import mean, median, spread


class HiddenMedianTest(unittest.TestCase):
    def test_cases(self):
        for values, expected in [([5], 5), ([9, 1, 5], 5), ([4, 1, 3, 2], 2.5), ([10, -2, 7, 7, 0], 7),
                                 ([2.5, 0.5], 1.5)]:
            with self.subTest(values=values):
                self.assertEqual(median(values), expected)

    def test_input_not_changed(self):
        values = [3, 1, 2]
        median(values)
        self.assertEqual(values, [3, 1, 2])

    def test_empty(self):
        for function in (mean, median, spread):
            with self.assertRaises(ValueError):
                function([])


if __name__ == "__main__":
    unittest.main()
