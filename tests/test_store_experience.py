"""The store's per-user experience (store/experience.py), on SQLite and PostgreSQL (the `store`
fixture runs each test on both): lessons and their change log, saved with a version check."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from openclaw_rl.experience import Experience, delete_lesson, learn, replay, revert
from openclaw_rl.store import ExperienceConflict, StoreError, make_store
from openclaw_rl.types import TurnRecord

_SEEN: dict[str, int] = {}


def distinct(texts: list[str]) -> np.ndarray:
    """A fake `embed` under which every text is orthogonal to every other: each lesson is added."""
    for text in texts:
        _SEEN.setdefault(text, len(_SEEN))
    return np.eye(256)[[_SEEN[t] % 256 for t in texts]]


def words(text: str) -> int:
    return len(text.split())


def taught(experience: Experience, text: str, turn_id: str, now: float = 100.0):
    return learn(experience, text, turn_id, now, distinct, words)


def test_an_owner_without_lessons_has_an_empty_experience(store):
    assert store.experience("ann") == Experience("ann")
    assert store.experience_changes("ann") == [] and store.experience_owners() == []


def test_lessons_and_their_changes_round_trip_and_replay_to_the_stored_experience(store):
    first, changes = taught(store.experience("ann"), "Show every step.", "t1")
    store.save_experience(first, changes)
    second, more = taught(store.experience("ann"), "Answer in plain sentences.", "t2")
    store.save_experience(second, more)
    assert store.experience("ann") == second and second.version == 2
    assert [lesson.text for lesson in second.lessons] == ["Show every step.", "Answer in plain sentences."]
    log = store.experience_changes("ann")
    assert [(c.version, c.kind, c.turn_id) for c in log] == [(2, "added", "t2"), (1, "added", "t1")]  # newest first
    assert log[0] == more[0] and store.experience_change("ann", 1) == changes[0]
    assert store.experience_change("ann", 9) is None
    assert replay("ann", reversed(log)) == second  # the log is complete
    assert store.experience_changes("ann", limit=1) == [more[0]]
    assert store.experience_owners() == ["ann"]


def test_lessons_survive_a_restart(store_url, tmp_path):
    store = make_store(store_url, data_dir=tmp_path)
    experience, changes = taught(store.experience("ann"), "Show every step.", "t7")
    store.save_experience(experience, changes)
    store.close()
    reopened = make_store(store_url, data_dir=tmp_path)
    try:
        assert reopened.experience("ann") == experience
        assert reopened.experience_changes("ann") == changes
    finally:
        reopened.close()


def test_a_second_writer_from_the_same_version_gets_a_conflict_and_loses_nothing(store):
    base = store.experience("ann")
    mine, my_changes = taught(base, "Show every step.", "t1")
    theirs, their_changes = taught(base, "Never use emojis.", "t2")
    store.save_experience(mine, my_changes)
    with pytest.raises(ExperienceConflict, match="no longer at version 0"):
        store.save_experience(theirs, their_changes)
    later, later_changes = delete_lesson(mine, mine.lessons[0].id)
    store.save_experience(later, [later_changes])
    with pytest.raises(ExperienceConflict, match="no longer at version 1"):
        store.save_experience(*taught(mine, "Never use emojis.", "t2"))  # read at v1, stored is v2 now
    assert store.experience("ann") == later
    assert [c.version for c in store.experience_changes("ann")] == [2, 1]


def test_concurrent_writers_retry_and_every_change_lands(store_url, tmp_path):
    stores = [make_store(store_url, data_dir=tmp_path) for _ in range(2)]  # two connections, as two processes
    errors: list[BaseException] = []

    def teach(store, who: int) -> None:
        try:
            for i in range(5):
                store.update_experience("ann", lambda e: taught(e, f"Rule {who}-{i} holds.", f"{who}.{i}"),
                                        attempts=50)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=teach, args=(store, who)) for who, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        final = stores[0].experience("ann")
        assert final.version == 10 and len(final.lessons) == 10
        assert replay("ann", reversed(stores[1].experience_changes("ann"))) == final
    finally:
        for store in stores:
            store.close()


def test_changes_that_do_not_lead_to_the_experience_are_refused(store):
    experience, changes = taught(store.experience("ann"), "Show every step.", "t1")
    with pytest.raises(ValueError, match="do not lead to v0 of 'bob'"):
        store.save_experience(Experience("bob"), changes)
    store.save_experience(experience, [])  # nothing changed: nothing written
    assert store.experience("ann") == Experience("ann")


def test_an_undo_is_a_change_of_its_own(store):
    store.update_experience("ann", lambda e: taught(e, "Show every step.", "t1"))
    experience = store.experience("ann")
    undone, change = revert(experience, store.experience_change("ann", 1))
    store.save_experience(undone, [change])
    assert store.experience("ann").lessons == () and store.experience("ann").version == 2
    assert store.experience_changes("ann")[0].kind == "undone"


def test_deleting_a_users_data_removes_their_experience_and_no_one_elses(store):
    for owner in ("ann", "bob"):
        store.ensure_session(f"s-{owner}", "header", owner=owner)
        store.record_turn(TurnRecord(
            session_id=f"s-{owner}", kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": "q"}],
            prompt_token_ids=[1], response_token_ids=[2], behaviour_logprobs=[-0.5], response_text="a",
            tool_calls=[], sampling={}, finish_reason="stop", owner=owner))
        store.update_experience(owner, lambda e: taught(e, "Show every step.", "t1"))
        store.update_experience(owner, lambda e: taught(e, "Keep it short.", "t2"))
    deleted = store.delete_sessions(owner="ann")
    assert (deleted["sessions"], deleted["lessons"], deleted["experience_changes"]) == (1, 2, 2)
    assert store.experience("ann") == Experience("ann") and store.experience_changes("ann") == []
    assert store.experience_owners() == ["bob"] and store.experience("bob").version == 2
    assert "lessons" not in store.delete_sessions(["s-bob"])  # one session: the user's rules stay
    assert len(store.experience("bob").lessons) == 2
    assert store.delete_experience("bob") == {"lessons": 2, "experience_changes": 2}
    assert store.experience_owners() == [] and store.delete_experience("bob") == {"lessons": 0,
                                                                                    "experience_changes": 0}


def test_a_lesson_from_a_turn_deleted_meanwhile_is_not_kept(store):
    store.ensure_session("s", "header", owner="ann")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": "q"}],
        prompt_token_ids=[1], response_token_ids=[2], behaviour_logprobs=[-0.5], response_text="a", tool_calls=[],
        sampling={}, finish_reason="stop", owner="ann"))
    read = store.experience("ann")  # the judge reads, then the session is deleted, then it saves
    store.delete_sessions(["s"])
    with pytest.raises(StoreError, match=rf"turn\(s\) \[{turn.id}\] were deleted while a lesson was learned"):
        store.save_experience(*taught(read, "Show every step.", str(turn.id)))
    assert store.experience("ann") == Experience("ann") and store.experience_changes("ann") == []
