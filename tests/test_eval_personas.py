"""The student and teacher personas: rubrics on hand-written answers, and their replies."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from openclaw_rl.eval import personas
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.student import STUDENT
from openclaw_rl.eval.teacher import TEACHER, student_attempt
from openclaw_rl.eval.problems import heldout_problems, train_problems
from openclaw_rl.judge.rules import extract_hints

CRAYONS = heldout_problems(1)[0]
WAGES = heldout_problems(10)[9]


def test_the_hand_written_answers_below_are_about_these_problems():
    assert CRAYONS.question == ("Tomas buys 8 packs of crayons. Each pack has 8 crayons. He gives 9 crayons to "
                                "Greta. How many crayons does Tomas have left?")
    assert CRAYONS.values == (64, 55)
    attempt = student_attempt(WAGES)
    assert WAGES.question.startswith("Bruno earns $10 an hour. He works 6 hours on Saturday and 3 hours")
    assert (attempt.slip_step, attempt.values, attempt.right_value) == (1, (9, 89), 90)


# -- the student ---------------------------------------------------------------------------

STUDENT_GOOD = ("Tomas buys 8 packs with 8 crayons in each, so he has 8 times 8, which is 64 crayons. Then he "
                "gives 9 of them to Greta. That leaves 64 minus 9, which is 55. So Tomas has 55 crayons left.")
STUDENT_BAD = ("Certainly! Great question.\n\n## Solution\n\n- **Step 1:** Multiply the packs by the crayons.\n"
               "- **Step 2:** Subtract the crayons he gave away.\n\n**Final Answer:** 56\n\nI hope this helps!")
MARKDOWN_BUT_RIGHT = ("## Solution\n\n- Tomas has **8 times 8**, which is 64 crayons.\n"
                      "- He gives 9 to Greta, so 64 minus 9 is 55 crayons.\n\nSo Tomas has **55** crayons left.")

# Each variant breaks exactly one of the student's criteria.
STUDENT_DEFECTS = {
    "no_headings": "## Crayons\n" + STUDENT_GOOD,
    "no_bold": STUDENT_GOOD.replace("has 55 crayons", "has **55** crayons"),
    "no_lists": ("- Tomas has 8 times 8, which is 64 crayons.\n- He gives 9 to Greta, so 64 minus 9 is 55.\n"
                 "So Tomas has 55 crayons left."),
    "no_ai_phrases": "Certainly! " + STUDENT_GOOD,
    "plain_prose": STUDENT_GOOD + "\nAnswer: 55",
    "concise": STUDENT_GOOD.split(". ")[0] + ". " + STUDENT_GOOD,
    "shows_steps": "Tomas has 55 crayons left after giving some of them to Greta.",
    "correct_answer": STUDENT_GOOD.replace("has 55 crayons left", "has 56 crayons left"),
}


def test_student_rubric_separates_good_from_bad():
    assert STUDENT.rubric(CRAYONS, STUDENT_GOOD) > 0.7
    assert STUDENT.rubric(CRAYONS, STUDENT_BAD) < 0.4
    assert STUDENT.rubric(CRAYONS, "") < 0.2


def test_student_objects_to_boilerplate_openers_and_rambling():
    opener = "To solve this problem, we need to find how many crayons are left. " + STUDENT_GOOD
    assert {c.name for c in STUDENT.failed_checks(CRAYONS, opener)} == {"no_ai_phrases"}
    rambling = STUDENT_GOOD + " " + " ".join(f"Tomas likes crayon number {i} a lot." for i in range(1, 30))
    check = next(c for c in STUDENT.checks(CRAYONS, rambling) if c.name == "concise")
    assert 0.0 <= check.score < 1.0 and any("short" in fix for fix in check.fixes)


def test_student_criteria_are_the_documented_ones():
    assert [c.name for c in STUDENT.criteria] == list(STUDENT_DEFECTS)
    assert sum(c.weight for c in STUDENT.criteria) == pytest.approx(1.0)


@pytest.mark.parametrize("criterion", list(STUDENT_DEFECTS))
def test_each_student_criterion_alone_lowers_the_score(criterion):
    checks = {c.name: c for c in STUDENT.checks(CRAYONS, STUDENT_DEFECTS[criterion])}
    assert [name for name, c in checks.items() if not c.passed] == [criterion]
    assert checks[criterion].fixes
    expected = 1.0 - checks[criterion].weight * (1.0 - checks[criterion].score)
    assert STUDENT.rubric(CRAYONS, STUDENT_DEFECTS[criterion]) == pytest.approx(expected)
    assert STUDENT.rubric(CRAYONS, STUDENT_DEFECTS[criterion]) < STUDENT.rubric(CRAYONS, STUDENT_GOOD)


# -- the teacher ---------------------------------------------------------------------------

TEACHER_GOOD = ("Nice work! You added the hours correctly: 6 + 3 = 9 hours is right. The mistake is in the last "
                "step: 9 × 10 is 90, not 89, so Bruno earns 90 dollars over the weekend. Keep it up, you are "
                "very close!")
TEACHER_BAD = "**Grade: 0/10**\n\n- Wrong answer.\n- Careless multiplication."
TEACHER_DEFECTS = {
    "names_error": ("Nice work! You added the hours correctly: 6 + 3 = 9 hours is right. Then you multiplied 9 "
                    "by 10 dollars an hour, have another look at that last multiplication. Keep it up, you are "
                    "very close!"),
    "names_correct_step": ("The mistake is in the last step: 9 × 10 is 90, not 89, so Bruno earns 90 dollars "
                           "over the weekend. Keep it up, you are very close, lovely effort!"),
    "friendly_tone": ("You added the hours correctly: 6 + 3 = 9 hours is right. The mistake is in the last step: "
                      "9 × 10 is 90, not 89, so Bruno earns 90 dollars over the weekend. Redo the "
                      "multiplication and write the new total."),
    "specific": ("Nice work! You found the total hours correctly, 9 is right. The mistake is in the last step, "
                 "the pay should be 90 dollars. Keep it up, you are very close!"),
    "no_markdown": "**Nice work!** " + TEACHER_GOOD.removeprefix("Nice work! "),
    "reasonable_length": "Nice work! 6 + 3 = 9 is right. The mistake: 9 × 10 is 90, not 89. Keep it up, so close!",
}


def test_teacher_rubric_separates_good_from_bad():
    assert TEACHER.rubric(WAGES, TEACHER_GOOD) > 0.7
    assert TEACHER.rubric(WAGES, TEACHER_BAD) < 0.4


def test_teacher_criteria_are_the_documented_ones():
    assert [c.name for c in TEACHER.criteria] == list(TEACHER_DEFECTS)
    assert sum(c.weight for c in TEACHER.criteria) == pytest.approx(1.0)


@pytest.mark.parametrize("criterion", list(TEACHER_DEFECTS))
def test_each_teacher_criterion_alone_lowers_the_score(criterion):
    checks = {c.name: c for c in TEACHER.checks(WAGES, TEACHER_DEFECTS[criterion])}
    assert [name for name, c in checks.items() if not c.passed] == [criterion]
    assert TEACHER.rubric(WAGES, TEACHER_DEFECTS[criterion]) < TEACHER.rubric(WAGES, TEACHER_GOOD)


def test_a_harsh_word_zeroes_the_tone():
    harsh = TEACHER_GOOD.replace("Nice work!", "That was careless.")
    tone = {c.name: c for c in TEACHER.checks(WAGES, harsh)}["friendly_tone"]
    assert tone.score == 0.0 and any("careless" in fix for fix in tone.fixes)


@pytest.mark.parametrize("problem", heldout_problems(16) + train_problems(1, 40), ids=lambda p: p.id)
def test_teachers_student_makes_exactly_one_slip(problem):
    attempt = student_attempt(problem)
    assert attempt == student_attempt(problem)  # the first message must not change between calls
    equations = [re.search(r"(\d+) ([+\-×÷]) (\d+) = (\d+)", s).groups() for s in attempt.sentences[:-1]]
    ops = {"+": int.__add__, "-": int.__sub__, "×": int.__mul__, "÷": lambda a, b: a / b}
    wrong = [k for k, (a, op, b, r) in enumerate(equations) if ops[op](int(a), int(b)) != int(r)]
    assert wrong == [attempt.slip_step]
    assert attempt.final != problem.answer
    assert attempt.right_value == problem.values[attempt.slip_step] != attempt.wrong_value
    message = TEACHER.first_message(problem)
    assert problem.question in message and all(s in message for s in attempt.sentences)


# -- replies -------------------------------------------------------------------------------

FORMATTING_WORDS = ("bold", "heading", "titles", "bullet", "list", "numbering")


def test_markdown_heavy_answer_gets_corrections_that_name_the_formatting():
    assert {c.name for c in STUDENT.checks(CRAYONS, MARKDOWN_BUT_RIGHT) if not c.passed} == {
        "no_headings", "no_bold", "no_lists"}
    replies = [STUDENT.reply(CRAYONS, MARKDOWN_BUT_RIGHT, 0, random.Random(seed)) for seed in range(40)]
    corrections = [r for r in replies if r.kind == "correct"]
    assert len(corrections) >= 25 and all(not r.satisfied for r in replies)
    for reply in corrections:
        assert any(word in reply.text.lower() for word in FORMATTING_WORDS), reply.text
    mentioned = " ".join(r.text.lower() for r in corrections)
    assert "bold" in mentioned and "bullet" in mentioned  # not always the same complaint


def test_missing_steps_correction_names_the_number_to_explain():
    problem_with_three_steps = heldout_problems(4)[3]  # 36 muffins, 12 left, 3 bags
    answer = "He can fill 3 bags."
    texts = [STUDENT.reply(problem_with_three_steps, answer, 0, random.Random(s)).text for s in range(30)]
    assert any("3" in t and re.search(r"show|explain", t, re.IGNORECASE) for t in texts)


@pytest.mark.parametrize("persona, problem, good", [(STUDENT, CRAYONS, STUDENT_GOOD), (TEACHER, WAGES, TEACHER_GOOD)])
def test_good_answers_are_approved(persona, problem, good):
    for seed in range(20):
        reply = persona.reply(problem, good, seed % 3, random.Random(seed))
        assert (reply.kind, reply.satisfied) == ("approve", True)
        assert reply.text in persona.approvals


def test_unhappy_users_sometimes_just_ask_again():
    replies = [STUDENT.reply(CRAYONS, STUDENT_BAD, 0, random.Random(seed)) for seed in range(200)]
    reasks = [r for r in replies if r.kind == "reask"]
    assert 0.1 < len(reasks) / len(replies) < 0.3  # reask_rate 0.2
    assert all(r.text in STUDENT.reasks for r in reasks)
    never = dataclasses.replace(STUDENT, reask_rate=0.0)
    assert all(never.reply(CRAYONS, STUDENT_BAD, 0, random.Random(s)).kind == "correct" for s in range(50))


def test_replies_are_seeded_and_varied():
    for persona, problem, bad in ((STUDENT, CRAYONS, STUDENT_BAD), (TEACHER, WAGES, TEACHER_BAD)):
        first = [persona.reply(problem, bad, 0, random.Random(s)) for s in range(30)]
        assert first == [persona.reply(problem, bad, 0, random.Random(s)) for s in range(30)]
        assert len({r.text for r in first}) >= 8


def test_each_reply_kind_has_at_least_five_templates():
    assert len(personas._CORRECTION_FRAMES) >= 5
    for persona in (STUDENT, TEACHER):
        assert len(set(persona.approvals)) >= 5 and len(set(persona.reasks)) >= 5


def test_only_corrections_carry_hints_the_judge_can_read():
    """The judge's rule-based extractor turns every correction into a hint, and nothing
    else: approvals and re-asks say nothing about how to change the answer."""
    bad_answers = [STUDENT_BAD, MARKDOWN_BUT_RIGHT, "42", "", TEACHER_BAD, "word " * 300,
                   "Step 1: 3 \\times 4 = 12\nAnswer: 12", "| a | b |\n```x```"]
    for persona in (STUDENT, TEACHER):
        for problem in heldout_problems(13):
            for answer in bad_answers:
                for seed in range(4):
                    reply = persona.reply(problem, answer, seed % 2, random.Random(seed))
                    assert bool(extract_hints(reply.text, "user")) == (reply.kind == "correct"), reply
        for text in persona.approvals + persona.reasks:
            assert extract_hints(text, "user") == [], text


def test_get_persona():
    assert get_persona("teacher") is TEACHER and get_persona("parent").name == "parent"
    with pytest.raises(ValueError, match="student, teacher, parent"):
        get_persona("grandparent")


@pytest.mark.parametrize("persona, problem", [(STUDENT, CRAYONS), (TEACHER, WAGES)])
@pytest.mark.parametrize("non_answer", ["", "55", "ok ok", "the the the of"])
def test_a_non_answer_earns_nothing_for_what_it_leaves_out(persona, problem, non_answer):
    assert persona.rubric(problem, non_answer) < 0.2
    gated = [c for c in persona.checks(problem, non_answer) if c.name in
             {k.name for k in persona.criteria if k.needs_answer}]
    assert gated and all(c.score == 0.0 and c.fixes == persona.no_answer_fixes for c in gated)
    for seed in range(20):  # five checks fail for one reason, and the user says it once
        text = persona.reply(problem, non_answer, 0, random.Random(seed)).text
        assert sum(text.count(fix) for fix in persona.no_answer_fixes) <= 1, text


def test_a_persona_from_outside_the_package_by_module_and_attribute():
    from openclaw_rl.eval.student import STUDENT as student

    assert get_persona("openclaw_rl.eval.student:STUDENT") is student
    with pytest.raises(ValueError, match="not an openclaw_rl.eval.personas.Persona"):
        get_persona("math:pi")
    with pytest.raises(ValueError, match="importing no_such_module_here failed"):
        get_persona("no_such_module_here:USER")


def _example_persona(name: str):
    """A persona of docs/examples, loaded from the repository root as the docs say."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        return get_persona(f"docs.examples.{name}")
    finally:
        sys.path.pop(0)


