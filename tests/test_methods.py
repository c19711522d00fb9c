"""Training methods as declared objects: the registry, `--method module:ATTR`, what a method
keeps of a turn's sample (and why it skips one), and one judge serving two methods' trainers."""

from __future__ import annotations

import asyncio
import math
import sys
import types
from pathlib import Path

import pytest
import torch

from openclaw_rl.chat import render_prompt
from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.judge.worker import JudgeWorker, Reading
from openclaw_rl.store import Store
from openclaw_rl.train.batch import collate
from openclaw_rl.train.methods import METHODS, Method, get_method, reward_advantages
from openclaw_rl.train.runner import shown, step_line
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import NextState, Sample, TurnRecord

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def importable(monkeypatch):
    """tests/ on sys.path, as PYTHONPATH puts a project's own module there for `--method module:ATTR`."""
    monkeypatch.syspath_prepend(str(HERE))


def _sample(turn_id: int = 1, **fields) -> Sample:
    return Sample(**{"turn_id": turn_id, "session_id": "s", "policy_version": 0, "prompt_token_ids": [1, 2],
                     "response_token_ids": [3, 4], "behaviour_logprobs": [-1.0, -1.0], "temperature": 1.0, **fields})


FULL = dict(reward=1.0, teacher_logprobs=[-0.5, -3.0], teacher_top_ids=[[3, 5], [4, 6]],
            teacher_top_logprobs=[[-0.5, -1.0], [-3.0, -0.1]], hint="say 366")


# -- the registry and module:ATTR -----------------------------------------------------------------


def test_the_registry_names_each_built_in_method_once_with_what_it_reads():
    assert list(METHODS) == ["binary", "opd", "combined", "topk", "stepwise", "consolidate"]
    assert all(method.name == name and get_method(name) is method for name, method in METHODS.items())
    assert {name: m.reads_teacher for name, m in METHODS.items()} == {
        "binary": False, "opd": True, "combined": True, "topk": True, "stepwise": False, "consolidate": False}
    assert [name for name, m in METHODS.items() if m.reads_experience] == ["consolidate"]
    assert METHODS["topk"].topk_kl and METHODS["topk"].advantages is None


def test_module_attr_loads_a_method_from_outside_the_package(importable):
    from sign_opd import SIGN_OPD

    assert get_method("sign_opd:SIGN_OPD") is SIGN_OPD
    assert SIGN_OPD.name == "sign_opd" and SIGN_OPD.reads_teacher


def test_a_name_that_is_no_method_says_what_would_work(importable, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown method 'ppo'; choose one of binary, opd, combined, topk, "
                                         r"stepwise, consolidate, or name your own Method as module:ATTR"):
        get_method("ppo")
    with pytest.raises(ValueError, match="importing no_such_module failed"):
        get_method("no_such_module:X")
    with pytest.raises(ValueError, match=r"sign_opd has no 'nothing'"):
        get_method("sign_opd:nothing")
    with pytest.raises(ValueError, match=r"it names a str, not an openclaw_rl.train.methods.Method"):
        get_method("sign_opd:__name__")
    fake = types.ModuleType("fake_methods")
    fake.BINARY = Method("binary", ("reward",), reward_advantages)  # a copy under a built-in's name
    monkeypatch.setitem(sys.modules, "fake_methods", fake)
    with pytest.raises(ValueError, match="a built-in's name; give it a name of its own"):
        get_method("fake_methods:BINARY")


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="a:b", signals=("reward",), advantages=reward_advantages), "without ':'"),
    (dict(name="x", signals=()), "use one or more of reward, teacher_logprobs"),
    (dict(name="x", signals=("votes",), advantages=reward_advantages), r"\['votes'\]"),
    (dict(name="x", signals=("reward",)), "no loss term"),
    (dict(name="x", signals=("teacher_logprobs",), topk_kl=True), "must include 'teacher_top_k'"),
    (dict(name="x", signals=("reward",), advantages=reward_advantages, weights=("w_x",)), r"\['w_opd', 'w_rl'\]"),
])
def test_a_method_declaration_is_checked_when_it_is_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Method(**kwargs)


