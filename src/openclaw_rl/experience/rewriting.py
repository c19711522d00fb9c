"""Rewriting a served answer to the user's lessons: which checks to ask for, the request, which rewrite to serve.

Serving (`serve --lesson-rewrites R`, serve/pipeline.py) asks the model to rewrite the answer it
picked (experience/checks.py `pick`) when that answer breaks lessons a rewrite can fix, and serves
a rewrite only when it keeps them better (docs/experience.md "Rewriting to the lessons").
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from openclaw_rl.experience import arithmetic
from openclaw_rl.experience.arithmetic import last_number
from openclaw_rl.experience.checks import Check, one_check, pick, scores

__all__ = ["ABSOLUTE", "CONDENSING", "choose_rewrite", "rewrite_request", "to_rewrite"]

# the checks whose "with" (the feature asked for) an answer keeps or breaks by itself, and a rewrite can add
_ADDABLE = frozenset({"phrase", "question", "greeting", "example"})

# The checks a rewrite can satisfy at 135M: asking for less (a limit, shorter, no working, no lists,
# Markdown, emojis or a phrase, less praise, fewer of the request's numbers). Asking for more (detail,
# every step) it cannot: a rewrite of a worked answer into more steps was worse than the answer it
# rewrote (docs/experiments.md "Rewriting").
CONDENSING = frozenset({"at_most", "shorter", "less_working", "without", "cooler", "fewer_numbers"})
# The ones an answer keeps or breaks by itself (not relative to other answers), and "with" a phrase,
# a closing question, a greeting or an example (`_ADDABLE`); a rewrite asked for the request's
# mistake is told its right result (`rewrite_request`).
ABSOLUTE = frozenset({"at_most", "between", "without", "corrects", "confirms", "answer_first"})


def _absolute(check: Check) -> bool:
    return check.kind in ABSOLUTE or (check.kind == "with" and check.unit in _ADDABLE)


def to_rewrite(answers: Sequence[str], picked: int, found: Sequence[Check], request: str = "") -> list[Check]:
    """The checks to ask the picked one of `answers` to be rewritten to ([]: serve it as it is).

    When every check asks for less (`CONDENSING`): all of them, if the answer does not keep them
    as well as the best of `answers` does, or carries no number. When some lesson asks for more
    ("Show every step"): only the checks the answer breaks by itself (`ABSOLUTE`: a list, a heading,
    a quoted phrase, a count over its limit, a phrase, closing question, greeting or example asked
    for and missing), so the rewrite is an edit of what is wrong, and `choose_rewrite`, which scores
    every check, keeps the draft unless the edit lost nothing else of the same weight."""
    if not found:
        return []
    if all(c.kind in CONDENSING for c in found):
        kept = scores(answers, found, request)[picked] < 1.0 or last_number(answers[picked]) is None
        return list(found) if kept else []
    return [c for c in found if _absolute(c) and one_check(c, [answers[picked]], request)[0] < 1.0]


def choose_rewrite(draft: str, rewrites: Sequence[str], found: Sequence[Check], asked: Sequence[Check] = (),
                   request: str = "") -> tuple[int | None, list[float]]:
    """Which rewrite to serve instead of `draft` (None: the draft), and the `pick` totals of the
    draft and each rewrite (a rewrite left out scores 0). A rewrite is a candidate only if it
    keeps the lessons it was asked to keep (`asked`, default all of `found`) better than the draft
    does, and has a number if the draft has one (a rewrite changes the form, and a 135M model's
    sometimes drops the answer); then `pick` over the draft and the candidates on every check,
    the draft first."""
    asked = asked or found
    needs_number = last_number(draft) is not None
    kept = [i for i, text in enumerate(rewrites)
            if (not needs_number or last_number(text) is not None)
            and operator.lt(*scores([draft, text], asked, request))]  # keeps `asked` better than the draft
    best, totals = pick([draft, *(rewrites[i] for i in kept)], found, request)
    every = [totals[0]] + [0.0] * len(rewrites)
    for place, i in enumerate(kept, start=1):
        every[i + 1] = totals[place]
    return (None if best == 0 else kept[best - 1]), every


def rewrite_request(found: Sequence[Check], request: str = "") -> str:
    """The user turn that asks for the rewrite: the lessons the checks to rewrite to (`to_rewrite`)
    came from, in the user's words, and what was checked of `request`'s equations when one of them
    asks for the mistake or for what was right (`arithmetic.note_for`)."""
    note = arithmetic.note_for({c.kind for c in found}, request)
    return " ".join(["Rewrite your answer.", *dict.fromkeys(c.lesson.strip() for c in found), note]).strip()
