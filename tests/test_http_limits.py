"""HTTP limits (serve/http_server.py, the guard's body timeout): a connection that sends no head,
or stops mid-body, is answered 408 and let go; requests beyond limit_concurrency answer 503;
and a `serve` process at a small open-file limit outlives more held connections than it has
descriptors, answering a good client once they go. Every connection is to 127.0.0.1."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import free_port
from openclaw_rl.config import ConfigError, ServeConfig


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s at most)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_the_limits_are_settings_with_checked_values():
    assert (ServeConfig().limit_concurrency, ServeConfig().keep_alive_timeout_s) == (256, 5)
    assert (ServeConfig().header_timeout_s, ServeConfig().body_timeout_s) == (10.0, 60.0)
    with pytest.raises(ConfigError, match="header_timeout_s = 0 is invalid: use a positive number of seconds"):
        ServeConfig(header_timeout_s=0)
    with pytest.raises(ConfigError, match="limit_concurrency = 0 is invalid"):
        ServeConfig(limit_concurrency=0)


def test_a_connection_that_sends_no_whole_head_is_closed_after_the_header_timeout(scripted_server):
    server = scripted_server(["ok"], header_timeout_s=0.5)
    with _connect(server.port) as bare, _connect(server.port) as partial:
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends a head
        started = time.monotonic()
        assert _answer(bare) == b""  # closed; nothing it could mistake for an answer
        answer = _answer(partial)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"header_timeout_s" in answer, answer
        assert time.monotonic() - started < 5
    # a client that keeps its connection and asks again later is not cut off by its first request's clock
    with httpx.Client(base_url=server.base_url) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(0.3)
        assert client.get("/healthz").status_code == 200


def test_a_body_that_stops_arriving_is_answered_408(scripted_server):
    server = scripted_server(["ok"], body_timeout_s=0.5)
    with _connect(server.port) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"messages\": [")
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"body_timeout_s" in answer, answer
    ok = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=30,
                    json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert ok.status_code == 200


def test_requests_beyond_limit_concurrency_answer_503(scripted_server):
    server = scripted_server(["ok"], limit_concurrency=2)
    with _connect(server.port), _connect(server.port):
        time.sleep(0.2)  # both accepted
        assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 503
    deadline = time.monotonic() + 5
    while httpx.get(f"{server.base_url}/healthz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the server did not recover once the connections closed"
        time.sleep(0.1)


FD_LIMIT, HELD = 128, 200  # more held connections than the server has descriptors


def _serve_at_fd_limit(model_dir, data_dir, port: int, *flags: str) -> subprocess.Popen:
    """`openclaw-rl serve` with RLIMIT_NOFILE FD_LIMIT (soft and hard: it cannot raise it), once /healthz
    answers; its console output goes to DATA_DIR/../serve.log."""
    with open(data_dir.parent / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "openclaw_rl.cli", "serve", "--model", str(model_dir), "--data-dir", str(data_dir),
             "--port", str(port), "--no-train", "--judge", "off", *flags],
            stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError((data_dir.parent / "serve.log").read_text()[-3000:])
    proc.kill()
    raise RuntimeError("the server did not start")


def _hold(port: int, count: int) -> list[socket.socket]:
    """`count` connections that send nothing (connected, or waiting in the listen queue)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        held.append(sock)
    return held


def _good_client(port: int, within_s: float) -> int:
    """The status of GET /v1/models, retried while the connection itself fails, for `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=max(1.0, deadline - time.monotonic())).status_code
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_serve_outlives_more_held_connections_than_it_has_descriptors(tiny_model_dir, tmp_path):
    port, log = free_port(), tmp_path / "serve.log"
    proc = _serve_at_fd_limit(tiny_model_dir, tmp_path / "data", port, "--header-timeout-s", "3")
    try:
        held = _hold(port, HELD)
        time.sleep(1.5)  # the server accepts what it can; the rest it refuses at once or leaves queued
        assert proc.poll() is None, log.read_text()[-3000:]
        assert _good_client(port, within_s=10) in (200, 503)  # an answer meanwhile, never a dead server
        for sock in held:
            sock.close()
        assert _good_client(port, within_s=10) == 200  # answered as soon as they are gone
        held = _hold(port, HELD)  # and once more, never closed by the client: the head timeout lets them go
        time.sleep(3.5)
        assert _good_client(port, within_s=10) == 200
        assert proc.poll() is None
        for sock in held:
            sock.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    said = log.read_text()
    assert "refused a connection beyond" in said or "cannot accept connections" in said, said[-3000:]
