"""Numbers in a text: the equations it states ("64 - 9 = 54", "$12 × 3 = $36") and whether each holds.

What it is for: a user who shows their own working (a teacher pasting a student's answer, a
learner asking where they went wrong) and whose lessons ask for "the actual mistake" or for
"what they got right" is served, among sampled answers, the one that gives the right result of
an equation of theirs that does not hold, or names a step that holds
(experience/checks.py, kinds `corrects` and `confirms`). Only the request's equations are
judged: whether an answer's own arithmetic holds is no check (docs/experiments.md, "Written
equations that hold": preferring answers whose equations hold passed over worked answers with
one slip for answers with no working).

An equation is two or more numbers joined by + - × x * ÷ /, "=", and a number; the left side is
evaluated with the usual precedence; it holds when the stated result is the value rounded to
the stated result's decimals ("10 / 3 = 3.33" holds). The numbers of a text (`values`,
`numbers`, `last_number`) are read here too, for experience/checks.py.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = ["Equation", "SCORERS", "checked_note", "confirms", "corrects", "equations", "last_number", "note_for",
           "numbers", "request_numbers", "unnumbered", "values"]

_NUM = r"\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"  # "1,200", not the comma after "54,"
_OP = r"(?:[-+*/\u00d7\u00f7\u2212]|(?<=\s)x(?=\s))"
# from the head of a chain of at most 12 terms (never from inside one: each chain is read once,
# so a long "1+1+1+..." without "=" costs linear time, not quadratic)
_EQUATION = re.compile(rf"(?<![\d.,$])(?<![-+*/\u00d7\u00f7\u2212]\s)(?<!\sx\s)(?<![-+*/\u00d7\u00f7\u2212])"
                       rf"({_NUM}(?:\s*{_OP}\s*{_NUM}){{1,11}})\s*=\s*({_NUM})(?!\.?\d)")
_TOKEN = re.compile(rf"{_NUM}|{_OP}")
_OPS = {"\u00d7": "*", "x": "*", "\u00f7": "/", "\u2212": "-"}
_ANY_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_NUMBERING = re.compile(r"\bstep\s*\d+\b|^\s*\d{1,2}[.)]\s", re.IGNORECASE | re.MULTILINE)  # "Step 3", "2. "


@dataclass(frozen=True)
class Equation:
    """`text` as written; `value`: its left side evaluated; `stated`: its right side; `terms`: the
    numbers of its left side."""

    text: str
    value: float
    stated: float
    decimals: int
    terms: tuple[float, ...]

    @property
    def holds(self) -> bool:
        return abs(self.value - self.stated) <= 0.5 * 10 ** -self.decimals + 1e-9


def _number(text: str) -> float:
    return float(text.lstrip("$").replace(",", ""))


def _evaluate(tokens: list[str]) -> float | None:
    """Numbers and operators, alternating; * and / before + and -; None on a division by 0."""
    terms: list[float] = [_number(tokens[0])]
    signs: list[str] = []
    for op, token in zip(tokens[1::2], tokens[2::2]):
        op, value = _OPS.get(op, op), _number(token)
        if op in "*/":
            if op == "/" and value == 0:
                return None
            terms[-1] = terms[-1] * value if op == "*" else terms[-1] / value
        else:
            terms.append(value)
            signs.append(op)
    total = terms[0]
    for sign, term in zip(signs, terms[1:]):
        total = total + term if sign == "+" else total - term
    return total


@functools.lru_cache(maxsize=256)  # the request's, once per scoring of its candidates
def equations(text: str) -> tuple[Equation, ...]:
    """Every equation stated in `text`, in order."""
    found = []
    for match in _EQUATION.finditer(text):
        left, right = match.groups()
        tokens = _TOKEN.findall(left)
        value, stated = _evaluate(tokens), _number(right)
        if value is None or not math.isfinite(value) or not math.isfinite(stated):
            continue  # a division by 0; numbers past a float's range
        decimals = len(right.split(".")[1]) if "." in right else 0
        found.append(Equation(match.group(), value, stated, decimals, tuple(_number(t) for t in tokens[::2])))
    return tuple(found)


def values(text: str) -> list[float]:
    """The numbers written in the text, in order ("1,200" is 1200)."""
    return [float(number.replace(",", "")) for number in _ANY_NUMBER.findall(text)]


def numbers(text: str) -> set[float]:
    return set(values(text))


@functools.lru_cache(maxsize=64)  # one request's, for all its candidates and checks
def request_numbers(request: str) -> frozenset[float]:
    return frozenset(values(request))


def unnumbered(text: str) -> str:
    """The text without "Step N" labels and list numbers ("2. "), which count nothing."""
    return _NUMBERING.sub(" ", text)


def last_number(text: str) -> float | None:
    """The text's last number, not counting "Step N" labels and list numbers (an outline's
    "Step 3: Give the answer." has no answer)."""
    found = values(unnumbered(text))
    return found[-1] if found else None


def corrects(answers: Sequence[str], request: str) -> list[float]:
    """1 for an answer that gives the right result of an equation of the request that does not
    hold, else 0; 1 for every answer when every equation of the request holds (nothing to correct)."""
    right = {round(e.value, e.decimals) for e in equations(request) if not e.holds}
    if not right:
        return [1.0] * len(answers)
    return [float(bool(numbers(a) & right)) for a in answers]


def confirms(answers: Sequence[str], request: str) -> list[float]:
    """1 for an answer that names a step of the request that holds: its result and one of its
    terms (a bare "The answer is 45." repeats the user's result, it names no step), not a wrong
    step's result; else 0. 1 for every answer when the request states no such equation."""
    stated = equations(request)
    wrong = {e.stated for e in stated if not e.holds}
    right = [e for e in stated if e.holds and e.stated not in wrong]
    if not right:
        return [1.0] * len(answers)
    return [float(any(e.stated in said and said & set(e.terms) for e in right))
            for said in map(numbers, answers)]


def _shown(value: float, decimals: int) -> str:
    value = round(value, decimals)
    return f"{value:,.{decimals}f}" if decimals else f"{int(value):,}"


def checked_note(request: str, wrong: bool = True, right: bool = False) -> str:
    """A sentence for the user's experience block: the request's equations as checked here, those
    that do not hold with their right result (`wrong`: a lesson asks for the mistake) and those
    that hold (`right`: one asks for what was right); "" when there are none. A 135M model rarely
    works out the right result of a user's slip itself: of 128 comments sampled with the lesson
    "Mention the actual mistake." in its block, 5 gave it (docs/experiments.md)."""
    said = []
    for e in equations(request):
        left = e.text.split("=")[0].strip()
        if wrong and not e.holds:
            said.append(f"{e.text} is wrong, {left} = {_shown(e.value, e.decimals)}")
        elif right and e.holds:
            said.append(f"{e.text} is right")
    return f"Checked arithmetic of the message: {'; '.join(said)}." if said else ""


# the checks of experience/checks.py against the request's own equations, by kind
SCORERS = {"corrects": corrects, "confirms": confirms}


def note_for(kinds: Collection[str], request: str) -> str:
    """`checked_note` for a user's checks of these kinds: the equations that do not hold when
    `corrects` is among them, those that hold when `confirms` is; "" for neither."""
    wrong, right = "corrects" in kinds, "confirms" in kinds
    return checked_note(request, wrong, right) if wrong or right else ""
