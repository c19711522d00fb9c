"""Accounts in whole cents; the balance may reach zero but never go below it."""


class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner: str, balance: int = 0) -> None:
        if balance < 0:
            raise ValueError(f"opening balance cannot be negative, got {balance}")
        self.owner = owner
        self.balance = balance
        self.history: list[int] = []

    def deposit(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"deposit must be positive, got {amount}")
        self.balance += amount
        self.history.append(amount)

    def withdraw(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"withdrawal must be positive, got {amount}")
        if amount >= self.balance:
            raise InsufficientFunds(f"{self.owner} has {self.balance}, cannot withdraw {amount}")
        self.balance -= amount
        self.history.append(-amount)

    def transfer(self, amount: int, to: "Account") -> None:
        self.withdraw(amount)
        to.deposit(amount)
