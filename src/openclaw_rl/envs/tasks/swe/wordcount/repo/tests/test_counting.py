import unittest

from wordcount import most_common, word_counts


class CountingTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(word_counts("a cat and a hat"), {"a": 2, "cat": 1, "and": 1, "hat": 1})

    def test_case_insensitive(self):
        self.assertEqual(word_counts("The cat and the hat")["the"], 2)

    def test_most_common(self):
        self.assertEqual(most_common("b a b"), [("b", 2)])


if __name__ == "__main__":
    unittest.main()
