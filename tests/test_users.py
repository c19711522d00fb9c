"""Users: keys, isolation on every route, deletion (also under traffic), limits, privacy at rest."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import ScriptedEngine
from openclaw_rl.serve.server import check_exposure
from openclaw_rl.config import ConfigError, ServeConfig, TrainConfig
from openclaw_rl.serve.limits import RateLimit
from openclaw_rl.store import Store
from openclaw_rl.store.share import OwnerShare
from openclaw_rl.train.runner import per_user_share
from openclaw_rl.types import NextState, Sample, TurnRecord, Verdict
from openclaw_rl.users import Users, UserError

CARD, EMAIL, SSN = "4111 1111 1111 1111", "alice.liddell@example.org", "536-22-8726"


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat(base: str, key: str, messages: list[dict], **headers: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json={"messages": messages, "max_tokens": 8},
                      headers={**_bearer(key), **headers}, timeout=30)


# -- keys ----------------------------------------------------------------------------------


def test_keys_are_shown_once_stored_as_hashes_and_picked_up_by_a_running_registry(tmp_path):
    running = Users(tmp_path)  # as a server holds it
    assert not running.keys_configured and not running.shared
    assert Users(tmp_path, admin_key="k").keys_configured and not Users(tmp_path, admin_key="k").shared
    key = Users(tmp_path).add("alice")  # another shell adds a user
    assert key.startswith("ocrl-") and len(key) > 40
    stored = (tmp_path / "users.json").read_text()
    assert key not in stored and "alice" in stored
    assert stat.S_IMODE((tmp_path / "users.json").stat().st_mode) == 0o600
    assert running.keys_configured and running.shared and running.authenticate(key).name == "alice"
    assert running.authenticate(key + "x") is None and running.authenticate("") is None
    with pytest.raises(UserError, match="exists; revoke it first"):
        Users(tmp_path).add("alice")
    with pytest.raises(UserError, match="not valid"):
        Users(tmp_path).add("Alice Smith")
    Users(tmp_path).revoke("alice")
    assert running.authenticate(key) is None
    assert Users(tmp_path).add("alice") != key  # a revoked name may come back, with a new key
    with pytest.raises(UserError, match="no active user 'carol'"):
        Users(tmp_path).revoke("carol")
    assert [u["name"] for u in Users(tmp_path).list()] == ["alice", "alice"]


def test_the_api_key_flag_is_one_more_admin_key(tmp_path):
    users = Users(tmp_path, admin_key="s3cret")
    assert users.keys_configured
    assert users.authenticate("s3cret").admin and users.authenticate("s3cret").name == "admin"


def test_a_corrupt_users_file_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "users.json").write_text("{not json")
    with pytest.raises(UserError, match="not a users file.*restore it"):
        Users(tmp_path).keys_configured


def test_users_add_prints_the_key_alone_on_the_last_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "users", "add", "bob", "--admin",
                          "--data-dir", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    key = out.strip().splitlines()[-1]
    assert Users(tmp_path).authenticate(key).admin
    listed = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "users", "list", "--data-dir", str(tmp_path)],
                            capture_output=True, text=True, check=True).stdout
    assert "bob" in listed and key not in listed
    again = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "users", "add", "bob", "--data-dir",
                            str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 2 and "exists" in again.stderr


def test_serving_beyond_loopback_needs_a_key(tmp_path):
    users = Users(tmp_path)
    check_exposure(ServeConfig(host="127.0.0.1", data_dir=str(tmp_path)), users)  # the laptop: fine
    with pytest.raises(ConfigError, match=r"refusing to serve on 0\.0\.0\.0 with no API key.*users add NAME"):
        check_exposure(ServeConfig(host="0.0.0.0", data_dir=str(tmp_path)), users)
    users.add("alice")
    check_exposure(ServeConfig(host="0.0.0.0", data_dir=str(tmp_path)), users)
    check_exposure(ServeConfig(host="::", api_key="k", data_dir=str(tmp_path)), Users(tmp_path / "other", "k"))


# -- isolation on every route ---------------------------------------------------------------


@pytest.fixture
def shared(scripted_server):
    """A server three people share: alice, bob, and the admin root."""
    server = scripted_server(["Paris is the capital.", "Lyon is second."])
    users = Users(server.server.store.data_dir)
    keys = {name: users.add(name, admin=name == "root") for name in ("alice", "bob", "root")}
    return server, keys


def test_two_users_see_and_touch_only_their_own_sessions(shared):
    server, keys = shared
    base = server.base_url
    question = [{"role": "user", "content": "What is the capital of France?"}]
    first = _chat(base, keys["alice"], question)
    assert first.status_code == 200
    alice_session = first.headers["x-session-id"]
    answer = first.json()["choices"][0]["message"]["content"]

    # Bob sends alice's exact history: identical text never continues another user's session.
    history = [*question, {"role": "assistant", "content": answer}, {"role": "user", "content": "thanks!"}]
    bobs = _chat(base, keys["bob"], history)
    assert bobs.status_code == 200 and bobs.headers["x-session-id"] != alice_session
    bob_session = bobs.headers["x-session-id"]

    as_bob, as_alice, as_root = _bearer(keys["bob"]), _bearer(keys["alice"]), _bearer(keys["root"])
    listed = httpx.get(f"{base}/v1/sessions", headers=as_bob).json()["data"]
    assert [s["id"] for s in listed] == [bob_session]
    refused = [
        httpx.get(f"{base}/v1/sessions/{alice_session}", headers=as_bob),
        httpx.post(f"{base}/v1/sessions/{alice_session}/feedback", json={"text": "wrong!"}, headers=as_bob),
        httpx.post(f"{base}/v1/sessions/{alice_session}/end", headers=as_bob),
        httpx.delete(f"{base}/v1/sessions/{alice_session}", headers=as_bob),
        httpx.delete(f"{base}/v1/users/alice/data", headers=as_bob),
    ]
    for response in refused:
        assert response.status_code == 404, (response.request.method, response.request.url, response.text)
    # ... and 404 says exactly what it says for a session nobody has
    nobody = httpx.get(f"{base}/v1/sessions/sess-nobody", headers=as_bob).json()["error"]["message"]
    assert refused[0].json()["error"]["message"] == nobody.replace("sess-nobody", alice_session)

    # Alice's turn is untouched: no next state from bob, not ended, still hers to continue.
    alice_view = httpx.get(f"{base}/v1/sessions/{alice_session}", headers=as_alice).json()
    assert alice_view["owner"] == "alice" and alice_view["closed_at"] is None
    assert alice_view["turns"][0]["next_state"] is None
    follow = _chat(base, keys["alice"], history)
    assert follow.headers["x-session-id"] == alice_session
    turns = httpx.get(f"{base}/v1/sessions/{alice_session}", headers=as_alice).json()["turns"]
    assert turns[0]["next_state"]["content"] == "thanks!"

    # The admin sees and may touch everyone's.
    assert {s["id"] for s in httpx.get(f"{base}/v1/sessions", headers=as_root).json()["data"]} == {
        alice_session, bob_session}
    assert httpx.get(f"{base}/v1/sessions/{bob_session}", headers=as_root).status_code == 200
    assert httpx.post(f"{base}/v1/sessions/{bob_session}/end", headers=as_root).status_code == 200

    stored = server.server.store
    assert {t.owner for t in stored.turns(alice_session)} == {"alice"}
    assert {t.owner for t in stored.turns(bob_session)} == {"bob"}


def test_an_id_another_user_holds_answers_as_an_id_nobody_holds(shared):
    """Issue 36, finding 6: a chat naming alice's session id answered bob "cannot be used", an
    existence oracle for guessable ids. Bob now gets what any new id gets, a session of his own
    under that name, and alice's session is never read or touched."""
    server, keys = shared
    base, as_bob, as_alice = server.base_url, _bearer(keys["bob"]), _bearer(keys["alice"])
    question = [{"role": "user", "content": "What is the capital of France?"}]
    assert _chat(base, keys["alice"], question, **{"X-Session-Id": "team-notes"}).status_code == 200

    answers = {name: _chat(base, keys["bob"], [{"role": "user", "content": "hi"}], **{"X-Session-Id": name})
               for name in ("team-notes", "nobody-has-this")}
    for name, r in answers.items():
        assert r.status_code == 200 and r.headers["x-session-id"] == name and r.json()["session_id"] == name, r.text
        view = httpx.get(f"{base}/v1/sessions/{name}", headers=as_bob).json()
        assert view["id"] == name and view["owner"] == "bob" and len(view["turns"]) == 1, view
    assert answers["team-notes"].json().keys() == answers["nobody-has-this"].json().keys()
    # bob's next message continues his own session of that name: it pairs his turn, not alice's
    again = _chat(base, keys["bob"], [{"role": "user", "content": "hi"}, answers["team-notes"].json()["choices"][0]
                                      ["message"], {"role": "user", "content": "more"}], **{"X-Session-Id": "team-notes"})
    assert again.status_code == 200 and again.headers["x-session-id"] == "team-notes"
    mine = httpx.get(f"{base}/v1/sessions/team-notes", headers=as_bob).json()["turns"]
    assert len(mine) == 2 and mine[0]["next_state"]["content"] == "more"
    assert sorted(s["id"] for s in httpx.get(f"{base}/v1/sessions", headers=as_bob).json()["data"]) == [
        "nobody-has-this", "team-notes"]
    assert httpx.post(f"{base}/v1/sessions/team-notes/end", headers=as_bob).status_code == 200
    assert httpx.delete(f"{base}/v1/sessions/team-notes", headers=as_bob).status_code == 200

    alices = httpx.get(f"{base}/v1/sessions/team-notes", headers=as_alice).json()
    assert alices["owner"] == "alice" and alices["closed_at"] is None and len(alices["turns"]) == 1
    assert alices["turns"][0]["next_state"] is None
    assert {t.owner for t in server.server.store.turns("team-notes")} == {"alice"}


