import unittest

from grid import count_islands, neighbors


class HiddenNeighborsTest(unittest.TestCase):
    def test_corners(self):
        grid = ["....", "....", "...."]
        self.assertEqual(sorted(neighbors(grid, 0, 0)), [(0, 1), (1, 0)])
        self.assertEqual(sorted(neighbors(grid, 2, 3)), [(1, 3), (2, 2)])
        self.assertEqual(sorted(neighbors(grid, 2, 1)), [(1, 1), (2, 0), (2, 2)])

    def test_single_row(self):
        self.assertEqual(sorted(neighbors(["..."], 0, 1)), [(0, 0), (0, 2)])


class HiddenIslandsTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(count_islands(["##.", "#..", "..#"]), 2)
        self.assertEqual(count_islands(["...", "..."]), 0)
        self.assertEqual(count_islands(["###", "#.#", "###"]), 1)
        self.assertEqual(count_islands(["#.#.#"]), 3)


if __name__ == "__main__":
    unittest.main()
