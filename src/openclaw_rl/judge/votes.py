"""Reading judge answers: scores, corrections, hints, and the majority over votes.

Decisions and why:

- Only the LAST `SCORE:` (or `CORRECTION:`) line counts. Judges reason before they
  answer and often restate the format ("SCORE: +1 if ..."), so earlier lines are
  drafts; the last one is the verdict. If that last line is malformed the whole answer
  is rejected rather than falling back to an earlier draft.
- Parsing is lenient about presentation (case, surrounding whitespace, markdown
  emphasis, headings, quotes, bullets, a trailing full stop, a Unicode minus sign) and
  strict about values: only +1, 1, -1 and 0. "SCORE: 2" or "SCORE: +1 or 0" raise.
- A failed parse raises `VoteParseError`. The caller drops that vote; it is never
  counted as 0 (docs/method.md §2, step 4).
- `majority` is a plurality: the most common vote wins, and a tie for the top (or no
  votes at all) gives 0, so an undecided judge produces no training push.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = [
    "MIN_HINT_CHARS",
    "VoteParseError",
    "dedupe_hints",
    "majority",
    "parse_directive",
    "parse_preference",
    "parse_score",
]

MIN_HINT_CHARS = 10  # a kept hint is strictly longer than this, once stripped
NEAR_DUPLICATE_JACCARD = 0.8

_VALID_SCORES = {"+1": 1, "1": 1, "-1": -1, "0": 0}
_MINUS_LOOKALIKES = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\uff0b": "+"})
# Markdown emphasis and code marks that may wrap a key, a value or the whole line.
_EMPHASIS = re.compile(r"[*_`]+")
# Heading marks, quote marks, bullets and stray quotes in front of the key.
_LINE_PREFIX = re.compile(r"^(?:[#>\s\"'\u201c\u201d]+|[-\u2022+]\s+|\d+[.)]\s+)+")
_KEY_LINE = re.compile(r"^(?P<key>score|correction|prefer)\s*:\s*(?P<value>.*?)\s*\.?\s*$", re.IGNORECASE)
_HINT_BLOCK = re.compile(r"\[\s*hint\s*\](?P<hint>.*?)\[\s*/\s*hint\s*\]", re.IGNORECASE | re.DOTALL)


class VoteParseError(ValueError):
    """A judge answer holds no valid verdict; drop the vote, do not score it as 0."""


def _key_lines(text: str, key: str) -> list[str]:
    """The raw values of every `KEY: value` line in `text`, in order."""
    values = []
    for raw_line in text.splitlines():
        line = _EMPHASIS.sub("", raw_line).translate(_MINUS_LOOKALIKES)
        line = _LINE_PREFIX.sub("", line).strip().strip("\"'\u201c\u201d")
        match = _KEY_LINE.match(line)
        if match and match["key"].lower() == key:
            values.append(match["value"])
    return values


def parse_score(text: str) -> int:
    """The score in {+1, 0, -1} on the last `SCORE:` line of a judge answer.

    Raises VoteParseError when there is no such line or its value is not one of
    +1, 1, -1, 0.
    """
    values = _key_lines(text, "score")
    if not values:
        raise VoteParseError(
            f"no 'SCORE:' line in judge answer ({_preview(text)}); "
            "the judge must end with a line like 'SCORE: +1', 'SCORE: -1' or 'SCORE: 0'"
        )
    value = values[-1].replace(" ", "")
    if value not in _VALID_SCORES:
        raise VoteParseError(
            f"last SCORE line has value {values[-1]!r}; expected one of +1, 1, -1, 0"
        )
    return _VALID_SCORES[value]


def parse_preference(text: str) -> str:
    """"A", "B" or "same" from the last `PREFER:` line of a comparison answer
    (prompts.comparison_prompt); VoteParseError when there is none or it names neither."""
    values = _key_lines(text, "prefer")
    if not values:
        raise VoteParseError(f"no 'PREFER:' line in judge answer ({_preview(text)}); "
                             "the judge must end with 'PREFER: A', 'PREFER: B' or 'PREFER: same'")
    value = values[-1].strip().strip("\"'").lower()
    for name, words in (("A", ("a", "answer a", "answer_a")), ("B", ("b", "answer b", "answer_b")),
                        ("same", ("same", "tie", "neither", "equal", "both"))):
        if value in words:
            return name
    raise VoteParseError(f"last PREFER line has value {values[-1]!r}; expected A, B or same")


def majority(votes: list[int]) -> int:
    """The most common vote; a tie for the most common, or no votes, gives 0."""
    for vote in votes:
        if vote not in (-1, 0, 1):
            raise ValueError(f"vote {vote!r} is not one of -1, 0, +1; parse votes with parse_score")
    ranked = Counter(votes).most_common()
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return 0
    return ranked[0][0]


def parse_directive(text: str) -> tuple[bool, str | None]:
    """(has correction, hint) from a directive judge answer.

    The yes/no comes from the last `CORRECTION:` line; VoteParseError if there is none
    or it is neither yes nor no. The hint is the text of the last `[HINT] ... [/HINT]`
    block, kept only when the answer is yes and the stripped hint is longer than
    MIN_HINT_CHARS characters; otherwise it is None.
    """
    values = _key_lines(text, "correction")
    if not values:
        raise VoteParseError(
            f"no 'CORRECTION:' line in judge answer ({_preview(text)}); "
            "the judge must answer with a line 'CORRECTION: yes' or 'CORRECTION: no'"
        )
    answer = values[-1].strip().lower()
    if answer not in ("yes", "no"):
        raise VoteParseError(f"last CORRECTION line has value {values[-1]!r}; expected yes or no")
    if answer == "no":
        return False, None
    blocks = _HINT_BLOCK.findall(text)
    hint = blocks[-1].strip() if blocks else ""
    return True, (hint if len(hint) > MIN_HINT_CHARS else None)


def _normalise(hint: str) -> str:
    """Lower case, punctuation as spaces, single spaces: the form hints are compared in."""
    return " ".join(re.sub(r"[^\w\s]|_", " ", hint.lower()).split())


def _near_duplicates(a: str, b: str) -> bool:
    """Whether two normalised hints say the same thing (containment or Jaccard >= 0.8)."""
    if f" {a} " in f" {b} " or f" {b} " in f" {a} ":
        return True
    tokens_a, tokens_b = set(a.split()), set(b.split())
    return len(tokens_a & tokens_b) / len(tokens_a | tokens_b) >= NEAR_DUPLICATE_JACCARD


def dedupe_hints(hints: list[str], max_hints: int = 3) -> list[str]:
    """Hints with near-duplicates removed, first seen kept, at most `max_hints`.

    Two hints are near-duplicates when, compared without case, punctuation or extra
    whitespace, one is contained in the other (on word boundaries) or their word sets
    have a Jaccard similarity of at least 0.8. Hints that are empty after normalising
    are dropped. The kept hints are returned as given.
    """
    if max_hints < 0:
        raise ValueError(f"max_hints must be >= 0, got {max_hints}")
    kept: list[str] = []
    kept_normalised: list[str] = []
    for hint in hints:
        if len(kept) == max_hints:
            break
        normalised = _normalise(hint)
        if not normalised or any(_near_duplicates(normalised, k) for k in kept_normalised):
            continue
        kept.append(hint)
        kept_normalised.append(normalised)
    return kept


def _preview(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "empty"
    return repr(flat if len(flat) <= limit else "..." + flat[-limit:])
