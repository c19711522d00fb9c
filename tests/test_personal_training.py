"""Personal adapters trained per user (train/personal.py), served by the local engine."""

from __future__ import annotations

import asyncio

import pytest
import torch

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.train.personal import PersonalAdapters, personal_config
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import SamplingParams, TokenStep
from test_trainer import SIGNALS, make_samples

PROMPT = [1, 17, 23, 45, 9, 31]


def _personal(model_dir, data_dir, engine=None) -> PersonalAdapters:
    torch.manual_seed(0)  # peft's initial A: the same for every trainer built here
    trainer = Trainer(model_dir, personal_config(TrainConfig(lr=1e-2, personal_lr=1e-2)), device="cpu")
    return PersonalAdapters(trainer, data_dir, [engine] if engine else [], min_samples=4)


def test_an_adapter_trains_at_personal_lr_whatever_the_shared_models_lr():
    """A preset's full fine-tuning rate (the demo's 5e-5) is the shared model's, not the adapters'."""
    assert personal_config(TrainConfig(lr=5e-5)).lr == TrainConfig().personal_lr == 1e-4
    adapter = personal_config(TrainConfig(lr=5e-5, personal_lr=3e-4))
    assert (adapter.lr, adapter.lora, adapter.lora_rank) == (3e-4, True, 8)
    with pytest.raises(ValueError, match="personal_lr"):
        TrainConfig(personal_lr=0)


@pytest.fixture(scope="module")
def samples(tiny_model_dir):
    both = make_samples(tiny_model_dir, SIGNALS + SIGNALS[:2])
    return both[:4], both[4:8]


async def _greedy(engine, user):
    events = [e async for e in engine.stream(PROMPT, SamplingParams(max_new_tokens=5, temperature=0, adapter=user))]
    return events[0].adapter_version, [e.logprob for e in events if isinstance(e, TokenStep)]


def test_each_users_samples_train_their_adapter_only_and_the_engine_serves_it(tiny_model_dir, tmp_path, samples):
    alice, bob = samples

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            personal = _personal(tiny_model_dir, tmp_path, engine)
            base = await _greedy(engine, "carol")
            assert await personal.train("alice", alice[:3]) is None  # too few: the shared model still
            assert engine.adapter_versions() == {}
            assert await personal.train("alice", alice) == 1
            served = await _greedy(engine, "alice"), await _greedy(engine, "carol")
            return personal, base, served, engine.adapter_versions()
        finally:
            await engine.aclose()

    personal, base, (alice_served, carol_served), versions = asyncio.run(main())
    assert versions == {"alice": 1} and alice_served[0] == 1
    assert carol_served == base  # a user with no adapter gets the base model's answers exactly
    assert alice_served[1] != base[1]
    assert personal.versions("alice") == [1] and personal.versions("bob") == []


def test_another_users_step_does_not_touch_this_users_adapter_or_moments(tiny_model_dir, tmp_path, samples):
    alice, bob = samples

    async def run(order, data_dir):
        personal = _personal(tiny_model_dir, data_dir)
        for user in order:
            await personal.train(user, alice if user == "alice" else bob)
        return personal.adapter("alice", 2).state_dict

    alone = asyncio.run(run(["alice", "alice"], tmp_path / "a"))
    interleaved = asyncio.run(run(["alice", "bob", "alice"], tmp_path / "b"))
    assert alone.keys() == interleaved.keys()
    for name in alone:
        assert torch.equal(alone[name], interleaved[name]), name


def test_rollback_reset_and_delete_are_per_user(tiny_model_dir, tmp_path, samples):
    alice, bob = samples

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            personal = _personal(tiny_model_dir, tmp_path, engine)
            await personal.train("alice", alice)
            first = await _greedy(engine, "alice")
            await personal.train("alice", alice)
            await personal.train("bob", bob)
            bob_before = await _greedy(engine, "bob")
            assert await personal.rollback("alice", 1) == 3
            rolled = await _greedy(engine, "alice")
            bob_after = await _greedy(engine, "bob")
            with pytest.raises(ValueError, match="no kept adapter version 9"):
                await personal.rollback("alice", 9)
            await personal.delete("alice")
            return personal, first, rolled, bob_before, bob_after, engine.adapter_versions()
        finally:
            await engine.aclose()

    personal, first, rolled, bob_before, bob_after, versions = asyncio.run(main())
    assert rolled == (3, first[1])  # v1's weights, under a new number
    assert bob_after == bob_before  # alice's rollback changes no other user's answers
    assert versions == {"bob": 1}
    assert personal.versions("alice") == [] and not (tmp_path / "personal" / "alice").exists()
    with pytest.raises(ValueError, match="cannot name an adapter directory"):
        personal.versions("../bob")


def test_the_loop_steps_a_user_whose_ready_samples_reach_min_samples_with_a_smaller_batch(tiny_model_dir, tmp_path):
    """run_personal with --batch-size 2 (the demo's) below min_samples 4: a step takes 4 (it claimed
    2 and min_size 4 before, so no adapter was ever trained in a demo)."""
    from openclaw_rl.store import Store
    from openclaw_rl.train.personal import personal_claims, run_personal
    from openclaw_rl.train.runner import Flush
    from test_promote import _store_with_samples

    _store_with_samples(tiny_model_dir, tmp_path, users=("alice",))
    store = Store(tmp_path)
    personal = _personal(tiny_model_dir, tmp_path)
    personal.store = store
    config = TrainConfig(method="binary", batch_size=2, gate="off", train_poll_interval_s=0.05)
    flush = Flush()
    flush.requested.set()

    async def main():
        stop = asyncio.Event()
        runner = asyncio.create_task(run_personal(store, personal, config, stop, flush))
        await asyncio.wait_for(asyncio.to_thread(flush.done.wait), 120)
        stop.set()
        await runner

    try:
        asyncio.run(main())
        assert personal.versions("alice") == [1]
        assert store.ready_owners(personal_claims(personal.trainer.method.name)) == {}
    finally:
        store.close()
