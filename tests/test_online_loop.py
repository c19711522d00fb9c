"""The whole loop on a tiny model: serve -> judge -> train -> new weights, without a failed request."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch

from conftest import LOGPROB_ATOL, LiveServer
from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.engine.sampling import sampling_logprobs
from openclaw_rl.store import Store

REPLIES = ["No, that's wrong. Don't use bullet points; write plain sentences.", "Thanks, that's exactly right!",
           "Too long. Make it shorter, one sentence please."]


def _conversation(url: str, i: int, results: list) -> None:
    messages = [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]
    for turn in range(2):
        r = httpx.post(url, json={"messages": messages, "max_tokens": 8, "temperature": 1.0}, timeout=120)
        results.append((r.status_code, r.headers.get("x-policy-version"), r.headers.get("x-session-id"),
                        r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text))
        if r.status_code != 200:
            return
        messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": REPLIES[(i + turn) % len(REPLIES)]}]


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """A server that judged and trained through three weight updates under continuous traffic."""
    data_dir = tmp_path_factory.mktemp("loop")
    server = LiveServer(tiny_model_dir, data_dir, judge=JudgeConfig(judge="embedding", poll_interval_s=0.1),
                        train=TrainConfig(method="combined", batch_size=2, catch_up=1, lr=1e-3, train_poll_interval_s=0.1,
                                          checkpoint_every=100), status_interval_s=0.5)
    published: dict[int, dict] = {}
    load = server.server.engine.load_weights

    async def recording_load(state_dict, version):  # observe the real hand-off, change nothing
        published[version] = {k: v.clone() for k, v in state_dict.items()}
        await load(state_dict, version)

    server.server.engine.load_weights = recording_load
    url = f"{server.base_url}/v1/chat/completions"
    results: list = []
    deadline = time.monotonic() + 240
    i = 0
    while server.server.engine.policy_version < 3 and time.monotonic() < deadline:
        threads = [threading.Thread(target=_conversation, args=(url, i + k, results)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        i += 3
    # serving swaps first; the store records the version (with its training steps) just after
    settle = time.monotonic() + 60
    store = server.server.store
    while store.policy()["policy_version"] < server.server.engine.policy_version and time.monotonic() < settle:
        time.sleep(0.2)
    status = httpx.get(f"{server.base_url}/v1/status").json()
    server.stop()
    return {"data_dir": data_dir, "results": results, "published": published, "status": status}


def test_serving_never_fails_through_three_updates(trained):
    results = trained["results"]
    assert all(code == 200 for code, *_ in results), [r for r in results if r[0] != 200]
    assert max(trained["published"]) >= 3, "the loop did not reach policy version 3"
    versions = {int(v) for _, v, _, _ in results}
    assert len(versions) >= 2, f"every response came from one version: {versions}"
    status = trained["status"]
    assert status["train_steps"] >= 3 and status["last_update_at"] is not None and "samples_ready" in status


def test_each_response_names_the_version_that_produced_it(trained, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    store = Store(trained["data_dir"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    checked = set()
    for code, version, session_id, text in trained["results"]:
        version = int(version)
        turns = [t for t in store.turns(session_id) if t.response_text == text]
        assert turns and turns[0].policy_version == version
        if version in checked or not turns[0].response_token_ids:
            continue
        checked.add(version)
        model.load_state_dict(initial)
        if version:
            model.load_state_dict(trained["published"][version], strict=False)
        turn = turns[0]
        with torch.no_grad():
            logits = model(torch.tensor([turn.prompt_token_ids + turn.response_token_ids])).logits[0]
        n = len(turn.response_token_ids)
        lp = sampling_logprobs(logits[len(turn.prompt_token_ids) - 1 : -1], torch.ones(n), torch.ones(n))
        fresh = lp.gather(-1, torch.tensor(turn.response_token_ids)[:, None])[:, 0]
        assert torch.allclose(fresh, torch.tensor(turn.behaviour_logprobs), atol=LOGPROB_ATOL), f"version {version}"
    assert len(checked) >= 2
    store.close()


def test_resume_continues_from_the_last_checkpoint(trained, tiny_model_dir):
    last = max(trained["published"])
    store = Store(trained["data_dir"])
    recorded, served = store.highest_policy_version(), store.highest_served_version()
    store.close()
    # the last served weights keep their number when nothing above them may have served (numbers the gate's
    # rejected candidates took are skipped by the next step); else they are renumbered above every number taken
    expected = last if served <= last else recorded + 1
    server = LiveServer(tiny_model_dir, trained["data_dir"], train=TrainConfig(batch_size=2, catch_up=1), resume=True)
    try:
        assert server.server.engine.policy_version == expected
        serving = server.server.engine.model.state_dict()
        assert set(trained["published"][last]) <= set(serving)
        assert all(torch.equal(serving[name], tensor) for name, tensor in trained["published"][last].items()
                   if name in serving)  # the weights last served, whatever their number now
        r = httpx.post(f"{server.base_url}/v1/chat/completions",
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.headers["x-policy-version"] == str(expected)
    finally:
        server.stop()


def test_separate_trainer_process_hands_weights_to_a_serve_only_process(trained, tiny_model_dir, tmp_path):
    """`openclaw-rl train` publishes through the data dir; `serve --no-train` picks it up."""
    store = Store(trained["data_dir"])
    with store._lock:  # make the used samples ready again, as if newly judged: forget every method's claims
        store._db.execute("DELETE FROM claims")
    version = store.policy_version()
    store.close()
    server = LiveServer(tiny_model_dir, trained["data_dir"])  # train off: watches the weights channel
    started = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "openclaw_rl.cli", "train", "--data-dir", str(trained["data_dir"]),
             "--model", str(tiny_model_dir), "--batch-size", "2", "--lr", "0.001", "--max-steps", "1",
             "--max-staleness", "100", "--resume", "--gate", "off"],  # the hand-off, not the gate (test_gate)
            capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 30
        while server.server.engine.policy_version <= version and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.server.engine.policy_version == version + 1
    finally:
        server.stop()
    published = trained["data_dir"] / "weights" / f"v{version + 1:06d}"
    written = [published, *published.rglob("*"), *(trained["data_dir"] / "tensorboard").rglob("*")]
    assert written and {str(p): oct(p.stat().st_mode & 0o777) for p in written
                        if p.stat().st_mode & 0o077 and p.stat().st_mtime > started} == {}
    out = tmp_path / "exported"
    proc = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "export", "--data-dir", str(trained["data_dir"]),
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert AutoModelForCausalLM.from_pretrained(out) is not None and AutoTokenizer.from_pretrained(out) is not None
