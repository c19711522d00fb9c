import unittest

from leaderboard import rank, top


class TopTest(unittest.TestCase):
    def test_best_first(self):
        self.assertEqual(top({"ann": 5, "bob": 9, "cy": 7}, 2), [("bob", 9), ("cy", 7)])


class RankTest(unittest.TestCase):
    def test_unknown_player(self):
        with self.assertRaises(KeyError):
            rank({"ann": 1}, "bob")


if __name__ == "__main__":
    unittest.main()
