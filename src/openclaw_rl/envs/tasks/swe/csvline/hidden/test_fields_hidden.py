import unittest

from csvline import join_fields, parse_table, split_fields


class HiddenFieldsTest(unittest.TestCase):
    def test_split_default(self):
        self.assertEqual(split_fields(" x ,y,  z"), ["x", "y", "z"])

    def test_split_other_separator(self):
        self.assertEqual(split_fields("a;b ; c", ";"), ["a", "b", "c"])
        self.assertEqual(split_fields("a,b;c", ";"), ["a,b", "c"])

    def test_round_trip(self):
        fields = ["one", "two", "three"]
        self.assertEqual(split_fields(join_fields(fields)), fields)

    def test_table_skips_blank_lines(self):
        text = "city, pop\n\nOslo, 700\nLima,9000\n"
        self.assertEqual(parse_table(text), [{"city": "Oslo", "pop": "700"}, {"city": "Lima", "pop": "9000"}])
        self.assertEqual(parse_table(""), [])


if __name__ == "__main__":
    unittest.main()
