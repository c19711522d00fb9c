import unittest

from slugs import slugify, unique_slug


class HiddenSlugifyTest(unittest.TestCase):
    def test_cases(self):
        cases = [
            ("Hello, World!", "hello-world"),
            ("  Leading and trailing  ", "leading-and-trailing"),
            ("...Dots...", "dots"),
            ("already-a-slug", "already-a-slug"),
            ("!!!", ""),
            ("", ""),
        ]
        for title, expected in cases:
            with self.subTest(title=title):
                self.assertEqual(slugify(title), expected)

    def test_separator(self):
        self.assertEqual(slugify("  Snake case, please ", "_"), "snake_case_please")


class HiddenUniqueSlugTest(unittest.TestCase):
    def test_counts_up(self):
        self.assertEqual(unique_slug("News!", {"news", "news-2"}), "news-3")

    def test_free(self):
        self.assertEqual(unique_slug("Fresh", set()), "fresh")


if __name__ == "__main__":
    unittest.main()
