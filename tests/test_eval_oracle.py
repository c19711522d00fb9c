"""The oracle judge: the persona's rubric as reward and hints, labelled as the oracle."""

from __future__ import annotations

import asyncio

import pytest

from openclaw_rl.config import JudgeConfig
from openclaw_rl.eval.oracle import ORACLE_LABEL, OracleJudge
from openclaw_rl.eval.student import STUDENT
from openclaw_rl.eval.teacher import TEACHER
from openclaw_rl.eval.problems import heldout_problems, train_problems
from openclaw_rl.judge.worker import JudgeFailure, JudgeWorker
from openclaw_rl.store import Store
from openclaw_rl.types import NextState, Turn, TurnRecord

PROBLEM = heldout_problems(1)[0]  # Tomas: 8 × 8 = 64 crayons, 64 - 9 = 55 left
GOOD = ("Tomas buys 8 packs with 8 crayons in each, so he has 8 times 8, which is 64 crayons. Then he gives 9 "
        "of them to Greta. That leaves 64 minus 9, which is 55. So Tomas has 55 crayons left.")
BAD = "**Answer:** Tomas has 55 crayons left. I hope this helps!"


def turn(response: str, prompt: list[dict], turn_id: int = 1) -> Turn:
    return Turn(id=turn_id, session_id="s", index=0, kind="main", policy_version=0, prompt_messages=prompt,
                prompt_token_ids=[1, 2], response_token_ids=[3, 4], behaviour_logprobs=[-1.0, -1.0],
                response_text=response, tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop",
                created_at=0.0, next_state=NextState("user", "whatever the user said"))


def first_prompt(persona=STUDENT, problem=PROBLEM) -> list[dict]:
    return [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": persona.first_message(problem)}]


def test_good_response_gets_plus_one_and_bad_gets_minus_one_with_hints():
    judge = OracleJudge(STUDENT, [PROBLEM])
    assert judge.name == "oracle"
    good = asyncio.run(judge.read(turn(GOOD, first_prompt())))
    assert good.votes == [1] and good.hints == []
    assert good.raw[0].startswith(ORACLE_LABEL) and ORACLE_LABEL == "ORACLE (reads the persona rubric)"
    bad = asyncio.run(judge.read(turn(BAD, first_prompt())))
    assert bad.votes == [-1]
    assert ORACLE_LABEL in bad.raw[0] and "no_bold" in bad.raw[0]
    assert any("bold" in h for h in bad.hints) and any("show" in h.lower() for h in bad.hints)
    assert all(len(h) > 10 and h.endswith(".") for h in bad.hints) and len(bad.hints) <= 3


def test_later_turns_of_a_session_are_judged_against_the_same_problem():
    prompt = first_prompt() + [{"role": "assistant", "content": BAD},
                               {"role": "user", "content": "Please don't use bold text."}]
    reading = asyncio.run(OracleJudge(STUDENT, [PROBLEM]).read(turn(GOOD, prompt)))
    assert reading.votes == [1]


def test_the_threshold_decides_the_vote():
    score = STUDENT.rubric(PROBLEM, BAD)
    assert asyncio.run(OracleJudge(STUDENT, [PROBLEM], threshold=score).read(turn(BAD, first_prompt()))).votes == [1]
    assert asyncio.run(OracleJudge(STUDENT, [PROBLEM], threshold=score + 0.01).read(
        turn(BAD, first_prompt()))).votes == [-1]


def test_a_turn_about_an_unknown_problem_gets_no_verdict():
    judge = OracleJudge(STUDENT, train_problems(0, 5))
    with pytest.raises(JudgeFailure, match="not about a registered problem"):
        asyncio.run(judge.read(turn(GOOD, first_prompt())))
    judge.register(PROBLEM)
    assert asyncio.run(judge.read(turn(GOOD, first_prompt()))).votes == [1]


def test_teacher_oracle_finds_the_problem_from_the_grading_request():
    problem = heldout_problems(10)[9]  # Bruno's wages; the student wrote 9 × 10 = 89
    comment = ("Nice work! You added the hours correctly: 6 + 3 = 9 hours is right. The mistake is in the last "
               "step: 9 × 10 is 90, not 89. Keep it up, you are very close!")
    judge = OracleJudge(TEACHER, heldout_problems(16))
    assert asyncio.run(judge.read(turn(comment, first_prompt(TEACHER, problem)))).votes == [1]
    harsh = asyncio.run(judge.read(turn("Wrong. Careless.", first_prompt(TEACHER, problem))))
    assert harsh.votes == [-1] and any("90" in h for h in harsh.hints)


def test_judge_worker_records_oracle_verdicts_and_samples(tmp_path):
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    recorded = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=first_prompt(), prompt_token_ids=[1, 2],
        response_token_ids=[3, 4], behaviour_logprobs=[-1.0, -1.0], response_text=BAD, tool_calls=[],
        sampling={"temperature": 1.0}, finish_reason="stop"))
    store.set_next_state(recorded.id, NextState("user", "Thanks!"))  # the oracle ignores what the user said
    worker = JudgeWorker(store, OracleJudge(STUDENT, [PROBLEM]), JudgeConfig())
    verdict = asyncio.run(worker.process(store.get_turn(recorded.id)))
    assert (verdict.status, verdict.reward, verdict.judge) == ("ok", -1, "oracle")
    assert ORACLE_LABEL in verdict.reason and verdict.hints
    assert store.verdicts([recorded.id])[recorded.id].judge == "oracle"
    assert store.sample_counts("binary")["ready"] == 1
    store.close()


def test_probe_problems_ask_nothing_played_or_held_out_and_repeat_with_the_seed():
    from openclaw_rl.eval.problems import probe_problems

    played, heldout = train_problems(0, 40), heldout_problems(16)
    probes = probe_problems(0, 16, [*played, *heldout])
    questions = [p.question for p in probes]
    assert len(set(questions)) == 16 and not set(questions) & {p.question for p in [*played, *heldout]}
    assert [p.question for p in probe_problems(0, 16, [*played, *heldout])] == questions
    assert [p.question for p in probe_problems(1, 16)] != questions
