"""The store's contract, on both backends: every test taking `store` or `store_url` runs on
SQLite and on a real PostgreSQL server (see conftest.py), and must pass unchanged on each."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openclaw_rl.store import Store, StoreError, StoreUnavailable, add_missing_columns, make_store, redact_url
from openclaw_rl.types import NextState, Sample, TurnRecord, Verdict
from openclaw_rl.users import LOCAL


def _turn(store: Store, session_id: str = "s", kind: str = "main", version: int = 0, text: str = "ans",
          continuation_hash: str | None = None):
    return store.record_turn(TurnRecord(
        session_id=session_id, kind=kind, policy_version=version,
        prompt_messages=[{"role": "user", "content": f"q for {text}"}], prompt_token_ids=[1, 2],
        response_token_ids=[3, 4, 5], behaviour_logprobs=[-0.1, -1 / 3, -2.5e-7], response_text=text, tool_calls=[],
        sampling={"temperature": 1.0}, finish_reason="stop", continuation_hash=continuation_hash))


def _sample(turn_id: int, version: int = 0) -> Sample:
    return Sample(turn_id=turn_id, session_id="s", policy_version=version, prompt_token_ids=[1],
                  response_token_ids=[2], behaviour_logprobs=[-0.5], temperature=1.0, reward=1.0)


def _verdict(turn_id: int, reward: int | None = 1, status: str = "ok") -> Verdict:
    return Verdict(turn_id=turn_id, status=status, reward=reward, votes=[1, 1, -1], raw=["+1", "+1", "-1"],
                   hints=["be brief"], selected_hint="be brief", overlap_scores=[0.5], judge="test", latency_s=0.25)


# -- sessions and turns ------------------------------------------------------------------------


def test_turns_round_trip_exactly_with_indices_per_session(store):
    store.ensure_session("s", "header")
    store.ensure_session("other", "new")
    first, side, second = _turn(store), _turn(store, kind="side", text="side"), _turn(store, text="again")
    elsewhere = _turn(store, session_id="other")
    assert [first.index, side.index, second.index, elsewhere.index] == [0, 1, 2, 0]
    assert first.behaviour_logprobs == [-0.1, -1 / 3, -2.5e-7]  # floats survive bit for bit
    assert (first.prompt_token_ids, first.response_token_ids) == ([1, 2], [3, 4, 5])
    assert store.get_turn(first.id) == first
    assert store.get_turn(10**9) is None
    assert [t.id for t in store.turns("s")] == [first.id, side.id, second.id]
    assert store.last_main_turn("s") == second  # the side turn is not the session's main line
    assert store.last_main_turn("nobody") is None
    assert store.counts() == {"sessions": 2, "turns": 4, "main_turns": 3, "paired_turns": 0}


def test_sessions_are_created_once_listed_newest_first_and_closed(store):
    created = store.ensure_session("a", "header")
    time.sleep(0.01)
    assert store.ensure_session("a", "other source") == created  # idempotent: first source and time stay
    store.ensure_session("b", "new")
    _turn(store, session_id="a")
    assert [(s.id, s.turn_count) for s in store.list_sessions()] == [("b", 0), ("a", 1)]
    assert [s.id for s in store.list_sessions(limit=1, offset=1)] == ["a"]
    assert store.get_session("missing") is None
    closed = store.close_session("a")
    assert closed.closed_at is not None
    assert store.close_session("a").closed_at == closed.closed_at  # closing again keeps the first time
    assert store.turns("a")[0].closed
    with pytest.raises(StoreError, match="unknown session"):
        store.close_session("missing")


def test_a_next_state_is_set_once_on_a_main_turn(store):
    store.ensure_session("s", "header")
    main, side = _turn(store), _turn(store, kind="side")
    store.set_next_state(main.id, NextState("user", "thanks", at=12.5))
    assert store.get_turn(main.id).next_state == NextState("user", "thanks", at=12.5)
    with pytest.raises(StoreError, match="not an open main turn"):
        store.set_next_state(main.id, NextState("user", "twice"))
    with pytest.raises(StoreError, match="not an open main turn"):
        store.set_next_state(side.id, NextState("user", "to a side turn"))
    assert store.counts()["paired_turns"] == 1


def test_sessions_continued_by_finds_main_turns_newest_first(store):
    store.ensure_session("s", "header")
    store.ensure_session("t", "header")
    old = _turn(store, continuation_hash="h1")
    new = _turn(store, session_id="t", continuation_hash="h1")
    _turn(store, kind="side", continuation_hash="h1")  # side turns never continue a session
    _turn(store, continuation_hash="h2")
    assert store.sessions_continued_by(["h1", "nope"]) == [("t", new), ("s", old)]
    assert store.sessions_continued_by([]) == []


def test_a_bad_turn_record_is_refused_with_the_value_and_the_fix(store):
    fields = dict(session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[],
                  response_token_ids=[1, 2], behaviour_logprobs=[0.0, -1.0], response_text="", tool_calls=[],
                  sampling={}, finish_reason="stop")
    with pytest.raises(ValueError, match=r"2 response ids but 1 log-probs \(turn of session 's'\): record one"):
        TurnRecord(**{**fields, "behaviour_logprobs": [0.0]})
    with pytest.raises(ValueError, match="kind is 'main' or 'side', got 'aside'"):
        TurnRecord(**{**fields, "kind": "aside"})
    with pytest.raises(TypeError, match="record_turn takes a TurnRecord .* got dict"):
        store.record_turn(fields)
    record = TurnRecord(**fields)
    assert (record.owner, record.source, record.continuation_hash) == (LOCAL.name, "new", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.kind = "side"  # type: ignore[misc]
    assert store.counts() == {"sessions": 0, "turns": 0, "main_turns": 0, "paired_turns": 0}
    turn = store.record_turn(record)  # the session is created for the record's owner, with its source
    assert (turn.session_id, turn.index, turn.kind, turn.owner) == ("s", 0, "main", LOCAL.name)
    assert store.get_session("s").source == "new"


def test_a_failed_write_rolls_back_and_the_store_goes_on(store):
    with pytest.raises(Exception):  # noqa: B017 - sqlite3 and psycopg name the NOT NULL violation differently
        _turn(store, session_id="never-created", text=None)  # the database refuses it inside the transaction
    assert store.get_session("never-created") is None  # the session it would have made is rolled back too
    store.ensure_session("s", "header")
    assert _turn(store).index == 0
    assert store.counts()["turns"] == 1


# -- verdicts, samples, policy ---------------------------------------------------------------------


def test_verdicts_wait_for_a_next_state_and_are_replaced_whole(store):
    store.ensure_session("s", "header")
    waiting, unpaired = _turn(store), _turn(store)
    assert store.turns_awaiting_verdict() == []
    store.set_next_state(waiting.id, NextState("user", "no, wrong"))
    assert [t.id for t in store.turns_awaiting_verdict()] == [waiting.id]
    store.write_verdict(_verdict(waiting.id))
    assert store.turns_awaiting_verdict() == []
    store.write_verdict(Verdict(turn_id=waiting.id, status="no_verdict", reward=None, votes=[], raw=["?"], hints=[],
                                selected_hint=None, overlap_scores=[], judge="test", latency_s=1.5, reason="timeout"))
    got = store.verdicts([waiting.id, unpaired.id])
    assert list(got) == [waiting.id]
    assert (got[waiting.id].status, got[waiting.id].reward, got[waiting.id].selected_hint, got[waiting.id].reason) == \
        ("no_verdict", None, None, "timeout")
    assert store.verdicts([]) == {}


def test_the_hinted_turns_are_the_newest_with_a_hint_oldest_first_and_only_the_owners(store):
    from dataclasses import replace

    store.ensure_session("a", "header", owner="alice")
    store.ensure_session("b", "header", owner="bob")
    turns = [_turn(store, session_id=s, text=f"t{i}") for i, s in enumerate("aaba")]
    for turn in turns:
        store.set_next_state(turn.id, NextState("user", "no"))
    store.write_verdict(_verdict(turns[0].id))
    store.write_verdict(replace(_verdict(turns[1].id), hints=[], selected_hint=None, reason="hint dropped: x"))
    store.write_verdict(_verdict(turns[2].id))
    store.write_verdict(_verdict(turns[3].id))
    assert [t.id for t, _ in store.hinted_turns()] == [turns[0].id, turns[2].id, turns[3].id]
    assert [t.id for t, _ in store.hinted_turns(limit=2)] == [turns[2].id, turns[3].id]  # the newest two
    assert [t.id for t, _ in store.hinted_turns(owner="alice")] == [turns[0].id, turns[3].id]
    turn, verdict = store.hinted_turns(owner="bob")[0]
    assert turn.response_text == "t2" and verdict.selected_hint == "be brief"
    assert store.verdicts_noting("hint dropped") == 1 and store.verdicts_noting("nothing like it") == 0


def test_samples_are_claimed_oldest_first_all_or_nothing_and_stale_ones_dropped(store):
    store.ensure_session("s", "header")
    turns = [_turn(store, version=5) for _ in range(5)]
    store.add_sample(_sample(turns[0].id, version=2))  # 3 behind v5
    for turn in turns[1:4]:
        store.add_sample(_sample(turn.id, version=5))
    store.reject_sample(turns[4].id, 5, "empty response")  # no method can learn from it

    claimed, dropped = store.claim_samples("combined", 4, current_version=5, max_staleness=2, train_step=1)
    assert claimed == []  # only 3 fresh ones: none taken
    assert dropped == [(turns[0].id, "stale: sampled by policy v2, current v5, max_staleness 2")]
    claimed, dropped = store.claim_samples("combined", 2, current_version=5, max_staleness=2, train_step=1)
    assert [s.turn_id for s in claimed] == [turns[1].id, turns[2].id] and dropped == []
    assert claimed[0] == _sample(turns[1].id, version=5)
    assert store.sample_counts("combined") == {"ready": 1, "used": 2, "dropped": 1, "rejected": 1}
    # what one method claimed is still ready for another: the sample is the turn's, not the method's
    assert store.sample_counts("binary") == {"ready": 4, "used": 0, "dropped": 0, "rejected": 1}
    assert store.sample_counts() == {"ready": 1, "used": 2, "dropped": 1, "rejected": 1}
    # a finished run's last, short batch: at least min_size of a batch of 4
    assert store.claim_samples("combined", 4, current_version=5, max_staleness=2, train_step=2, min_size=2)[0] == []
    claimed, _ = store.claim_samples("combined", 4, current_version=5, max_staleness=2, train_step=2, min_size=1)
    assert [s.turn_id for s in claimed] == [turns[3].id]


def test_a_turn_judged_again_replaces_its_sample_but_never_trains_a_method_twice(store):
    store.ensure_session("s", "header")
    turn = _turn(store)
    store.reject_sample(turn.id, 0, "no verdict")
    store.add_sample(_sample(turn.id))  # judged again, with a verdict this time
    (claimed,), _ = store.claim_samples("opd", 1, 0, 2, train_step=3)
    assert claimed == _sample(turn.id)
    store.add_sample(_sample(turn.id))
    assert store.claim_samples("opd", 1, 0, 2, train_step=4) == ([], [])  # opd has trained on this turn
    assert store.sample_counts("opd") == {"ready": 0, "used": 1, "dropped": 0, "rejected": 0}
    store.reject_sample(turn.id, 0, "judged again")
    assert store.sample_counts("binary") == {"ready": 0, "used": 0, "dropped": 0, "rejected": 1}
    assert store.claim_samples("binary", 1, 0, 2, train_step=1) == ([], [])


def test_a_claim_assembles_for_its_method_records_each_rejection_and_reads_past_a_page(store):
    store.ensure_session("s", "header")
    turn_ids = [_turn(store).id for _ in range(70)]  # more than a page (64) of candidates
    for turn_id in turn_ids:
        store.add_sample(_sample(turn_id))
    usable = set(turn_ids[-3:])

    def picky(sample: Sample) -> Sample | str:
        return sample if sample.turn_id in usable else "not my signal"

    claimed, dropped = store.claim_samples("picky", 2, 0, 2, train_step=1, assemble=picky)
    assert [s.turn_id for s in claimed] == turn_ids[-3:-1] and dropped == []
    assert store.sample_counts("picky") == {"ready": 1, "used": 2, "dropped": 0, "rejected": 67}
    reasons = store._execute("SELECT DISTINCT reason FROM claims WHERE method = ? AND status = 'rejected'",
                             ("picky",)).fetchall()
    assert reasons == [("not my signal",)]
    # the next claim reads only what picky has not seen: the one usable turn left, not the 67 again
    seen: list[int] = []
    claimed, _ = store.claim_samples("picky", 2, 0, 2, train_step=2, min_size=1,
                                     assemble=lambda s: seen.append(s.turn_id) or picky(s))
    assert [s.turn_id for s in claimed] == turn_ids[-1:] and seen == turn_ids[-1:]
    # and for another method every turn is still there
    assert len(store.claim_samples("other", 70, 0, 2, train_step=1)[0]) == 70


def test_rows_of_a_database_from_the_per_method_era_stay_readable_and_claimable(store):
    """Before signals were per turn the judge wrote one row per (turn, method) the trainer named."""
    store.ensure_session("s", "header")
    ready, used = _turn(store), _turn(store)
    for turn, status in ((ready, "ready"), (used, "used")):
        store._execute(
            "INSERT INTO samples (turn_id, method, status, reason, policy_version, payload, created_at) "
            "VALUES (?, 'combined', ?, NULL, 0, ?, ?)", (turn.id, status, json.dumps(_sample(turn.id).to_dict()),
                                                          time.time()))
    assert store.sample_counts("combined") == {"ready": 1, "used": 1, "dropped": 0, "rejected": 0}
    assert store.sample_counts("binary") == {"ready": 0, "used": 0, "dropped": 0, "rejected": 0}  # not its queue
    assert store.claim_samples("binary", 1, 0, 2, train_step=1) == ([], [])
    (claimed,), _ = store.claim_samples("combined", 1, 0, 2, train_step=1)
    assert claimed == _sample(ready.id)
    assert store.sample_counts("combined") == {"ready": 0, "used": 2, "dropped": 0, "rejected": 0}
    assert store.sample_counts()["used"] == 2


def test_policy_version_starts_at_zero_and_keeps_the_last_train_step(store):
    assert store.policy() == {"policy_version": 0, "train_steps": 0, "last_update_at": None}
    store.set_policy_version(3, train_step=7)
    store.set_policy_version(4)  # no step given: the recorded one stays
    policy = store.policy()
    assert (policy["policy_version"], policy["train_steps"]) == (4, 7)
    assert policy["last_update_at"] == pytest.approx(time.time(), abs=60)
    assert store.policy_version() == 4


def test_a_verdict_keeps_the_policy_version_of_its_teacher(store):
    store.ensure_session("s", "header")
    taught, untaught = _turn(store), _turn(store)
    store.write_verdict(Verdict(**{**_verdict(taught.id).__dict__, "teacher_policy_version": 7}))
    store.write_verdict(_verdict(untaught.id))
    got = store.verdicts([taught.id, untaught.id])
    assert (got[taught.id].teacher_policy_version, got[untaught.id].teacher_policy_version) == (7, None)


# -- databases made by older versions ------------------------------------------------------------------


def test_a_database_made_before_a_column_existed_opens_keeps_its_rows_and_gains_the_column(store, store_url,
                                                                                            tmp_path):
    store.ensure_session("s", "header")
    turn = _turn(store)
    store.write_verdict(_verdict(turn.id))
    with store._lock:  # the verdicts table as versions before teacher_policy_version made it
        store._db.execute("ALTER TABLE verdicts DROP COLUMN teacher_policy_version")
    store.close()
    reopened = make_store(store_url, data_dir=tmp_path)
    try:
        old = reopened.verdicts([turn.id])[turn.id]
        assert (old.votes, old.selected_hint, old.teacher_policy_version) == ([1, 1, -1], "be brief", None)
        assert reopened.get_turn(turn.id) == turn
        reopened.write_verdict(Verdict(**{**_verdict(turn.id).__dict__, "teacher_policy_version": 3}))
        assert reopened.verdicts([turn.id])[turn.id].teacher_policy_version == 3
    finally:
        reopened.close()
    again = make_store(store_url, data_dir=tmp_path)  # a current database: nothing to add
    try:
        assert again.verdicts([turn.id])[turn.id].teacher_policy_version == 3
    finally:
        again.close()


def test_add_missing_columns_adds_what_the_schema_declares_and_the_table_lacks():
    import sqlite3

    schema = """
