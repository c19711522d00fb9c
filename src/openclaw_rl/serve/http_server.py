"""uvicorn as the server runs it: HTTP limits, timeouts, and an open-file budget it cannot exhaust.

uvicorn (0.55, on h11 here: no httptools) has `limit_concurrency` (a request beyond it answers
503) and `timeout_keep_alive` (an idle connection after a response), which we pass from
ServeConfig as they are. It has no timeout for a request head and none for a body, and it
accepts every connection, so bare TCP connections that send nothing are held forever, each
holding a file descriptor. At the open-file limit `accept()` fails with EMFILE; asyncio then
pauses accepting for a second and logs the error, and that log line (a traceback rendered by
rich, which imports modules lazily, which needs a free descriptor) once took the process down
(cli.py now imports them at start). What we add, and why each is safe:

- a head timeout (`header_timeout_s`), in `_LimitedH11`, a subclass of uvicorn's h11
  protocol, since no uvicorn option sets one: a connection that has not sent a whole request
  head in time, from connecting or from its previous response, is closed (with a 408 if it
  sent part of one). A
  client that has sent its head is never affected (the body has its own timeout, read in the
  app's guard, serve/app.py).
- a connection cap below the open-file limit (`connection_budget`): the soft RLIMIT_NOFILE,
  less the descriptors open at start (model, store, logs) and `FD_HEADROOM` for the files the
  server opens as it runs (checkpoints, logs, the judge's and the trainer's sockets). A
  connection beyond it is answered 503 and closed as soon as it is accepted, so held
  connections leave the rest of the process its descriptors; `limit_concurrency` is lowered
  to the cap. asyncio accepts in bursts (up to the listen backlog) before any connection is
  counted, so a flood can still run out of descriptors for a moment: the cap frees them at
  once, and a smaller backlog would drop legitimate connections in a burst of them instead.
- the accept error logged as one line, at most every `_SAY_EVERY_S`, with no traceback to
  render: asyncio's own retry (one second later) is the recovery.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from openclaw_rl.config import ServeConfig

log = logging.getLogger(__name__)

FD_HEADROOM = 64  # descriptors kept free beyond those open at start, for files and sockets opened while serving
_SAY_EVERY_S = 10.0
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (the soft one is often 1024, a
    few hundred idle clients); the soft limit now. For `serve`, the process that holds connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as error:  # e.g. a container that forbids it: keep the soft limit
            log.info("could not raise the open-file limit from %d to %d: %s", soft, target, error)
    return soft


def connection_budget() -> int:
    """How many connections this process may hold without running out of descriptors: the soft
    open-file limit less those open now and FD_HEADROOM (at least 1)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(1, soft - _open_descriptors() - FD_HEADROOM)


def _open_descriptors() -> int:
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing))
        except OSError:
            continue
    return 0


def uvicorn_config(app: Any, config: ServeConfig, host: str | None = None, port: int | None = None,
                   **options: Any) -> uvicorn.Config:
    """uvicorn's config for `app` under `config`'s limits, on `host`/`port` (default: the config's)."""
    budget = connection_budget()
    limit = min(config.limit_concurrency, budget)
    if limit < config.limit_concurrency:
        log.warning("limit_concurrency lowered from %d to %d: the open-file limit (ulimit -n %d) leaves room for "
                    "no more connections; raise it to serve more at once", config.limit_concurrency, limit,
                    resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    def protocol(**kwargs: Any) -> _LimitedH11:
        return _LimitedH11(max_connections=budget, header_timeout_s=config.header_timeout_s, **kwargs)

    return uvicorn.Config(app, host=host or config.host, port=config.port if port is None else port,
                          http=protocol, limit_concurrency=limit,  # type: ignore[arg-type]
                          timeout_keep_alive=config.keep_alive_timeout_s, **{"log_level": "warning", **options})


def run(server: uvicorn.Server) -> None:
    """Serve until stopped (a signal, or `server.should_exit`), logging accept() failures as one line."""
    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_AcceptErrors())
        await server.serve()

    asyncio.run(main())


class _Throttled:
    """A warning said at most every _SAY_EVERY_S, with how often it happened meanwhile: a flood
    of connections must not become a flood of log lines."""

    def __init__(self, message: str) -> None:
        self.message, self._said_at, self._unsaid = message, -_SAY_EVERY_S, 0

    def warn(self, *args: Any) -> None:
        self._unsaid += 1
        if time.monotonic() - self._said_at >= _SAY_EVERY_S:
            log.warning(self.message + " (%d time(s) since last said)", *args, self._unsaid)
            self._said_at, self._unsaid = time.monotonic(), 0


class _AcceptErrors:
    """The loop's exception handler: an accept() out of descriptors is one throttled warning line
    with no traceback (nothing to render, no module to import, when no descriptor is free);
    asyncio retries accepting a second later by itself. Anything else: asyncio's default handler."""

    def __init__(self) -> None:
        self._out_of_descriptors = _Throttled("cannot accept connections: %s; new clients wait in the listen "
                                              "queue until held connections close or time out (header_timeout_s)")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in _OUT_OF_DESCRIPTORS:
            self._out_of_descriptors.warn(os.strerror(error.errno))
        else:
            loop.default_exception_handler(context)


class _LimitedH11(H11Protocol):
    """uvicorn's h11 protocol, with a connection cap at accept and a request-head timeout."""

    _refused = _Throttled("refused a connection beyond %d, the most this process's open-file limit leaves room for")

    def __init__(self, *, max_connections: int, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_connections, self._header_timeout_s = max_connections, header_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._max_connections:
            self._refused.warn(self._max_connections)
            _answer_and_close(transport, 503, "Service Unavailable",
                              "the server holds as many connections as it can; retry shortly")
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole head arrived (or the connection failed)
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()  # the next request's head: its time starts now

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self._head_timer = self.loop.call_later(self._header_timeout_s, self._head_timed_out)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        """408 to a connection that sent part of a head; one that sent nothing is just closed (a
        response nobody asked for could be read by a client as the answer to its next request)."""
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:
            _answer_and_close(self.transport, 408, "Request Timeout",
                              f"no whole request head within {self._header_timeout_s:g} s (header_timeout_s)")
        else:
            self.transport.close()


def _answer_and_close(transport: asyncio.BaseTransport, status: int, reason: str, message: str) -> None:
    """Write a last response in the OpenAI error format outside h11 (no request was parsed), then close."""
    body = json.dumps({"error": {"message": message, "type": "server_error", "param": None, "code": None}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    transport.write(head + body)  # type: ignore[attr-defined]
    transport.close()
