"""Overlap-guided hint selection on hand-made top-k sets (k = 4, three positions)."""

from __future__ import annotations

import random

import pytest

from openclaw_rl.judge.overlap import (
    HINT_STRATEGIES,
    overlap_per_position,
    select_hint,
    select_longest,
    select_random,
    select_sequence_level,
    select_token_level,
)

STUDENT = [[1, 2, 3, 4], [10, 11, 12, 13], [20, 21, 22, 23]]  # (T=3, k=4)
# Overlap with STUDENT per position, worked out by hand:
TEACHER_A = [[1, 2, 3, 4], [10, 90, 91, 92], [20, 93, 94, 95]]  # 4, 1, 1 -> total 6
TEACHER_B = [[1, 2, 96, 97], [13, 12, 11, 10], [23, 22, 98, 99]]  # 2, 4, 2 -> total 8
TEACHER_C = [[4, 3, 2, 80], [81, 82, 83, 84], [23, 22, 21, 20]]  # 3, 0, 4 -> total 7
TEACHERS = [TEACHER_A, TEACHER_B, TEACHER_C]


def test_overlap_per_position_counts_shared_ids_regardless_of_rank() -> None:
    assert overlap_per_position(STUDENT, TEACHER_A) == [4, 1, 1]
    assert overlap_per_position(STUDENT, TEACHER_B) == [2, 4, 2]
    assert overlap_per_position(STUDENT, TEACHER_C) == [3, 0, 4]


def test_overlap_per_position_cuts_rows_to_k() -> None:
    student = [[1, 2, 3, 4, 5, 6]]  # recorded more alternatives than selection uses
    teacher = [[6, 5, 4, 1]]
    assert overlap_per_position(student, teacher) == [4]
    assert overlap_per_position(student, teacher, k=4) == [2]  # {1,2,3,4} & {6,5,4,1}
    assert overlap_per_position(student, teacher, k=1) == [0]


class _Tensorish:
    """Stands in for a tensor: iterating it would not give plain ints, tolist() does."""

    def __init__(self, rows: list[list[int]]) -> None:
        self._rows = rows

    def __iter__(self):
        raise TypeError("iterate via tolist()")

    def tolist(self) -> list[list[int]]:
        return self._rows


def test_overlap_accepts_objects_with_tolist() -> None:
    assert overlap_per_position(_Tensorish(STUDENT), _Tensorish(TEACHER_B)) == [2, 4, 2]


def test_overlap_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="3 vs 2"):
        overlap_per_position(STUDENT, TEACHER_A[:2])


def test_sequence_level_picks_the_largest_total_overlap() -> None:
    assert select_sequence_level(STUDENT, TEACHERS) == (1, [6, 8, 7])


def test_sequence_level_tie_goes_to_the_earlier_hint() -> None:
    # totals 7, 8, 8: the earlier of the two best wins
    assert select_sequence_level(STUDENT, [TEACHER_C, TEACHER_B, TEACHER_B]) == (1, [7, 8, 8])
    assert select_sequence_level(STUDENT, [TEACHER_B, TEACHER_A, TEACHER_B])[0] == 0


def test_token_level_picks_the_best_hint_per_position() -> None:
    per_position, overlaps = select_token_level(STUDENT, TEACHERS)
    assert per_position == [0, 1, 2]
    assert overlaps == [[4, 1, 1], [2, 4, 2], [3, 0, 4]]


def test_token_level_tie_goes_to_the_earlier_hint() -> None:
    # B gives 2, 4, 2 and D gives 3, 3, 2: D, B, then a tie at position 2 -> B
    teacher_d = [[1, 2, 3, 80], [10, 11, 12, 81], [20, 21, 82, 83]]  # 3, 3, 2
    per_position, _ = select_token_level(STUDENT, [TEACHER_B, teacher_d])
    assert per_position == [1, 0, 0]


def test_selection_needs_at_least_one_teacher() -> None:
    with pytest.raises(ValueError, match="no teachers"):
        select_sequence_level(STUDENT, [])


def test_longest_and_random_baselines() -> None:
    hints = ["Be brief.", "Use plain sentences, no headings.", "Use plain sentences, no titles."]
    assert select_longest(hints) == 1  # 33 > 31 > 9 characters
    assert select_longest(["Answer in French.", "Cite the source!!"]) == 0  # equal length
    draws = {select_random(hints, random.Random(seed)) for seed in range(50)}
    assert draws == {0, 1, 2}
    assert select_random(hints, random.Random(7)) == select_random(hints, random.Random(7))


def test_select_hint_dispatches_by_strategy() -> None:
    hints = ["Use plain sentences.", "Answer in French, please.", "Cite the source."]
    sequence = select_hint("sequence", hints, STUDENT, TEACHERS)
    assert (sequence.index, sequence.per_position, sequence.overlap_totals) == (1, None, [6, 8, 7])
    assert [sequence.hint_at(t) for t in range(3)] == [1, 1, 1]

    token = select_hint("token", hints, STUDENT, TEACHERS)
    assert (token.index, token.per_position, token.overlap_totals) == (None, [0, 1, 2], [6, 8, 7])
    assert [token.hint_at(t) for t in range(3)] == [0, 1, 2]

    assert select_hint("longest", hints).index == 1
    assert select_hint("random", hints, rng=random.Random(0)).index in (0, 1, 2)


def test_select_hint_rejects_unknown_strategy_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError) as error:
        select_hint("overlap", ["Use plain sentences."], STUDENT, [TEACHER_A])
    assert "'overlap'" in str(error.value)
    for strategy in HINT_STRATEGIES:
        assert strategy in str(error.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "sequence", "hints": ["a hint here"]}, "needs student_top and teachers"),
        ({"strategy": "token", "hints": ["a", "b"], "student_top": STUDENT, "teachers": [TEACHER_A]}, "2 hints but 1"),
        ({"strategy": "random", "hints": ["a hint here"]}, "needs rng"),
        ({"strategy": "longest", "hints": []}, "no hints"),
    ],
)
def test_select_hint_rejects_missing_inputs(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select_hint(**kwargs)