def test_the_documented_example_persona_loads_rubrics_and_replies():
    brief = _example_persona("brief_persona:BRIEF")
    problem = CRAYONS
    good = f"The answer is {problem.answer}."
    assert brief.rubric(problem, good) == pytest.approx(1.0)
    long_wrong = "word " * 120
    assert brief.rubric(problem, long_wrong) < 0.5
    reply = brief.reply(problem, long_wrong, 0, random.Random(0))
    assert not reply.satisfied



def test_sam_wants_his_name_first_a_closing_question_and_a_short_plain_answer():
    sam = _example_persona("sam_persona:SAM")
    problem = CRAYONS
    assert sam.rubric(problem, f"Hi Sam! Tomas has {problem.answer} crayons left. Does that make sense?") == 1.0
    assert sam.rubric(problem, f"Tomas has {problem.answer} left. Hi Sam. Clear?") == pytest.approx(0.875)  # name late
    assert sam.rubric(problem, f"Hi Sam! Tomas has {problem.answer} crayons left.") == pytest.approx(0.75)
    assert sam.rubric(problem, "Hi Sam! Tomas has 54 crayons left. Does that make sense?") == pytest.approx(0.8)
    listed = f"- 8 x 8 = 64\n- 64 - 9 = {problem.answer}\nHi Sam, got it?"
    assert sam.rubric(problem, listed) == pytest.approx(0.775)  # the name is not in the opening line
    echo = f"Hi Sam. {problem.question}"  # his question parroted back ends in "?", but asks him nothing
    assert sam.rubric(problem, echo) == pytest.approx(0.55)
    reply = sam.reply(problem, f"Tomas has {problem.answer} crayons left.", 0, random.Random(0))
    assert not reply.satisfied and reply.kind in ("correct", "reask")


