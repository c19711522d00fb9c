"""When does a newer lesson contradict an older one? A small, explicit rule.

Two lessons contradict when they are about the same point and take opposite sides on it.
The embedding similarity says "same topic" (consolidate.py checks it); this module says
"opposite sides", from cue words only, so that every decision can be read and tested:

1. **Graded axes.** Both lessons mention one of length (long/detailed vs short/brief/
   "one sentence"), amount (more/extra vs fewer/less), formality (formal vs casual) or
   warmth (friendly/encouraging vs blunt/strict), on opposite sides: "Answer in one
   sentence" vs "Give a long, detailed answer", "Use a formal tone" vs "Use a casual
   tone". Limits ("no more than", "at most", "under") are the short/fewer side.
2. **Do vs don't about the same thing.** Every content word (not a stop word, not a cue,
   not a generic verb such as "use" or "write", not a word for the container such as
   "answer", "text", "sentence", "paragraph"; stemmed to its first five letters after a
   plural "s", so "steps"/"step" and "explain"/"explanation" meet) takes the sign of its
   place in its clause: negative after an odd number of negators (not, no, never, don't,
   avoid, skip, omit, without, stop, remove, drop, instead, rather, ...) earlier in the
   clause, positive otherwise. A clause ends at `,` `;` `:` `.` and at "and"/"but"/"then"
   before a new verb ("Remove the formatting and write a short paragraph": the paragraph
   is not negated). A word the two lessons share, each on one side only, and opposite
   sides: a contradiction. "Show your working" vs "Do not show your working"; "Write with
   bullet points" vs "Write without bullet points". Two rules about different things
   ("Use Markdown headings", "Never use emojis") share no content word, so neither
   replaces the other, however close their embeddings are. A negator also flips the
   graded side of the words after it ("don't make it long" is on the short side).
3. A contrast is a negation: ", not like an AI", "instead of Markdown", "rather than a
   list" put what follows on the don't side, so "Write like a student, not like an AI"
   agrees with "Make it sound like a student wrote it, not an AI".

`agreement` is the converse that a merge needs: a shared content word or graded axis on
the same side, and no contradiction.

The words for a solution's working ("working", "calculations", "steps") count as one word,
and "leave out" / "cut out" as negators: a preference shift in `simulate --shift-to`
(student to parent) left "Show every step." beside "Do not show the working." in one
user's block before they did.

Measured (tests/test_experience.py, 62 labelled pairs): the rule alone flags 19 of the 21
contradictions and none of the 41 other pairs. Misses it accepts: opposite choices with
no polar cue ("Reply in English" / "Reply in Spanish", "first" / "at the end"); and
agreeing rules phrased as a do and a don't about one word would read as a contradiction,
whose cost is that the newer wording replaces the older and its support restarts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Stance", "agreement", "contradiction", "stance"]

_NEGATORS = frozenset("not no never don't dont doesn't avoid skip omit without stop remove drop hide exclude "
                      "nothing none neither nor instead rather".split())
_AXES: dict[str, tuple[frozenset[str], frozenset[str]]] = {  # axis: (+ side words, - side words)
    "length": (frozenset("long longer lengthy detailed thorough elaborate verbose expand depth".split()),
               frozenset("short shorter brief briefer concise succinct terse _limit _oneliner".split())),
    "amount": (frozenset("more extra additional many lots".split()), frozenset("less fewer sparingly _limit".split())),
    "formality": (frozenset("formal professional".split()), frozenset("casual informal relaxed chatty".split())),
    "warmth": (frozenset("friendly warm warmer kind kinder encouraging gentle".split()),
               frozenset("blunt harsh strict neutral".split())),
}
_CUES = _NEGATORS | {word for plus, minus in _AXES.values() for word in plus | minus}
_GENERIC = frozenset("""a an the to of in on for with and or but your my our it its this that these those each every
    all any as be is are was were just only please so at by from like than then too very you i me them they their
    what how when where which who one two three four few some much also always use using write give make keep put say
    do does add include show provide mention get let try sure answer's it's that's answer response reply text
    sentence paragraph word line thing way time bit little lot enough actual""".split())  # the last: the container
_VERBS = "write|use|say|keep|give|make|show|explain|put|start|end|add|include|mention|be|tell|point|just"
_LIMIT = re.compile(r"\b(?:no more than|not more than|at most|up to|under|fewer than|less than)\b")
_ONE_LINER = re.compile(r"\b(?:one|a single|single) (?:sentence|line|word)s?\b")
_CLAUSE = re.compile(rf"[,;.:!?]|\b(?:and|but|then)\s+(?=(?:{_VERBS})\b)")  # a new verb, a new scope
_WORD = re.compile(r"[a-z_]+(?:'[a-z]+)?")
# Stems that name one thing: a user who wanted "every step" and now says "don't show the working" or
# "skip the calculations" has changed their mind about the same point (measured: a preference shift in
# `simulate --shift-to`, docs/experiments.md, kept both sides in the block before these met).
_SAME_THING = {"worki": "step", "calcu": "step"}
_PHRASES = (("leave out", "omit"), ("cut out", "omit"), ("get rid of", "remove"))


@dataclass(frozen=True)
class Stance:
    """What a lesson says, as the contradiction rule reads it."""

    objects: frozenset[tuple[str, int]]  # (stemmed content word, +1 do | -1 don't)
    axes: frozenset[tuple[str, int]]  # (graded axis, +1 | -1) for every graded axis it mentions


def stance(text: str) -> Stance:
    text = text.lower().replace("\u2019", "'").replace("do not", "don't")
    for phrase, word in _PHRASES:
        text = text.replace(phrase, word)
    text = _ONE_LINER.sub(" _oneliner ", _LIMIT.sub(" _limit ", text))
    objects: set[tuple[str, int]] = set()
    axes: set[tuple[str, int]] = set()
    for clause in _CLAUSE.split(text):
        sign = 1
        for word in _WORD.findall(clause):
            if word in _NEGATORS:
                sign = -sign  # a negator governs the words after it in its clause
            for axis, (plus, minus) in _AXES.items():
                axes |= {(axis, sign)} if word in plus else {(axis, -sign)} if word in minus else set()
            if word not in _CUES and _singular(word) not in _GENERIC:
                objects.add((_stem(word), sign))
    return Stance(frozenset(objects), frozenset(axes))


def contradiction(older: str, newer: str) -> str | None:
    """Why `newer` takes the opposite side of `older`, or None if it does not (see the module docstring)."""
    a, b = stance(older), stance(newer)
    opposed = sorted(axis for axis in _sides(a.axes).keys() & _sides(b.axes).keys() if _opposite(a.axes, b.axes, axis))
    if opposed:
        return f"opposite {'/'.join(opposed)}"
    flipped = sorted(w for w in _sides(a.objects).keys() & _sides(b.objects).keys()
                     if _opposite(a.objects, b.objects, w))
    return f"do vs don't about {', '.join(flipped)}" if flipped else None


def agreement(older: str, newer: str) -> str | None:
    """What the two lessons say on the same side (a shared content word or graded axis), or None.

    A merge needs it as well as a close embedding: two rules about different things
    ("Don't use bold text" / "Don't use headings", similarity 0.50) share no word, so
    neither swallows the other.
    """
    if older.casefold().rstrip(".!") == newer.casefold().rstrip(".!"):
        return "the same words"  # even a rule of generic words only ("Say it once.") agrees with itself
    if contradiction(older, newer):
        return None
    a, b = stance(older), stance(newer)
    same = sorted({w for w in _sides(a.objects).keys() & _sides(b.objects).keys() if _same(a.objects, b.objects, w)}
                  | {x for x in _sides(a.axes).keys() & _sides(b.axes).keys() if _same(a.axes, b.axes, x)})
    return f"both about {', '.join(same)}" if same else None


def _same(a: frozenset[tuple[str, int]], b: frozenset[tuple[str, int]], key: str) -> bool:
    return _sides(a)[key] == _sides(b)[key]


def _sides(pairs: frozenset[tuple[str, int]]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for key, sign in pairs:
        found.setdefault(key, set()).add(sign)
    return found


def _opposite(a: frozenset[tuple[str, int]], b: frozenset[tuple[str, int]], key: str) -> bool:
    """Each lesson takes one side on `key`, and not the same one."""
    side_a, side_b = _sides(a)[key], _sides(b)[key]
    return len(side_a) == 1 and len(side_b) == 1 and side_a != side_b


def _singular(word: str) -> str:
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _stem(word: str) -> str:
    """Plural "s" off, then the first 5 letters: "steps"/"step", "explain"/"explanation";
    the words for a solution's working meet as one ("working", "calculations", "steps")."""
    stem = _singular(word)[:5]
    return _SAME_THING.get(stem, stem)
