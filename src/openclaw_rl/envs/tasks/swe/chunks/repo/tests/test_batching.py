import unittest

from chunks import chunked, flatten


class ChunkedTest(unittest.TestCase):
    def test_even(self):
        self.assertEqual(chunked([1, 2, 3, 4], 2), [[1, 2], [3, 4]])

    def test_uneven(self):
        self.assertEqual(chunked([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_flatten(self):
        self.assertEqual(flatten([[1], [2, 3]]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
