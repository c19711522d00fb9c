import unittest

from inventory import Inventory


class HiddenInventoryTest(unittest.TestCase):
    def test_add_accumulates(self):
        inventory = Inventory()
        inventory.add("pear")
        inventory.add("pear", 4)
        self.assertEqual(inventory.count("pear"), 5)

    def test_remove_to_zero_forgets_item(self):
        inventory = Inventory()
        inventory.add("fig", 2)
        inventory.remove("fig", 2)
        self.assertEqual(inventory.items(), [])

    def test_remove_too_many(self):
        inventory = Inventory()
        inventory.add("kiwi", 1)
        with self.assertRaises(ValueError):
            inventory.remove("kiwi", 2)
        with self.assertRaises(ValueError):
            inventory.remove("plum")

    def test_items_sorted(self):
        inventory = Inventory()
        for item, quantity in [("plum", 2), ("apple", 1), ("lime", 3)]:
            inventory.add(item, quantity)
        self.assertEqual(inventory.items(), [("apple", 1), ("lime", 3), ("plum", 2)])

    def test_quantity_must_be_positive(self):
        with self.assertRaises(ValueError):
            Inventory().add("apple", 0)


if __name__ == "__main__":
    unittest.main()
