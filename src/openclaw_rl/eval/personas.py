"""Simulated users with a hidden preference: what a persona is, how it scores and replies.

The two personas of docs/method.md §5 live next door: `student.py` (GSM8K homework that
must not look AI-written) and `teacher.py` (specific, friendly grading comments), and a
third written for the experience study, `parent.py` (only the result, in one sentence).

A persona opens a session about one problem, scores every response with its rubric (a
pure function, 0 to 1) and replies the way a person would: it approves and moves on when
the response meets its preference (evaluative), says what to change when it does not
(directive), and now and then just asks again without saying why.

Decisions and why:

- The rubric is a weighted mean of small named checks. Each check returns its score and
  the corrections a person would say when it fails ("please don't use bold text"), so
  a reply names the concrete problem the rubric found, and the oracle judge turns the
  same failures into hints. One source of truth for "what this user wants".
- The checks are deliberately surface-level (markup, phrases, which numbers appear):
  they must be cheap, deterministic and explainable, and the preference they encode is
  about style, which is what personalization means here. Correctness is one check
  among several, as it is for a real student who wants the homework to look like theirs.
- The absence checks ("no bold", "no chatbot phrases") give credit only to a response
  that is an answer at all (for the student, a sentence with a number in it): otherwise
  an empty or garbled reply would earn half the rubric for what it leaves out.
- Corrections are written as imperatives, prohibitions or "please ..." so that the
  rule-based hint extractor of the judge (`judge/rules.py`) can read them; re-asks and
  approvals contain no instruction at all, so they carry no directive signal.
- Replies come from template banks and a seeded `random.Random` (no LLM), so a whole
  experiment runs on a CPU and is reproducible.
- The first message of a problem is a pure function of the problem (its phrasing is
  drawn from an RNG seeded with the problem id): the oracle judge finds the problem of a
  turn by that message, and evaluation asks the same question every time.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Literal

from openclaw_rl.eval.problems import Problem, numbers_in
from openclaw_rl.plugins import import_named

__all__ = [
    "PERSONA_NAMES",
    "Check",
    "Criterion",
    "Persona",
    "Reply",
    "ReplyKind",
    "get_persona",
    "mentions",
    "sentences",
    "word_count",
]

ReplyKind = Literal["approve", "correct", "reask"]
Measure = Callable[[Problem, str], tuple[float, list[str]]]  # -> (score in [0, 1], corrections when < 1)


@dataclass(frozen=True)
class Criterion:
    """One named part of a rubric: its weight and the function that measures it."""

    name: str
    weight: float
    measure: Measure
    description: str
    needs_answer: bool = False  # an absence check ("no bold"): no credit when there is no answer at all


@dataclass(frozen=True)
class Check:
    """A criterion measured on one response."""

    name: str
    weight: float
    score: float  # in [0, 1]; 1 means the preference is met
    fixes: tuple[str, ...]  # what the user would ask to change, in their words (empty when met)

    @property
    def passed(self) -> bool:
        return self.score >= 1.0 - 1e-9

    @property
    def lost(self) -> float:
        """How much of the rubric this check costs the response."""
        return self.weight * (1.0 - self.score)


@dataclass(frozen=True)
class Reply:
    text: str
    kind: ReplyKind
    satisfied: bool


@dataclass(frozen=True)
class Persona:
    """A simulated user: how it opens a session, what it wants, how it replies.

    `preference` is the hidden preference in words. It is never sent to the agent; an
    LLM that plays the user (`--user-model`) is prompted with it.
    """

    name: str
    role: str  # who the user is, for an LLM playing them
    preference: str
    criteria: tuple[Criterion, ...]
    opener: Callable[[Problem], str]
    is_answer: Callable[[str], bool]  # whether a response is an answer at all (gates the absence checks)
    no_answer_fixes: tuple[str, ...]
    approvals: tuple[str, ...]
    reasks: tuple[str, ...]
    approve_threshold: float = 0.8  # the rubric score at which the user is satisfied
    reask_rate: float = 0.2  # how often an unhappy user just asks again without saying why

    def __post_init__(self) -> None:
        total = sum(c.weight for c in self.criteria)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"persona {self.name}: criterion weights must sum to 1, got {total}")
        if not 0.0 <= self.reask_rate <= 1.0:
            raise ValueError(f"persona {self.name}: reask_rate must be in [0, 1], got {self.reask_rate}")

    def first_message(self, problem: Problem) -> str:
        return self.opener(problem)

    def checks(self, problem: Problem, response: str) -> list[Check]:
        found = []
        answered = self.is_answer(response)
        for c in self.criteria:
            score, fixes = c.measure(problem, response)
            if c.needs_answer and not answered:  # an empty reply has no bold text, and no merit either
                score, fixes = 0.0, list(self.no_answer_fixes)
            score = min(1.0, max(0.0, score))
            found.append(Check(c.name, c.weight, score, tuple(fixes) if score < 1.0 - 1e-9 else ()))
        return found

    def rubric(self, problem: Problem, response: str) -> float:
        """The personalization score of one response, in [0, 1]."""
        return sum(c.weight * c.score for c in self.checks(problem, response))

    def failed_checks(self, problem: Problem, response: str) -> list[Check]:
        """The checks that fall short, the costliest first."""
        return sorted((c for c in self.checks(problem, response) if not c.passed), key=lambda c: -c.lost)

    def reply(self, problem: Problem, response: str, turn_index: int, rng: random.Random) -> Reply:
        """What the user says next. `turn_index` is 0 for the reply to the first answer."""
        checks = self.checks(problem, response)
        if sum(c.weight * c.score for c in checks) >= self.approve_threshold:
            return Reply(rng.choice(self.approvals), "approve", satisfied=True)
        if rng.random() < self.reask_rate:
            return Reply(rng.choice(self.reasks), "reask", satisfied=False)
        failed: dict[tuple[str, ...], Check] = {}
        for c in checks:  # checks that fail for one reason (no answer at all) are said once
            if not c.passed and c.fixes:
                failed.setdefault(c.fixes, c)
        named = _pick_by_cost(list(failed.values()), 1 + (rng.random() < 0.5), rng)
        fixes = [rng.choice(c.fixes) for c in named]
        if not fixes:  # below threshold with nothing to name: only an evaluative signal remains
            return Reply(rng.choice(self.reasks), "reask", satisfied=False)
        frame = rng.choice(_CORRECTION_FRAMES + (_LATER_FRAMES if turn_index > 0 else ()))
        text = frame.format(fix=fixes[0], Fix=_capitalize(fixes[0]))
        if len(fixes) > 1:
            text += " " + rng.choice(_SECOND_FIX).format(fix=fixes[1], Fix=_capitalize(fixes[1]))
        return Reply(text, "correct", satisfied=False)

    def hints(self, problem: Problem, response: str, limit: int = 3) -> list[str]:
        """The failed checks as self-contained instructions (what the oracle judge hints)."""
        hints = (_capitalize(c.fixes[0]).rstrip(".") + "." for c in self.failed_checks(problem, response) if c.fixes)
        return list(dict.fromkeys(hints))[:limit]


def _pick_by_cost(failed: list[Check], count: int, rng: random.Random) -> list[Check]:
    """Up to `count` failed checks, drawn without replacement with odds by what each costs.

    A person mentions what bothers them most, but not always the same thing first: a
    markdown-heavy answer gets told about its bold text one time and its bullets the next.
    """
    pool, picked = list(failed), []
    while pool and len(picked) < count:
        total = sum(c.lost for c in pool)
        x, chosen = rng.random() * total, pool[-1]
        for c in pool:
            x -= c.lost
            if x < 0:
                chosen = c
                break
        picked.append(chosen)
        pool.remove(chosen)
    return picked


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


_CORRECTION_FRAMES = (
    "{Fix}.",
    "Hmm, not quite. {Fix}.",
    "One thing though. {Fix}.",
    "Almost there. {Fix}.",
    "That's close. {Fix}.",
    "Thanks, but {fix}.",
    "Not like that. {Fix}.",
)
_LATER_FRAMES = ("Still not right. {Fix}.", "Closer. {Fix}.")
_SECOND_FIX = ("Also, {fix}.", "And {fix}.", "{Fix} too.")


# -- reading responses (shared by the personas' checks) ---------------------------------

MARKDOWN_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S|^\s*(?:=|-){3,}\s*$", re.MULTILINE)
MARKDOWN_BOLD = re.compile(r"\*\*[^*\n]+?\*\*|__[^_\n]+?__")
MARKDOWN_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,2}[.)])\s+\S", re.MULTILINE)
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z']+")


def sentences(text: str) -> list[str]:
    """Pieces of text that end like a sentence and contain a word (linear time, no backtracking)."""
    pieces = (p.strip() for p in SENTENCE_BREAK.split(text))
    return [p for p in pieces if p and p[-1] in ".!?" and re.search(r"[A-Za-z]", p)]


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def mentions(text: str, value: float) -> bool:
    """Whether `value` occurs in `text` as a number ("64" yes, "640" no)."""
    return any(abs(n - value) < 1e-9 for n in numbers_in(text))


# -- the personas, by name ---------------------------------------------------------------

PERSONA_NAMES = ("student", "teacher", "parent")


def get_persona(name: str) -> Persona:
    """The persona called `name`, or `module:ATTR`: a Persona (or a function of no arguments
    that returns one) from outside the package."""
    if ":" in name:
        found = import_named(name, f"persona {name!r}")
        if callable(found) and not isinstance(found, Persona):
            found = found()
        if not isinstance(found, Persona):
            raise ValueError(f"persona {name!r} cannot be loaded: it is a {type(found).__name__}, not an "
                             "openclaw_rl.eval.personas.Persona (or a function returning one)")
        return found
    if name == "student":
        from openclaw_rl.eval.student import STUDENT  # here, not at the top: student.py imports this module

        return STUDENT
    if name == "teacher":
        from openclaw_rl.eval.teacher import TEACHER  # here, not at the top: teacher.py imports this module

        return TEACHER
    if name == "parent":
        from openclaw_rl.eval.parent import PARENT  # here, not at the top: parent.py imports this module

        return PARENT
    raise ValueError(f"unknown persona {name!r}; choose one of {', '.join(PERSONA_NAMES)}")

