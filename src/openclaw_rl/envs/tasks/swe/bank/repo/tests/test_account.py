import unittest

from bank import Account, InsufficientFunds


class AccountTest(unittest.TestCase):
    def test_withdraw_some(self):
        account = Account("ann", 100)
        account.withdraw(30)
        self.assertEqual(account.balance, 70)

    def test_withdraw_everything(self):
        account = Account("ann", 50)
        account.withdraw(50)
        self.assertEqual(account.balance, 0)

    def test_overdraft(self):
        with self.assertRaises(InsufficientFunds):
            Account("ann", 10).withdraw(11)


if __name__ == "__main__":
    unittest.main()
