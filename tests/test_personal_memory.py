"""The personal trainer's per-user state bounded in memory (train/personal_state.py): evicted
users' moments are read back from disk exactly, their gates rebuilt, and nothing is lost."""

from __future__ import annotations

import asyncio

import pytest
import torch
from safetensors.torch import load_file

from openclaw_rl.config import TrainConfig
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.personal import PersonalAdapters, personal_config
from openclaw_rl.train.personal_state import MOMENTS_FILE, UserStates
from openclaw_rl.train.trainer import Trainer
from test_trainer import SIGNALS, make_samples

ROUNDS = 4  # alternating steps of each user


@pytest.fixture(scope="module")
def samples(tiny_model_dir):
    both = make_samples(tiny_model_dir, SIGNALS + SIGNALS[:2])
    return {"alice": both[:4], "bob": both[4:8]}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _personal(model_dir, data_dir, max_resident=None, tokenizer=None) -> PersonalAdapters:
    torch.manual_seed(0)  # peft's initial A: the same for every trainer built here
    config = personal_config(TrainConfig(lr=1e-2, personal_lr=1e-2, gate_max_new_tokens=6, gate_anchors=2))
    trainer = Trainer(model_dir, config, device="cpu")
    gate = None
    if tokenizer is not None:
        probes = [tokenizer.encode(f"Question {i}: what is {i} plus {i}?") for i in range(3)]
        gate = lambda anchors, user: Gate(trainer, config, tokenizer, lambda: probes, None, anchors)  # noqa: E731
    return PersonalAdapters(trainer, data_dir, [], min_samples=4, gate=gate,
                            **({"max_resident": max_resident} if max_resident else {}))


def _moments(personal: PersonalAdapters) -> dict[str, torch.Tensor]:
    state = personal.trainer.optimizer.state_dict()["state"]
    return {f"{i}.{k}": v.clone() for i, values in state.items() for k, v in values.items()}


def _alternate(personal, samples, rounds=ROUNDS, watch=None):
    """alice, bob, alice, bob, ...: each user's adapter after each step, and the decisions' reasons."""
    out = {"alice": [], "bob": []}

    async def main():
        for _ in range(rounds):
            for user in ("alice", "bob"):
                version = await personal.train(user, samples[user])
                out[user].append((version, personal.adapter(user, version).state_dict if version else None))
                if watch is not None:
                    watch(personal)
    asyncio.run(main())
    return out


def _assert_same(unbounded, bounded):
    for user in unbounded:
        assert [v for v, _ in unbounded[user]] == [v for v, _ in bounded[user]], user
        for (_, a), (_, b) in zip(unbounded[user], bounded[user]):
            assert (a is None) == (b is None)
            for name in a or {}:
                assert torch.equal(a[name], b[name]), (user, name)


@pytest.mark.parametrize("gated", [False, True], ids=["ungated", "gated"])
def test_one_resident_user_trains_each_adapter_exactly_as_an_unbounded_trainer(tiny_model_dir, tmp_path, samples,
                                                                             tokenizer, gated):
    tok = tokenizer if gated else None
    unbounded_personal = _personal(tiny_model_dir, tmp_path / "all", 1000, tok)
    unbounded = _alternate(unbounded_personal, samples)
    resident = []

    def watch(personal):
        states = personal.states
        resident.append(states.resident())
        assert len(states.resident()) <= 1
        assert sum(1 for r in states._resident.values() if r.gate is not None or r.moments is not None) <= 1
        for user, held in states._resident.items():  # the gate's snapshot is named by the user's served version
            assert held.gate is None or held.gate.snapshot.version == personal.current(user)

    bounded_personal = _personal(tiny_model_dir, tmp_path / "one", 1, tok)
    bounded = _alternate(bounded_personal, samples, watch=watch)
    assert resident == [["alice"], ["bob"]] * ROUNDS
    _assert_same(unbounded, bounded)  # the same versions, decisions and weights
    assert [v for v, _ in bounded["alice"]] == ([1, 2, None, None] if gated else [1, 2, 3, 4])
    # the rejected steps left alice's moments in memory as her last accepted one wrote them
    held = unbounded_personal.states.moments("alice", 2 if gated else 4)["state"]
    saved = load_file(str(tmp_path / "all" / "personal" / "alice" / MOMENTS_FILE))
    assert saved.keys() == {f"state.{i}.{k}" for i, values in held.items() for k in values}
    assert all(torch.equal(held[i][k], saved[f"state.{i}.{k}"]) for i, values in held.items() for k in values)


