import unittest

from chunks import chunked, flatten


class HiddenChunkedTest(unittest.TestCase):
    def test_cases(self):
        for items, size, expected in [([], 3, []), ([1], 3, [[1]]), ([1, 2, 3], 3, [[1, 2, 3]]),
                                      ([1, 2, 3, 4, 5, 6, 7], 3, [[1, 2, 3], [4, 5, 6], [7]])]:
            with self.subTest(items=items, size=size):
                self.assertEqual(chunked(items, size), expected)

    def test_nothing_lost(self):
        items = list(range(23))
        for size in range(1, 30):
            self.assertEqual(flatten(chunked(items, size)), items)

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            chunked([1, 2], 0)


if __name__ == "__main__":
    unittest.main()
