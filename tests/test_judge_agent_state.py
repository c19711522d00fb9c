"""The default judge's rules for agent next states (judge/agent_state.py, issue 40).

The split tests/data/judge_agent_states.jsonl holds the four kinds the judge misread
(a call aimed at other parameters, a GUI page with a validation message or an unchanged
value, system noise, short doubts), each with controls that look the same but are right.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openclaw_rl.judge.agent_state import (
    doubt_fix,
    gui_problem,
    neutral_notice,
    parameter_mismatch,
    request_numbers,
    short_doubt,
)
from openclaw_rl.judge.evidence import material_from_parts, rule_verdict
from openclaw_rl.judge.rules import correction_hints

DATA = Path(__file__).parent / "data"


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def as_material(case: dict):
    return material_from_parts(case["request"], case["response"], case["tool_calls"], case["next_state_role"],
                               case["next_state"])


AGENT_CASES = load("judge_agent_states.jsonl")
READ_BY_THE_CLASSIFIER = {"a051"}  # a doubt and a stated fix in two sentences: "ethanol should be about 78"


def test_the_split_has_at_least_eight_cases_of_each_kind_and_controls():
    for category in ("action_target", "gui_state", "neutral_noise", "short_doubt"):
        cases = [c for c in AGENT_CASES if c["category"] == category]
        assert len([c for c in cases if c["expected_score"] != 1]) >= 8, category
        assert any(c["expected_score"] == 1 for c in cases), f"{category} has no control case"


@pytest.mark.parametrize("case", [c for c in AGENT_CASES if c["expected_score"] != 1], ids=lambda c: c["id"])
def test_rules_read_each_misread_agent_state_as_labelled(case):
    ruled = rule_verdict(as_material(case))
    if case["id"] in READ_BY_THE_CLASSIFIER:
        assert ruled is None
        return
    assert ruled is not None and ruled[0] == case["expected_score"], (case["next_state"], ruled)


@pytest.mark.parametrize("case", [c for c in AGENT_CASES if c["expected_score"] == 1], ids=lambda c: c["id"])
def test_rules_leave_the_right_actions_alone(case):
    ruled = rule_verdict(as_material(case))  # silence, or the follow-up rule's +1 (judge/people_state.py)
    assert ruled is None or ruled[0] == 1, (case["next_state"], ruled)


@pytest.mark.parametrize("split", ["judge_tuning.jsonl", "judge_measured.jsonl"])
def test_the_new_rules_never_contradict_the_earlier_splits(split):
    """Where a new rule speaks on the earlier hand labels, it agrees with them."""
    for case in load(split):
        m = as_material(case)
        for rule, vote in ((parameter_mismatch, -1), (gui_problem, -1), (short_doubt, -1), (neutral_notice, 0)):
            if rule(m) is not None and not (rule is neutral_notice and rule_verdict(m)[0] != 0):
                assert case["expected_score"] == vote, (case["id"], rule.__name__, rule(m))


def test_request_numbers_read_words_months_and_afternoon_times():
    assert {4.0, 19.0, 7.0} <= request_numbers("a table for four at 7pm")
    assert {3.0, 12.0} <= request_numbers("on March 12")


def call(name: str, **arguments) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]


def test_a_parameter_other_than_the_requested_one_is_a_miss_whatever_the_output_says():
    wrong = material_from_parts("remind me in 45 minutes", "", call("remind", minutes=54), "tool", "Reminder set.")
    right = material_from_parts("remind me in 45 minutes", "", call("remind", minutes=45), "tool", "Reminder set.")
    assert "54" in parameter_mismatch(wrong)
    assert parameter_mismatch(right) is None
    head = material_from_parts("print the first 3 lines of a.csv", "", call("bash", command="head -n 30 a.csv"),
                               "tool", "x")
    assert parameter_mismatch(head) is not None
    mail = material_from_parts("email bo@x.org", "", call("send", to="bob@x.org"), "tool", "Sent to bob@x.org")
    assert parameter_mismatch(mail) is not None


def test_a_page_that_keeps_the_old_value_or_shows_an_alert_is_a_miss_with_the_alert_as_hint():
    kept = material_from_parts("set the width to 300", "", call("type", element_id=2, text="300"), "environment",
                               'Page "Box"\n[2] textbox "Width" value="250"')
    assert "250" in gui_problem(kept)
    alert = 'Page "Form"\nalert "Zip code must have 5 digits."\n[2] textbox "Zip" value="123"'
    flagged = material_from_parts("fill in the zip 123", "", call("click", element_id=3), "environment", alert)
    assert gui_problem(flagged) is not None
    assert correction_hints(alert, "environment")[0] == "Zip code must have 5 digits."
    saved = material_from_parts("set the width to 300", "", call("type", element_id=2, text="300"), "environment",
                                'Page "Box"\nalert "Settings saved."\n[2] textbox "Width" value="300"')
    assert gui_problem(saved) is None


def test_a_pending_or_broadcast_output_is_neutral_but_a_result_is_not():
    pending = material_from_parts("convert a.mp4 to webm", "", call("convert", file="a.mp4"), "tool",
                                  "Your file is in the queue (position 3).")
    done = material_from_parts("convert a.mp4 to webm", "", call("convert", file="a.mp4"), "tool",
                               "Conversion finished; the queue is empty.")
    assert rule_verdict(pending)[0] == 0
    assert neutral_notice(done) is None


def test_short_doubts_are_corrections_and_follow_ups_are_not():
    def doubt(reply: str, answer: str = "Lisbon.") -> str | None:
        return short_doubt(material_from_parts("capital of portugal?", answer, [], "user", reply))

    assert doubt("hmm, isn't it porto?") is not None
    assert doubt("wasn't it also the capital of brazil once?") is None  # adds, does not doubt
    assert doubt("isn't it lisbon?", answer="Porto.") is not None
    assert doubt("isn't it lisbon?", answer="Lisbon.") is None  # names nothing new
    assert doubt("what's the population?") is None


@pytest.mark.parametrize("sentence, hint", [
    ("wait, isn't it Canberra?", "The answer should be Canberra."),
    ("shouldn't that be 12?", "The answer should be 12."),
    ("you sure it's not Na?", "The answer should be Na."),
    ("don't spiders have eight?", "Spiders have eight."),
    ("uh, isn't a leap year 366?", "A leap year is 366."),
    ("wasn't he also a journalist?", None),
])
def test_doubt_fix_turns_a_doubting_question_into_the_statement_it_suggests(sentence, hint):
    assert doubt_fix(sentence) == hint
