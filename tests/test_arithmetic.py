"""experience/arithmetic.py: the equations a text states, and whether each holds."""

from __future__ import annotations

import pytest

from openclaw_rl.experience.arithmetic import checked_note, confirms, corrects, equations, last_number, values

STUDENT = ("Student's answer: First, Tomas has 8 × 8 = 54 crayons in total. After giving 9 to Greta, "
           "he has 54 - 9 = 45 crayons left. So the answer is 45.")


@pytest.mark.parametrize("text, expected", [
    ("8 × 8 = 54 and 54 - 9 = 45", [("8 × 8 = 54", 64, False), ("54 - 9 = 45", 45, True)]),
    ("2 + 3 × 4 = 14", [("2 + 3 × 4 = 14", 14, True)]),  # × before +
    ("12 ÷ 4 = 4", [("12 ÷ 4 = 4", 3, False)]),
    ("$1,200 / 4 = $300", [("$1,200 / 4 = $300", 300, True)]),
    ("10 / 3 = 3.33", [("10 / 3 = 3.33", 10 / 3, True)]),  # rounded to the stated decimals
    ("10 / 3 = 3.4", [("10 / 3 = 3.4", 10 / 3, False)]),
    ("3 x 4 = 12", [("3 x 4 = 12", 12, True)]),
    ("She wrote 8 x 8 = 54, then 54 - 9 = 45.", [("8 x 8 = 54", 64, False), ("54 - 9 = 45", 45, True)]),
    ("5 / 0 = 0", []),  # no value: not an equation to judge
    ("The answer is 12 = twelve, 2023-12-04", []),  # no operator on the left, a date
    ("Max 3 + 4 = 7", [("3 + 4 = 7", 7, True)]),
    ("1+2+3+4+5+6+7+8+9+10+11+12+13 = 91", []),  # over 12 terms: not read, and never from inside the chain
    ("9" * 400 + " × 2 = 3", []),  # past a float's range
])
def test_equations_are_read_and_evaluated_with_precedence(text, expected):
    found = [(e.text, e.value, e.holds) for e in equations(text)]
    assert [(t, pytest.approx(v), h) for t, v, h in expected] == found


def test_an_answer_that_gives_the_right_result_of_a_wrong_step_corrects_it():
    answers = ["Great effort! 8 × 8 is 64, not 54, so you should have 55 crayons.",
               "Good work, 54 - 9 = 45 is right.",
               "Nice try, check your multiplication."]
    assert corrects(answers, STUDENT) == [1.0, 0.0, 0.0]
    assert confirms(answers, STUDENT) == [0.0, 1.0, 0.0]  # 54 - 9 = 45 holds
    assert confirms(["The answer is 45.", "Taking 9 from 54 leaves 45, well done."], STUDENT) == [0.0, 1.0]
    assert corrects(answers, "What is 8 times 8?") == [1.0, 1.0, 1.0]  # nothing to correct: no signal
    assert confirms(answers, "What is 8 times 8?") == [1.0, 1.0, 1.0]


def test_the_numbers_of_a_text_and_its_last_one_past_step_labels():
    assert values("Pay $1,200 now and -3 later, 2.5 each.") == [1200, -3, 2.5]
    assert last_number("Step 1: 3 + 4 = 7. Step 2: Give the answer.") == 7
    assert last_number("Step 3: Give the answer.") is None


def test_the_note_says_which_of_the_requests_equations_hold_as_the_lessons_ask():
    assert checked_note(STUDENT) == "Checked arithmetic of the message: 8 × 8 = 54 is wrong, 8 × 8 = 64."
    assert checked_note(STUDENT, wrong=True, right=True) == (
        "Checked arithmetic of the message: 8 × 8 = 54 is wrong, 8 × 8 = 64; 54 - 9 = 45 is right.")
    assert checked_note("Is 1,000 / 8 = 125.5 right?") == (
        "Checked arithmetic of the message: 1,000 / 8 = 125.5 is wrong, 1,000 / 8 = 125.0.")
    assert checked_note("What is 8 times 8?", wrong=True, right=True) == ""


def test_a_long_chain_without_an_equals_sign_is_read_once():
    """Each chain is read from its head only: a 100,000-term sum without "=" is linear work (the
    pattern tried from every term would be quadratic, minutes, not milliseconds)."""
    assert equations("1+" * 100_000 + "1") == ()
    assert checked_note("1 + " * 50_000 + "1 = 3, and 2 × 3 = 7") == (
        "Checked arithmetic of the message: 2 × 3 = 7 is wrong, 2 × 3 = 6.")
