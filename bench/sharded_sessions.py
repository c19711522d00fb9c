"""A sharded trainer learning from real sessions on the default model (a check, not a test).

    .venv/bin/python bench/sharded_sessions.py [--nproc 2] [--steps 2] [--sessions 8] [--split]

Starts `openclaw-rl serve --train-nproc N` (the default model, the embedding judge; serve
starts `openclaw-rl train --nproc N` beside itself), or with --split `serve --no-train`
and that trainer as a process of its own on the same data dir, then plays sessions through the
OpenAI API: a question, the model's answer, a reply that approves or corrects it, and
feedback that closes the second turn. The judge pairs and judges each turn, the sharded
trainer claims the samples, trains `--steps` steps and publishes through DATA_DIR/weights,
and serving picks each version up between requests. Requests keep coming until serving
answers from the last version; every one must succeed.

Writes bench/results/sharded_sessions.json: requests, failures, the policy versions that
answered, the trainer's steps and its wall time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "openclaw_rl.cli"]
QUESTIONS = ["What is 12 + 30?", "Name a fruit that is yellow.", "What is the capital of Italy?",
             "How many days are in a week?", "What colour is the sky on a clear day?", "What is 9 times 3?",
             "Give me a synonym for happy.", "What do bees make?"]
REPLIES = ["Thanks, that is exactly what I needed!", "No, that's wrong. You should answer in one short sentence "
           "and give only the answer."]


def wait_up(url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"serve did not come up on {url}")


def session(url: str, i: int, results: list) -> None:
    """One conversation: question, reply (the first turn's next state), feedback (the second's)."""
    messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
    session_id = None
    for reply in (REPLIES[i % 2], REPLIES[(i + 1) % 2]):
        headers = {"X-Session-Id": session_id} if session_id else {}
        r = post(url, {"messages": messages, "max_tokens": 32, "temperature": 0.7}, headers, results)
        if r is None:
            return
        session_id = r.headers["x-session-id"]
        messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": reply}]
    httpx.post(f"{url}/v1/sessions/{session_id}/feedback", json={"text": REPLIES[i % 2]}, timeout=60)


def post(url: str, body: dict, headers: dict, results: list) -> httpx.Response | None:
    try:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=300)
        results.append((r.status_code, int(r.headers.get("x-policy-version", -1))))
        return r if r.status_code == 200 else None
    except httpx.HTTPError as error:
        results.append((str(error), -1))
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--timeout-s", type=float, default=1500)
    parser.add_argument("--split", action="store_true", help="serve --no-train beside train --nproc N")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "sharded_sessions.json"))
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="sharded-sessions-"))
    url = f"http://127.0.0.1:{args.port}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    train_flags = ["--batch-size", "2", "--micro-batch-size", "1", "--max-staleness", "100", "--train-threads", "1",
                   "--lr", "1e-5"]
    serving = ["--no-train"] if args.split else ["--train-nproc", str(args.nproc), *train_flags]
    serve = subprocess.Popen([*CLI, "serve", *serving, "--data-dir", str(data_dir), "--port", str(args.port),
                              "--threads", "1", "--status-interval-s", "0"], env=env,
                             stdout=open(data_dir / "serve.log", "w"), stderr=subprocess.STDOUT)
    started = time.monotonic()
    results: list = []
    train = None
    try:
        wait_up(url)
        if args.split:
            train = subprocess.Popen([*CLI, "train", "--data-dir", str(data_dir), "--nproc", str(args.nproc),
                                      "--max-steps", str(args.steps), *train_flags], env=env,
                                     stdout=open(data_dir / "trainer.log", "w"), stderr=subprocess.STDOUT)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: session(url, i, results), range(args.sessions)))
        for i in itertools.count(args.sessions):  # more sessions until serving has the trainer's v{steps}
            if max(v for _, v in results) >= args.steps:
                break
            if time.monotonic() - started > args.timeout_s:
                raise RuntimeError(f"no v{args.steps} after {args.timeout_s:.0f} s; see {data_dir}")
            session(url, i, results)
    finally:
        serve.terminate()  # serve --train-nproc stops its trainer with it
        serve.wait(60)
        if train is not None:
            train.wait(120)
    failed = [status for status, _ in results if status != 200]
    result = {"mode": "split" if args.split else "serve --train-nproc", "nproc": args.nproc,
              "model": "SmolLM2-135M-Instruct", "requests": len(results), "failed": len(failed),
              "failures": failed[:5], "versions_served": sorted({v for _, v in results}),
              "seconds": round(time.monotonic() - started, 1), "data_dir": str(data_dir)}
    print(json.dumps(result, indent=2))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
