"""The store on SQLite and on PostgreSQL (a benchmark, not a test).

    .venv/bin/python bench/store.py [--store postgresql://...] [--samples 2000] [--batch-size 16]

1. `record_turn` latency: the commit every main turn waits for before its response.
2. Claim throughput: samples per second that 1 and then 2 claimer processes (as separate
   trainers would) take from a queue of ready samples, batch by batch, until it is empty.

Both databases are durable as configured in production: SQLite with WAL and
synchronous=FULL, PostgreSQL with fsync on. Without --store a throwaway PostgreSQL server
is started from Debian's binaries (the tests' own helper) on loopback and removed after.
Writes bench/results/store.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.store import Store, make_store  # noqa: E402
from openclaw_rl.types import Sample, TurnRecord  # noqa: E402

CLAIMER = """
import sys, time
from openclaw_rl.store import make_store
store = make_store(sys.argv[1], data_dir=sys.argv[2])
batch, start = int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
claimed = 0
while True:
    samples, _ = store.claim_samples("combined", batch, 0, 2, 1)
    if not samples:
        break
    claimed += len(samples)
print(claimed, time.time())
"""


def fill(store: Store, turns: int, samples: int) -> list[float]:
    """Record `turns` turns (timing each), then queue `samples` ready samples on them."""
    store.ensure_session("bench", "header")
    latencies = []
    ids = []
    for i in range(max(turns, samples)):
        start = time.perf_counter()
        turn = store.record_turn(TurnRecord(
            session_id="bench", kind="main", policy_version=0,
            prompt_messages=[{"role": "user", "content": f"question {i} " * 20}], prompt_token_ids=list(range(200)),
            response_token_ids=list(range(100)), behaviour_logprobs=[-0.5] * 100, response_text="answer " * 50,
            tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop", continuation_hash=f"h{i}"))
        latencies.append(time.perf_counter() - start)
        ids.append(turn.id)
    for turn_id in ids[:samples]:
        store.add_sample(Sample(turn_id=turn_id, session_id="bench", policy_version=0, prompt_token_ids=list(range(200)),
                                response_token_ids=list(range(100)), behaviour_logprobs=[-0.5] * 100,
                                temperature=1.0, reward=1.0))
    return latencies[:turns]


def claim(url: str, data_dir: Path, processes: int, batch_size: int) -> dict:
    start = time.time() + 3.0  # every claimer has imported and connected by then
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, url, str(data_dir), str(batch_size), str(start)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(processes)]
    outs = [p.communicate(timeout=600)[0].split() for p in procs]
    claimed = sum(int(o[0]) for o in outs)
    seconds = max(float(o[1]) for o in outs) - start
    return {"processes": processes, "claimed": claimed, "seconds": round(seconds, 3),
            "samples_per_s": round(claimed / seconds), "per_process": [int(o[0]) for o in outs]}


def run(name: str, url: str, data_dir: Path, samples: int, batch_size: int) -> dict:
    result = {"backend": name}
    for processes in (1, 2):
        store = make_store(url, data_dir=data_dir)
        with store._lock:  # a fresh queue each round: the previous round's samples are used
            store._db.execute("DELETE FROM samples")
        latencies = fill(store, 200, samples)
        store.close()
        if processes == 1:
            result["record_turn_ms"] = {"median": round(statistics.median(latencies) * 1e3, 3),
                                        "p95": round(statistics.quantiles(latencies, n=20)[-1] * 1e3, 3)}
        result[f"claim_{processes}"] = claim(url, data_dir, processes, batch_size)
    print(json.dumps(result))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="", help="a postgresql:// URL (default: start a throwaway server)")
    parser.add_argument("--samples", type=int, default=2000, help="ready samples queued before each claim run")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per claim")
    args = parser.parse_args()

    server = None
    url = args.store
    if not url:
        sys.path.insert(0, str(ROOT / "tests"))
        from conftest import PostgresServer, postgres_bin_dir

        server = PostgresServer(postgres_bin_dir(), durable=True)
        url = server.create_database("bench")
    try:
        with tempfile.TemporaryDirectory() as sqlite_dir, tempfile.TemporaryDirectory() as pg_dir:
            results = [run("sqlite", "", Path(sqlite_dir), args.samples, args.batch_size),
                       run("postgresql", url, Path(pg_dir), args.samples, args.batch_size)]
    finally:
        if server is not None:
            server.stop()
    out = ROOT / "bench" / "results" / "store.json"
    out.write_text(json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                               "samples": args.samples, "batch_size": args.batch_size, "results": results},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
