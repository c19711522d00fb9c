"""Rankings: the highest score first; players with equal scores in alphabetical order."""


def top(scores: dict[str, int], n: int = 3) -> list[tuple[str, int]]:
    """The `n` best (player, score) pairs."""
    ranked = sorted(scores.items(), key=lambda item: (item[1], item[0]))
    return ranked[:n]


def rank(scores: dict[str, int], player: str) -> int:
    """The player's 1-based place in the ranking."""
    if player not in scores:
        raise KeyError(f"unknown player {player!r}")
    names = [name for name, _ in top(scores, len(scores))]
    return names.index(player) + 1
