import unittest

from leaderboard import rank, top

SCORES = {"dan": 4, "ann": 7, "eve": 9, "bob": 7, "cy": 2}


class HiddenTopTest(unittest.TestCase):
    def test_order_with_ties(self):
        self.assertEqual(top(SCORES, 4), [("eve", 9), ("ann", 7), ("bob", 7), ("dan", 4)])

    def test_more_than_there_are(self):
        self.assertEqual(len(top(SCORES, 10)), 5)
        self.assertEqual(top(SCORES, 10)[-1], ("cy", 2))

    def test_none(self):
        self.assertEqual(top(SCORES, 0), [])


class HiddenRankTest(unittest.TestCase):
    def test_places(self):
        self.assertEqual([rank(SCORES, p) for p in ("eve", "ann", "bob", "dan", "cy")], [1, 2, 3, 4, 5])


if __name__ == "__main__":
    unittest.main()
