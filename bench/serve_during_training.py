"""Chat latency while the policy trains and weights are swapped (a benchmark, not a test).

    .venv/bin/python bench/serve_during_training.py [--requests 16] [--batch-size 4]

Starts `openclaw-rl serve` on the default model (in-process training, binary objective,
judge off) in its own process, then:

1. idle: sends `--requests` greedy 32-token chat requests one after another;
2. training: turns those turns into ready samples (rewards +1/-1) so the server's
   trainer takes steps and publishes new weights, and sends requests the same way
   until every sample has been trained on.

Reports p50 and p95 latency of each phase, the number of failed requests, and the
policy versions seen. Writes bench/results/serve_during_training.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.store import Store  # noqa: E402
from openclaw_rl.types import Sample  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def chat(client: httpx.Client, url: str, i: int) -> tuple[float, bool, str | None]:
    body = {"messages": [{"role": "user", "content": f"Tell me one fact about the number {i}."}],
            "max_tokens": 32, "temperature": 0}
    started = time.perf_counter()
    try:
        r = client.post(url, json=body, headers={"X-Session-Id": f"bench-{i}"}, timeout=300)
        ok = r.status_code == 200
        return time.perf_counter() - started, ok, r.headers.get("x-policy-version")
    except httpx.HTTPError:
        return time.perf_counter() - started, False, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--model", default="")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="openclaw-bench-"))
    command = [sys.executable, "-m", "openclaw_rl.cli", "serve", "--port", str(args.port), "--data-dir", str(data_dir),
               "--judge", "off", "--method", "binary", "--batch-size", str(args.batch_size),
               "--catch-up", "1", "--max-staleness", "1000", "--train-poll-interval-s", "0.2", "--status-interval-s", "0"]
    if args.model:
        command += ["--model", args.model]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(900):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        url = f"{base}/v1/chat/completions"
        with httpx.Client() as client:
            chat(client, url, -1)  # warm-up
            idle = [chat(client, url, i) for i in range(args.requests)]
            store = Store(data_dir)
            turns = [t for i in range(args.requests) for t in store.turns(f"bench-{i}")]
            for k, turn in enumerate(turns):
                store.add_sample(Sample(
                    turn_id=turn.id, session_id=turn.session_id, policy_version=turn.policy_version,
                    prompt_token_ids=turn.prompt_token_ids, response_token_ids=turn.response_token_ids,
                    behaviour_logprobs=turn.behaviour_logprobs, temperature=1.0, reward=1.0 if k % 2 else -1.0))
            steps_wanted = len(turns) // args.batch_size
            training = []
            i = args.requests
            deadline = time.monotonic() + 1800
            while store.policy()["train_steps"] < steps_wanted and time.monotonic() < deadline:
                training.append(chat(client, url, i))
                i += 1
            steps = store.policy()["train_steps"]
            store.close()
    finally:
        proc.terminate()
        proc.wait(60)
    idle_s = [s for s, _, _ in idle]
    train_s = [s for s, _, _ in training]
    result = {
        "model": "SmolLM2-135M-Instruct" if not args.model else Path(args.model).name,
        "requests_idle": len(idle), "requests_training": len(training), "train_steps": steps,
        "batch_size": args.batch_size,
        "p50_idle_ms": round(statistics.median(idle_s) * 1000, 1),
        "p95_idle_ms": round(percentile(idle_s, 0.95) * 1000, 1),
        "p50_training_ms": round(statistics.median(train_s) * 1000, 1) if train_s else None,
        "p95_training_ms": round(percentile(train_s, 0.95) * 1000, 1) if train_s else None,
        "p95_ratio": round(percentile(train_s, 0.95) / percentile(idle_s, 0.95), 3) if train_s else None,
        "training_ms": [round(s * 1000) for s in train_s],  # in order: which requests an update slowed
        "errors": sum(not ok for _, ok, _ in idle + training),
        "policy_versions_seen": sorted({v for _, _, v in idle + training if v is not None}, key=int),
    }
    out = ROOT / "bench" / "results" / "serve_during_training.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