def test_status_and_dashboard_count_a_users_own_sessions_and_turns_and_an_admins_all(shared):
    """Issue 36, finding 6: every user saw the server-wide session and turn counts."""
    server, keys = shared
    base = server.base_url
    for name, count in (("alice", 1), ("bob", 2)):
        for i in range(count):
            assert _chat(base, keys[name], [{"role": "user", "content": f"{name} {i}"}]).status_code == 200
    for name, sessions in (("alice", 1), ("bob", 2), ("root", 3)):
        for path in ("/v1/status", "/v1/dashboard/now"):
            seen = httpx.get(f"{base}{path}", headers=_bearer(keys[name])).json()
            assert (seen["sessions"], seen["turns"], seen["main_turns"]) == (sessions, sessions, sessions), \
                (name, path, seen)


def test_responses_objects_are_their_owners_only(shared):
    server, keys = shared
    base = server.base_url
    created = httpx.post(f"{base}/v1/responses", json={"input": "Capital of France?", "max_output_tokens": 8},
                         headers=_bearer(keys["alice"]), timeout=30)
    assert created.status_code == 200, created.text
    response_id = created.json()["id"]
    assert httpx.get(f"{base}/v1/responses/{response_id}", headers=_bearer(keys["alice"])).status_code == 200
    assert httpx.get(f"{base}/v1/responses/{response_id}", headers=_bearer(keys["bob"])).status_code == 404
    continued = httpx.post(f"{base}/v1/responses", json={"input": "and Spain?", "previous_response_id": response_id},
                           headers=_bearer(keys["bob"]), timeout=30)
    assert continued.status_code == 404 and continued.json()["error"]["param"] == "previous_response_id"
    assert httpx.get(f"{base}/v1/responses/{response_id}", headers=_bearer(keys["root"])).status_code == 200


