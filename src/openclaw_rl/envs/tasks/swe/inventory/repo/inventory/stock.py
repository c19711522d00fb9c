"""Count items in stock; an item whose count drops to zero is removed."""


class Inventory:
    def __init__(self) -> None:
        self._stock: dict[str, int] = {}

    def add(self, item: str, quantity: int = 1) -> None:
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        self._stock[item] += quantity

    def remove(self, item: str, quantity: int = 1) -> None:
        have = self._stock.get(item, 0)
        if quantity > have:
            raise ValueError(f"cannot remove {quantity} {item}: only {have} in stock")
        self._stock[item] = have - quantity
        if self._stock[item] == 0:
            del self._stock[item]

    def count(self, item: str) -> int:
        return self._stock.get(item, 0)

    def items(self) -> list[tuple[str, int]]:
        """(item, count) pairs in alphabetical order."""
        return sorted(self._stock.items())
