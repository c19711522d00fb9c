import unittest

from slugs import slugify, unique_slug


class SlugifyTest(unittest.TestCase):
    def test_simple_title(self):
        self.assertEqual(slugify("Release Notes 2024"), "release-notes-2024")

    def test_punctuation_at_the_end(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")


class UniqueSlugTest(unittest.TestCase):
    def test_taken(self):
        self.assertEqual(unique_slug("News", {"news"}), "news-2")


if __name__ == "__main__":
    unittest.main()
