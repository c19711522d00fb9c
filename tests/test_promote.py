"""`openclaw-rl promote`: chosen users' samples trained into the shared model (processes.promote), and
`serve --personal-adapters on` on that data dir serving the promoted model as its base."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import torch

from openclaw_rl import cli
from openclaw_rl.config import PromoteConfig, TrainConfig
from openclaw_rl.processes import promote
from openclaw_rl.store import Store
from openclaw_rl.train import checkpoint
from openclaw_rl.train.promotion import PromotionError
from openclaw_rl.train.trainer import Trainer, is_lora_parameter
from openclaw_rl.types import Sample, TurnRecord
from openclaw_rl.users import Users
from test_personal_serving import Running, _same
from test_trainer import make_samples

SIGNALS = [(1.0, True), (-1.0, False), (1.0, False), (-1.0, True)]  # every one a binary sample


def _train(**overrides) -> TrainConfig:
    return TrainConfig(**{"method": "binary", "batch_size": 4, "catch_up": 1, "lr": 1e-2, "gate": "off",
                          "train_poll_interval_s": 0.05, "train_threads": 1, **overrides})


def _store_with_samples(model_dir: Path, data_dir: Path, users=("alice", "bob", "carol")) -> dict[str, list[int]]:
    """A store holding four ready samples of each user (their own turns); their turn ids by user."""
    store = Store(data_dir)
    turn_ids: dict[str, list[int]] = {}
    for user in users:
        for i in range(len(SIGNALS)):
            turn = store.record_turn(TurnRecord(
                session_id=f"{user}-{i}", kind="main", policy_version=0,
                prompt_messages=[{"role": "user", "content": "q"}], prompt_token_ids=[1, 2], response_token_ids=[3],
                behaviour_logprobs=[-0.5], response_text="a", tool_calls=[], sampling={"temperature": 1.0},
                finish_reason="stop", owner=user))
            turn_ids.setdefault(user, []).append(turn.id)
        for sample in make_samples(model_dir, SIGNALS, turn_ids=turn_ids[user]):
            assert store.add_sample(sample)
    store.close()
    return turn_ids


def _adapter_of(data_dir: Path, user: str) -> None:
    """A personal adapter on disk and in the store's history; no LATEST names it, so a server does
    not load its (empty) files: what matters here is whether a promotion removes it."""
    version = data_dir / "personal" / user / "v000001"
    version.mkdir(parents=True)
    (version / "adapter_model.safetensors").write_bytes(b"")
    store = Store(data_dir)
    store.record_adapter_version(user, 1, parent=None, gate="ungated")
    store.close()


@pytest.fixture(scope="module")
def promoted(tiny_model_dir, tmp_path_factory):
    """A data dir where alice's and bob's samples were promoted (with --reset-adapters), carol's not."""
    data_dir = tmp_path_factory.mktemp("promoted")
    turn_ids = _store_with_samples(tiny_model_dir, data_dir)
    _adapter_of(data_dir, "alice")
    _adapter_of(data_dir, "carol")
    done = promote(PromoteConfig(data_dir=str(data_dir), users="alice,bob", model=str(tiny_model_dir),
                                 reset_adapters=True), _train())
    return data_dir, turn_ids, done


def test_promote_trains_only_the_named_users_samples_and_moves_the_shared_version(promoted, tiny_model_dir):
    data_dir, turn_ids, done = promoted
    assert done.claims == {"alice": {"used": 4, "dropped": 0, "rejected": 0},
                           "bob": {"used": 4, "dropped": 0, "rejected": 0}}
    assert done.steps == 2 and done.accepted == [1, 2] and done.rejected == [] and done.policy_version == 2
    store = Store(data_dir)
    try:
        assert store.policy_version() == 2
        assert store.ready_owners("binary") == {"carol": 4}  # the others' stay unclaimed for the shared method
        states = store.sample_states(turn_ids["alice"] + turn_ids["bob"] + turn_ids["carol"])
        promoted_turns = {t for t, state in states.items() if state["status"] == "used"}
        assert promoted_turns == set(turn_ids["alice"] + turn_ids["bob"])
        assert store.ready_owners("personal:binary") == {"alice": 4, "bob": 4, "carol": 4}  # adapters' claims untouched
        # --reset-adapters: the promoted users' adapters go, the others' stay
        assert done.adapters_reset == ["alice"]
        assert not (data_dir / "personal" / "alice").exists() and store.adapter_versions("alice") == []
        assert (data_dir / "personal" / "carol").is_dir() and len(store.adapter_versions("carol")) == 1
    finally:
        store.close()
    latest = checkpoint.load_latest(data_dir)
    assert (latest.train_step, latest.policy_version) == (2, 2)
    assert done.base.policy_version == 2 and done.base.path.name == tiny_model_dir.name
    provenance = json.loads((done.base.path / checkpoint.PROVENANCE_FILE).read_text())
    assert provenance["policy_version"] == 2


