import unittest

from stats import mean, median, spread


class SummaryTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)

    def test_median_sorted_input(self):
        self.assertEqual(median([1, 2, 3]), 2)

    def test_median_unsorted_input(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_spread(self):
        self.assertEqual(spread([4, 9, 1]), 8)


if __name__ == "__main__":
    unittest.main()