# -- the parent (issue 38's own persona: only the result, in one sentence) --------------------

PARENT_GOOD = "Tomas has 55 crayons left."
PARENT_DEFECTS = {
    "one_sentence": "Tomas has 55 crayons left. That's it.\nHe gave some to Greta.",
    "short": "Tomas has 55 crayons left, " + "because he gave some of them away to his good friend Greta " * 3 + ".",
    "no_working": "Tomas has 8 x 8 = 64 crayons, and 64 - 9 = 55 left.",
    "correct_answer": "Tomas has 56 crayons left.",
    "no_fluff": "Certainly, Tomas has 55 crayons left.",
}


def test_parent_rubric_wants_only_the_result_in_one_sentence():
    parent = get_persona("parent")
    assert parent.rubric(CRAYONS, PARENT_GOOD) == pytest.approx(1.0)
    assert parent.rubric(CRAYONS, STUDENT_GOOD) < 0.7  # the student's ideal answer shows the working
    assert parent.rubric(CRAYONS, "") == 0.0  # short and without working, but no answer at all
    assert [c.name for c in parent.criteria] == ["one_sentence", "short", "no_working", "correct_answer", "no_fluff"]


@pytest.mark.parametrize("criterion", sorted(PARENT_DEFECTS))
def test_each_parent_criterion_alone_lowers_the_score(criterion):
    parent = get_persona("parent")
    failed = [c.name for c in parent.failed_checks(CRAYONS, PARENT_DEFECTS[criterion])]
    assert criterion in failed
    assert parent.rubric(CRAYONS, PARENT_DEFECTS[criterion]) < 1.0


def test_the_parents_corrections_become_standing_rules():
    from openclaw_rl.experience import lesson_from_hint

    parent = get_persona("parent")
    rules = {lesson_from_hint(h) for h in parent.hints(CRAYONS, "Certainly! 8 x 8 = 64. Then 64 - 9 = 55. " * 4)}
    assert "Give me the answer in one sentence." in rules
    assert None not in rules
