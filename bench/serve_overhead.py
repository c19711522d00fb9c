"""Serving overhead and throughput on the default model (a benchmark, not a test).

    .venv/bin/python bench/serve_overhead.py [--model PATH] [--repeats 10]

1. The same greedy 32-token generation, called in-process on the engine and through
   HTTP (`openclaw-rl serve` in its own process): median latency of each, and the ratio.
2. Throughput (completion tokens / wall second) with 1, 4 and 8 concurrent HTTP clients.
3. The dashboard's cost: the same HTTP latency with and without a client reading what the
   dashboard page reads (/v1/dashboard/now, the sessions, the version history and the
   learning curves: 4 requests a second, 4 times what one open page asks), in alternating
   blocks (without, with, without, with) so that drift in the machine's load falls on
   both. `--only dashboard` runs this part alone and updates the file's `dashboard` entry.

Writes bench/results/serve_overhead.json. The two measurements never overlap, so the
engine always has both cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.types import SamplingParams, TokenStep  # noqa: E402

MAX_TOKENS = 32
PROMPTS = [f"Write a long, detailed story about a robot named Unit {i} who learns to paint." for i in range(64)]


def in_process(model_dir: Path, repeats: int) -> tuple[list[float], int]:
    engine = LocalEngine(model_dir)
    params = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0)

    async def once(i: int) -> tuple[float, int]:
        ids = render_prompt(engine.tokenizer, [{"role": "user", "content": PROMPTS[i]}], None, None)
        start = time.perf_counter()
        n = sum([isinstance(e, TokenStep) async for e in engine.stream(ids, params)])
        return time.perf_counter() - start, n

    async def run() -> tuple[list[float], int]:
        await once(0)  # warm-up
        results = [await once(i) for i in range(repeats)]
        await engine.aclose()
        return [r[0] for r in results], results[0][1]

    return asyncio.run(run())


def start_server(model_dir: Path, port: int, data_dir: Path, *flags: str, env: dict | None = None) -> subprocess.Popen:
    """`openclaw-rl serve` in its own process (extra `flags`, environment `env`), once /healthz answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "openclaw_rl.cli", "serve", "--model", str(model_dir), "--port", str(port),
         "--data-dir", str(data_dir), *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    for _ in range(900):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def http_request(client: httpx.Client, url: str, i: int, session: str = "") -> tuple[float, int]:
    """One first turn of session `session` (default: bench-i). Every call needs a session of its own:
    a second turn in a session gives the first its next state, and the server judges and trains on it."""
    body = {"messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], "max_tokens": MAX_TOKENS,
            "temperature": 0}
    start = time.perf_counter()
    r = client.post(url, json=body, headers={"X-Session-Id": session or f"bench-{i}"}, timeout=300)
    r.raise_for_status()
    return time.perf_counter() - start, r.json()["usage"]["completion_tokens"]


def throughput(url: str, clients: int, requests_per_client: int) -> float:
    from concurrent.futures import ThreadPoolExecutor

    def worker(c: int) -> int:
        with httpx.Client() as client:
            return sum(http_request(client, url, c * 100 + k, session=f"throughput-{clients}-{c}-{k}")[1]
                       for k in range(requests_per_client))

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(worker, range(clients)))
    return tokens / (time.perf_counter() - start)


DASHBOARD_READS = ("/v1/dashboard/now", "/v1/sessions?limit=200", "/v1/policy/versions?limit=200",
                   "/v1/dashboard/learning")


def dashboard_cost(base: str, repeats: int, blocks: int = 4) -> dict:
    """Median chat latency without and with a dashboard reader, in alternating blocks of `repeats`."""
    stop = threading.Event()

    def reader() -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            client.get("/dashboard").raise_for_status()  # the page and its files, once, as a browser would
            client.get("/dashboard/static/dashboard.js").raise_for_status()
            while not stop.is_set():
                for path in DASHBOARD_READS:
                    client.get(path).raise_for_status()
                stop.wait(1.0)

    url = f"{base}/v1/chat/completions"
    latencies: dict[str, list[float]] = {"without": [], "with": []}
    with httpx.Client() as client:
        http_request(client, url, 0, session="bench-warm-up")  # a session of its own
        for block in range(blocks):
            polled = block % 2 == 1
            thread = threading.Thread(target=reader) if polled else None
            if thread:
                stop.clear()
                thread.start()
                time.sleep(1.0)  # the reader is polling before the first timed request
            latencies["with" if polled else "without"] += [
                http_request(client, url, i, session=f"dashboard-{block}-{i}")[0] for i in range(repeats)]
            if thread:
                stop.set()
                thread.join(30)
    without, with_page = statistics.median(latencies["without"]), statistics.median(latencies["with"])
    return {"median_ms_without_page": round(without * 1000, 1), "median_ms_with_page": round(with_page * 1000, 1),
            "ratio": round(with_page / without, 3), "requests_each": len(latencies["with"]),
            "reader": f"{len(DASHBOARD_READS)} GETs a second: " + ", ".join(DASHBOARD_READS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--only", choices=["dashboard"], default=None,
                        help="run only the dashboard part and update its entry in the results file")
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model)
    out = ROOT / "bench" / "results" / "serve_overhead.json"
    if args.only == "dashboard":
        with tempfile.TemporaryDirectory() as data_dir:
            proc = start_server(model_dir, args.port, Path(data_dir))
            try:
                cost = dashboard_cost(f"http://127.0.0.1:{args.port}", args.repeats)
            finally:
                proc.terminate()
                proc.wait(30)
        result = json.loads(out.read_text()) if out.exists() else {"model": model_dir.name}
        result["dashboard"] = cost
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(cost, indent=2))
        return

    inproc, tokens = in_process(model_dir, args.repeats)
    print(f"in-process: median {statistics.median(inproc) * 1000:.0f} ms for {tokens} tokens")

    with tempfile.TemporaryDirectory() as data_dir:
        proc = start_server(model_dir, args.port, Path(data_dir))
        try:
            url = f"http://127.0.0.1:{args.port}/v1/chat/completions"
            with httpx.Client() as client:
                http_request(client, url, 0, session="bench-warm-up")  # a session of its own
                http = [http_request(client, url, i)[0] for i in range(args.repeats)]
            print(f"HTTP:       median {statistics.median(http) * 1000:.0f} ms")
            rates = {}
            for clients in (1, 4, 8):
                rates[str(clients)] = round(throughput(url, clients, requests_per_client=max(2, 8 // clients)), 1)
                print(f"{clients} concurrent client(s): {rates[str(clients)]} tokens/s")
            cost = dashboard_cost(f"http://127.0.0.1:{args.port}", args.repeats)
            print(f"dashboard:  median {cost['median_ms_without_page']} ms without the page's reads, "
                  f"{cost['median_ms_with_page']} ms with them")
        finally:
            proc.terminate()
            proc.wait(30)

    result = {
        "model": model_dir.name,
        "max_tokens": MAX_TOKENS,
        "greedy": True,
        "median_ms_http": round(statistics.median(http) * 1000, 1),
        "median_ms_inprocess": round(statistics.median(inproc) * 1000, 1),
        "overhead_ratio": round(statistics.median(http) / statistics.median(inproc), 3),
        "throughput_tok_s": rates,
        "dashboard": cost,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, torch threads 2",
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
