"""Retention probes, and the arithmetic one: held-out word problems, checked whatever the style.

    RetentionProbe(name, prompts, checks)       prompts (token ids) and a check of each answer's text
    gate.retention = [arithmetic_probe(tokenizer, n=16)]      (what --gate-retention-problems 16 sets)

The other probes are eval/bfcl.py's (tool calling, --gate-retention-bfcl) and
eval/instructions.py's (instruction following, --gate-retention-instructions).

A user who teaches the model a style (no markdown, friendly comments, short answers) must
not cost it its arithmetic. The probe asks each problem bare, as a user's first message,
and an answer counts as right when its final number (`problems.final_number`: the last
marked answer, else the last number) is the problem's answer, in prose, a list, LaTeX or
one bare number alike.

Decisions and why:

- Its own problems: the templates of the held-out set, people from the held-out pool
  (never in training), numbers from an RNG stream of their own ("retention:i"), so the
  gate never selects versions on the problems that simulate's held-out score reports.
- 16 problems by default: enough for the sign test of train/retention.py to reject 5
  lost and none gained at alpha 0.05, and 16 greedy answers per candidate on the CPU.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openclaw_rl.chat import render_prompt
from openclaw_rl.eval.problems import HELDOUT_PEOPLE, TEMPLATES, Problem, check_answer, make_problem

__all__ = ["RetentionProbe", "arithmetic_probe", "retention_problems"]


@dataclass(frozen=True)
class RetentionProbe:
    """A named set of prompts, each with a check of an answer's text."""

    name: str
    prompts: list[list[int]]
    checks: list[Callable[[str], bool]]

    def __post_init__(self) -> None:
        if not self.prompts or len(self.prompts) != len(self.checks):
            raise ValueError(f"retention probe {self.name!r} needs one check per prompt and at least one prompt; "
                             f"got {len(self.prompts)} prompts and {len(self.checks)} checks")

    def correct(self, texts: Sequence[str]) -> list[bool]:
        if len(texts) != len(self.checks):
            raise ValueError(f"retention probe {self.name!r} has {len(self.checks)} prompts, got {len(texts)} answers")
        return [bool(check(text)) for check, text in zip(self.checks, texts)]


def retention_problems(n: int = 16) -> list[Problem]:
    """`n` problems, every template in turn, held-out people, a stream apart from the held-out set's."""
    if n < 1:
        raise ValueError(f"the arithmetic retention probe needs at least one problem, got n={n}")
    names = list(TEMPLATES)
    return [make_problem(names[i % len(names)], random.Random(f"retention:{i}"), HELDOUT_PEOPLE,
                         f"retention-{i:03d}") for i in range(n)]


def arithmetic_probe(tokenizer: Any, n: int = 16) -> RetentionProbe:
    """The probe: each problem's question as a user's first message, its answer checked by number."""
    problems = retention_problems(n)
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": p.question}], None, None) for p in problems]
    checks = [lambda text, answer=p.answer: check_answer(text, answer) for p in problems]
    return RetentionProbe("arithmetic", prompts, checks)