CREATE TABLE IF NOT EXISTS things (
    id      INTEGER PRIMARY KEY,
    name    TEXT NOT NULL,
    weight  REAL,
    colour  TEXT DEFAULT 'red',
    UNIQUE (name)
);
CREATE TABLE IF NOT EXISTS others (
    id      INTEGER PRIMARY KEY
);
"""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    db.execute("INSERT INTO things (name) VALUES ('kept')")
    db.executescript(schema)
    assert add_missing_columns(db.execute, schema) == [
        "ALTER TABLE things ADD COLUMN weight  REAL", "ALTER TABLE things ADD COLUMN colour  TEXT DEFAULT 'red'"]
    assert db.execute("SELECT name, weight, colour FROM things").fetchall() == [("kept", None, "red")]
    assert add_missing_columns(db.execute, schema) == []


# -- across store objects and processes -------------------------------------------------------------


def test_a_second_store_sees_every_committed_write(store, store_url, tmp_path):
    store.ensure_session("s", "header")
    turn = _turn(store)
    store.set_next_state(turn.id, NextState("user", "ok"))
    store.set_policy_version(2, train_step=2)
    store.close()
    reopened = make_store(store_url, data_dir=tmp_path)
    try:
        assert reopened.get_turn(turn.id).next_state.content == "ok"
        assert reopened.policy_version() == 2
    finally:
        reopened.close()


_CLAIMER = """
import json, pathlib, sys, time
from openclaw_rl.store import make_store
store = make_store(sys.argv[1], data_dir=sys.argv[2])
here, other = pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
here.touch()  # a barrier: each has imported and opened its store before either claims
deadline = time.time() + 60
while not other.exists() and time.time() < deadline:
    time.sleep(0.001)