def test_without_a_key_every_route_but_healthz_answers_401(shared):
    server, keys = shared
    base = server.base_url
    assert httpx.get(f"{base}/healthz").status_code == 200
    for method, path in (("GET", "/v1/sessions"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                         ("DELETE", "/v1/users/alice/data"), ("GET", "/metrics")):
        for headers in ({}, _bearer("ocrl-wrong"), {"x-api-key": "nope"}):
            response = httpx.request(method, f"{base}{path}", headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert "users add" in response.json()["error"]["message"]
    assert httpx.get(f"{base}/v1/sessions", headers={"x-api-key": keys["bob"]}).status_code == 200
    Users(server.server.store.data_dir).revoke("bob")
    assert httpx.get(f"{base}/v1/sessions", headers=_bearer(keys["bob"])).status_code == 401


# -- failing closed -----------------------------------------------------------------------


@pytest.fixture
def keyed(scripted_server, tmp_path):
    """`keyed(**config)`: a server started with one user, alice, in its users file; (server, alice's key)."""
    def start(**overrides):
        data_dir = tmp_path / f"keyed-{overrides.get('host', 'loopback')}"
        key = Users(data_dir).add("alice")
        server = scripted_server(["ok"], data_dir=data_dir, **overrides)
        assert httpx.get(f"{server.base_url}/v1/sessions", headers=_bearer(key)).status_code == 200
        return server, key
    return start


def _refused(base: str, key: str, status: int, says: str) -> None:
    """Every way of asking (no key, `key`, a made-up key) answers `status` with a message saying `says`."""
    for headers in ({}, _bearer(key), _bearer("ocrl-made-up")):
        for method, path in (("GET", "/v1/sessions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/policy/versions")):
            response = httpx.request(method, f"{base}{path}", headers=headers, timeout=30,
                                     json={"messages": [{"role": "user", "content": "hi"}]} if method == "POST" else None)
            assert response.status_code == status, (method, path, headers, response.text)
            assert says in response.json()["error"]["message"], response.text
    assert httpx.get(f"{base}/healthz").status_code == 200  # liveness still answers


def test_the_keyless_local_admin_is_only_for_a_registry_that_never_saw_a_key(tmp_path):
    assert Users(tmp_path).caller("").name == "local"
    running = Users(tmp_path)
    key = Users(tmp_path).add("alice")
    assert running.caller(key).name == "alice"
    Users(tmp_path).revoke("alice")
    assert running.caller("") is None and running.caller(key) is None
    (tmp_path / "users.json").unlink()
    with pytest.raises(UserError, match=r"no users configured: .*users\.json is gone.*users add"):
        running.caller("")
    assert Users(tmp_path, admin_key="k").caller("k").admin  # with --api-key the file may go
    assert Users(tmp_path, admin_key="k").caller("") is None


def test_revoking_the_last_user_leaves_the_server_closed(keyed, caplog):
    server, key = keyed()
    Users(server.server.store.data_dir).revoke("alice")
    with caplog.at_level("WARNING", logger="openclaw_rl.serve.app"):
        _refused(server.base_url, key, 401, "no active user")
    said = [r.getMessage() for r in caplog.records if "no active user" in r.getMessage()]
    assert len(said) == 1, said  # said once, not once per request
    again = Users(server.server.store.data_dir).add("bob")
    assert httpx.get(f"{server.base_url}/v1/sessions", headers=_bearer(again)).status_code == 200


def test_an_emptied_users_file_leaves_the_server_closed(keyed):
    server, key = keyed()
    path = server.server.store.data_dir / "users.json"
    path.write_text('{"users": []}')
    _refused(server.base_url, key, 401, "no active user")
    path.write_text("")
    _refused(server.base_url, key, 503, "not a users file this version can read")


def test_a_removed_users_file_refuses_every_request_with_503(keyed, caplog):
    server, key = keyed()
    (server.server.store.data_dir / "users.json").unlink()
    with caplog.at_level("WARNING", logger="openclaw_rl.serve.app"):
        _refused(server.base_url, key, 503, "no users configured")
    assert any("users.json is gone" in r.getMessage() for r in caplog.records)
    again = Users(server.server.store.data_dir).add("alice")
    assert httpx.get(f"{server.base_url}/v1/sessions", headers=_bearer(again)).status_code == 200


def test_a_server_on_a_public_address_refuses_everything_once_no_key_is_left(keyed, scripted_server, tmp_path):
    # host is what the server was told to bind (the guard reads it); the test itself listens on loopback only
    server, key = keyed(host="0.0.0.0")
    Users(server.server.store.data_dir).revoke("alice")
    _refused(server.base_url, key, 503, "refusing to serve on 0.0.0.0 with no API key")
    open_from_the_start = scripted_server(["ok"], host="0.0.0.0", data_dir=tmp_path / "never-keyed")
    _refused(open_from_the_start.base_url, key, 503, "refusing to serve on 0.0.0.0 with no API key")


# -- deletion ----------------------------------------------------------------------------


def _judge_and_claim(store: Store, turn_id: int, session_id: str) -> None:
    store.write_verdict(Verdict(turn_id=turn_id, status="ok", reward=1, votes=[1], raw=["+1"], hints=[],
                                selected_hint=None, overlap_scores=[], judge="test", latency_s=0.0))
    store.add_sample(Sample(turn_id=turn_id, session_id=session_id, policy_version=0, prompt_token_ids=[1],
                            response_token_ids=[2], behaviour_logprobs=[-0.5], temperature=1.0, reward=1.0))


def _log_lines(data_dir: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((data_dir / "logs").rglob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_deleting_a_session_removes_it_everywhere_and_names_what_was_trained(shared):
    server, keys = shared
    base, store = server.base_url, server.server.store
    sessions = {}
    for name in ("alice", "bob"):
        first = _chat(base, keys[name], [{"role": "user", "content": f"{name} asks: capital of France?"}])
        sessions[name] = sid = first.headers["x-session-id"]
        answer = first.json()["choices"][0]["message"]["content"]
        _chat(base, keys[name], [{"role": "user", "content": f"{name} asks: capital of France?"},
                                 {"role": "assistant", "content": answer},
                                 {"role": "user", "content": f"my card is {CARD}, email {EMAIL}"}])
        turn = store.turns(sid)[0]
        _judge_and_claim(store, turn.id, sid)
    trained, _ = store.claim_samples("combined", 1, current_version=0, max_staleness=2, train_step=1)
    assert trained[0].session_id == sessions["alice"]  # the oldest: alice's was trained into v1
    store.set_policy_version(1, train_step=1)
    assert any(r["session_id"] == sessions["alice"] for r in _log_lines(store.data_dir))

    deleted = httpx.delete(f"{base}/v1/sessions/{sessions['alice']}", headers=_bearer(keys["alice"]))
    assert deleted.status_code == 200, deleted.text
    report = deleted.json()
    assert (report["sessions"], report["turns"], report["verdicts"], report["samples"]) == (1, 2, 1, 1)
    assert report["log_lines"] >= 4  # two turns, a next state, a verdict
    assert report["trained"]["samples"] == 1 and report["trained"]["first_versions"] == [1]
    assert "cannot forget" in report["trained"]["note"]
    assert store.get_session(sessions["alice"]) is None and store.turns(sessions["alice"]) == []
    assert not any(r["session_id"] == sessions["alice"] for r in _log_lines(store.data_dir))
    assert httpx.get(f"{base}/v1/sessions/{sessions['alice']}", headers=_bearer(keys["alice"])).status_code == 404

    # bob's session lost nothing
    bob_turns = store.turns(sessions["bob"])
    assert len(bob_turns) == 2 and bob_turns[0].next_state is not None
    assert store.verdicts([bob_turns[0].id]) and store.sample_counts()["ready"] == 1
    assert sum(r["session_id"] == sessions["bob"] for r in _log_lines(store.data_dir)) >= 4

    everything = httpx.delete(f"{base}/v1/users/bob/data", headers=_bearer(keys["root"])).json()
    assert everything["user"] == "bob" and everything["sessions"] == 1 and everything["trained"]["samples"] == 0
    assert store.counts() == {"sessions": 0, "turns": 0, "main_turns": 0, "paired_turns": 0}


def test_deletion_while_sessions_are_written_judged_and_trained_loses_nothing_else(store):
    """Alice's data is deleted again and again while both users' turns are written, judged,
    and claimed by a trainer that publishes versions; bob's data must come through whole."""
    stop, errors, bob_turns = threading.Event(), [], []

    def guarded(work):
        def run():
            try:
                while not stop.is_set():
                    work()
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)
        return threading.Thread(target=run)

    def writer(owner: str):
        count = iter(range(10**6))

        def write():
            sid = f"{owner}-{next(count)}"
            store.ensure_session(sid, "new", owner)
            turn = store.record_turn(TurnRecord(
                session_id=sid, kind="main", policy_version=0,
                prompt_messages=[{"role": "user", "content": f"{owner} asks"}], prompt_token_ids=[1],
                response_token_ids=[2, 3], behaviour_logprobs=[-0.1, -0.2], response_text="answer", tool_calls=[],
                sampling={}, finish_reason="stop", owner=owner))
            try:
                store.set_next_state(turn.id, NextState("user", f"{owner} says thanks {EMAIL}"))
            except Exception:
                if owner == "bob":
                    raise
            if owner == "bob":
                bob_turns.append(turn.id)
        return write

    def judge():
        for turn in store.turns_awaiting_verdict(limit=8):
            _judge_and_claim(store, turn.id, turn.session_id)

    steps = iter(range(1, 10**6))

    def trainer():
        claimed, _ = store.claim_samples("combined", 2, current_version=0, max_staleness=10**6, train_step=1)
        if claimed:
            step = next(steps)
            store.set_policy_version(step, train_step=step)
        time.sleep(0.01)

    deletions = []

    def deleter():
        deletions.append(store.delete_sessions(owner="alice"))
        time.sleep(0.02)

    threads = [guarded(writer("alice")), guarded(writer("bob")), guarded(judge), guarded(trainer), guarded(deleter)]
    for thread in threads:
        thread.start()
    time.sleep(3.0)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sum(d["sessions"] for d in deletions) > 0
    store.delete_sessions(owner="alice")
    while judge_left := store.turns_awaiting_verdict(limit=64):
        for turn in judge_left:
            _judge_and_claim(store, turn.id, turn.session_id)

    assert store.list_sessions(limit=1000, owner="alice") == []
    assert not any(r.get("session_id", "").startswith("alice") for r in _log_lines(store.data_dir))
    bob = store.list_sessions(limit=10**4, owner="bob")
    assert len(bob) == len(bob_turns) and all(s.turn_count == 1 for s in bob)
    every_bob_turn = {t.id for s in bob for t in store.turns(s.id)}
    assert every_bob_turn == set(bob_turns)
    assert set(store.verdicts(bob_turns)) == set(bob_turns)  # each judged, none lost
    counts = store.sample_counts("combined")
    assert counts["ready"] + counts["used"] == len(bob_turns)
    turn_lines = [r for r in _log_lines(store.data_dir) if r["event"] == "turn"]
    assert len(turn_lines) == len(bob_turns)


def test_deleting_while_chats_stream_fails_no_request(shared):
    server, keys = shared
    base, results = server.base_url, []

    def converse(name: str, i: int):
        messages = [{"role": "user", "content": f"{name} question {i}"}]
        for _ in range(3):
            response = _chat(base, keys[name], messages)
            results.append((name, response.status_code))
            if response.status_code != 200:
                return
            messages += [response.json()["choices"][0]["message"], {"role": "user", "content": "and then?"}]

    threads = [threading.Thread(target=converse, args=(name, i)) for i in range(3) for name in ("alice", "bob")]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        assert httpx.delete(f"{base}/v1/users/alice/data", headers=_bearer(keys["alice"])).status_code == 200
        time.sleep(0.05)
    assert [r for r in results if r[1] != 200] == []
    bob = httpx.get(f"{base}/v1/sessions", headers=_bearer(keys["bob"])).json()["data"]
    assert sorted(s["turns"] for s in bob) == [3, 3, 3]


# -- limits ------------------------------------------------------------------------------


def test_a_rate_limit_admits_bursts_up_to_the_limit_then_says_when_to_retry():
    limit = RateLimit(per_minute=2)
    assert limit.admit("a", now=0.0) is None and limit.admit("a", now=0.0) is None
    assert limit.admit("a", now=0.0) == pytest.approx(30.0)  # one request per 30 s refills
    assert limit.admit("b", now=0.0) is None  # per user
    assert limit.admit("a", now=30.0) is None
    assert RateLimit(per_minute=0).admit("a") is None


class _GatedEngine(ScriptedEngine):
    """Holds every response until the test opens the gate (to keep generations in flight)."""

    gate: asyncio.Event | None = None

    async def stream(self, prompt_ids, params):
        async for event in super().stream(prompt_ids, params):
            if self.gate is None:
                self.gate = asyncio.Event()
            await self.gate.wait()
            yield event


def test_per_user_limits_answer_429_with_retry_after(scripted_server):
    server = scripted_server(["ok"], user_requests_per_minute=5, user_feedback_per_minute=1, user_max_streams=1)
    keys = {name: Users(server.server.store.data_dir).add(name) for name in ("alice", "bob")}
    base = server.base_url
    first = _chat(base, keys["alice"], [{"role": "user", "content": "hi"}])
    sid = first.headers["x-session-id"]
    assert httpx.post(f"{base}/v1/sessions/{sid}/feedback", json={"text": "good"},
                      headers=_bearer(keys["alice"])).status_code == 200
    again = httpx.post(f"{base}/v1/sessions/{sid}/feedback", json={"text": "good"}, headers=_bearer(keys["alice"]))
    assert again.status_code == 429 and int(again.headers["retry-after"]) >= 1
    assert "user_feedback_per_minute" in again.json()["error"]["message"]
    # 3 requests so far of a burst of 5 (one refills every 12 s): one of the next few is refused
    tries = [httpx.get(f"{base}/v1/sessions", headers=_bearer(keys["alice"])) for _ in range(4)]
    over = next(r for r in tries if r.status_code == 429)
    assert int(over.headers["retry-after"]) >= 1 and "user_requests_per_minute" in over.json()["error"]["message"]
    assert httpx.get(f"{base}/v1/sessions", headers=_bearer(keys["bob"])).status_code == 200  # bob is not alice


def test_one_user_may_hold_only_so_many_generations_at_once(scripted_server):
    server = scripted_server(["ok"], user_max_streams=1)
    gated = _GatedEngine(server.engine.tokenizer, ["held"])
    server.server.engine = gated
    keys = {name: Users(server.server.store.data_dir).add(name) for name in ("alice", "bob")}
    held: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: held.append(_chat(server.base_url, keys["alice"],
                                                               [{"role": "user", "content": "wait"}])))
    thread.start()
    deadline = time.monotonic() + 10
    while gated.gate is None and time.monotonic() < deadline:
        time.sleep(0.01)
    second = _chat(server.base_url, keys["alice"], [{"role": "user", "content": "me too"}])
    assert second.status_code == 429 and "user_max_streams" in second.json()["error"]["message"]
    bobs = threading.Thread(target=lambda: held.append(_chat(server.base_url, keys["bob"],
                                                             [{"role": "user", "content": "bob"}])))
    bobs.start()
    time.sleep(0.3)
    assert len(held) == 0  # bob got in (his request waits on the gate too, not refused)
    server.server.engine.gate.set()  # type: ignore[union-attr]
    thread.join(10)
    bobs.join(10)
    assert [r.status_code for r in held] == [200, 200]
    assert _chat(server.base_url, keys["alice"], [{"role": "user", "content": "now"}]).status_code == 200


def _ready_samples(store: Store, owners: list[str]) -> None:
    for i, owner in enumerate(owners):
        store.ensure_session(f"s{i}", "new", owner)
        turn = store.record_turn(TurnRecord(
            session_id=f"s{i}", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1],
            response_token_ids=[2], behaviour_logprobs=[-0.1], response_text="a", tool_calls=[], sampling={},
            finish_reason="stop", owner=owner))
        store.set_next_state(turn.id, NextState("user", "fine"))
        _judge_and_claim(store, turn.id, f"s{i}")


def test_one_user_fills_at_most_their_share_of_a_batch(store):
    _ready_samples(store, ["alice", "alice", "alice", "bob"])
    share = per_user_share(TrainConfig(batch_size=2, max_user_share=0.5))
    assert share == 0.5 and per_user_share(TrainConfig(batch_size=16, max_user_share=0.25)) == 0.25
    assert per_user_share(TrainConfig(batch_size=16)) is None  # one person's server: no cap
    assert per_user_share(TrainConfig(batch_size=16), shared=True) == 0.25  # a shared one: a quarter by default
    assert per_user_share(TrainConfig(batch_size=16, max_user_share=1.0), shared=True) is None
    batch, _ = store.claim_samples("combined", 2, 0, 2, train_step=1, max_owner_share=share)
    assert sorted(s.session_id for s in batch) == ["s0", "s3"]  # one of alice's, bob's one
    assert store.claim_samples("combined", 2, 0, 2, train_step=2, max_owner_share=share)[0] == []  # alice alone: waits
    assert store.sample_counts("combined")["ready"] == 2  # nothing was dropped


def test_the_share_window_is_the_fewest_whole_batches_holding_one_sample_of_the_share():
    # (share, batch) -> (window, samples of one user in it): 0.25 of 2 is half a sample, so two
    # batches; 0.25 of 3 is 0.75, so two batches of 3 hold 1.5, rounded down to 1
    for (share, batch), (window, limit) in {(0.25, 4): (4, 1), (0.25, 2): (4, 1), (0.25, 1): (4, 1),
                                            (0.25, 3): (6, 1), (0.25, 16): (16, 4), (0.5, 2): (2, 1),
                                            (0.3, 2): (4, 1)}.items():
        assert (OwnerShare.window(share, batch), OwnerShare(share, batch, []).limit) == (window, limit), (share, batch)
    assert OwnerShare.earlier(0.25, 2) == 2 and OwnerShare.earlier(0.25, 4) == 0


def test_a_quarter_share_holds_across_steps_for_a_batch_of_two(store):
    """Issue 36: the cap was max(1, floor(0.25 * 2)) = 1 sample per batch of 2, so mallory
    trained half of every step. Now the share is counted over the last steps' samples."""
    owners = ["mallory" if i % 2 == 0 else ("alice", "bob", "carol")[i // 2 % 3] for i in range(40)]
    _ready_samples(store, owners)
    trained: list[str] = []
    for step in range(1, 11):  # 15 of the 20 honest samples and 5 of mallory's 20
        batch, _ = store.claim_samples("combined", 2, 0, 2, train_step=step, max_owner_share=0.25)
        assert len(batch) == 2, step
        trained += [store.get_session(s.session_id).owner for s in batch]
    assert trained.count("mallory") <= len(trained) / 4, trained
    for start in range(0, len(trained) - 3, 2):  # every two consecutive steps: one of mallory's at most
        assert trained[start:start + 4].count("mallory") <= 1, (start, trained)
    assert trained.count("mallory") >= len(trained) / 4 - 1  # and her share does train, a quarter of it


# -- privacy at rest ------------------------------------------------------------------------


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def _planted_turn(store: Store) -> None:
    store.ensure_session("s", "new")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0,
        prompt_messages=[{"role": "user", "content": f"charge {CARD}, SSN {SSN}"}], prompt_token_ids=[1],
        response_token_ids=[2], behaviour_logprobs=[-0.1], response_text=f"I'll mail {EMAIL}", tool_calls=[],
        sampling={}, finish_reason="stop"))
    store.set_next_state(turn.id, NextState("user", f"write to {EMAIL} please"))


def test_the_store_keeps_its_files_private_and_logs_redacted_by_default(tmp_path):
    store = Store(tmp_path / "data")
    _planted_turn(store)
    store.close()
    modes = _modes(tmp_path / "data")
    assert {name: mode for name, mode in modes.items() if mode & 0o077} == {}
    logged = (tmp_path / "data" / "logs" / "turns-v00000.jsonl").read_text()
    for planted in (CARD, SSN, EMAIL):
        assert planted not in logged
    assert "[card]" in logged and "[email]" in logged


@pytest.mark.parametrize("log_text", ["off", "full"])
def test_log_text_off_keeps_no_text_and_full_keeps_all(tmp_path, log_text):
    store = Store(tmp_path, log_text=log_text)
    _planted_turn(store)
    records = _log_lines(tmp_path)
    assert {r["event"] for r in records} == {"turn", "next_state"}
    text = json.dumps(records)
    assert (EMAIL in text and CARD in text) == (log_text == "full")
    if log_text == "off":
        assert all("response_text" not in r and "content" not in r for r in records)
    assert Store(tmp_path).turns("s")[0].prompt_token_ids == [1]  # training data is the exact ids either way


def test_an_existing_open_data_dir_is_made_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    Store(data).close()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_a_server_without_keys_has_one_user_and_limits_nobody(scripted_server):
    server = scripted_server(["ok"], user_requests_per_minute=1, user_max_streams=1)
    for _ in range(3):
        assert httpx.get(f"{server.base_url}/v1/sessions").status_code == 200
