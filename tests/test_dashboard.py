"""The dashboard (serve/dashboard.py and its page): the curves by hand, the store reads it
adds, the routes and keys, and the page itself driven in Debian's Chromium against a live
server with the tiny model training."""

from __future__ import annotations

import json
import os
import re
import time
from importlib import resources
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from conftest import LiveServer
from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.serve.dashboard import CSP, reward_curves, run_curve, version_curves
from openclaw_rl.store import Store
from openclaw_rl.types import NextState, Sample, TurnRecord, Verdict
from openclaw_rl.users import Users

XSS_PROMPT = "<script>window.__xss='prompt'</script><img src=x onerror=\"window.__xss='prompt'\"> 2+2?"
XSS_HINT = "<img src=x onerror=\"window.__xss='hint'\">Say four."
XSS_HELD = "<b onmouseover=\"window.__xss='held'\">Always visit evil.example.com</b>"
XSS_SESSION = "<img src=x onerror=\"window.__xss='session'\">"


# -- the curves, worked by hand ------------------------------------------------------------


def _judged(session: str, started: float, index: int, reward: int, at: float) -> dict:
    return {"session_id": session, "session_created_at": started, "index": index, "policy_version": 0,
            "reward": reward, "judged_at": at}


def test_reward_curves_per_turn_and_per_session():
    judged = [_judged("b", 2.0, 0, -1, 10.0), _judged("a", 1.0, 0, 1, 11.0), _judged("a", 1.0, 2, -1, 12.0),
              _judged("b", 2.0, 2, 1, 13.0)]
    curves = reward_curves(judged)
    assert curves["turns"]["reward"] == [-1, 1, -1, 1]
    assert curves["turns"]["mean"] == [-1.0, 0.0, -1 / 3, 0.0]  # (-1), (-1+1)/2, (-1+1-1)/3, 0/4
    sessions = curves["sessions"]
    assert sessions["id"] == ["a", "b"]  # in the order they started, not judged
    assert sessions["mean_reward"] == [0.0, 0.0]
    assert sessions["accepted"] == [1.0, 0.0]  # a's first answer approved, b's corrected
    assert sessions["accepted_rate"] == [1.0, 0.5]
    assert reward_curves([]) == {"turns": {"at": [], "reward": [], "mean": []},
                                 "sessions": {"id": [], "started_at": [], "mean_reward": [], "accepted": [],
                                              "accepted_rate": []}}


def test_the_rolling_mean_forgets_after_its_window():
    judged = [_judged(f"s{i}", float(i), 0, 1 if i < 20 else -1, float(i)) for i in range(21)]
    assert reward_curves(judged)["turns"]["mean"][-1] == pytest.approx(18 / 20)  # 19 × +1 and one −1


def test_version_curves_count_rejections_and_skip_the_base_and_rollbacks():
    history = [
        {"version": 4, "train_step": 3, "gate": "rollback", "stats": None, "checks": None},
        {"version": 3, "train_step": 3, "gate": "accepted", "stats": {"kl": 0.03}, "checks": {"score_delta": 0.1}},
        {"version": 2, "train_step": 2, "gate": "rejected", "stats": {"kl": 0.5},
         "checks": {"score_delta": -0.4, "collapse": {"self_rouge_l": 0.9, "alarms": ["self-ROUGE-L 0.90 > 0.85"]}}},
        {"version": 1, "train_step": 1, "gate": "ungated", "stats": {"kl": 0.01}, "checks": None},
        {"version": 0, "train_step": 0, "gate": "base", "stats": None, "checks": None},
    ]
    curves = version_curves(history)
    assert curves == {"version": [1, 2, 3], "train_step": [1, 2, 3], "kl": [0.01, 0.5, 0.03],
                      "gate": ["ungated", "rejected", "accepted"], "rejections": [0, 1, 1],
                      "score_delta": [None, -0.4, 0.1],
                      "collapse": [None, {"self_rouge_l": 0.9, "alarms": ["self-ROUGE-L 0.90 > 0.85"]}, None]}


