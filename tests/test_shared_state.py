"""Serve, judge and train as three processes that share only a PostgreSQL store and a data
dir, as they would on three machines with the data dir on shared storage."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from conftest import LiveServer
from openclaw_rl.store import make_store

REPLIES = ["No, that's wrong. Write plain sentences.", "Thanks, that's exactly right!"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openclaw_rl.cli", *args], capture_output=True, text=True, timeout=300)


def test_serve_judge_and_train_processes_share_a_postgres_store(tiny_model_dir, postgres_url, tmp_path):
    shared = tmp_path / "shared"  # the data dir every machine mounts: weights, checkpoints
    server = LiveServer(tiny_model_dir, shared, store=postgres_url)  # no judge, no training: both run elsewhere
    url = f"{server.base_url}/v1/chat/completions"
    try:
        for i in range(4):  # each conversation's second request brings its first turn's next state
            messages = [{"role": "user", "content": f"What is {i} + {i}?"}]
            for reply in REPLIES:
                r = httpx.post(url, json={"messages": messages, "max_tokens": 6, "temperature": 1.0}, timeout=120)
                assert r.status_code == 200, r.text
                messages += [r.json()["choices"][0]["message"], {"role": "user", "content": reply}]

        judged = _cli("judge", "--data-dir", str(tmp_path / "judge"), "--store", postgres_url, "--once",
                      "--model", str(tiny_model_dir), "--judge", "embedding", "--no-teacher-targets")  # binary reads none
        assert judged.returncode == 0, judged.stderr
        assert "judged 4 turns" in judged.stdout

        trained = _cli("train", "--data-dir", str(shared), "--store", postgres_url, "--model", str(tiny_model_dir),
                       "--method", "binary", "--batch-size", "2", "--catch-up", "1", "--lr", "0.001", "--max-steps", "1",
                       "--gate", "off")
        assert trained.returncode == 0, trained.stderr
        deadline = time.monotonic() + 30
        while server.server.engine.policy_version < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.server.engine.policy_version == 1  # picked up from shared/weights
        r = httpx.post(url, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=120)
        assert r.headers["x-policy-version"] == "1"
    finally:
        server.stop()

    store = make_store(postgres_url, data_dir=tmp_path / "reader")
    try:
        assert store.policy() | {"last_update_at": None} == {"policy_version": 1, "train_steps": 1,
                                                               "last_update_at": None}
        assert store.counts()["main_turns"] == 9 and len(store.verdicts(list(range(1, 20)))) == 4
        assert store.sample_counts("binary")["used"] == 2
    finally:
        store.close()
    assert not (shared / "openclaw.db").exists()  # nothing went to SQLite


def test_the_weights_watcher_outlives_a_version_it_cannot_read(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from openclaw_rl.engine.weight_files import write_atomic
    from openclaw_rl.train.weights import FilesChannel

    server = LiveServer(tiny_model_dir, tmp_path)  # train off: watches tmp_path/weights every 2 s
    try:
        (tmp_path / "weights").mkdir()
        write_atomic(tmp_path / "weights" / "LATEST", "3\n")  # as if v3 were pruned by another machine
        time.sleep(3)
        assert server.server.engine.policy_version == 0
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        FilesChannel(tmp_path).write(4, {name: p.detach() for name, p in model.named_parameters()})
        deadline = time.monotonic() + 30
        while server.server.engine.policy_version < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.server.engine.policy_version == 4
    finally:
        server.stop()
