"""Generated word problems: correct worked solutions, a disjoint held-out set, answer reading."""

from __future__ import annotations

import re

import pytest

from openclaw_rl.eval.problems import (
    HELDOUT_PEOPLE, TEMPLATES, TRAIN_PEOPLE, check_answer, final_number, heldout_problems, numbers_in,
    train_problems,
)

# Each template's answer from the question's numbers, in the order the question gives them,
# worked out independently of the template's own steps.
FORMULAS = {
    "packs": lambda packs, per_pack, given: packs * per_pack - given,
    "savings": lambda weekly, weeks, spent: weekly * weeks - spent,
    "change": lambda price, count, bill: bill - price * count,
    "bakery": lambda trays, per_tray, sold, bag: (trays * per_tray - sold) / bag,
    "train_trip": lambda speed, hours, extra: speed * hours + extra,
    "ages": lambda age, older, years: age + (age + older) + 2 * years,
    "reading": lambda pages, per_day, days: pages - per_day * days,
    "garden": lambda rows, per_row, each, given: rows * per_row * each - given,
    "quarter": lambda marbles, bought: marbles - marbles / 4 + bought,
    "wages": lambda rate, saturday, sunday: rate * (saturday + sunday),
    "vans": lambda students, adults, size: (students + adults) / size,
    "apples": lambda monday, used: monday + 2 * monday - used,
    "sharing": lambda total, friends, eaten: total / friends - eaten,
}

MANY = heldout_problems(2 * len(TEMPLATES)) + train_problems(seed=0, n=150) + train_problems(seed=7, n=50)
_EQUATION = re.compile(r"(\d+) ([+\-×÷]) (\d+) = (\d+)")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "×": lambda a, b: a * b, "÷": lambda a, b: a / b}


def test_every_template_has_an_independent_answer_formula():
    assert set(FORMULAS) == set(TEMPLATES)
    assert len(TEMPLATES) >= 12


@pytest.mark.parametrize("problem", MANY, ids=lambda p: p.id)
def test_answer_matches_the_question_and_the_worked_solution(problem):
    assert FORMULAS[problem.template](*numbers_in(problem.question)) == problem.answer
    assert isinstance(problem.answer, int) and problem.answer > 0
    results = []
    for sentence in problem.solution:
        (left, op, right, result), = _EQUATION.findall(sentence)  # one calculation per sentence
        assert _OPS[op](int(left), int(right)) == int(result), sentence
        results.append(int(result))
    assert results == list(problem.values)
    assert results[-1] == problem.answer
    assert len(problem.solution) >= 2


def test_heldout_set_is_fixed_covers_every_template_and_has_unique_ids():
    heldout = heldout_problems(16)
    assert heldout == heldout_problems(16)
    assert heldout_problems(4) == heldout[:4]
    assert {p.template for p in heldout} == set(TEMPLATES)
    assert len({p.id for p in heldout}) == 16


def test_heldout_problems_never_occur_in_training():
    assert not {p.name for p in TRAIN_PEOPLE} & {p.name for p in HELDOUT_PEOPLE}
    heldout = heldout_problems(64)
    train = [p for seed in range(3) for p in train_problems(seed, 300)]
    assert not {p.question for p in heldout} & {p.question for p in train}
    assert not {p.id for p in heldout} & {p.id for p in train}
    train_names = {p.name for p in TRAIN_PEOPLE}
    for problem in heldout:  # by construction: each held-out question names only held-out people
        words = set(re.findall(r"[A-Z][a-z]+", problem.question))
        assert words & {p.name for p in HELDOUT_PEOPLE}, problem.question
        assert not words & train_names, problem.question


def test_training_problems_follow_the_seed():
    assert train_problems(3, 20) == train_problems(3, 20)
    assert [p.question for p in train_problems(3, 20)] != [p.question for p in train_problems(4, 20)]
    assert len({p.template for p in train_problems(0, 100)}) == len(TEMPLATES)


@pytest.mark.parametrize("text, expected", [
    ("So Tomas has 55 crayons left.", 55),
    ("64 - 9 = 55, so the answer is 55.", 55),
    ("The answer is 1,200 dollars. I checked it twice, 3 times.", 1200),
    ("#### 42", 42),
    ("\\boxed{17} is what we get after 3 steps", 17),
    ("He earns $90.", 90),
    ("That is 27.0 marbles", 27),
    ("no number here", None),
])
def test_final_number(text, expected):
    assert final_number(text) == expected


def test_check_answer():
    assert check_answer("He has 64 - 9 = 55 crayons left.", 55)
    assert not check_answer("He has 55 crayons, then buys 3 more", 55)
    assert not check_answer("It is 55.5 crayons.", 55)
    assert not check_answer("", 55)
