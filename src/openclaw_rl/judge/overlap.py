"""Overlap-guided hint selection (docs/method.md §2, step 6).

Every candidate hint gives a teacher: the same model scoring the original response
under `prompt ⊕ hint`. The teacher whose top-k tokens agree most with the student's is
the one whose corrections stay closest to what the policy would plausibly say, so its
distillation targets are the most reachable. Overlap at position t is
|top-k(student, t) ∩ top-k(teacher, t)| (k = 4 in the paper).

- Sequence level (the default, more stable): one hint for the whole response, the one
  with the largest total overlap.
- Token level: at each position the hint whose teacher overlaps the student most.
- Longest and random: ablation baselines that ignore the teachers.

Ties always go to the earlier hint, so selection is deterministic given its inputs.
Top-k ids are nested lists shaped (T, k), best first, as `types.Score.top_ids` holds
them; anything with `.tolist()` (a tensor, an array) is accepted too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HINT_STRATEGIES",
    "HintSelection",
    "overlap_per_position",
    "select_hint",
    "select_longest",
    "select_random",
    "select_sequence_level",
    "select_token_level",
]

HINT_STRATEGIES = ("sequence", "token", "longest", "random")

TopIds = Sequence[Sequence[int]]  # (T, k)


def _rows(top_ids: Any) -> list[list[int]]:
    if hasattr(top_ids, "tolist"):
        top_ids = top_ids.tolist()
    return [list(row) for row in top_ids]


def overlap_per_position(student_top_ids: TopIds, teacher_top_ids: TopIds, k: int | None = None) -> list[int]:
    """|top-k(student, t) ∩ top-k(teacher, t)| for every position t, shape (T,).

    With `k` given, only the first k ids of each row count (rows are best first), so a
    student that recorded more alternatives than the selection uses is cut down to k.
    """
    student, teacher = _rows(student_top_ids), _rows(teacher_top_ids)
    if len(student) != len(teacher):
        raise ValueError(
            f"student and teacher top-k cover different lengths ({len(student)} vs "
            f"{len(teacher)} positions); both must score the same response tokens"
        )
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return [len(set(s[:k]) & set(t[:k])) for s, t in zip(student, teacher)]


def _overlaps(student_top: TopIds, teachers: Sequence[TopIds], k: int | None) -> list[list[int]]:
    if not teachers:
        raise ValueError("no teachers to select from; score at least one hint first")
    return [overlap_per_position(student_top, teacher, k) for teacher in teachers]  # (H, T)


def _first_argmax(values: Sequence[int]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


def select_sequence_level(
    student_top: TopIds, teachers: Sequence[TopIds], k: int | None = None
) -> tuple[int, list[int]]:
    """(index of the hint with the largest total overlap, total overlap per hint)."""
    totals = [sum(per_position) for per_position in _overlaps(student_top, teachers, k)]  # (H,)
    return _first_argmax(totals), totals


def select_token_level(
    student_top: TopIds, teachers: Sequence[TopIds], k: int | None = None
) -> tuple[list[int], list[list[int]]]:
    """(hint index per position (T,), overlap per hint and position (H, T))."""
    overlaps = _overlaps(student_top, teachers, k)  # (H, T)
    positions = len(overlaps[0])
    chosen = [_first_argmax([per_hint[t] for per_hint in overlaps]) for t in range(positions)]
    return chosen, overlaps


def select_longest(hints: Sequence[str]) -> int:
    """Index of the longest hint (by characters); ties go to the earlier hint."""
    if not hints:
        raise ValueError("no hints to select from")
    return _first_argmax([len(hint) for hint in hints])


def select_random(hints: Sequence[str], rng: random.Random) -> int:
    """Index of a hint drawn uniformly with `rng`."""
    if not hints:
        raise ValueError("no hints to select from")
    return rng.randrange(len(hints))


@dataclass(frozen=True)
class HintSelection:
    """Which hint's teacher supplies the targets, for the whole response or per token."""

    strategy: str
    index: int | None  # the single chosen hint; None for token-level selection
    per_position: list[int] | None  # (T,) token level only
    overlap_totals: list[int]  # (H,) total overlap per hint; empty for longest/random

    def hint_at(self, position: int) -> int:
        """The hint whose teacher log-prob is used at response position `position`."""
        if self.per_position is not None:
            return self.per_position[position]
        assert self.index is not None
        return self.index


def select_hint(
    strategy: str,
    hints: Sequence[str],
    student_top: TopIds | None = None,
    teachers: Sequence[TopIds] | None = None,
    rng: random.Random | None = None,
    k: int | None = None,
) -> HintSelection:
    """Choose among candidate hints with one of HINT_STRATEGIES.

    "sequence" and "token" need the student's top-k ids and one teacher top-k per hint;
    "random" needs `rng`; "longest" needs only the hints.
    """
    if strategy not in HINT_STRATEGIES:
        raise ValueError(
            f"unknown hint selection strategy {strategy!r}; use one of {', '.join(HINT_STRATEGIES)}"
        )
    if not hints:
        raise ValueError("no hints to select from")
    if strategy == "longest":
        return HintSelection(strategy, select_longest(hints), None, [])
    if strategy == "random":
        if rng is None:
            raise ValueError(
                "strategy 'random' needs rng (a random.Random); pass one seeded for reproducibility"
            )
        return HintSelection(strategy, select_random(hints, rng), None, [])
    if student_top is None or teachers is None:
        raise ValueError(f"strategy {strategy!r} needs student_top and teachers (one top-k per hint)")
    if len(teachers) != len(hints):
        raise ValueError(f"got {len(hints)} hints but {len(teachers)} teachers; score every hint once")
    if strategy == "sequence":
        index, totals = select_sequence_level(student_top, teachers, k)
        return HintSelection(strategy, index, None, totals)
    per_position, overlaps = select_token_level(student_top, teachers, k)
    return HintSelection(strategy, None, per_position, [sum(row) for row in overlaps])
