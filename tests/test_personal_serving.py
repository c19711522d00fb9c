"""--personal-adapters on, end to end through the HTTP API: each user's feedback trains their own
adapter (train/personal.py), served to them alone, with its own history, gate, pin and rollback."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from openclaw_rl.compose import StackSpec, build_stack
from openclaw_rl.config import ConfigError, JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.judge.worker import Reading
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.train.runner import Flush
from openclaw_rl.users import Users

ASK = [{"role": "user", "content": "What is the capital of France?"}]


class _ByOwner:
    """Approves alice's turns, rejects bob's: two users who want opposite things."""

    name = "by-owner"

    async def read(self, turn) -> Reading:
        vote = 1 if turn.owner == "alice" else -1
        return Reading(votes=[vote], raw=[f"SCORE: {vote}"], hints=[])


class Running:
    def __init__(self, model_dir: Path, data_dir: Path, personal: str, train: TrainConfig | None = None,
                 raw_keys: dict[str, str] | None = None, train_here: bool = True):
        """`raw_keys`: the users' keys of an earlier server on `data_dir` (a restart); None: new users.
        `train_here` False: --no-train, the adapters trained by another process (test_personal_processes.py)."""
        self.flush = Flush()
        serve = ServeConfig(model=str(model_dir), data_dir=str(data_dir), port=free_port(), status_interval_s=0.0,
                            personal_adapters=personal, train=personal == "on" and train_here,
                            # the tests read the turns served with a user's block; serving an answer decoded
                            # without it (--lesson-plain) is tested in test_checked_sampling.py
                            lesson_plain="off")
        self.stack = build_stack(serve, JudgeConfig(poll_interval_s=0.05),
                                 train or TrainConfig(method="binary", batch_size=4, lr=1e-2, personal_lr=1e-2, gate="off",
                                                      train_poll_interval_s=0.05),
                                 StackSpec(judge=_ByOwner(), flush=self.flush))
        self.server, self.store = self.stack.server, self.stack.server.store
        users = Users(data_dir)
        self.raw_keys = raw_keys or {name: users.add(name, admin=name == "root") for name in ("alice", "bob", "carol",
                                                                                              "root")}
        self.keys = {name: {"Authorization": f"Bearer {key}"} for name, key in self.raw_keys.items()}
        self.thread = ServerThread(self.stack.app(), serve.port)
        self.url = self.thread.base_url

    def greedy(self, user: str, messages=ASK) -> tuple[str | None, list[tuple[str, float]]]:
        """The X-Adapter-Version and (token, log-prob) of a greedy answer to `user`."""
        r = httpx.post(f"{self.url}/v1/chat/completions", headers=self.keys[user], timeout=120,
                       json={"messages": messages, "max_tokens": 6, "temperature": 0, "logprobs": True})
        assert r.status_code == 200, r.text
        steps = r.json()["choices"][0]["logprobs"]["content"]
        # X-Policy-Version names what answered: the user's adapter version, else the shared model's
        assert r.headers["x-policy-version"] == r.headers.get("x-adapter-version",
                                                              str(self.server.engine.policy_version))
        return r.headers.get("x-adapter-version"), [(s["token"], s["logprob"]) for s in steps]

    def give_feedback(self, user: str, sessions: int, start: int = 0) -> None:
        """`sessions` one-turn sessions of `user`, each with a feedback; back once every such turn is judged."""
        for i in range(start, start + sessions):
            r = httpx.post(f"{self.url}/v1/chat/completions", headers=self.keys[user], timeout=120,
                           json={"messages": [{"role": "user", "content": f"{user}'s question {i}: 2 + {i}?"}],
                                 "max_tokens": 4, "temperature": 1.0})
            assert r.status_code == 200, r.text
            session = r.headers["x-session-id"]
            assert httpx.post(f"{self.url}/v1/sessions/{session}/feedback", headers=self.keys[user], timeout=30,
                              json={"text": "ok"}).status_code == 200
        turn_ids = [t.id for s in self.store.list_sessions(1000, 0, user) for t in self.store.turns(s.id)
                    if t.next_state is not None]
        self._until(lambda: len(self.store.sample_states(turn_ids)) == len(turn_ids), "the judge's samples")

    def train_all(self) -> None:
        """Let the personal trainer take every ready step (Flush), then stop asking."""
        self.flush.done.clear()
        self.flush.requested.set()
        assert self.server.wait_for(self.flush.done, 120)
        self.flush.requested.clear()

    def adapters(self, user: str, query: str = "") -> dict:
        r = httpx.get(f"{self.url}/v1/adapters{query}", headers=self.keys[user], timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def _until(self, ready, what: str) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.server.check_loops()
            time.sleep(0.05)

    def stop(self) -> None:
        self.thread.stop()


@pytest.fixture(scope="module")
def base_answer(tiny_model_dir, tmp_path_factory):
    """carol's greedy answer from a server with personal adapters off (and no training)."""
    running = Running(tiny_model_dir, tmp_path_factory.mktemp("off"), "off")
    try:
        return running.greedy("carol")
    finally:
        running.stop()


