import unittest

from wordcount import most_common, word_counts


class HiddenCountingTest(unittest.TestCase):
    def test_keys_lowercase(self):
        counts = word_counts("Hello HELLO hello World")
        self.assertEqual(counts, {"hello": 3, "world": 1})

    def test_apostrophes(self):
        self.assertEqual(word_counts("Don't stop, don't!"), {"don't": 2, "stop": 1})

    def test_most_common(self):
        self.assertEqual(most_common("The the THE cat Cat dog", 2), [("the", 3), ("cat", 2)])

    def test_empty(self):
        self.assertEqual(word_counts("... 123 !"), {})


if __name__ == "__main__":
    unittest.main()
