"""Hostile input against a real server process (a benchmark, not a test).

    .venv/bin/python bench/hostile_input.py [--model PATH] [--src SRC_DIR]

Starts `openclaw-rl serve` (training and judging off) on the default model, then sends,
in turn: four concurrent 4 MB prompts while /healthz is polled, a 500 MB chunked body,
and each bad sampling parameter beside 8 concurrent good requests. Reports the server's
RSS before and after, the slowest /healthz answer while the big prompts were in, and
every status code. `--src` runs another checkout's code (for a before/after table).
Writes bench/results/hostile_input.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import select
import socket
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
from openclaw_rl.serve.background import free_port  # noqa: E402
from serve_overhead import start_server  # noqa: E402  (bench/ is this script's directory)

BAD = [("seed", 2**64), ("temperature", -1), ("top_p", 0), ("max_tokens", 10**9),
       ("stop", [f"s{i}" for i in range(100)]), ("top_logprobs", 100)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(model_dir: Path, port: int, data_dir: str, src: Path) -> subprocess.Popen:
    return start_server(model_dir, port, Path(data_dir), "--no-train", "--judge", "off",
                        env={**os.environ, "PYTHONPATH": str(src)})


def big_prompts(url: str) -> dict:
    prompt = "word " * 800_000  # 4,000,000 characters, under the 4 MiB body limit
    slowest = [0.0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            started = time.perf_counter()
            try:
                httpx.get(url + "/healthz", timeout=60)
            except httpx.HTTPError:
                pass
            slowest[0] = max(slowest[0], time.perf_counter() - started)
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(lambda _: httpx.post(url + "/v1/chat/completions", json=body, timeout=300).status_code,
                              range(4)))
    done.set()
    poller.join()
    return {"status_codes": codes, "slowest_healthz_s": round(slowest[0], 3)}


def chunked(port: int) -> dict:
    chunk = b"x" * 65536
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        while sent < 8000 and not answer:  # 500 MB
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                break
            sent += 1
            if select.select([sock], [], [], 0)[0]:
                answer = sock.recv(4096)
        if not answer and sent == 8000:
            sock.sendall(b"0\r\n\r\n")
        answer = answer or sock.recv(4096)
    return {"status_line": answer.split(b"\r\n", 1)[0].decode(errors="replace"), "mb_sent": round(sent / 16, 1)}


def bad_parameters(url: str) -> dict:
    good = [{"messages": [{"role": "user", "content": f"good {i}"}], "max_tokens": 8, "temperature": 1.0, "seed": i}
            for i in range(8)]
    bad = [{"messages": [{"role": "user", "content": name}], "max_tokens": 8, "logprobs": True, name: value}
           for name, value in BAD]
    with concurrent.futures.ThreadPoolExecutor(len(good) + len(bad)) as pool:
        answers = list(pool.map(lambda b: httpx.post(url + "/v1/chat/completions", json=b, timeout=300),
                                good + bad))
    return {"good": [r.status_code for r in answers[: len(good)]],
            "bad": {name: r.status_code for (name, _), r in zip(BAD, answers[len(good):])}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the checkout's src/ to run")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hostile_input.json"))
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model or None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data_dir:
        proc = start(model_dir, port, data_dir, Path(args.src))
        try:
            httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "warm up"}],
                                                           "max_tokens": 4}, timeout=300)
            result = {"rss_mb_before": round(rss_mb(proc.pid), 1)}
            result["big_prompts"] = big_prompts(url)
            result["rss_mb_after_big_prompts"] = round(rss_mb(proc.pid), 1)
            result["chunked_500mb"] = chunked(port)
            result["rss_mb_after_chunked"] = round(rss_mb(proc.pid), 1)
            result["bad_parameters"] = bad_parameters(url)
            result["rss_mb_after"] = round(rss_mb(proc.pid), 1)
            result["healthy_after"] = httpx.get(url + "/healthz", timeout=30).status_code == 200
        finally:
            proc.terminate()
            proc.wait(30)
    result["src"] = args.src
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
