"""Held connections against a server at an open-file limit (a benchmark, not a test).

    .venv/bin/python bench/held_connections.py [--fd-limit 1024] [--held 1100] [--model PATH] [--src SRC_DIR]

Starts `openclaw-rl serve` (training and judging off) with RLIMIT_NOFILE set to `--fd-limit`
(soft and hard, so it cannot raise it), opens `--held` bare TCP connections that send nothing,
and asks as a good client (GET /v1/models, then a chat completion of 8 tokens) three times: while
they are held, after the server's header timeout has passed with them still open, and right
after they close. Reports whether the server lived, each answer's status and latency, and the
server's log lines about refused connections. `--src` runs another checkout's code (for a
before/after table). Writes bench/results/held_connections.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.net import free_port  # noqa: E402


def start(model_dir: Path, port: int, data_dir: Path, fd_limit: int, src: Path | None, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(src)} if src else None
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "openclaw_rl.cli", "serve", "--model", str(model_dir), "--port", str(port),
             "--data-dir", str(data_dir), "--no-train", "--judge", "off"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit)))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(log.read_text()[-3000:])
    proc.kill()
    raise RuntimeError("the server did not start")


def hold(port: int, count: int) -> list[socket.socket]:
    """`count` connections that send nothing (accepted, or waiting in the listen queue)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        held.append(sock)
    return held


def good_client(port: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> dict:
    """One GET /v1/models and one short chat completion: status (or the error) and latency of each."""
    result: dict = {}
    for name, method, path, body in (("models", "GET", "/v1/models", None),
                                     ("chat", "POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})):
        started = time.perf_counter()
        try:
            status: int | str = httpx.request(method, f"http://127.0.0.1:{port}{path}", json=body,
                                              timeout=timeout_s).status_code
        except httpx.HTTPError as error:
            status = f"{type(error).__name__}: {error}"[:200]
        result[name] = {"status": status, "latency_s": round(time.perf_counter() - started, 3)}
    result["server_alive"] = proc.poll() is None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fd-limit", type=int, default=1024)
    parser.add_argument("--held", type=int, default=1100)
    parser.add_argument("--header-timeout-s", type=float, default=10.0, help="the server's (its default: 10)")
    parser.add_argument("--model", default="")
    parser.add_argument("--src", type=Path, default=None, help="another checkout's src/ to run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "held_connections.json")
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model or None)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        proc = start(model_dir, port, Path(tmp) / "data", args.fd_limit, args.src, log)
        try:
            held = hold(port, args.held)
            time.sleep(2.0)
            phases = {"while_held": good_client(port, proc)}
            time.sleep(max(0.0, args.header_timeout_s + 1.0 - 2.0))
            phases["after_header_timeout_still_held"] = good_client(port, proc)
            for sock in held:
                sock.close()
            time.sleep(0.5)
            phases["after_closed"] = good_client(port, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        said = log.read_text(errors="replace")
    result = {
        "fd_limit": args.fd_limit, "held": args.held, "model": str(model_dir), "src": str(args.src or ROOT / "src"),
        "exit_status": proc.returncode if proc.returncode not in (-15, 0) else None,
        "phases": phases,
        "server_said": [line.strip() for line in said.splitlines()
                        if any(k in line for k in ("refused a connection", "cannot accept", "limit_concurrency",
                                                   "Too many open files", "Traceback"))][:20],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
