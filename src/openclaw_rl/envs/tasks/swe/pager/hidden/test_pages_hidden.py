import unittest

from pager import page, page_count


class HiddenPageCountTest(unittest.TestCase):
    def test_counts(self):
        for total, per_page, expected in [(0, 5, 0), (1, 5, 1), (5, 5, 1), (6, 5, 2), (10, 3, 4), (11, 5, 3)]:
            with self.subTest(total=total, per_page=per_page):
                self.assertEqual(page_count(total, per_page), expected)

    def test_per_page_must_be_positive(self):
        with self.assertRaises(ValueError):
            page_count(3, 0)


class HiddenPageTest(unittest.TestCase):
    def test_last_short_page(self):
        self.assertEqual(page(list(range(10)), 4, 3), [9])

    def test_out_of_range(self):
        with self.assertRaises(IndexError):
            page(list(range(10)), 5, 3)
        with self.assertRaises(IndexError):
            page([], 1, 3)


if __name__ == "__main__":
    unittest.main()
