import unittest

from bank import Account, InsufficientFunds


class HiddenAccountTest(unittest.TestCase):
    def test_empty_the_account_then_stop(self):
        account = Account("bo", 20)
        account.withdraw(20)
        with self.assertRaises(InsufficientFunds):
            account.withdraw(1)
        self.assertEqual(account.history, [-20])

    def test_large_overdraft(self):
        with self.assertRaises(InsufficientFunds):
            Account("dee", 5000).withdraw(5001)

    def test_transfer_all(self):
        source, target = Account("bo", 75), Account("cy")
        source.transfer(75, target)
        self.assertEqual((source.balance, target.balance), (0, 75))

    def test_failed_transfer_changes_nothing(self):
        source, target = Account("bo", 5), Account("cy", 1)
        with self.assertRaises(InsufficientFunds):
            source.transfer(6, target)
        self.assertEqual((source.balance, target.balance), (5, 1))

    def test_invalid_amounts(self):
        account = Account("bo", 5)
        with self.assertRaises(ValueError):
            account.withdraw(0)
        with self.assertRaises(ValueError):
            account.deposit(-3)
        with self.assertRaises(ValueError):
            Account("bo", -1)


if __name__ == "__main__":
    unittest.main()
