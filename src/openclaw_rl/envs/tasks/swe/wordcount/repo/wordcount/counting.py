"""Count words: runs of letters and apostrophes, compared case-insensitively."""

import re

_WORD = re.compile(r"[A-Za-z']+")


def word_counts(text: str) -> dict[str, int]:
    """How often each word occurs; the keys are lowercase."""
    counts: dict[str, int] = {}
    for word in _WORD.findall(text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def most_common(text: str, n: int = 1) -> list[tuple[str, int]]:
    """The `n` most frequent words, ties broken alphabetically."""
    return sorted(word_counts(text).items(), key=lambda item: (-item[1], item[0]))[:n]
