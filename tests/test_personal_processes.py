"""Personal adapters across processes: `serve --personal-adapters on --no-train` beside `openclaw-rl
train --personal-adapters on` on one data dir (train/personal_history.py, docs/personal-adapters.md).

The trainer is a second process, `openclaw-rl train` started with subprocess, as
test_online_loop.py and test_shared_state.py run it for the shared model: the file lock, the
store's records and the files are then crossed by two processes for real, not by two objects
that share an interpreter. The serving app runs in this process (test_personal_serving's
`Running`), so the test reads its engine's adapters. Every wait is on a store record or on what
the engine serves, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from openclaw_rl.compose import build_personal_trainer, standalone_judge
from openclaw_rl.judge.teacher import personal_adapter
from openclaw_rl.config import ConfigError, JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.store import Store
from openclaw_rl.train.personal import PersonalAdapters, personal_claims, personal_config, run_personal
from openclaw_rl.train.personal_history import AdapterHistory
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.trainer import Trainer
from test_personal_serving import Running, _same
from test_promote import SIGNALS as FOUR_SIGNALS
from test_promote import _store_with_samples
from test_trainer import SIGNALS, make_samples


def _trainer(model_dir: Path, data_dir: Path, max_steps: int) -> subprocess.Popen:
    log = open(data_dir / "personal-trainer.log", "w")  # noqa: SIM115 - the process holds it until it exits
    return subprocess.Popen(
        [sys.executable, "-m", "openclaw_rl.cli", "train", "--personal-adapters", "on", "--data-dir", str(data_dir),
         "--model", str(model_dir), "--method", "binary", "--batch-size", "4", "--lr", "0.01", "--gate", "off",
         "--train-poll-interval-s", "0.05", "--max-steps", str(max_steps)],
        stdout=log, stderr=subprocess.STDOUT)


def _until(running: Running, trainer: subprocess.Popen, ready, what: str, timeout_s: float = 90) -> None:
    """Poll `ready` (a store record, what the engine serves) until it holds; fail at once if the trainer died."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        log = Path(running.store.data_dir) / "personal-trainer.log"
        assert trainer.poll() in (None, 0), f"the trainer exited with {trainer.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}; trainer log: {log.read_text()[-3000:]}"
        running.server.check_loops()
        time.sleep(0.05)


def test_a_trainer_process_trains_each_users_adapter_and_the_serving_process_serves_it(tiny_model_dir, tmp_path):
    running = Running(tiny_model_dir, tmp_path, "on", train_here=False)
    trainer = _trainer(tiny_model_dir, tmp_path, max_steps=4)  # alice, bob, alice, alice after her rollback
    store, engine = running.store, running.server.engine
    try:
        assert running.stack.trainer is None and running.server.personal is not None  # nothing trains here
        base = {user: running.greedy(user) for user in ("alice", "carol")}
        running.give_feedback("alice", 4)
        running.give_feedback("bob", 4)
        _until(running, trainer, lambda: store.served_adapter_versions() == {"alice": 1, "bob": 1}, "v1 recorded")
        _until(running, trainer, lambda: engine.adapter_versions() == {"alice": 1, "bob": 1}, "v1 served")
        alice, bob, carol = running.greedy("alice"), running.greedy("bob"), running.greedy("carol")
        assert alice[0] == "1" and bob[0] == "1"  # X-Policy-Version names their own adapter's version
        assert _same(carol, base["carol"])  # no adapter: the base model's tokens and log-probs
        assert alice[1] != base["alice"][1] and alice[1] != bob[1]
        (record,) = running.adapters("alice")["data"][0]["versions"]
        assert (record["version"], record["parent"], record["gate"], record["serving"]) == (1, None, "ungated", True)

        running.give_feedback("alice", 4, start=10)
        _until(running, trainer, lambda: engine.adapter_versions().get("alice") == 2, "alice's v2 served")
        assert running.greedy("alice")[0] == "2"
        rolled = httpx.post(f"{running.url}/v1/adapters/rollback", headers=running.keys["alice"], json={"to": 1})
        assert rolled.status_code == 200 and rolled.json()["version"] == 3
        assert _same(running.greedy("alice"), ("3", alice[1]))  # v1's weights under a new number, at once

        running.give_feedback("alice", 4, start=20)  # the trainer trains on from what she is served now
        _until(running, trainer, lambda: store.served_adapter_versions().get("alice") == 4, "alice's v4 recorded")
        history = {r["version"]: r for r in store.adapter_versions("alice")}
        assert (history[3]["gate"], history[3]["parent"], history[4]["parent"]) == ("rollback", 1, 3)
        _until(running, trainer, lambda: engine.adapter_versions().get("alice") == 4, "alice's v4 served")
        assert running.greedy("alice")[0] == "4" and _same(running.greedy("bob"), bob)
        assert trainer.wait(timeout=60) == 0  # --max-steps 4

        deleted = httpx.delete(f"{running.url}/v1/users/bob/data", headers=running.keys["bob"])
        assert deleted.status_code == 200 and deleted.json()["adapter_versions"] == 1
        assert engine.adapter_versions() == {"alice": 4} and not (tmp_path / "personal" / "bob").exists()
        assert _same(running.greedy("carol"), base["carol"])
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        running.stop()


