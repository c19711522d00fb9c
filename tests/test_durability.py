"""Crash safety: a SIGKILLed server loses no committed turn, and sessions keep pairing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import torch

from conftest import LOGPROB_ATOL, free_port
from openclaw_rl.engine.sampling import sampling_logprobs
from openclaw_rl.store import Store


def _start(model_dir, data_dir, port) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "openclaw_rl.cli", "serve", "--model", str(model_dir), "--data-dir", str(data_dir),
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
    proc.kill()
    raise RuntimeError("server did not come up")


def test_sigkill_mid_traffic_then_restart_keeps_every_committed_turn(tiny_model_dir, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    proc = _start(tiny_model_dir, tmp_path, port)
    answered: list[tuple[str, str]] = []  # (session id, response text) the client saw
    stop = threading.Event()

    def traffic(worker: int) -> None:
        i = 0
        while not stop.is_set():
            body = {"messages": [{"role": "user", "content": f"w{worker} q{i}"}], "max_tokens": 8}
            try:
                r = httpx.post(url, json=body, headers={"X-Session-Id": f"s{worker}"}, timeout=30)
            except httpx.HTTPError:
                return
            if r.status_code == 200:
                answered.append((r.headers["x-session-id"], r.json()["choices"][0]["message"]["content"]))
            i += 1

    opener = [{"role": "user", "content": "remember me"}]
    first = httpx.post(url, json={"messages": opener, "max_tokens": 4}, timeout=60).json()
    workers = [threading.Thread(target=traffic, args=(w,)) for w in range(3)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while len(answered) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # mid-traffic: three clients are waiting on answers
    proc.wait()
    stop.set()
    for w in workers:
        w.join(15)
    assert len(answered) >= 3, "no traffic got through before the kill"

    port2 = free_port()
    proc = _start(tiny_model_dir, tmp_path, port2)
    try:
        for session_id, text in answered:
            turns = httpx.get(f"http://127.0.0.1:{port2}/v1/sessions/{session_id}").json()["turns"]
            assert text in [t["response_text"] for t in turns]
        # A header-less session left open before the crash keeps pairing after the restart.
        messages = opener + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "after the crash"}]
        r = httpx.post(f"http://127.0.0.1:{port2}/v1/chat/completions", json={"messages": messages, "max_tokens": 2},
                       timeout=60)
        assert r.status_code == 200 and r.headers["x-session-id"] == first["session_id"]
        turns = httpx.get(f"http://127.0.0.1:{port2}/v1/sessions/{first['session_id']}").json()["turns"]
        assert turns[0]["next_state"]["content"] == "after the crash"
    finally:
        proc.terminate()
        proc.wait(20)
    assert list((tmp_path / "logs").glob("turns-v*.jsonl"))
    # every file the server wrote is its owner's only: conversations are private data
    opened = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in [tmp_path, *tmp_path.rglob("*")]
              if p.stat().st_mode & 0o077}
    assert opened == {}


def test_stored_ids_decode_to_text_and_logprobs_match_a_fresh_forward(live, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for temperature, top_p, stop in ((1.0, 1.0, None), (0.7, 0.8, None), (0.0, 1.0, None), (1.2, 1.0, ["e", "a"])):
        body = {"messages": [{"role": "user", "content": f"identity {temperature}"}], "max_tokens": 24,
                "temperature": temperature, "top_p": top_p, "seed": 7, "stop": stop}
        r = httpx.post(f"{live.base_url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        session_id = r.headers["x-session-id"]
        store = Store(live.config.data_dir)
        (turn,) = store.turns(session_id)
        store.close()
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        assert tokenizer.decode(turn.response_token_ids, skip_special_tokens=True) == r.json()["choices"][0]["message"]["content"]
        if stop:
            assert all(s not in turn.response_text for s in stop)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
        ids = turn.prompt_token_ids + turn.response_token_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(turn.prompt_token_ids) - 1 : -1]
        n = len(turn.response_token_ids)
        t = temperature if temperature > 0 else 1.0
        p = top_p if temperature > 0 else 1.0
        fresh = sampling_logprobs(logits, torch.full((n,), t), torch.full((n,), p))
        fresh = fresh.gather(-1, torch.tensor(turn.response_token_ids)[:, None])[:, 0]
        assert torch.allclose(fresh, torch.tensor(turn.behaviour_logprobs), atol=LOGPROB_ATOL)
