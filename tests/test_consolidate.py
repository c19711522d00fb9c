"""Consolidation (issue 38, item 3): the `consolidate` method distils a user's experience block
into the weights. For a turn served with the block, the student is the model on the client's
messages without it, the teacher the same model on the exact ids served, the response the
exact ids sampled; A_t = w_rl r + w_opd clip(teacher - student, -C, C), trained on the
prompt without the block, so the first PPO ratio is 1.

The tiny model (tests/conftest.py: SmolLM2's tokenizer and chat template, random weights)
scores both sides on the local engine; the trainer loads the same weights.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from openclaw_rl.chat import render_prompt
from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.experience import HEADER, merge_system
from openclaw_rl.judge.teacher import ExperienceRenderError, score_experience, student_prompt_ids
from openclaw_rl.judge.worker import JudgeWorker, Reading
from openclaw_rl.store import Store
from openclaw_rl.train.batch import collate
from openclaw_rl.train.methods import METHODS
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import ExperienceTargets, NextState, Sample, Turn, TurnRecord

BLOCK = f"{HEADER} Show every step of the calculation. Answer in plain sentences, no bullet points."
MESSAGES = [{"role": "system", "content": "You are a careful maths tutor."},
            {"role": "user", "content": "What is 12 times 7?"}]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "evaluate an expression",
                                           "parameters": {"type": "object",
                                                          "properties": {"expression": {"type": "string"}}}}}]
RESPONSE = "Twelve times seven: 10 times 7 is 70, 2 times 7 is 14, and 70 plus 14 is 84."


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    eng = LocalEngine(tiny_model_dir, max_batch_size=4)
    yield eng
    asyncio.run(eng.aclose())


def record(store: Store, tokenizer, *, block: str = BLOCK, tools=TOOLS, tool_choice="auto",
           next_state: str = "No, show the steps.") -> Turn:
    """A main turn as serving records it: the client's messages, the ids served (block merged
    into the system message, rendered with the tools), the experience version and block."""
    store.ensure_session("s", "header")
    served = render_prompt(tokenizer, merge_system(MESSAGES, block), tools, tool_choice)
    response = tokenizer.encode(RESPONSE, add_special_tokens=False)
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=MESSAGES, prompt_token_ids=served,
        response_token_ids=response, behaviour_logprobs=[-2.0] * len(response), response_text=RESPONSE,
        tool_calls=[], sampling={"temperature": 1.0, "top_p": 1.0, "tools": tools, "tool_choice": tool_choice},
        finish_reason="stop", experience_version=3 if block else None, experience_block=block))
    store.set_next_state(turn.id, NextState("user", next_state, at=1.0))
    return store.get_turn(turn.id)


def consolidation_sample(turn: Turn, experience: ExperienceTargets, reward: float | None = None) -> Sample:
    return Sample(turn_id=turn.id, session_id=turn.session_id, policy_version=turn.policy_version,
                  prompt_token_ids=turn.prompt_token_ids, response_token_ids=turn.response_token_ids,
                  behaviour_logprobs=turn.behaviour_logprobs, temperature=1.0, reward=reward, experience=experience)


# -- the experience pass (judge/teacher.py) --------------------------------------------------------


def test_the_student_prompt_is_the_clients_messages_rendered_as_served_without_the_block(tmp_path, engine):
    tokenizer = engine.tokenizer
    turn = record(Store(tmp_path), tokenizer)
    student = student_prompt_ids(tokenizer, turn)
    assert student == render_prompt(tokenizer, MESSAGES, TOOLS, "auto")  # same template, tools, tool_choice
    assert student != render_prompt(tokenizer, MESSAGES, None, None)  # the tools are in it
    text, served = tokenizer.decode(student), tokenizer.decode(turn.prompt_token_ids)
    assert HEADER in served and HEADER not in text
    assert "careful maths tutor" in text and "calculator" in text
    # the served ids are the student's with the block added to the client's own system message
    assert served.replace(f"\n\n{BLOCK}", "") == text


def test_a_served_prompt_that_does_not_rerender_to_its_ids_gets_no_experience_pass(tmp_path, engine):
    store = Store(tmp_path)
    turn = record(store, engine.tokenizer)
    other = Turn(**{**turn.__dict__, "prompt_token_ids": turn.prompt_token_ids[:-1]})
    with pytest.raises(ExperienceRenderError, match="does not re-render"):
        asyncio.run(score_experience(engine, engine.tokenizer, other))


def test_teacher_minus_student_is_the_two_scores_of_the_response_with_and_without_the_block(tmp_path, engine):
    tokenizer = engine.tokenizer
    turn = record(Store(tmp_path), tokenizer)
    experience = asyncio.run(score_experience(engine, tokenizer, turn))
    response = turn.response_token_ids
    without = asyncio.run(engine.score(render_prompt(tokenizer, MESSAGES, TOOLS, "auto"), response))
    served = asyncio.run(engine.score(turn.prompt_token_ids, response))
    assert experience.prompt_token_ids == render_prompt(tokenizer, MESSAGES, TOOLS, "auto")
    assert experience.student_logprobs == pytest.approx(without.logprobs, abs=1e-6)
    assert experience.teacher_logprobs == pytest.approx(served.logprobs, abs=1e-6)
    assert (experience.policy_version, experience.experience_version) == (engine.policy_version, 3)
    gap = [t - s for t, s in zip(experience.teacher_logprobs, experience.student_logprobs)]
    assert len(gap) == len(response) and max(abs(g) for g in gap) > 1e-3  # the block changes the scores


def test_a_turn_served_without_a_block_has_no_experience_pass(tmp_path, engine):
    turn = record(Store(tmp_path), engine.tokenizer, block="")
    assert asyncio.run(score_experience(engine, engine.tokenizer, turn)) is None


# -- the judge writes it; consolidate assembles it --------------------------------------------------


class Votes:
    """The judge's reading by the turn's next state: a correction, an approval, or neither."""

    name = "votes"

    async def read(self, turn) -> Reading:
        vote = {"No, show the steps.": -1, "Thanks.": 1}.get(turn.next_state.content, 0)
        return Reading(votes=[vote], raw=[], hints=[])


def test_the_judge_writes_the_experience_signal_and_consolidate_trains_the_student_view(tmp_path, engine):
    store = Store(tmp_path)
    tokenizer = engine.tokenizer
    served = record(store, tokenizer)  # a correction of a turn served with the block
    plain = record(store, tokenizer, block="", next_state="Thanks.")  # no block: the reward alone
    neither = record(store, tokenizer, block="", next_state="Hm.")  # no block, reward 0: nothing
    worker = JudgeWorker(store, Votes(), JudgeConfig(votes=1), engine, tokenizer)
    assert asyncio.run(worker.drain()) == 3

    claimed, _ = store.claim_samples("consolidate", 3, 0, 2, train_step=1, min_size=1,
                                     assemble=METHODS["consolidate"].assemble)
    by_turn = {s.turn_id: s for s in claimed}
    assert sorted(by_turn) == [served.id, plain.id]
    sample = by_turn[served.id]
    assert sample.experience is not None and sample.reward == -1.0
    assert sample.prompt_token_ids == render_prompt(tokenizer, MESSAGES, TOOLS, "auto") != served.prompt_token_ids
    assert sample.behaviour_logprobs == sample.experience.student_logprobs
    assert sample.teacher_logprobs == sample.experience.teacher_logprobs and sample.hint is None
    alone = by_turn[plain.id]
    assert (alone.experience, alone.teacher_logprobs, alone.reward) == (None, None, 1.0)
    assert (alone.prompt_token_ids, alone.behaviour_logprobs) == (plain.prompt_token_ids, plain.behaviour_logprobs)
    reason = store._execute("SELECT reason FROM claims WHERE method = 'consolidate' AND turn_id = ?",
                            (neither.id,)).fetchone()[0]
    assert "reward 0" in reason and "not served with an experience block" in reason
    # the methods that read no experience see the turn as before: combined its reward, on the ids served
    combined = METHODS["combined"].assemble(store_sample(store, served.id))
    assert (combined.prompt_token_ids, combined.reward, combined.teacher_logprobs) == (
        served.prompt_token_ids, -1.0, None)
    assert METHODS["consolidate"].assemble(sample) == sample  # assembling twice changes nothing
    store.close()


def test_experience_targets_off_scores_no_experience_pass(tmp_path, engine):
    store = Store(tmp_path)
    turn = record(store, engine.tokenizer)
    worker = JudgeWorker(store, Votes(), JudgeConfig(votes=1, experience_targets=False), engine, engine.tokenizer)
    asyncio.run(worker.drain())
    assert store_sample(store, turn.id).experience is None
    store.close()


def store_sample(store: Store, turn_id: int) -> Sample:
    import json

    (payload,) = store._execute("SELECT payload FROM samples WHERE turn_id = ?", (turn_id,)).fetchone()
    return Sample.from_dict(json.loads(payload))


# -- the trainer ------------------------------------------------------------------------------------


def test_the_first_ratio_is_one_and_a_step_moves_the_student_toward_the_teacher(tmp_path, engine, tiny_model_dir):
    tokenizer = engine.tokenizer
    turn = record(Store(tmp_path), tokenizer)
    experience = asyncio.run(score_experience(engine, tokenizer, turn))
    method = METHODS["consolidate"]
    sample = method.assemble(consolidation_sample(turn, experience))  # no verdict: the distillation term alone
    trainer = Trainer(tiny_model_dir, TrainConfig(method="consolidate", lr=1e-3), device="cpu")
    batch = collate([sample])
    with torch.no_grad():
        before, _ = trainer.logprobs(batch)  # (1, T) the trainer's student log-probs, prompt without the block
    # the trainer measures what the judge's engine scored: the first PPO ratio is 1
    assert before[0].tolist() == pytest.approx(experience.student_logprobs, abs=1e-4)
    stats = trainer.step([sample])
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["clip_fraction"] == 0.0
    assert stats["optimizer_steps"] == 1.0

    with torch.no_grad():
        after, _ = trainer.logprobs(batch)
    advantage = (torch.tensor(experience.teacher_logprobs) - torch.tensor(experience.student_logprobs)).clamp(-1, 1)
    moved = after[0] - before[0]  # (T,)
    # the step ascends the surrogate: the student rose where the teacher (the block) was higher, relative to the rest
    assert float((advantage * moved).sum()) > 0
    higher = advantage > 0
    assert float(moved[higher].mean()) > float(moved[~higher].mean())


# -- absorption: does the lesson still move the policy? (designed, the threshold unmeasured) ------


def test_a_lessons_absorption_is_its_mean_gap_with_and_without_it(tmp_path, engine):
    from openclaw_rl.experience import Lesson
    from openclaw_rl.judge.absorption import lesson_absorption, lesson_block

    tokenizer = engine.tokenizer
    store = Store(tmp_path)
    turns = [record(store, tokenizer), record(store, tokenizer, block="", tools=None, tool_choice=None)]
    lesson = Lesson(id=4, owner="alice", text="Show every step of the calculation.", support=2, sources=("1",),
                    created_at=0.0, updated_at=0.0)
    assert lesson_block(lesson) == f"{HEADER} Show every step of the calculation."
    expected = []
    for turn, tools in zip(turns, (TOOLS, None)):
        choice = "auto" if tools else None
        taught = asyncio.run(engine.score(render_prompt(tokenizer, merge_system(MESSAGES, lesson_block(lesson)),
                                                        tools, choice), turn.response_token_ids))
        plain = asyncio.run(engine.score(render_prompt(tokenizer, MESSAGES, tools, choice), turn.response_token_ids))
        expected.append(sum(t - s for t, s in zip(taught.logprobs, plain.logprobs)) / len(plain.logprobs))
    gap = sum(expected) / 2
    measured = asyncio.run(lesson_absorption(engine, tokenizer, lesson, turns, threshold=abs(gap) + 1.0))
    assert (measured.lesson_id, measured.turns, measured.absorbed) == (4, 2, True)
    assert measured.gap_per_token == pytest.approx(gap, abs=1e-6) and abs(gap) > 1e-4
    strict = asyncio.run(lesson_absorption(engine, tokenizer, lesson, turns, threshold=gap - 1e-3))
    assert not strict.absorbed
    with pytest.raises(ValueError, match="at least one turn"):
        asyncio.run(lesson_absorption(engine, tokenizer, lesson, []))
    store.close()


# -- the composition root scores the pass only where a method that trains reads it ---------------


@pytest.mark.parametrize("method, hint_teacher, experience", [("combined", True, False), ("consolidate", False, True)])
def test_serve_scores_the_experience_pass_only_for_a_method_that_reads_it(tiny_model_dir, tmp_path, method,
                                                                          hint_teacher, experience):
    from openclaw_rl.compose import StackSpec, build_stack
    from openclaw_rl.config import ServeConfig
    from openclaw_rl.serve.background import ServerThread, free_port

    port = free_port()
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), port=port, status_interval_s=0.0,
                        train=True)
    stack = build_stack(serve, JudgeConfig(teacher="initial"), TrainConfig(method=method, gate="off"),
                        StackSpec(judge=Votes()))
    thread = ServerThread(stack.app(), port)
    try:
        (worker,) = [loop.__self__ for loop in stack.loops if isinstance(getattr(loop, "__self__", None), JudgeWorker)]
        assert (worker.config.teacher_targets, worker.config.experience_targets) == (hint_teacher, experience)
        # the hint teacher of --teacher initial is an engine of its own; the experience pass runs on the policy served
        assert (worker.teacher_engine is stack.server.engine) == (not hint_teacher)
    finally:
        thread.stop()


def test_a_method_may_not_read_the_experience_beside_the_hint_teacher():
    from openclaw_rl.train.methods import Method, combined_term_advantages

    with pytest.raises(ValueError, match="beside the hint teacher's signals"):
        Method("both", ("experience", "teacher_logprobs"), combined_term_advantages)


@pytest.mark.parametrize("gaps, expected", [
    ([], None), ([0.3], None),  # nothing to compare with
    ([0.01, 0.0], None),  # a first gap within what base weights show: cannot tell
    ([0.3, 0.2], False), ([0.3, 0.075], True), ([0.3, 0.5, 0.05], True), ([0.3, 0.05, 0.2], False)])
def test_a_lesson_is_absorbed_when_its_gap_fell_to_a_quarter_of_its_first(gaps, expected):
    from openclaw_rl.judge.absorption import absorbed

    assert absorbed([{"gap": gap, "policy_version": i} for i, gap in enumerate(gaps)]) is expected


def test_under_a_personal_adapter_a_lesson_is_compared_along_the_adapters_versions():
    from openclaw_rl.judge.absorption import absorbed, absorbed_by_adapter_version, weights_line

    def at(gap: float, when: float, adapter: int | None = None, version: int = 0) -> dict:
        return {"policy_version": version, "adapter_version": adapter, "gap": gap, "measured_at": when}

    base, v1, v2 = at(0.3, 1.0), at(0.2, 2.0, adapter=1), at(0.06, 3.0, adapter=2)
    assert weights_line([base, v1, v2]) == [base, v1, v2]  # the base the adapter started from, then its versions
    assert absorbed([base, v1, v2]) is True  # 0.06 <= a quarter of the base's 0.3
    assert absorbed([v1, v2]) is False  # no base measured: the adapter's first version is the first gap
    assert absorbed_by_adapter_version([base, v1, v2]) == {1: False, 2: True}  # each version along its line
    # the adapter turned off and the lesson measured on the shared model again: that line alone (one version)
    again = at(0.3, 4.0)
    assert weights_line([again, v1, v2]) == [again] and absorbed([again, v1, v2]) is None
    assert absorbed_by_adapter_version([again, v1, v2]) == {1: False, 2: True}  # the adapter's line still holds
    # another base (a promotion): the adapter's line starts at its own base's measurement
    promoted, on_it = at(0.1, 5.0, version=4), at(0.06, 6.0, adapter=3, version=4)
    assert weights_line([base, v1, v2, promoted, on_it]) == [promoted, on_it]
    assert absorbed([base, v1, v2, promoted, on_it]) is False
