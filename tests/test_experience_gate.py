"""The experience gate (experience/gate.py, judge/experience_gate.py): a new version of a user's
experience that makes their own approved answers less likely, or rejected ones more likely, is
undone before it is served; a harmless one, or one with too little history to judge, is served."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from openclaw_rl.chat import render_prompt
from openclaw_rl.compose import build_experience_gate
from openclaw_rl.config import JudgeConfig, ServeConfig
from openclaw_rl.experience import (
    Change, Experience, GateDecision, GatePolicy, Lesson, gate_decision, lesson_from_hint, place, revert, take_back,
)
from openclaw_rl.judge.experience_gate import ExperienceGate
from openclaw_rl.judge.lessons import LessonLearner
from openclaw_rl.judge.worker import JudgeWorker, LLMJudge
from openclaw_rl.loop import count_experience_gate
from openclaw_rl.store import Store
from openclaw_rl.types import NextState, SamplingParams, TokenStep, TurnRecord, Verdict
from openclaw_rl.users import Users

POLICY = GatePolicy()

# -- the rule, on hand numbers ------------------------------------------------------------------------


def test_a_version_that_lowers_the_approved_answers_beyond_the_tolerance_is_rejected():
    decision = gate_decision([-0.30, -0.25, -0.20, -0.35], [0.05, 0.00, -0.05, 0.00], 7)
    assert decision.outcome == "rejected" and decision.checked_version == 7
    assert decision.statistic == pytest.approx(-0.275)  # mean(approved) -0.275 - mean(rejected) 0.0
    assert decision.p_value < POLICY.alpha and (decision.approved_turns, decision.rejected_turns) == (4, 4)
    assert "D -0.275 < -0.05" in decision.reason
    assert "approved answers -0.275 nats/token over 4 turns" in decision.reason


def test_one_that_raises_the_rejected_answers_is_rejected_too():
    decision = gate_decision([], [0.20, 0.30, 0.25, 0.15, 0.20], 3)
    assert decision.outcome == "rejected" and decision.statistic == pytest.approx(-0.22)
    assert decision.approved_shift is None and decision.rejected_shift == pytest.approx(0.22)


def test_a_harmed_approved_side_beside_an_untouched_rejected_side_is_rejected():
    """The case a pooled sign test over all 16 turns calls a coin toss (8 harmed, 8 not)."""
    decision = gate_decision([-0.2] * 8, [0.0, 0.01, -0.01, 0.0, 0.02, -0.02, 0.0, 0.0], 4)
    assert decision.outcome == "rejected" and decision.statistic == pytest.approx(-0.2)


def test_a_shift_within_the_tolerance_or_without_evidence_passes():
    within = gate_decision([-0.04, -0.03, -0.05, -0.04], [0.0, 0.0, 0.0, 0.0], 2)
    assert within.outcome == "passed" and within.statistic == pytest.approx(-0.04)
    noisy = gate_decision([-0.6, 0.5, -0.5, 0.55, -0.45], [], 2)  # D -0.1 but as many turns gain as lose
    assert noisy.outcome == "passed" and noisy.statistic < -POLICY.tolerance and noisy.p_value >= POLICY.alpha
    both_lower = gate_decision([-0.3] * 4, [-0.3] * 4, 2)  # a common shift, as any new block gives
    assert both_lower.outcome == "passed" and both_lower.statistic == pytest.approx(0.0)
    assert gate_decision([0.0] * 8, [0.0] * 8, 2).outcome == "passed"  # identical blocks: every Δ is 0


def test_too_few_labelled_turns_pass_and_a_side_of_one_turn_does_not_enter():
    few = gate_decision([-0.9, -0.9, -0.9, -0.9], [], 5)
    assert few.outcome == "passed" and few.reason.startswith("too few labelled turns (4 approved, 0 rejected")
    assert few.statistic is None and few.p_value is None
    one_rejected = gate_decision([-0.9, -0.9, -0.9, -0.9], [0.9], 5)  # 5 turns, but the rejected side is one
    assert one_rejected.outcome == "passed" and one_rejected.reason.startswith("too few labelled turns")
    enough = gate_decision([-0.9] * 5, [0.9], 5)
    assert enough.outcome == "rejected" and enough.rejected_shift is None and enough.statistic == pytest.approx(-0.9)


def test_the_decision_is_the_same_for_the_same_shifts():
    shifts = ([-0.1, -0.3, 0.05, -0.2, -0.15], [0.1, -0.05, 0.2])
    assert gate_decision(*shifts, 9) == gate_decision(*shifts, 9)


def _lesson(lesson_id: int, text: str, support: int = 1, owner: str = "ann") -> Lesson:
    return Lesson(lesson_id, owner, text, support, (str(lesson_id),), 1.0, 1.0)


def test_take_back_restores_the_old_lessons_and_undoing_it_reapplies_the_rejected_version():
    before = Experience("ann", (_lesson(1, "Show every step."), _lesson(2, "Use metric units.")), 2)
    after = Experience("ann", (_lesson(1, "Show every step.", support=2), _lesson(3, "Use bold headings.")), 3)
    decision = gate_decision([-0.3] * 5, [], 3)
    back, change = take_back(after, before, decision, "17")
    assert (back.version, back.lessons) == (4, before.lessons)
    assert change.kind == "undone" and change.gate == decision and change.turn_id == "17"
    assert change.reason.startswith("the experience gate rejected v3: makes the user's answers worse")
    again, _ = revert(back, change)  # POST /v1/experience/undo {"version": 4}
    assert (again.version, again.lessons) == (5, after.lessons)


# -- on the tiny model: the real scoring path -------------------------------------------------------------

QUESTIONS = ["Name a colour.", "What is 2 + 3?", "Say hello.", "Pick a fruit.", "Count to three.", "Name a city.",
             "Name an animal.", "Give me a number."]
CORRECTION = "Answer in French, in one short line."


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from openclaw_rl.engine.local import LocalEngine

    eng = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
    yield eng
    asyncio.run(eng.aclose())


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


class Quiet:
    """A chat judge backend that votes -1 and offers no hint: the lesson is the feedback itself."""

    name = "quiet"

    async def complete(self, messages, *, max_tokens, temperature, seed):
        return "SCORE: -1" if "SCORE: +1" in messages[0]["content"] else "CORRECTION: no"


def _orthogonal(texts: list[str]) -> np.ndarray:
    return np.eye(len(texts))


def _new_block(gate: ExperienceGate) -> str:
    """The block serving would render once the correction is ann's one lesson."""
    return gate.block(Experience("ann", (_lesson(1, lesson_from_hint(CORRECTION)),), 1))