@pytest.fixture(scope="module")
def alice_samples(tiny_model_dir):
    return make_samples(tiny_model_dir, SIGNALS)[:4]


def _personal(model_dir: Path, data_dir: Path) -> PersonalAdapters:
    torch.manual_seed(0)  # peft's initial A: the same for every trainer built here
    return PersonalAdapters(Trainer(model_dir, personal_config(TrainConfig(lr=1e-2, personal_lr=1e-2)), device="cpu"), data_dir, [],
                            min_samples=4)


def test_a_rollback_made_by_another_process_is_trained_on_as_one_made_by_the_trainer(tiny_model_dir, tmp_path,
                                                                                      alice_samples):
    """The trainer's next step after a rollback the serving process wrote starts from the rolled-back
    weights with fresh moments, bit for bit as after its own rollback (the moments it kept for v2
    would otherwise carry on: train/personal_state.py)."""

    async def rolled_back_by(serving_apart: bool, data_dir: Path) -> dict[str, torch.Tensor]:
        personal = _personal(tiny_model_dir, data_dir)
        serving = AdapterHistory(data_dir, []) if serving_apart else personal
        for _ in range(2):
            await personal.train("alice", alice_samples)
        assert await serving.rollback("alice", 1) == 3
        assert await personal.train("alice", alice_samples) == 4
        return personal.adapter("alice", 4).state_dict

    apart = asyncio.run(rolled_back_by(True, tmp_path / "apart"))
    together = asyncio.run(rolled_back_by(False, tmp_path / "together"))
    assert apart.keys() == together.keys()
    for name in apart:
        assert torch.equal(apart[name], together[name]), name


def test_a_step_on_samples_of_a_user_deleted_since_their_claim_trains_nothing(tiny_model_dir, tmp_path):
    """Deleting a user's data in the serving process deletes their samples; a trainer that claimed
    them before does not bring the adapter back (it keeps only what the store still holds)."""
    turn_ids = _store_with_samples(tiny_model_dir, tmp_path, users=("alice", "bob"))
    store = Store(tmp_path)
    personal = _personal(tiny_model_dir, tmp_path)
    personal.store = store
    claimed = {user: make_samples(tiny_model_dir, FOUR_SIGNALS, turn_ids=ids) for user, ids in turn_ids.items()}
    try:
        store.delete_sessions(owner="alice")
        assert asyncio.run(personal.train("alice", claimed["alice"])) is None
        assert asyncio.run(personal.train("bob", claimed["bob"])) == 1
        assert personal.versions("alice") == [] and store.adapter_versions("alice") == []
    finally:
        store.close()