def test_an_evicted_users_moments_are_read_back_bitwise_and_a_fresh_process_continues_from_them(
        tiny_model_dir, tmp_path, samples):
    personal = _personal(tiny_model_dir, tmp_path, 1)

    async def step(p, user):
        return await p.train(user, samples[user])

    assert asyncio.run(step(personal, "alice")) == 1
    after_alice = _moments(personal)
    saved = load_file(str(tmp_path / "personal" / "alice" / MOMENTS_FILE))
    assert {k.removeprefix("state."): v for k, v in saved.items()}.keys() == after_alice.keys()
    asyncio.run(step(personal, "bob"))  # alice leaves memory
    assert personal.states.resident() == ["bob"]
    read_back = personal.states.moments("alice", 1)["state"]
    for name, tensor in after_alice.items():
        index, key = name.split(".", 1)
        assert torch.equal(read_back[int(index)][key], tensor), name

    continued = _alternate(_personal(tiny_model_dir, tmp_path / "same", 1), samples, rounds=2)
    restarted = _personal(tiny_model_dir, tmp_path, 1)  # a restart: a new trainer on the same data dir
    assert restarted.states.resident() == []
    assert asyncio.run(step(restarted, "alice")) == 2
    again = restarted.adapter("alice", 2).state_dict
    for name, tensor in continued["alice"][1][1].items():
        assert torch.equal(again[name], tensor), name  # as if the process had never stopped


def test_a_reset_or_a_rollback_removes_the_saved_moments(tiny_model_dir, tmp_path, samples):
    personal = _personal(tiny_model_dir, tmp_path, 1)
    alice = tmp_path / "personal" / "alice" / MOMENTS_FILE

    async def main():
        await personal.train("alice", samples["alice"])
        await personal.train("alice", samples["alice"])
        assert alice.is_file()
        await personal.rollback("alice", 1)
        assert not alice.exists() and personal.states.resident() == []
        await personal.train("alice", samples["alice"])
        assert alice.is_file()
        await personal.reset("alice")
    asyncio.run(main())
    assert not alice.exists() and personal.states.resident() == []
    assert not alice.parent.exists()


def test_moments_saved_for_another_version_are_not_used(tiny_model_dir, tmp_path, samples):
    personal = _personal(tiny_model_dir, tmp_path, 1)
    asyncio.run(personal.train("alice", samples["alice"]))
    # as a restart finds them: the file follows v1, so not v2 (a crash between the two writes)
    assert UserStates(personal.root, personal.states.fresh, 1).moments("alice", 2)["state"] == {}
    assert UserStates(personal.root, personal.states.fresh, 1).moments("alice", 1)["state"] != {}


def test_a_rebuilt_gate_decides_as_the_one_it_replaces(tiny_model_dir, tmp_path, samples, tokenizer):
    personal = _personal(tiny_model_dir, tmp_path, 1, tokenizer)

    async def main():
        await personal.train("alice", samples["alice"])
        kept = personal.states._resident["alice"].gate
        await personal.train("bob", samples["bob"])  # alice's gate leaves memory
        assert "alice" not in personal.states.resident()
        # alice's next step, by hand: her served adapter and moments in the trainer, then a candidate
        trainer = personal.trainer
        trainer.load_trainable_state_dict(personal.adapter("alice", 1).state_dict)
        trainer.optimizer.load_state_dict(personal.states.moments("alice", 1))
        trainer.return_to(1, None)
        rebuilt = personal._gate_of("alice")
        assert rebuilt is not kept and rebuilt.snapshot.version == kept.snapshot.version
        for name, tensor in kept.snapshot.weights.items():
            assert torch.equal(rebuilt.snapshot.weights[name], tensor), name
        assert rebuilt.anchors.prompts == kept.anchors.prompts
        assert rebuilt.anchors.answers.ids == kept.anchors.answers.ids
        trainer.step(samples["alice"])
        trainer.return_to(2, 1)
        return kept.decide(), rebuilt.decide()

    old, new = asyncio.run(main())
    assert (old.accepted, old.reason) == (new.accepted, new.reason)
    assert new.checks["kl_per_token"] == pytest.approx(old.checks["kl_per_token"], abs=1e-6)
    assert new.checks["candidate"] == old.checks["candidate"] and new.checks["served"] == old.checks["served"]


def test_a_gate_carries_its_score_drift_into_the_gate_rebuilt_for_it(tiny_model_dir, tokenizer):
    config = personal_config(TrainConfig(gate_max_new_tokens=4))
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: [])
    assert gate.carried() == {}
    gate._drift[gate.snapshot.version] = -0.125
    rebuilt = Gate(trainer, config, tokenizer, lambda: [])
    rebuilt.carry(gate.carried())
    assert rebuilt.carried() == {"score_drift": -0.125}