def _record(store: Store, owner: str, question: str, response: list[int], reward: int | None,
            feedback: str = "Thanks.") -> int:
    session = f"s-{owner}-{question}-{reward}"
    store.ensure_session(session, "header", owner=owner)
    turn = store.record_turn(TurnRecord(
        session_id=session, kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": question}],
        prompt_token_ids=[1, 2], response_token_ids=response, behaviour_logprobs=[-1.0] * len(response),
        response_text="", tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop", owner=owner))
    store.set_next_state(turn.id, NextState("feedback" if reward is None else "user", feedback, at=1.0))
    if reward is not None:
        store.write_verdict(Verdict(turn_id=turn.id, status="ok", reward=reward, votes=[reward], raw=[], hints=[],
                                    selected_hint=None, overlap_scores=[], judge="test", latency_s=0.0))
    return turn.id


def _moved_token(model, tokenizer, question: str, block: str, down: bool) -> int:
    """The token whose log-prob as the first answer token the block lowers the most (`down`), or raises the most."""
    messages = [{"role": "user", "content": question}]

    def logprobs(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)

    shift = (logprobs(render_prompt(tokenizer, place(messages, block, "user"), None, None))
             - logprobs(render_prompt(tokenizer, messages, None, None)))
    return int(shift.argmin() if down else shift.argmax())


async def _greedy(engine, question: str, block: str) -> list[int]:
    ids = render_prompt(engine.tokenizer, place([{"role": "user", "content": question}], block, "user"), None, None)
    return [e.token_id async for e in engine.stream(ids, SamplingParams(max_new_tokens=6, temperature=0.0))
            if isinstance(e, TokenStep)]


def _gate(store: Store, engine, **policy) -> ExperienceGate:
    return ExperienceGate(store, engine, engine.tokenizer, budget_tokens=256, placement="user",
                          policy=replace(POLICY, **policy))


def _worker(store: Store, gate: ExperienceGate | None) -> JudgeWorker:
    config = JudgeConfig(votes=1, teacher_targets=False)
    learner = LessonLearner(store, _orthogonal, lambda text: len(text.split()))
    return JudgeWorker(store, LLMJudge(Quiet(), config, len), config, lessons=learner, experience_gate=gate)


def _correct(store: Store, worker: JudgeWorker, owner: str = "ann") -> None:
    turn = store.get_turn(_record(store, owner, "Say something.", [198], None, feedback=CORRECTION))
    assert asyncio.run(worker.process(turn)).status == "ok"


def test_a_block_that_makes_approved_answers_less_likely_is_rejected_and_undone(tmp_path, engine, model):
    store = Store(tmp_path)
    gate = _gate(store, engine)
    block = _new_block(gate)
    for question in QUESTIONS:  # approved: what the block makes least likely; rejected: what it makes likeliest
        _record(store, "ann", question, [_moved_token(model, engine.tokenizer, question, block, down=True)], 1)
        _record(store, "ann", question, [_moved_token(model, engine.tokenizer, question, block, down=False)], -1)
    _correct(store, _worker(store, gate))

    served = store.experience("ann")
    assert (served.version, served.lessons) == (2, ())  # v1 was taken back before anything served it
    undone, added = store.experience_changes("ann")
    assert (added.kind, added.version, added.after_text) == ("added", 1, (lesson_from_hint(CORRECTION),))
    assert (undone.kind, undone.version, undone.before_text) == ("undone", 2, added.after_text)
    decision = undone.gate
    assert decision == added.gate and decision.outcome == "rejected" and decision.checked_version == 1
    assert (decision.approved_turns, decision.rejected_turns, decision.policy_version) == (8, 8, 0)
    assert decision.approved_shift < 0 < decision.rejected_shift and decision.statistic < -POLICY.tolerance
    assert undone.reason.startswith("the experience gate rejected v1: makes the user's answers worse")
    reapplied, _ = revert(served, undone)  # the user or an admin can still have it
    assert [lesson.text for lesson in reapplied.lessons] == [lesson_from_hint(CORRECTION)]


def test_a_harmless_block_passes_with_its_numbers_and_is_served(tmp_path, engine):
    store = Store(tmp_path)
    gate = _gate(store, engine)
    block = _new_block(gate)
    for question in QUESTIONS[:4]:  # the model's own greedy answers, with the block and without it
        _record(store, "ann", question, asyncio.run(_greedy(engine, question, "")), 1)
        _record(store, "ann", question, asyncio.run(_greedy(engine, question, block)), -1)
    _correct(store, _worker(store, gate))

    served = store.experience("ann")
    assert served.version == 1 and [lesson.text for lesson in served.lessons] == [lesson_from_hint(CORRECTION)]
    (added,) = store.experience_changes("ann")
    assert added.gate.outcome == "passed" and (added.gate.approved_turns, added.gate.rejected_turns) == (4, 4)
    assert abs(added.gate.statistic) < POLICY.tolerance and added.gate.policy_version == 0


def test_an_unchanged_block_passes_unscored(tmp_path, engine):
    store = Store(tmp_path)
    gate = _gate(store, engine, tolerance=0.05)
    same = Experience("ann", (_lesson(1, "Show every step."),), 1)
    decision = asyncio.run(gate.check(same, replace(same, version=2)))
    assert (decision.outcome, decision.reason) == ("passed", "the block served is unchanged")


class Recording:
    """The engine, noting every response it scores."""

    def __init__(self, engine):
        self.engine, self.scored = engine, []
        self.policy_version = engine.policy_version

    async def score(self, prompt_ids, response_ids, **kwargs):
        self.scored.append(tuple(response_ids))
        return await self.engine.score(prompt_ids, response_ids, **kwargs)


def test_too_few_labelled_turns_pass_and_another_users_turns_are_never_read(tmp_path, engine, model):
    store = Store(tmp_path)
    recording = Recording(engine)
    gate = ExperienceGate(store, recording, engine.tokenizer, budget_tokens=256, placement="user")
    block = _new_block(gate)
    harmful = {q: _moved_token(model, engine.tokenizer, q, block, down=True) for q in QUESTIONS}
    for question in QUESTIONS:  # bob's history would reject ann's lesson, were it read
        _record(store, "bob", question, [harmful[question], 7], 1)
    for question in QUESTIONS[:4]:
        _record(store, "ann", question, [harmful[question]], 1)
    _correct(store, _worker(store, gate))

    (added,) = store.experience_changes("ann")
    assert added.gate.outcome == "passed" and added.gate.reason.startswith("too few labelled turns (4 approved")
    assert recording.scored == [] and store.experience("ann").version == 1

    _record(store, "ann", QUESTIONS[4], [harmful[QUESTIONS[4]]], 1)  # now 5 of ann's: scored, and only hers
    turn = store.get_turn(_record(store, "ann", "Say more.", [198], None, feedback="Use metric units."))
    asyncio.run(_worker(store, gate).process(turn))
    # ann's 5 approved turns and the correction judged -1 above, under both blocks; bob's have 2 tokens
    assert len(recording.scored) == 12 and all(len(ids) == 1 for ids in recording.scored)


def test_the_gate_off_serves_every_version_as_before(tmp_path, engine, model):
    store = Store(tmp_path)
    block = _new_block(_gate(store, engine))
    for question in QUESTIONS:
        _record(store, "ann", question, [_moved_token(model, engine.tokenizer, question, block, down=True)], 1)
    _correct(store, _worker(store, None))
    (added,) = store.experience_changes("ann")
    assert added.gate is None and store.experience("ann").version == 1 and len(store.experience("ann").lessons) == 1
    assert build_experience_gate(store, JudgeConfig(experience_gate="off"), ServeConfig(), engine) is None
    assert build_experience_gate(store, JudgeConfig(lessons="off"), ServeConfig(), engine) is None
    on = build_experience_gate(store, JudgeConfig(), ServeConfig(experience_placement="system",
                                                                  experience_budget_tokens=64), engine)
    assert (on.placement, on.budget_tokens) == ("system", 64)


# -- where decisions show ---------------------------------------------------------------------------------


def test_the_api_shows_each_changes_gate_decision_and_the_metric_counts_it(scripted_server):
    server = scripted_server(["Paris."])
    store = server.server.store
    users = Users(store.data_dir)
    key, admin = users.add("ann"), users.add("root", admin=True)
    before = Experience("ann")
    after = Experience("ann", (_lesson(1, "Use bold headings."),), 1)
    decision = gate_decision([-0.3] * 5, [], 1)
    back, undo = take_back(after, before, decision)
    store.save_experience(back, [Change("added", "ann", 1, (), after.lessons, gate=decision), undo])
    count_experience_gate(server.server)(decision)

    view = httpx.get(f"{server.base_url}/v1/experience", headers={"Authorization": f"Bearer {key}"}).json()
    assert view["version"] == 2 and view["lessons"] == []
    shown = {c["version"]: c["gate"] for c in view["changes"]}
    assert shown[2]["outcome"] == shown[1]["outcome"] == "rejected" and shown[1]["checked_version"] == 1
    assert shown[2]["reason"] == decision.reason and shown[2]["statistic"] == pytest.approx(-0.3)
    metrics = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    assert 'openclaw_experience_gate_decisions_total{outcome="rejected"} 1.0' in metrics
    assert isinstance(store.experience_changes("ann")[0].gate, GateDecision)  # kept through the store


class Broken(Recording):
    async def score(self, prompt_ids, response_ids, **kwargs):
        raise RuntimeError("engine gone")


def test_a_scoring_that_fails_passes_the_version_and_says_why(tmp_path, engine):
    store = Store(tmp_path)
    for question in QUESTIONS[:5]:
        _record(store, "ann", question, [198], 1)
    gate = ExperienceGate(store, Broken(engine), engine.tokenizer, budget_tokens=256, placement="user")
    _correct(store, _worker(store, gate))
    (added,) = store.experience_changes("ann")
    assert added.gate.outcome == "passed" and added.gate.reason == "not checked: scoring failed: RuntimeError: engine gone"
    assert store.experience("ann").version == 1