@pytest.fixture(scope="module")
def running(tiny_model_dir, tmp_path_factory):
    running = Running(tiny_model_dir, tmp_path_factory.mktemp("on"), "on")
    yield running
    running.stop()


def test_two_users_feedback_trains_two_adapters_and_a_third_gets_the_base_exactly(running, base_answer):
    assert running.stack.trainer is None and running.server.personal is not None  # no shared trainer
    assert _same(running.greedy("carol"), base_answer)
    running.give_feedback("alice", 4)
    running.give_feedback("bob", 4)
    running.train_all()
    assert running.server.engine.adapter_versions() == {"alice": 1, "bob": 1}
    alice, bob, carol = running.greedy("alice"), running.greedy("bob"), running.greedy("carol")
    assert alice[0] == "1" and bob[0] == "1"
    assert _same(carol, base_answer)  # no adapter: the base model's tokens and log-probs, no header
    assert alice[1] != carol[1] and bob[1] != carol[1] and alice[1] != bob[1]
    mine = running.adapters("alice")
    assert mine["personal_adapters"] == "on" and [d["user"] for d in mine["data"]] == ["alice"]
    (record,) = mine["data"][0]["versions"]
    assert (record["version"], record["parent"], record["gate"], record["serving"]) == (1, None, "ungated", True)
    assert len(record["samples"]) == 4
    assert running.adapters("carol")["data"] == [{"user": "carol", "on": True, "serving": None, "kept": [],
                                                  "versions": []}]
    assert [d["user"] for d in running.adapters("root")["data"]] == ["alice", "bob"]  # an admin sees everyone's
    assert httpx.get(f"{running.url}/v1/adapters?user=bob", headers=running.keys["alice"]).status_code == 404
    latest = running.store.turns(running.store.list_sessions(1, 0, "alice")[0].id)[0]
    assert latest.sampling["adapter_version"] == 1  # the turn records which adapter version answered it
    carols = running.store.turns(running.store.list_sessions(1, 0, "carol")[0].id)[0]
    assert "adapter_version" not in carols.sampling  # the base model answered: recorded as without the setting


