import unittest

from grid import count_islands, neighbors

GRID = ["#..",
        "..#",
        "#.#"]


class NeighborsTest(unittest.TestCase):
    def test_middle(self):
        self.assertEqual(sorted(neighbors(GRID, 1, 1)), [(0, 1), (1, 0), (1, 2), (2, 1)])

    def test_bottom_left_corner(self):
        self.assertEqual(sorted(neighbors(GRID, 2, 0)), [(1, 0), (2, 1)])


class IslandsTest(unittest.TestCase):
    def test_count(self):
        self.assertEqual(count_islands(GRID), 3)


if __name__ == "__main__":
    unittest.main()