class _Receiver:
    """An engine's adapter calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int | None]] = []

    async def load_adapter(self, user, adapter, version) -> None:
        self.calls.append(("load", user, version))

    async def drop_adapter(self, user) -> None:
        self.calls.append(("drop", user, None))


def test_the_trainer_of_the_train_command_gates_each_candidate_and_honours_an_admins_switch(tiny_model_dir, tmp_path):
    """`build_personal_trainer` (what `openclaw-rl train --personal-adapters on` runs, here in a thread
    of this process on a store of its own) gives each user their update gate, and reads the switch an
    admin turned in the serving process; the server serves none of a rejected candidate."""
    _store_with_samples(tiny_model_dir, tmp_path, users=("alice", "bob"))
    strict = TrainConfig(method="binary", batch_size=4, lr=1e-2, personal_lr=1e-2, gate="on", gate_max_kl=0.0, gate_anchors=0,
                         gate_max_new_tokens=4, gate_probe_every=1000, train_poll_interval_s=0.05)
    trainer_store, serving_store = Store(tmp_path), Store(tmp_path)
    receiver = _Receiver()
    serving = AdapterHistory(tmp_path, [receiver], store=serving_store)
    personal = build_personal_trainer(trainer_store, tmp_path, str(tiny_model_dir), strict, 32)
    flush = Flush()
    flush.requested.set()

    async def main():
        await serving.set_on("bob", False, by="root")  # the admin, in the serving process
        stop = asyncio.Event()
        runner = asyncio.create_task(run_personal(trainer_store, personal, strict, stop, flush))
        await asyncio.wait_for(asyncio.to_thread(flush.done.wait), 120)
        stop.set()
        await runner
        return await serving.sync()

    try:
        assert personal.gate is not None
        assert asyncio.run(main()) == []
        (record,) = serving_store.adapter_versions("alice")
        assert record["gate"] == "rejected" and "gate_max_kl 0" in record["reason"]
        assert serving_store.served_adapter_versions() == {} and receiver.calls == [("drop", "bob", None)]
        assert serving_store.ready_owners(personal_claims("binary")) == {"bob": 4}  # off: frozen, not trained
    finally:
        trainer_store.close()
        serving_store.close()


def test_a_standalone_judge_scores_each_users_turn_under_the_adapter_the_store_names(tiny_model_dir, tmp_path):
    """`openclaw-rl judge --personal-adapters on`, and each Ray judge: before a batch of turns its
    engine loads every user's adapter version the store records, so the teacher scores alice's turn
    under her adapter (`personal_adapter`) and bob's, who has none, on the base."""
    turn_ids = _store_with_samples(tiny_model_dir, tmp_path, users=("alice", "bob"))
    store = Store(tmp_path)
    personal = _personal(tiny_model_dir, tmp_path)
    personal.store = store
    samples = make_samples(tiny_model_dir, FOUR_SIGNALS, turn_ids=turn_ids["alice"])
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), personal_adapters="on")
    worker = standalone_judge(store, serve, tiny_model_dir, JudgeConfig(judge="embedding"))
    engine = worker.teacher_engine
    alice, bob = store.get_turn(turn_ids["alice"][0]), store.get_turn(turn_ids["bob"][0])

    async def main():
        await worker.refresh()
        before = dict(engine.adapter_versions())
        assert await personal.train("alice", samples) == 1  # written and recorded by "another process"
        base = await engine.score(alice.prompt_token_ids, alice.response_token_ids)
        await worker.refresh()
        under = await engine.score(alice.prompt_token_ids, alice.response_token_ids, **personal_adapter(engine, alice))
        return before, base, under

    try:
        before, base, under = asyncio.run(main())
        assert before == {} and engine.adapter_versions() == {"alice": 1}
        assert personal_adapter(engine, alice) == {"adapter": "alice"} and personal_adapter(engine, bob) == {}
        assert under.logprobs != base.logprobs  # her adapter, not the base
    finally:
        asyncio.run(engine.aclose())
        store.close()


def test_the_judge_command_takes_personal_adapters(tmp_path):
    from openclaw_rl.cli import _parser
    from openclaw_rl.config import JudgeProcessConfig, build

    args = _parser().parse_args(["judge", "--data-dir", str(tmp_path), "--personal-adapters", "on"])
    assert build(JudgeProcessConfig, {}, args).personal_adapters == "on"
    with pytest.raises(ConfigError, match="personal_adapters"):
        JudgeProcessConfig(data_dir=str(tmp_path), personal_adapters="yes")