def test_a_second_promotion_stacks_on_the_first_and_a_sample_is_promoted_once(promoted, tiny_model_dir, tmp_path):
    data_dir, _, first = promoted
    copy = tmp_path / "again"
    shutil.copytree(data_dir, copy)
    with pytest.raises(PromotionError, match="'alice' has no ready samples that the shared method binary"):
        promote(PromoteConfig(data_dir=str(copy), users="alice", model=str(tiny_model_dir)), _train())
    done = promote(PromoteConfig(data_dir=str(copy), users="carol", model=str(tiny_model_dir), max_steps=1), _train())
    assert done.steps == 1 and done.accepted == [3] and done.policy_version == 3  # resumed at v2: stacked
    assert done.claims == {"carol": {"used": 4, "dropped": 0, "rejected": 0}}
    assert [p.name for p in (copy / "promoted").iterdir()] == ["step-000003"]  # the earlier promotion replaced
    assert done.base.policy_version == 3 and first.base.path.is_dir()  # (the first data dir's is untouched)


def test_promote_refuses_a_dir_without_a_store_an_unknown_user_and_one_with_nothing_ready(
        tiny_model_dir, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PromotionError, match="holds no store"):
        promote(PromoteConfig(data_dir=str(empty), users="alice"), _train())
    assert not (empty / "openclaw.db").exists()  # refused before a store was made there
    data_dir = tmp_path / "data"
    _store_with_samples(tiny_model_dir, data_dir, users=("alice",))
    Users(data_dir).add("erin")  # registered, never talked to the server
    with pytest.raises(PromotionError, match=r"unknown user 'dave'.*ready samples for binary: alice \(4\)"):
        promote(PromoteConfig(data_dir=str(data_dir), users="alice,dave"), _train())
    with pytest.raises(PromotionError, match="'erin' has no ready samples"):
        promote(PromoteConfig(data_dir=str(data_dir), users="erin"), _train())
    with pytest.raises(PromotionError, match="--users names no one"):
        promote(PromoteConfig(data_dir=str(data_dir), users=" , "), _train())
    assert cli.main(["promote", "--data-dir", str(data_dir), "--users", "dave", "--method", "binary"]) == 2
    assert "unknown user 'dave'" in capsys.readouterr().err
    assert checkpoint.load_latest(data_dir) is None  # nothing trained


def test_a_claim_of_some_owners_takes_theirs_only_and_counts_them(store):
    def owned(owner: str) -> int:
        turn = store.record_turn(TurnRecord(
            session_id=f"{owner}-s", kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": "q"}],
            prompt_token_ids=[1, 2], response_token_ids=[3], behaviour_logprobs=[-0.5], response_text="a",
            tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop", owner=owner))
        store.add_sample(Sample(turn_id=turn.id, session_id=turn.session_id, policy_version=0, prompt_token_ids=[1, 2],
                                response_token_ids=[3], behaviour_logprobs=[-0.5], temperature=1.0, reward=1.0))
        return turn.id

    ids = {owner: [owned(owner) for _ in range(2)] for owner in ("alice", "bob", "carol")}
    assert store.claim_samples("binary", 8, 0, 2, 1, 1, owners=[]) == ([], [])
    taken, _ = store.claim_samples("binary", 8, 0, 2, 1, 1, owners=["alice", "carol"])
    assert sorted(s.turn_id for s in taken) == sorted(ids["alice"] + ids["carol"])
    assert store.ready_owners("binary") == {"bob": 2}
    assert store.claims_by_owner("binary", 0.0, ["alice", "bob"]) == {
        "alice": {"used": 2, "dropped": 0, "rejected": 0}, "bob": {"used": 0, "dropped": 0, "rejected": 0}}
    with pytest.raises(ValueError, match="`owner` or `owners`, not both"):
        store.claim_samples("binary", 8, 0, 2, 1, 1, owner="bob", owners=["bob"])


def _promoted_weights(model_dir: Path, data_dir: Path) -> dict[str, torch.Tensor]:
    """The policy of the data dir's latest checkpoint, read back by a trainer (not by the export)."""
    trainer = Trainer(model_dir, _train(), device="cpu")
    checkpoint.restore(trainer, checkpoint.load_latest(data_dir))
    return trainer.policy_state_dict()


def test_a_personal_adapters_start_serves_the_promoted_model_as_the_base(promoted, tiny_model_dir, tmp_path):
    data_dir, _, done = promoted
    weights = _promoted_weights(tiny_model_dir, data_dir)
    reference = Running(tiny_model_dir, tmp_path / "reference", "off")  # the bundled base, then the promoted weights
    try:
        bundled = reference.greedy("root")
        asyncio.run(reference.server.engine.load_weights(weights, 2))
        expected = reference.greedy("root")
    finally:
        reference.stop()
    assert expected[1] != bundled[1]  # the promotion changed the answer: the comparison below can tell them apart

    served = Running(tiny_model_dir, data_dir, "on")  # (its loop trains the users' adapters meanwhile)
    try:
        assert served.server.engine.policy_version == 2  # X-Policy-Version (checked in greedy) names it too
        assert _same(served.greedy("root"), expected)  # a user without an adapter: the promoted model
        model = served.server.personal.trainer.model.get_base_model()  # the frozen base under every adapter
        base = {name.replace(".base_layer.", "."): p for name, p in model.named_parameters()
                if not is_lora_parameter(name)}
        assert base.keys() == weights.keys()
        for name, tensor in weights.items():
            torch.testing.assert_close(base[name], tensor, rtol=0, atol=0, msg=name)
    finally:
        served.stop()
