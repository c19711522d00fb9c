import unittest

from inventory import Inventory


class InventoryTest(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(Inventory().count("apple"), 0)

    def test_add_new_item(self):
        inventory = Inventory()
        inventory.add("apple", 3)
        self.assertEqual(inventory.count("apple"), 3)


if __name__ == "__main__":
    unittest.main()
