import unittest

from pager import page, page_count


class PageCountTest(unittest.TestCase):
    def test_exact_pages(self):
        self.assertEqual(page_count(9, 3), 3)

    def test_partial_last_page(self):
        self.assertEqual(page_count(10, 3), 4)


class PageTest(unittest.TestCase):
    def test_first_page(self):
        self.assertEqual(page(list(range(10)), 1, 3), [0, 1, 2])


if __name__ == "__main__":
    unittest.main()