@pytest.fixture
def chromium(running):  # after the server, and closed after its test: Playwright runs an event loop in this thread
    from openclaw_rl.envs.gui import CHROMIUM_ARGS, find_chromium

    if (executable := find_chromium()) is None:
        pytest.skip("the dashboard's browser tests need Chromium (make system-deps: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def test_the_dashboard_shows_each_user_their_own_adapter_and_the_admin_all(running, chromium):
    from playwright.sync_api import expect

    for user, shown in (("alice", ["alice"]), ("root", ["alice", "bob"])):
        context = chromium.new_context()
        page = context.new_page()
        page.set_default_timeout(20_000)
        try:
            page.goto(f"{running.url}/dashboard?poll_ms=300#adapters")
            page.locator("#key-form input").fill(running.raw_keys[user])
            page.locator("#key-form button").click()
            page.locator("nav [data-view=adapters]").click()
            expect(page.locator(".adapters-table")).to_have_count(len(shown))
            assert [t.get_attribute("data-user") for t in page.locator(".adapters-table").all()] == shown
            row = page.locator(".adapters-table[data-user=alice] tr[data-version='1']")
            expect(row).to_contain_text("serving")
            expect(row).to_contain_text("ungated")
            switch = page.locator("section:has(.adapters-table[data-user=alice]) [data-action=switch]")
            if user != "root":
                expect(switch).to_have_count(0)  # the switch is the admins'
                continue
            page.once("dialog", lambda dialog: dialog.accept())
            switch.click()
            expect(page.locator("#notice")).to_have_text("alice's adapter turned off")
            expect(page.locator("section:has(.adapters-table[data-user=alice]) h3")).to_contain_text("turned off")
            assert running.adapters("alice")["data"][0]["on"] is False
            page.once("dialog", lambda dialog: dialog.accept())
            switch.click()
            expect(page.locator("#notice")).to_have_text("alice's adapter turned on")
            assert running.adapters("alice")["data"][0]["on"] is True
        finally:
            context.close()


def _alice_has_a_lesson(running) -> int:
    """alice's lesson "Show every step." (taught once), its id."""
    from openclaw_rl.experience import learn

    if not running.store.experience("alice").lessons:
        running.store.update_experience("alice", lambda e: learn(e, "Show every step.", "t-alice", time.time(),
                                                                 lambda texts: [[1.0]] * len(texts), len))
    return running.store.experience("alice").lessons[0].id


def test_absorption_measures_a_users_lessons_under_their_adapter_and_says_which(running):
    lesson = _alice_has_a_lesson(running)
    assert running.greedy("alice")[0] == "1"  # a turn served with the lesson, by alice's adapter v1
    r = httpx.post(f"{running.url}/v1/experience/absorption", headers=running.keys["alice"], timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["measured"] == 1 and body["measured_on"] == {"policy_version": 0, "adapter_version": 1}
    (shown,) = [x for x in body["lessons"] if x["id"] == lesson]
    assert [(m["policy_version"], m["adapter_version"]) for m in shown["absorption"]] == [(0, 1)]
    assert shown["absorption_line"] == shown["absorption"] and shown["absorbed"] is None  # one version: cannot tell
    assert [m["adapter_version"] for m in running.store.absorption("alice")[lesson]] == [1]
    (v1,) = running.adapters("alice")["data"][0]["versions"]
    assert v1["lessons"] == {"measured": 1, "absorbed": []}
    # the base measured at 0.4 and v1 at 0.05: absorbed at v1, along alice's adapter line
    running.store.record_absorption("alice", [(lesson, 0, 0.4, 4)])
    running.store.record_absorption("alice", [(lesson, 0, 0.05, 4)], adapter_version=1)
    (v1,) = running.adapters("alice")["data"][0]["versions"]
    assert v1["lessons"] == {"measured": 1, "absorbed": [{"id": lesson, "text": "Show every step."}]}
    assert running.adapters("bob")["data"][0]["versions"][0]["lessons"] is None  # not measured


def test_the_dashboard_shows_the_lessons_absorbed_at_each_adapter_version(running, chromium):
    from playwright.sync_api import expect

    lesson = _alice_has_a_lesson(running)
    running.store.record_absorption("alice", [(lesson, 0, 0.4, 4)])
    running.store.record_absorption("alice", [(lesson, 0, 0.05, 4)], adapter_version=1)
    for user in ("alice", "root"):
        context = chromium.new_context()
        page = context.new_page()
        page.set_default_timeout(20_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            page.goto(f"{running.url}/dashboard?poll_ms=300#adapters")
            page.locator("#key-form input").fill(running.raw_keys[user])
            page.locator("#key-form button").click()
            page.locator("nav [data-view=adapters]").click()
            cell = page.locator(".adapters-table[data-user=alice] tr[data-version='1'] .absorbed")
            expect(cell.locator(f".lesson[data-lesson='{lesson}']")).to_have_text("Show every step.")
            expect(cell).to_contain_text("1 of 1 measured")
            if user == "root":  # bob's lessons were never measured under his adapter
                expect(page.locator(".adapters-table[data-user=bob] tr[data-version='1'] .absorbed")).to_have_text(
                    "not measured")
                continue
            page.locator("nav [data-view=experience]").click()
            absorbed = page.locator(f"#lessons-table tr[data-lesson='{lesson}'] .absorbed")
            expect(absorbed).to_contain_text("yes")
            expect(absorbed).to_contain_text("0.050 at adapter v1 (from 0.400 at v0)")
            assert errors == []
        finally:
            context.close()


def _same(a, b) -> bool:
    """The same answer: adapter version and tokens exactly, log-probs to 1e-4 (a prefill on one
    core or two, as the trainer lends them, sums in another order: measured 1e-6 apart)."""
    return (a[0] == b[0] and [t for t, _ in a[1]] == [t for t, _ in b[1]]
            and all(abs(x - y) <= 1e-4 for (_, x), (_, y) in zip(a[1], b[1])))


def test_pin_rollback_and_deleting_a_user_are_per_user(running):
    v1 = running.greedy("alice")
    running.give_feedback("alice", 4, start=10)
    running.train_all()
    assert running.greedy("alice")[0] == "2"
    bob = running.greedy("bob")
    url, alice = running.url, running.keys["alice"]
    pinned = httpx.post(f"{url}/v1/adapters/pin", headers=alice, json={"version": 1})
    assert pinned.status_code == 200 and running.store.pinned_adapter_versions("alice") == {1}
    missing = httpx.post(f"{url}/v1/adapters/rollback", headers=alice, json={"to": 9})
    assert missing.status_code == 404 and "no kept adapter version 9" in missing.json()["error"]["message"]
    during: list = []  # bob's answers while alice rolls back: every request answered, none changed
    traffic = threading.Thread(target=lambda: during.extend(running.greedy("bob") for _ in range(6)))
    traffic.start()
    rolled = httpx.post(f"{url}/v1/adapters/rollback", headers=alice, json={"to": 1})
    traffic.join()
    assert rolled.status_code == 200 and rolled.json()["version"] == 3
    assert _same(running.greedy("alice"), ("3", v1[1]))  # v1's weights under a new number
    # alice's rollback fails no request of bob's and changes none of his answers
    assert len(during) == 6 and all(_same(answer, bob) for answer in [*during, running.greedy("bob")])
    history = {r["version"]: r for r in running.adapters("alice")["data"][0]["versions"]}
    assert (history[3]["gate"], history[3]["parent"], history[2]["parent"]) == ("rollback", 1, 1)
    deleted = httpx.delete(f"{url}/v1/users/alice/data", headers=alice)
    assert deleted.status_code == 200 and deleted.json()["adapter_versions"] == 3
    assert running.adapters("alice")["data"][0] == {"user": "alice", "on": True, "serving": None, "kept": [],
                                                    "versions": []}
    assert running.server.engine.adapter_versions() == {"bob": 1}
    assert not (Path(running.store.data_dir) / "personal" / "alice").exists()
    assert _same(running.greedy("bob"), bob)


def test_an_admin_turns_a_users_adapter_off_and_on_and_a_restart_keeps_the_switch(tiny_model_dir, tmp_path):
    running = Running(tiny_model_dir, tmp_path, "on")
    try:
        base = running.greedy("alice")
        running.give_feedback("alice", 4)
        running.train_all()
        adapted = running.greedy("alice")
        assert adapted[0] == "1" and adapted[1] != base[1]
        bob = running.greedy("bob")
        url, alice, root = running.url, running.keys["alice"], running.keys["root"]
        mine = httpx.post(f"{url}/v1/adapters/off", headers=alice)
        assert mine.status_code == 403 and mine.json()["error"]["code"] == "admin_only"  # the switch is the admins'
        off = httpx.post(f"{url}/v1/adapters/off?user=alice", headers=root)
        assert off.status_code == 200 and off.json() == {"object": "adapter.switch", "user": "alice", "on": False,
                                                         "serving": None}
        assert _same(running.greedy("alice"), (None, base[1]))  # the shared model's answer, tokens and log-probs
        assert _same(running.greedy("bob"), bob)
        view = running.adapters("alice")["data"][0]
        assert (view["on"], view["serving"], view["kept"], [v["version"] for v in view["versions"]]) == \
            (False, None, [1], [1])  # kept, history and all
        running.give_feedback("alice", 4, start=10)
        running.train_all()
        assert [v["version"] for v in running.adapters("alice")["data"][0]["versions"]] == [1]  # frozen: not trained
    finally:
        running.stop()
    running = Running(tiny_model_dir, tmp_path, "on", raw_keys=running.raw_keys)  # a restart keeps the switch
    try:
        url, alice, root = running.url, running.keys["alice"], running.keys["root"]
        assert running.server.engine.adapter_versions() == {} and _same(running.greedy("alice"), (None, base[1]))
        on = httpx.post(f"{url}/v1/adapters/on?user=alice", headers=root)
        assert on.status_code == 200 and (on.json()["on"], on.json()["serving"]) == (True, 1)
        assert _same(running.greedy("alice"), adapted)
        running.train_all()  # the samples that waited while it was off train it now
        assert running.adapters("alice")["data"][0]["serving"] == 2
        assert httpx.post(f"{url}/v1/adapters/off?user=alice", headers=root).status_code == 200
        assert httpx.delete(f"{url}/v1/adapters", headers=alice).status_code == 200  # alice's own reset
        view = running.adapters("alice")["data"][0]
        assert (view["on"], view["versions"]) == (False, [])  # her reset does not undo an admin's switch
        assert httpx.delete(f"{url}/v1/users/alice/data", headers=alice).status_code == 200
        assert running.adapters("alice")["data"][0]["on"] and running.store.adapters_off() == {}
    finally:
        running.stop()


def test_a_candidate_the_gate_rejects_is_recorded_and_never_served(tiny_model_dir, tmp_path):
    strict = TrainConfig(method="binary", batch_size=4, lr=1e-2, personal_lr=1e-2, gate="on", gate_max_kl=0.0, gate_anchors=0,
                         gate_max_new_tokens=4, gate_probe_every=1000, train_poll_interval_s=0.05)
    running = Running(tiny_model_dir, tmp_path, "on", strict)
    try:
        base = running.greedy("alice", [{"role": "user", "content": "Name a colour."}])
        running.give_feedback("alice", 4)
        running.train_all()
        (record,) = running.adapters("alice")["data"][0]["versions"]
        assert record["gate"] == "rejected" and "gate_max_kl 0" in record["reason"] and not record["serving"]
        assert running.server.engine.adapter_versions() == {}
        assert _same(running.greedy("alice", [{"role": "user", "content": "Name a colour."}]), base)
        # the next candidate gets the next number: a number names one set of weights forever
        running.give_feedback("alice", 4, start=10)
        running.train_all()
        assert [r["version"] for r in running.adapters("alice")["data"][0]["versions"]] == [2, 1]
    finally:
        running.stop()


def test_a_candidate_the_gate_accepts_serves_and_records_the_gates_checks(tiny_model_dir, tmp_path):
    lenient = TrainConfig(method="binary", batch_size=4, lr=1e-2, personal_lr=1e-2, gate="on", gate_max_kl=100.0, gate_anchors=2,
                          gate_max_new_tokens=4, gate_max_length_ratio=100.0, gate_max_repetition=1.0,
                          gate_max_repetition_increase=1.0, gate_max_non_answer_increase=1.0,
                          gate_max_brought_in_increase=1.0, train_poll_interval_s=0.05)
    running = Running(tiny_model_dir, tmp_path, "on", lenient)
    try:
        running.give_feedback("alice", 5)
        running.train_all()
        (record,) = running.adapters("alice")["data"][0]["versions"]
        assert (record["gate"], record["serving"], record["reason"]) == ("accepted", True, "passed every check")
        assert record["checks"]["probes"] >= 1 and record["checks"]["kl_per_token"] is not None
        assert running.server.engine.adapter_versions() == {"alice": 1}
        assert (tmp_path / "personal" / "alice" / "gate-anchors.json").exists()  # the user's own anchors
    finally:
        running.stop()


def test_personal_adapters_need_the_local_or_vllm_engine_and_one_trainer_here_or_apart(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="personal_adapters.*'maybe'.*on or off"):
        ServeConfig(personal_adapters="maybe")
    with pytest.raises(ConfigError, match="engine.*'sglang'.*local or vllm with --personal-adapters on"):
        ServeConfig(personal_adapters="on", engine="sglang", engine_url="http://127.0.0.1:30000")
    ServeConfig(personal_adapters="on", engine="vllm")  # vLLM serves each user's adapter as a LoRA of its own
    with pytest.raises(ConfigError, match="train_nproc.*2.*1 with --personal-adapters on"):
        ServeConfig(personal_adapters="on", train_nproc=2)
    ServeConfig(personal_adapters="on", train=False)  # beside `openclaw-rl train --personal-adapters on`
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), personal_adapters="on",
                        status_interval_s=0.0)
    with pytest.raises(ConfigError, match="beside --no-train; this stack trains off"):
        build_stack(serve, JudgeConfig(judge="off"), TrainConfig(gate="off"), StackSpec(training="off"))
