"""The store's side of personal adapters: claims of one owner, and each user's adapter history."""

from __future__ import annotations

import pytest

from openclaw_rl.store import Store, StoreError
from openclaw_rl.types import Sample, TurnRecord


def _owned_sample(store: Store, owner: str, i: int) -> int:
    turn = store.record_turn(TurnRecord(
        session_id=f"{owner}-{i}", kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": "q"}],
        prompt_token_ids=[1, 2], response_token_ids=[3], behaviour_logprobs=[-0.5], response_text="a", tool_calls=[],
        sampling={"temperature": 1.0}, finish_reason="stop", owner=owner))
    store.add_sample(Sample(turn_id=turn.id, session_id=turn.session_id, policy_version=0, prompt_token_ids=[1, 2],
                            response_token_ids=[3], behaviour_logprobs=[-0.5], temperature=1.0, reward=1.0))
    return turn.id


def test_a_claim_of_one_owner_takes_only_their_samples_and_leaves_the_shared_trainers(store):
    alice = [_owned_sample(store, "alice", i) for i in range(3)]
    bob = [_owned_sample(store, "bob", i) for i in range(2)]
    assert store.ready_owners("personal:binary") == {"alice": 3, "bob": 2}
    taken, _ = store.claim_samples("personal:binary", 8, 0, 2, None, 2, owner="bob")
    assert [s.turn_id for s in taken] == bob
    too_few, _ = store.claim_samples("personal:binary", 8, 0, 2, None, 4, owner="alice")
    assert too_few == []  # all or nothing, as for the shared trainer
    assert store.ready_owners("personal:binary") == {"alice": 3}
    shared, _ = store.claim_samples("binary", 8, 0, 2, 1, 1)  # another claim name: every sample is still there
    assert sorted(s.turn_id for s in shared) == sorted(alice + bob)


def test_each_users_adapter_history_pins_and_is_deleted_with_their_data(store):
    _owned_sample(store, "alice", 0)
    store.record_adapter_version("alice", 1, parent=None, gate="accepted", reason="passed every check",
                                 checks={"probes": 2}, turn_ids=[1])
    store.record_adapter_version("alice", 2, parent=1, gate="rejected", reason="KL 2 > 1")
    store.record_adapter_version("bob", 1, parent=None, gate="ungated")
    assert [(r["owner"], r["version"]) for r in store.adapter_versions("alice")] == [("alice", 2), ("alice", 1)]
    assert store.adapter_versions("alice")[1]["checks"] == {"probes": 2}
    assert store.highest_adapter_version("alice") == 2 and store.highest_adapter_version("carol") == 0
    store.pin_adapter_version("alice", 1)
    assert store.pinned_adapter_versions("alice") == {1}
    with pytest.raises(StoreError, match="no served adapter version 2"):
        store.pin_adapter_version("alice", 2)  # a rejected candidate has no weights to keep
    with pytest.raises(ValueError, match="not 'maybe'"):
        store.record_adapter_version("alice", 3, parent=1, gate="maybe")
    deleted = store.delete_sessions(owner="alice")
    assert deleted["adapter_versions"] == 2
    assert store.adapter_versions("alice") == [] and len(store.adapter_versions()) == 1  # bob's stays


def test_an_admins_switch_of_a_users_adapter_is_kept_until_turned_on_or_the_user_is_deleted(store):
    _owned_sample(store, "alice", 0)
    store.record_adapter_version("alice", 1, parent=None, gate="ungated")
    store.turn_adapter_off("alice", by="root")
    store.turn_adapter_off("bob", by="root")
    store.turn_adapter_off("alice", by="other")  # already off: who turned it off first stays
    assert {owner: record["by"] for owner, record in store.adapters_off().items()} == {"alice": "root", "bob": "root"}
    assert store.turn_adapter_on("bob") and not store.turn_adapter_on("bob")
    store.delete_adapter_history("alice")  # a reset keeps the switch
    assert set(store.adapters_off()) == {"alice"}
    store.delete_sessions(owner="alice")  # deleting the user does not
    assert store.adapters_off() == {}


def test_absorption_under_an_adapter_is_kept_per_adapter_version_and_goes_with_its_reset(store):
    store.record_absorption("alice", [(1, 0, 0.3, 4), (2, 0, 0.1, 4)])  # on the shared model (the base)
    store.record_absorption("alice", [(1, 0, 0.2, 4)], adapter_version=1)  # one base, one adapter version after another
    store.record_absorption("alice", [(1, 0, 0.9, 2)], adapter_version=2)
    store.record_absorption("alice", [(1, 0, 0.05, 4)], adapter_version=2)  # the same weights again: replaces
    store.record_absorption("bob", [(1, 0, 0.4, 4)], adapter_version=1)
    measured = store.absorption("alice")
    assert [(m["policy_version"], m["adapter_version"], m["gap"]) for m in measured[1]] == [
        (0, None, 0.3), (0, 1, 0.2), (0, 2, 0.05)]  # oldest weights first
    assert [m["adapter_version"] for m in measured[2]] == [None]
    store.delete_adapter_history("alice")  # a reset: the numbers start again, so what was measured under them goes
    assert [m["adapter_version"] for m in store.absorption("alice")[1]] == [None]
    assert store.absorption("bob")[1][0]["adapter_version"] == 1
    store.delete_sessions(owner="bob")  # deleting the user's data: every measurement
    assert store.absorption("bob") == {}
