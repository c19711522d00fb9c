"""Format and parse amounts held as integer cents, e.g. 123450 <-> "$1,234.50"."""


def format_cents(cents: int, symbol: str = "$") -> str:
    """'$1,234.50' for 123450; a negative amount as '-$3.05'."""
    sign = "-" if cents < 0 else ""
    dollars, rest = divmod(abs(cents), 100)
    return f"{sign}{symbol}{dollars:,}.{rest}"


def parse_cents(text: str, symbol: str = "$") -> int:
    """The inverse of format_cents."""
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-").removeprefix(symbol).replace(",", "")
    dollars, _, rest = digits.partition(".")
    return sign * (int(dollars) * 100 + int(rest.ljust(2, "0")[:2]))
