import unittest

from csvline import join_fields, parse_table, split_fields


class FieldsTest(unittest.TestCase):
    def test_split_default(self):
        self.assertEqual(split_fields("a, b,c"), ["a", "b", "c"])

    def test_join(self):
        self.assertEqual(join_fields(["a", "b"]), "a,b")

    def test_table(self):
        self.assertEqual(parse_table("name,age\nann,7\n"), [{"name": "ann", "age": "7"}])


if __name__ == "__main__":
    unittest.main()