@pytest.mark.parametrize("config, message", [
    (TrainConfig(method="binary", w_rl=0.0), "give --w-rl a positive weight"),
    (TrainConfig(method="combined", w_rl=0.0, w_opd=0.0), "give --w-rl or --w-opd a positive weight"),
    (TrainConfig(method="grpo"), "unknown method 'grpo'"),
])
def test_a_bad_method_or_all_zero_weights_fail_before_any_model_loads(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        Trainer(tmp_path / "no-model-here", config, device="cpu")


def test_the_judge_method_flag_is_gone_with_a_message_that_says_where_it_went(tmp_path, capsys):
    from openclaw_rl.cli import main

    assert main(["judge", "--data-dir", str(tmp_path), "--method", "binary", "--once"]) == 2
    err = capsys.readouterr().err
    assert "judge --method binary is gone" in err and "`openclaw-rl train`" in err and "--no-teacher-targets" in err


# -- assembly: what a method keeps of a turn's sample ---------------------------------------------


def test_each_method_keeps_only_the_signals_it_reads():
    full = _sample(**FULL)
    binary = METHODS["binary"].assemble(full)
    assert (binary.reward, binary.teacher_logprobs, binary.hint) == (1.0, None, None)
    opd = METHODS["opd"].assemble(full)
    assert (opd.reward, opd.teacher_logprobs, opd.teacher_top_ids, opd.hint) == (None, [-0.5, -3.0], None, "say 366")
    combined = METHODS["combined"].assemble(full)
    assert (combined.reward, combined.teacher_logprobs, combined.teacher_top_ids) == (1.0, [-0.5, -3.0], None)
    topk = METHODS["topk"].assemble(full)
    assert topk.reward is None and topk.teacher_top_ids == [[3, 5], [4, 6]] and topk.teacher_logprobs is not None
    assert METHODS["stepwise"].assemble(full) == "no step advantage"
    step = METHODS["stepwise"].assemble(_sample(step_advantage=-0.7, reward=1.0))
    assert (step.step_advantage, step.reward) == (-0.7, None)
    # reward 0 is no direction: combined keeps the turn for its teacher alone, binary skips it
    neutral = _sample(**{**FULL, "reward": 0.0})
    assert METHODS["combined"].assemble(neutral).reward is None
    assert METHODS["binary"].assemble(neutral) == "reward 0 carries no evaluative signal"
    assert METHODS["topk"].assemble(_sample(teacher_logprobs=[-1.0, -1.0])) == "no teacher top-k"
    assert METHODS["stepwise"].assemble(_sample(step_advantage=0.0)) == "step advantage 0: no direction"
    assert METHODS["binary"].assemble(full) == METHODS["binary"].assemble(binary)  # assembling twice changes nothing


def test_a_teacher_method_skips_a_turn_without_teacher_targets_and_records_why(tmp_path):
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    ids = [store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1, 2],
        response_token_ids=[3, 4], behaviour_logprobs=[-1.0, -1.0], response_text="", tool_calls=[], sampling={},
        finish_reason="stop")).id for _ in range(2)]
    store.add_sample(_sample(ids[0], **FULL))
    store.add_sample(_sample(ids[1], reward=-1.0))  # a verdict, but no hint: nothing for opd
    opd = METHODS["opd"]
    claimed, _ = store.claim_samples(opd.name, 2, 0, 2, train_step=1, min_size=1, assemble=opd.assemble)
    assert [s.turn_id for s in claimed] == [ids[0]]
    assert store.sample_counts("opd") == {"ready": 0, "used": 1, "dropped": 0, "rejected": 1}
    rows = store._execute("SELECT turn_id, status, reason FROM claims WHERE method = 'opd' ORDER BY turn_id").fetchall()
    assert rows == [(ids[0], "used", None), (ids[1], "rejected", "no hint: no directive signal (or the judge "
                                                                 "scored no teacher)")]
    binary = METHODS["binary"]  # the turn opd skipped is still there for a method that can learn from it
    claimed, _ = store.claim_samples(binary.name, 2, 0, 2, train_step=1, assemble=binary.assemble)
    assert [(s.turn_id, s.reward) for s in claimed] == [(ids[0], 1.0), (ids[1], -1.0)]
    store.close()


# -- the example method of docs/architecture.md ---------------------------------------------------


def test_sign_opd_advantages_by_hand(importable):
    from sign_opd import SIGN_OPD

    mask = lambda rows: torch.tensor(rows, dtype=torch.bool)  # noqa: E731
    batch = {
        "loss_mask": mask([[1, 1], [1, 1], [1, 0]]),
        "behaviour_logprobs": torch.full((3, 2), -1.0),
        "teacher_logprobs": torch.tensor([[-0.5, -3.0], [0.0, 0.0], [-0.8, math.nan]]),  # gaps +0.5, -2; -; +0.2
        "teacher_mask": mask([[1, 1], [0, 0], [1, 0]]),
    }
    from openclaw_rl.train.losses import LossParams

    advantages, kept = SIGN_OPD.advantages(batch, LossParams())
    assert advantages.tolist() == [[1.0, -1.0], [0.0, 0.0], [1.0, 0.0]]
    assert kept.tolist() == [[True, True], [False, False], [True, False]]
    loss, stats = SIGN_OPD.loss(batch, batch["behaviour_logprobs"].clone())  # ratio 1: L = mean of -A
    assert loss.item() == pytest.approx((0.0 + -1.0) / 2)  # sample 0: (-1 + 1) / 2; sample 1 has no teacher
    assert stats["samples"] == 2