claimed = []
while True:
    # min_size 1: a last odd sample is claimed too (with min_size 2 it would wait, by design, and read as lost)
    samples, _ = store.claim_samples("combined", 2, 0, 2, 1, 1)
    if not samples:  # a claim that lost the race for its samples comes back empty while others are ready
        if store.sample_counts("combined")["ready"] == 0:
            break
        continue
    if not claimed:  # a second barrier: each claims once before either claims again, so the claims interleave
        pathlib.Path(str(here) + ".claimed").touch()  # even when one process starts seconds after the other
        deadline = time.time() + 60
        while not pathlib.Path(str(other) + ".claimed").exists() and time.time() < deadline:
            time.sleep(0.001)
    claimed += [s.turn_id for s in samples]
    time.sleep(0.02)  # a trainer steps between claims; this also spreads the claims out
store.close()
print(json.dumps(claimed))
"""


def test_two_processes_claiming_at_once_never_take_the_same_sample(store, store_url, tmp_path):
    store.ensure_session("s", "header")
    turn_ids = [_turn(store).id for _ in range(120)]
    for turn_id in turn_ids:
        store.add_sample(_sample(turn_id))
    ready = [tmp_path / "ready-0", tmp_path / "ready-1"]
    claimers = [
        subprocess.Popen([sys.executable, "-c", _CLAIMER, store_url, str(tmp_path), str(ready[i]), str(ready[1 - i])],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    results = []
    for claimer in claimers:
        out, err = claimer.communicate(timeout=120)
        assert claimer.returncode == 0, err
        results.append(json.loads(out))
    first, second = results
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(turn_ids)  # every sample claimed once, none lost
    assert first and second, "one claimer took everything: the claims did not overlap"
    assert store.sample_counts("combined")["used"] == 120


def test_two_stores_recording_turns_of_one_session_get_distinct_indices(store, store_url, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    store.ensure_session("s", "header")
    other = make_store(store_url, data_dir=tmp_path)  # its own connection, as another process
    try:
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda pair: [_turn(pair[0], text=f"{pair[1]}{i}").index for i in range(20)],
                                 [(store, "a"), (other, "b")]))
    finally:
        other.close()
    assert sorted(done[0] + done[1]) == list(range(40))


# -- logs ---------------------------------------------------------------------------------------------


def test_turns_next_states_and_verdicts_are_logged_as_json_lines(store):
    store.ensure_session("s", "header")
    turn = _turn(store, version=1)
    store.set_next_state(turn.id, NextState("user", "thanks"))
    store.write_verdict(_verdict(turn.id))
    lines = [json.loads(line) for line in (store.logs_dir / "turns-v00001.jsonl").read_text().splitlines()]
    assert [line["event"] for line in lines] == ["turn", "next_state", "verdict"]
    assert lines[0]["request_last_message"] == "q for ans" and lines[1]["content"] == "thanks"
    expected = store.data_dir / "logs"
    assert store.logs_dir == (expected if store.path else expected / socket.gethostname())


# -- PostgreSQL only: URLs, errors, reconnecting --------------------------------------------------------


def test_redact_url_hides_passwords():
    assert redact_url("postgresql://ann:s3cr:t@db.example:5432/rl") == "postgresql://ann:***@db.example:5432/rl"
    assert redact_url("postgresql://db/rl?user=ann&password=s3cret&sslmode=require") == \
        "postgresql://db/rl?user=ann&password=***&sslmode=require"
    assert redact_url("postgresql://ann@db/rl") == "postgresql://ann@db/rl"
    assert redact_url("postgres://ann:p@ss/w0rd@db/rl") == "postgres://ann:***@db/rl"  # unencoded @ and /


def test_unsupported_and_unreachable_urls_say_which_and_what_to_do(tmp_path):
    with pytest.raises(StoreUnavailable, match=r"'mysql://ann:\*\*\*@db/rl' is not supported: use postgresql://"):
        make_store("mysql://ann:hunter2@db/rl", data_dir=tmp_path)
    pytest.importorskip("psycopg")
    from openclaw_rl.serve.background import free_port

    url = f"postgresql://ann:hunter2@127.0.0.1:{free_port()}/rl"  # nothing listens there
    with pytest.raises(StoreUnavailable) as caught:
        Store(tmp_path, url=url, busy_timeout_s=2)
    message = str(caught.value)
    assert "cannot open the store 'postgresql://ann:***@127.0.0.1:" in message
    assert "Connection refused" in message and "server runs" in message and "hunter2" not in message
    with pytest.raises(ValueError, match="needs a data dir"):
        make_store(url)
    with pytest.raises(StoreUnavailable, match=r"'postgresql://ann:\*\*\*@127.0.0.1:port/rl'.*invalid integer"):
        make_store("postgresql://ann:hunter2@127.0.0.1:port/rl", data_dir=tmp_path)
    with pytest.raises(StoreUnavailable, match=r"'postgresql://\[::1/rl' is malformed"):
        make_store("postgresql://[::1/rl", data_dir=tmp_path)


def test_the_cli_reports_an_unreachable_store_without_a_traceback(tmp_path, capsys):
    pytest.importorskip("psycopg")
    from openclaw_rl.cli import main
    from openclaw_rl.serve.background import free_port

    url = f"postgresql://ann:hunter2@127.0.0.1:{free_port()}/rl"
    assert main(["train", "--data-dir", str(tmp_path), "--store", url, "--max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("openclaw-rl: error: cannot open the store 'postgresql://ann:***@") and "hunter2" not in err


def test_a_dropped_postgres_connection_is_replaced_without_failing_a_call(postgres_url, tmp_path):
    import psycopg

    store = make_store(postgres_url, data_dir=tmp_path)
    try:
        store.ensure_session("s", "header")
        for call in (store.counts, lambda: _turn(store), lambda: store.claim_samples("binary", 1, 0, 2, 1)):
            pid = store._db.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:  # as a server restart would
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            call()  # a read, a write transaction, a claim: each reconnects and goes through
            assert store._db.info.backend_pid != pid
        assert store.counts()["turns"] == 1
    finally:
        store.close()


def test_a_stopped_postgres_server_gives_a_clear_error_and_a_restart_heals(tmp_path):
    from conftest import PostgresServer, postgres_bin_dir

    if postgres_bin_dir() is None:
        pytest.skip("no PostgreSQL binaries")
    server = PostgresServer(postgres_bin_dir())
    try:
        store = make_store(server.url(), data_dir=tmp_path)
        store.ensure_session("s", "header")
        server.stop_server()
        with pytest.raises(StoreUnavailable, match=r"cannot open the store 'postgresql://openclaw@127\.0\.0\.1"):
            store.counts()
        server.start_server()
        assert store.counts()["sessions"] == 1
        store.close()
    finally:
        server.stop()


def test_postgres_tables_are_created_once_by_stores_opening_together(postgres_url, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda i: make_store(postgres_url, data_dir=tmp_path / str(i)), range(4)))
    for opened in stores:
        assert opened.counts()["turns"] == 0
        opened.close()


def test_logs_of_machines_sharing_a_data_dir_go_to_one_folder_per_host(postgres_url, tmp_path):
    store = make_store(postgres_url, data_dir=tmp_path)
    store.close()
    assert store.logs_dir == Path(tmp_path) / "logs" / socket.gethostname() and store.logs_dir.is_dir()