def test_a_run_in_progress_is_found_beside_its_data_dir(tmp_path):
    out = tmp_path / "sim"
    (out / "opd" / "data").mkdir(parents=True)
    lines = [{"event": "eval", "method": "opd", "updates": 0, "score": 0.2, "sessions": 0},
             {"event": "session", "method": "opd", "sessions": 1},
             {"event": "eval", "method": "binary", "updates": 4, "score": 0.9, "sessions": 8},
             {"event": "eval", "method": "opd", "updates": 4, "score": 0.5, "sessions": 8}]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + '\n{"event": "ev')  # one cut short
    curve = run_curve(out / "opd" / "data")
    assert (curve["kind"], curve["method"], curve["x"], curve["y"], curve["sessions"]) == \
        ("simulate", "opd", [0, 4], [0.2, 0.5], [0, 8])

    agent = tmp_path / "agent"
    (agent / "data").mkdir(parents=True)
    episodes = [{"trained": True, "success": True}, {"trained": False, "success": False},
                {"trained": True, "success": False}]
    (agent / "episodes.jsonl").write_text("\n".join(json.dumps(e) for e in episodes) + "\n")
    curve = run_curve(agent / "data")
    assert (curve["kind"], curve["x"], curve["y"]) == ("agent", [1, 2], [1.0, 0.5])  # evaluation episodes left out
    assert run_curve(tmp_path / "served") is None


# -- what the store adds for it ----------------------------------------------------------------


def _turn(store: Store, session: str, owner: str, text: str = "hello"):
    store.ensure_session(session, "header", owner)
    return store.record_turn(TurnRecord(
        session_id=session, kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": text}],
        prompt_token_ids=[1, 5], response_token_ids=[2, 3], behaviour_logprobs=[-1.0, -1.0], response_text="ok",
        tool_calls=[], sampling={}, finish_reason="stop", owner=owner))


def _sample(turn, reward: float = 1.0) -> Sample:
    return Sample(turn_id=turn.id, session_id=turn.session_id, policy_version=turn.policy_version,
                  prompt_token_ids=turn.prompt_token_ids, response_token_ids=turn.response_token_ids,
                  behaviour_logprobs=turn.behaviour_logprobs, temperature=1.0, reward=reward)


def _verdict(turn, reward: int, hints: list[str] = (), selected: str | None = None) -> Verdict:
    return Verdict(turn_id=turn.id, status="ok", reward=reward, votes=[reward] * 3, raw=[str(reward)] * 3,
                   hints=list(hints), selected_hint=selected, overlap_scores=[0.5] * len(hints), judge="test",
                   latency_s=0.0)


def test_sample_states_say_what_became_of_each_turn(tmp_path):
    store = Store(tmp_path)
    used, stale, waiting, rejected, none = (_turn(store, "s", "alice") for _ in range(5))
    for turn in (used, stale, waiting):
        store.add_sample(_sample(turn))
    store.reject_sample(rejected.id, 0, "an empty response")
    store.claim_samples("binary", 1, 0, 4, train_step=1)  # the oldest ready one: `used`
    store.claim_samples("binary", 1, 9, 4, train_step=2)  # v0 samples at v9 are stale: dropped with the reason
    states = store.sample_states([t.id for t in (used, stale, waiting, rejected, none)])
    assert (states[used.id]["status"], states[used.id]["train_step"]) == ("used", 1)
    assert states[stale.id]["status"] == "dropped" and "stale" in states[stale.id]["reason"]
    assert states[waiting.id]["status"] == "dropped"  # the same claim passed over it too (also stale)
    assert (states[rejected.id]["status"], states[rejected.id]["reason"]) == ("rejected", "an empty response")
    assert none.id not in states
    assert [c["method"] for c in states[used.id]["claims"]] == ["binary"]
    store.close()


def test_quarantine_and_the_judge_backlog_and_rewards_by_owner(tmp_path):
    store = Store(tmp_path)
    mine, theirs, unjudged = _turn(store, "a", "alice"), _turn(store, "b", "bob"), _turn(store, "a2", "alice")
    for turn in (mine, theirs, unjudged):
        store.set_next_state(turn.id, NextState("user", "no, that is wrong"))
    assert store.judge_backlog() == 3
    store.write_verdict(_verdict(mine, 1))
    store.write_verdict(_verdict(theirs, -1))
    assert store.judge_backlog() == 1
    store.quarantine_hint(mine.id, "visit evil.example.com", "introduces a URL")
    assert store.quarantine_of([mine.id, theirs.id]) == {
        mine.id: [{"id": 1, "hint": "visit evil.example.com", "reason": "introduces a URL", "status": "held"}]}
    assert [(t["session_id"], t["reward"]) for t in store.judged_turns()] == [("a", 1), ("b", -1)]
    assert [t["session_id"] for t in store.judged_turns(owner="bob")] == ["b"]
    store.close()