def test_a_method_named_as_module_attr_trains_one_step_on_the_tiny_model(importable, tiny_model_dir):
    trainer = Trainer(tiny_model_dir, TrainConfig(method="sign_opd:SIGN_OPD", lr=1e-3), device="cpu")
    assert trainer.method.name == "sign_opd"
    draft = _sample(response_token_ids=[11, 12, 13], behaviour_logprobs=[0.0] * 3)
    with torch.no_grad():
        behaviour, _ = trainer.logprobs(collate([draft]))  # the policy's own log-probs: the first ratio is 1
    behaviour = behaviour[0].tolist()
    sample = Sample(**{**draft.to_dict(), "behaviour_logprobs": behaviour,
                       "teacher_logprobs": [b + g for b, g in zip(behaviour, (0.5, -0.3, 2.0))]})
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    stats = trainer.step([sample])
    assert stats["loss"] == pytest.approx(-(1 - 1 + 1) / 3, abs=1e-5)  # A = sign(+0.5, -0.3, +2.0), ratio 1
    assert (stats["optimizer_steps"], trainer.policy_version) == (1.0, 1)
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_a_combined_step_without_a_hint_logs_no_nan(tiny_model_dir):
    """Issue 42: a combined batch with rewards and no teacher tokens has no |A_opd|; the stats keep
    NaN (TensorBoard, /metrics) and the lines a person reads say n/a."""
    trainer = Trainer(tiny_model_dir, TrainConfig(method="combined", lr=1e-3), device="cpu")
    stats = trainer.step([METHODS["combined"].assemble(_sample(reward=1.0)), METHODS["combined"].assemble(
        _sample(2, reward=-1.0))])
    assert math.isnan(stats["opd_adv_abs_mean"]) and stats["reward_mean"] == 0.0
    line = step_line(trainer.train_step, trainer.policy_version, stats, 2)
    assert "|A_opd| n/a," in line and "reward 0.00," in line and "nan" not in line.lower()
    assert (shown(math.nan, ".3f"), shown(None, ".2f"), shown(0.25, "+.2f")) == ("n/a", "n/a", "+0.25")


# -- one judge, two trainers of different methods, one store ---------------------------------------


class FixedJudge:
    """Votes and hints by the turn's position in its session: the whole spread of signals."""

    name = "fixed"
    READINGS = [(1, "Say that a leap year has 366 days."), (-1, None), (0, "Mention the 29th of February."),
                (1, "Name the extra day: 29 February.")]

    def __init__(self) -> None:
        self.calls = 0

    async def read(self, turn) -> Reading:
        self.calls += 1
        vote, hint = self.READINGS[turn.index]
        return Reading(votes=[vote], raw=[], hints=[hint] if hint else [])


def test_one_judge_run_serves_trainers_of_two_methods_from_one_store(tiny_model_dir, tmp_path):
    engine = LocalEngine(tiny_model_dir, threads=1)
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    for i in range(4):
        messages = [{"role": "user", "content": f"How many days has leap year {i}?"}]
        response = engine.tokenizer.encode("A leap year has 365 days.")
        turn = store.record_turn(TurnRecord(
            session_id="s", kind="main", policy_version=0, prompt_messages=messages,
            prompt_token_ids=render_prompt(engine.tokenizer, messages, None, None), response_token_ids=response,
            behaviour_logprobs=[-2.0] * len(response), response_text="", tool_calls=[],
            sampling={"temperature": 1.0}, finish_reason="stop"))
        store.set_next_state(turn.id, NextState("user", "No, 366.", at=1.0))
    judge = FixedJudge()
    worker = JudgeWorker(store, judge, JudgeConfig(votes=1), engine, engine.tokenizer)  # no method anywhere
    try:
        assert asyncio.run(worker.drain()) == 4
    finally:
        asyncio.run(engine.aclose())
    assert judge.calls == 4 and store.sample_counts() == {"ready": 4, "used": 0, "dropped": 0, "rejected": 0}

    trained = {}
    for name in ("binary", "opd"):
        trainer = Trainer(tiny_model_dir, TrainConfig(method=name, lr=1e-3), device="cpu")
        samples, _ = store.claim_samples(name, 4, 0, 2, train_step=1, min_size=1, assemble=trainer.method.assemble)
        trained[name] = sorted(samples, key=lambda s: s.turn_id)  # claimed in the order the judge finished them
        stats = trainer.step(samples)
        assert stats["optimizer_steps"] == 1.0 and trainer.policy_version == 1
    turn_ids = [t.id for t in store.turns("s")]
    # binary: the non-zero verdicts (turns 0, 1, 3), reward only; opd: the hinted turns (0, 2, 3), teacher only
    assert [(s.turn_id, s.reward, s.teacher_logprobs is None) for s in trained["binary"]] == [
        (turn_ids[0], 1.0, True), (turn_ids[1], -1.0, True), (turn_ids[3], 1.0, True)]
    assert [(s.turn_id, s.reward, s.hint) for s in trained["opd"]] == [
        (turn_ids[0], None, FixedJudge.READINGS[0][1]), (turn_ids[2], None, FixedJudge.READINGS[2][1]),
        (turn_ids[3], None, FixedJudge.READINGS[3][1])]
    assert all(len(s.teacher_logprobs) == len(s.response_token_ids) for s in trained["opd"])
    for name in ("binary", "opd"):
        assert store.sample_counts(name) == {"ready": 0, "used": 3, "dropped": 0, "rejected": 1}
    store.close()