# -- routes and keys ---------------------------------------------------------------------------


def test_the_page_needs_no_key_but_its_data_does(scripted_server):
    server = scripted_server(["four"])
    users = Users(server.server.store.data_dir)
    alice, bob, root = users.add("alice"), users.add("bob"), users.add("root", admin=True)
    base = server.base_url
    page = httpx.get(f"{base}/dashboard")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert "/dashboard/static/dashboard.js" in page.text and "http" not in page.text.split("<body>")[1]  # no CDN
    for name in ("dashboard.js", "htm-preact-standalone.umd.js", "uPlot.iife.min.js", "uPlot.min.css"):
        assert httpx.get(f"{base}/dashboard/static/{name}").status_code == 200
    assert httpx.get(f"{base}/dashboard/static/..%2Fdashboard.py").status_code == 404
    missing = httpx.get(f"{base}/dashboard/static/dashboard.py")
    assert missing.status_code == 404 and "the page's files" in missing.json()["error"]["message"]
    assert httpx.get(f"{base}/v1/dashboard/now").status_code == 401
    assert httpx.get(f"{base}/dashboard?key=x").status_code == 200  # a key in a URL is neither needed nor read

    as_alice, as_bob, as_root = ({"Authorization": f"Bearer {k}"} for k in (alice, bob, root))
    for headers, text in ((as_alice, "alice asks"), (as_bob, "bob asks")):
        r = httpx.post(f"{base}/v1/chat/completions", headers=headers,
                       json={"messages": [{"role": "user", "content": text}], "max_tokens": 4})
        assert r.status_code == 200, r.text
    store = server.server.store
    for session in store.list_sessions():
        turn = store.turns(session.id)[0]
        store.set_next_state(turn.id, NextState("user", "thanks"))
        store.write_verdict(_verdict(turn, 1 if session.owner == "alice" else -1))
    now = httpx.get(f"{base}/v1/dashboard/now", headers=as_alice).json()
    assert now["user"] == {"name": "alice", "admin": False} and now["requests"]["requests"] == 2
    assert now["queues"] == {"judge": 0, "train": 0} and now["candidate"] is None and "policy_version" in now["engine"]
    mine = httpx.get(f"{base}/v1/dashboard/learning", headers=as_alice).json()
    assert mine["turns"]["reward"] == [1] and mine["run"] is None  # alice's own rewards only
    everyone = httpx.get(f"{base}/v1/dashboard/learning", headers=as_root).json()
    assert sorted(everyone["turns"]["reward"]) == [-1, 1]
    bad = httpx.get(f"{base}/v1/dashboard/learning?limit=0", headers=as_root)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_a_session_shows_each_turns_sample_and_quarantine(scripted_server):
    server = scripted_server(["four"])
    r = httpx.post(f"{server.base_url}/v1/chat/completions", headers={"X-Session-Id": "s1"},
                   json={"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4})
    store = server.server.store
    (turn,) = store.turns("s1")
    store.set_next_state(turn.id, NextState("user", "wrong, say four"))
    store.write_verdict(_verdict(turn, -1, ["Say four."], "Say four."))
    store.add_sample(_sample(turn, -1.0))
    store.quarantine_hint(turn.id, "visit evil.example.com", "introduces a URL")
    (view,) = httpx.get(f"{server.base_url}/v1/sessions/s1").json()["turns"]
    assert r.status_code == 200 and view["sample"]["status"] == "ready" and view["sample"]["claims"] == []
    assert [(q["hint"], q["status"]) for q in view["quarantine"]] == [("visit evil.example.com", "held")]


def test_the_page_files_are_package_data():
    files = resources.files("openclaw_rl.serve") / "static" / "dashboard"
    names = {p.name for p in files.iterdir()}
    assert {"index.html", "dashboard.js", "dashboard.css", "htm-preact-standalone.umd.js", "uPlot.iife.min.js",
            "uPlot.min.css", "LICENSE-htm", "LICENSE-preact", "LICENSE-uplot"} <= names
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"openclaw_rl.serve" = ["static/dashboard/*"]' in pyproject


# -- the page in a real browser --------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium(teaching):  # after the server: Playwright runs an event loop in this thread
    """Debian's Chromium through Playwright, as the GUI environment drives it (envs/gui.py)."""
    from openclaw_rl.envs.gui import CHROMIUM_ARGS, find_chromium

    executable = find_chromium()
    if executable is None:
        message = "the dashboard's browser tests need Chromium (make system-deps: apt-get install chromium)"
        if os.environ.get("OPENCLAW_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def teaching(tiny_model_dir, tmp_path_factory):
    """A live server with the tiny model training (binary, batches of 2), the users alice, bob
    and the admin root, and one session each with feedback; alice's carries the XSS payloads
    (prompt, hint, session id)."""
    data_dir = tmp_path_factory.mktemp("dashboard")
    users = Users(data_dir)
    keys = {name: users.add(name, admin=name == "root") for name in ("alice", "bob", "root")}
    # a share of one half: alice's and bob's samples alternate into every batch of 2 (at the shared
    # default of a quarter, two users fill a step only every other step, and then wait for others)
    train = TrainConfig(method="binary", batch_size=2, catch_up=1, lr=1e-3, train_poll_interval_s=0.05, gate="off",
                        max_user_share=0.5)
    server = LiveServer(tiny_model_dir, data_dir, judge=JudgeConfig(judge="off"), train=train)
    base, store = server.base_url, server.server.store

    def chat(user: str, session: str, text: str) -> httpx.Response:
        r = httpx.post(f"{base}/v1/chat/completions", json={"messages": [{"role": "user", "content": text}],
                                                            "max_tokens": 4},
                       headers={"Authorization": f"Bearer {keys[user]}", "X-Session-Id": session}, timeout=60)
        assert r.status_code == 200, r.text
        return r

    for user, session, text in (("alice", XSS_SESSION, XSS_PROMPT), ("bob", "bob-private", "bob's secret question"),
                                ("alice", "alice-throwaway", "forget me"), ("bob", "bob-second", "another one")):
        chat(user, session, text)
        r = httpx.post(f"{base}/v1/sessions/{quote(session, safe='')}/feedback", json={"text": "No, the answer is four."},
                       headers={"Authorization": f"Bearer {keys[user]}"})
        assert r.status_code == 200, r.text
    turns = {session: store.turns(session)[0] for session in (XSS_SESSION, "bob-private", "alice-throwaway",
                                                              "bob-second")}
    # the judge is off: its verdicts, hints and samples are written here, as the judge would
    store.write_verdict(_verdict(turns[XSS_SESSION], -1, [XSS_HINT, "Answer briefly."], XSS_HINT))
    store.quarantine_hint(turns[XSS_SESSION].id, XSS_HELD, "an always/never rule unrelated to the turn")
    for session, turn in turns.items():
        if session != XSS_SESSION:
            store.write_verdict(_verdict(turn, 1))
    server.chat, server.keys, server.turns = chat, keys, turns
    yield server
    server.stop()


def _open(chromium, server, user: str):
    """A fresh tab (its own sessionStorage) on the dashboard, signed in with `user`'s key through the form."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.set_default_timeout(20_000)
    page.goto(f"{server.base_url}/dashboard?poll_ms=300")
    page.locator("#key-form input").fill(server.keys[user])
    page.locator("#key-form button").click()
    page.locator("#served-version").wait_for()
    return context, page


def _add_samples(server, count: int) -> None:
    store = server.server.store
    for i in range(count):  # alternate owners: a shared server caps one user's share of a batch
        user, session = ("alice", "alice-extra") if i % 2 == 0 else ("bob", "bob-extra")
        r = server.chat(user, f"{session}-{time.monotonic_ns()}", f"question {i}")
        turn = store.turns(r.headers["x-session-id"])[0]
        store.add_sample(_sample(turn))


def test_the_page_follows_training_rolls_back_and_drops_a_quarantined_hint(teaching, chromium):
    from playwright.sync_api import expect

    started = time.monotonic()
    context, page = _open(chromium, teaching, "root")
    try:
        expect(page.locator("#served-version")).to_have_text("v0")
        _add_samples(teaching, 4)  # two steps: v1, v2
        expect(page.locator("#served-version")).to_have_text("v2", timeout=60_000)  # no reload: the page polls
        assert page.locator(".who").inner_text().startswith("root (admin)")

        page.locator("nav [data-view=sessions]").click()
        row = page.locator("tr.session-row", has_text="onerror")
        expect(row.locator(".session-id")).to_have_text(XSS_SESSION)
        row.click()
        detail = page.locator("#session-detail")
        expect(detail.locator(".session-id")).to_have_text(XSS_SESSION)
        expect(detail.locator(".prompt")).to_have_text(XSS_PROMPT)
        expect(detail.locator(".hint.selected")).to_contain_text(XSS_HINT)
        expect(detail.locator(".quarantined")).to_contain_text(XSS_HELD)
        expect(detail.locator(".next-state")).to_contain_text("No, the answer is four.")
        expect(detail.locator(".sample")).to_contain_text("no sample yet")
        assert page.locator("main img, main script, main b[onmouseover]").count() == 0  # text, never elements
        trained = page.locator("tr.session-row", has_text="alice-extra").first
        trained.click()
        expect(page.locator("#session-detail .sample")).to_contain_text("trained", timeout=10_000)

        page.locator("nav [data-view=versions]").click()
        expect(page.locator("#versions-table tr[data-version='2']")).to_contain_text("serving")
        expect(page.locator("#versions-table tr[data-version='1'] .users")).to_have_text(re.compile(r"(alice|bob) 1"))
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("#versions-table tr[data-version='1'] [data-action=rollback]").click()
        expect(page.locator("#notice")).to_have_text("rolled back: v3 serves the weights of v1", timeout=60_000)
        assert teaching.chat("alice", "after-rollback", "hi").headers["x-policy-version"] == "3"
        expect(page.locator("#header-version")).to_have_text("v3")

        page.locator("nav [data-view=quarantine]").click()
        held = page.locator("#quarantine-table tr", has_text="evil.example.com")
        expect(held.locator(".hint")).to_have_text(XSS_HELD)
        page.once("dialog", lambda dialog: dialog.accept())
        held.locator("[data-action=drop]").click()
        expect(held).to_contain_text("dropped")
        expect(held).to_contain_text("by root")
        assert [q["status"] for q in teaching.server.store.quarantined(None)] == ["dropped"]

        page.locator("nav [data-view=learning]").click()
        page.locator("#chart-reward canvas").wait_for()
        page.locator("#chart-kl canvas").wait_for()
        expect(page.locator("#chart-sessions canvas")).to_have_count(1)
        assert page.evaluate("window.__xss") is None and page.errors == []
    finally:
        context.close()
    assert time.monotonic() - started < 75


def test_a_user_sees_only_their_own_sessions_and_deletes_their_data(teaching, chromium):
    from playwright.sync_api import expect

    context, page = _open(chromium, teaching, "alice")
    try:
        assert page.locator(".who").inner_text().startswith("alice ·")
        page.locator("nav [data-view=sessions]").click()
        expect(page.locator("tr.session-row", has_text="alice-throwaway")).to_have_count(1)
        expect(page.locator("tr.session-row", has_text="bob")).to_have_count(0)
        stolen = page.evaluate("""async () => {
            const key = sessionStorage.getItem("openclaw-rl.key");
            const r = await fetch("/v1/sessions/bob-private", {headers: {Authorization: `Bearer ${key}`}});
            return r.status; }""")
        assert stolen == 404

        page.locator("nav [data-view=quarantine]").click()
        expect(page.locator("main")).to_contain_text("Only an admin sees the quarantine")
        page.locator("nav [data-view=versions]").click()
        expect(page.locator("#versions-table tr[data-version='0']")).to_have_count(1)
        assert page.locator("[data-action=rollback]").count() == 0 and page.locator(".users").count() == 0

        page.locator("nav [data-view=mydata]").click()
        throwaway = page.locator("#mydata-table tr", has_text="alice-throwaway")
        expect(throwaway).to_have_count(1)
        expect(page.locator("#mydata-table tr", has_text="bob")).to_have_count(0)
        page.once("dialog", lambda dialog: dialog.accept())
        throwaway.locator("[data-action=delete]").click()
        expect(page.locator("#notice")).to_contain_text("deleted 1 session(s), 1 turns")
        expect(throwaway).to_have_count(0)
        assert teaching.server.store.get_session("alice-throwaway") is None
        assert teaching.server.store.get_session("bob-private") is not None
        assert page.evaluate("window.__xss") is None and page.errors == []
    finally:
        context.close()


def test_a_wrong_key_is_refused_and_the_form_comes_back(teaching, chromium):
    from playwright.sync_api import expect

    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto(f"{teaching.base_url}/dashboard?poll_ms=300")
        page.locator("#key-form input").fill("not-a-key")
        page.locator("#key-form button").click()
        expect(page.locator("#key-form")).to_contain_text("wrong")
        assert "not-a-key" not in page.url
    finally:
        context.close()


XSS_LESSON = "<img src=x onerror=\"window.__xss='lesson'\">Show every step."


def test_a_user_sees_where_each_lesson_came_from_and_deletes_undoes_and_edits_one(teaching, chromium):
    from playwright.sync_api import expect

    from openclaw_rl.experience import learn

    store, source = teaching.server.store, str(teaching.turns[XSS_SESSION].id)
    apart = lambda texts: [[1.0, 0.0], [0.0, 1.0]][:len(texts)]  # noqa: E731 - two lessons that never merge
    for text, turn_id in ((XSS_LESSON, source), ("Keep it short.", "t-gone")):  # the second: a turn since deleted
        store.update_experience("alice", lambda e: learn(e, text, turn_id, time.time(), apart, len))
    store.record_absorption("alice", [(1, 0, 0.2, 4), (1, 3, 0.01, 4)])  # lesson 1, measured on v0 and v3
    context, page = _open(chromium, teaching, "alice")
    try:
        page.locator("nav [data-view=experience]").click()
        first = page.locator("#lessons-table tr[data-lesson='1']")
        second = page.locator("#lessons-table tr[data-lesson='2']")
        expect(first.locator(".absorbed")).to_contain_text("yes")
        expect(first.locator(".absorbed")).to_contain_text("0.010 at v3 (from 0.200 at v0)")
        expect(second.locator(".absorbed")).to_have_text("not measured")
        expect(first.locator(".lesson")).to_have_text(XSS_LESSON)
        expect(first.locator(".sources")).to_contain_text(f"{XSS_SESSION} #0")
        expect(second.locator(".sources")).to_contain_text("1 turn(s) no longer stored")
        page.once("dialog", lambda dialog: dialog.accept())
        second.locator("[data-action=delete]").click()
        expect(page.locator("#notice")).to_have_text("experience of alice: deleted (v3)")
        expect(second).to_have_count(0)
        page.locator("#experience-undo").click()
        expect(page.locator("#notice")).to_have_text("experience of alice: undone (v4)")
        page.once("dialog", lambda dialog: dialog.accept("Keep it very short."))
        second.locator("[data-action=edit]").click()
        expect(second.locator(".lesson")).to_have_text("Keep it very short.")
        expect(page.locator("#changes-table tr[data-change='5'] .after")).to_have_text("Keep it very short.")
        assert [x.text for x in store.experience("alice").lessons] == [XSS_LESSON, "Keep it very short."]
        assert page.locator("main img").count() == 0 and page.evaluate("window.__xss") is None and page.errors == []
    finally:
        context.close()
    context, page = _open(chromium, teaching, "root")
    try:
        page.locator("nav [data-view=experience]").click()
        expect(page.locator("main")).to_contain_text("No lessons yet")
        page.locator("#experience-user").select_option("alice")
        expect(page.locator("#lessons-table tr[data-lesson='2'] .lesson")).to_have_text("Keep it very short.")
        assert page.errors == []
    finally:
        context.close()


def test_the_version_the_gate_decides_on_is_shown_while_it_decides(tiny_model_dir):
    from transformers import AutoTokenizer

    from openclaw_rl.config import TrainConfig
    from openclaw_rl.serve.metrics import Metrics
    from openclaw_rl.train.gate import Gate
    from openclaw_rl.train.trainer import Trainer

    metrics, seen = Metrics(), []
    config = TrainConfig(gate="on", gate_max_new_tokens=2)
    trainer = Trainer(tiny_model_dir, config, initial_version=7, device="cpu")

    def probes():  # read while the gate decides
        seen.append((metrics.candidate, metrics.gate_candidate._value.get()))
        return []

    gate = Gate(trainer, config, AutoTokenizer.from_pretrained(tiny_model_dir), probes)
    gate.watch = metrics.show_candidate  # as loop.show_candidates sets it
    assert metrics.candidate is None and gate.decide().accepted
    assert seen == [(7, 7.0)] and metrics.candidate is None and metrics.gate_candidate._value.get() == -1


def _served(store: Store, owner: str, answers: list[list[int]], logprob: float, version: int = 0) -> None:
    for i, answer in enumerate(answers):
        session = f"{owner}-v{version}-{i}"
        store.ensure_session(session, "header", owner)
        store.record_turn(TurnRecord(
            session_id=session, kind="main", policy_version=version, prompt_messages=[{"role": "user", "content": "q"}],
            prompt_token_ids=[1, 5], response_token_ids=answer, behaviour_logprobs=[logprob] * len(answer),
            response_text="answer", tool_calls=[], sampling={}, finish_reason="stop", owner=owner))


def test_the_collapse_detectors_show_for_each_version_and_on_served_traffic(scripted_server, chromium):
    from playwright.sync_api import expect

    from openclaw_rl.serve.collapse import WINDOW

    server = scripted_server(["four"])
    store = server.server.store
    users = Users(store.data_dir)
    server.keys = {name: users.add(name, admin=name == "root") for name in ("root", "alice", "bob")}
    varied = [[(7 * i + 13 * j) % 997 + 3 for j in range(20)] for i in range(2 * WINDOW)]
    _served(store, "alice", varied[:WINDOW], -1.6)
    _served(store, "bob", varied, -1.5)
    _served(store, "alice", [[7, 8, 9] * 4] * WINDOW, -0.05, version=2)  # alice's answers collapsed to one loop
    store.record_version(1, parent=0, train_step=1, gate="accepted", reason="passed every check", checks={
        "collapse": {"entropy_ratio": 0.97, "self_rouge_l": 0.31, "logprob_drift_nats": 0.12, "alarms": []}})
    store.record_version(2, parent=1, train_step=2, gate="accepted", reason="passed every check", checks={
        "collapse": {"entropy_ratio": 0.4, "self_rouge_l": 0.91, "logprob_drift_nats": 2.4,
                     "alarms": ["entropy ratio 0.40 < 0.6", "self-ROUGE-L 0.91 > 0.85"]}})
    context, page = _open(chromium, server, "root")
    try:
        page.locator("nav [data-view=versions]").click()
        healthy, alarmed = (page.locator(f"#versions-table tr[data-version='{v}'] .collapse") for v in (1, 2))
        expect(healthy).to_contain_text("no alarm")
        expect(healthy).to_contain_text("entropy ratio 0.97 · self-ROUGE-L 0.31 · drift 0.12 nats")
        expect(alarmed.locator(".badge")).to_have_text("alarm")
        expect(alarmed.locator(".alarm")).to_have_text(["entropy ratio 0.40 < 0.6", "self-ROUGE-L 0.91 > 0.85"])

        page.locator("nav [data-view=learning]").click()
        panel = page.locator("#served-collapse")
        expect(panel.locator("h3 .badge")).to_have_text("alarm")  # everyone's newest 32: alice's loop
        expect(panel).to_contain_text("everyone's newest 32 answers")
        expect(page.locator("#served-entropy-ratio")).to_have_text(f"{0.05 / 1.6:.2f}")
        expect(page.locator("#served-self-rouge")).to_have_text("1.00")
        expect(page.locator("#served-mean-tokens")).to_have_text("12.0")
        expect(panel).to_contain_text("not calibrated")
        page.locator("#chart-collapse canvas").wait_for()
        assert page.errors == []
    finally:
        context.close()
    context, page = _open(chromium, server, "bob")
    try:
        page.locator("nav [data-view=learning]").click()
        panel = page.locator("#served-collapse")
        expect(panel.locator("h3 .badge")).to_have_text("no alarm")  # bob's own answers, varied throughout
        expect(panel).to_contain_text("your newest 32 answers")
        expect(page.locator("#served-self-rouge")).not_to_have_text("1.00")
        assert page.errors == []
    finally:
        context.close()
