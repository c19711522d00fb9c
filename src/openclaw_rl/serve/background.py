"""Run an app on a loopback port in a background thread (the simulator, tests, notebooks)."""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI

from openclaw_rl.config import ServeConfig
from openclaw_rl.net import free_port
from openclaw_rl.serve import http_server

__all__ = ["ServerThread", "free_port"]


class ServerThread:
    """uvicorn serving `app` until `stop()`, under `limits`' HTTP limits (default: ServeConfig's),
    as `serve` runs it (serve/http_server.py); the app's shutdown closes its loops, engine and store."""

    def __init__(self, app: FastAPI, port: int, host: str = "127.0.0.1", start_timeout_s: float = 60.0,
                 limits: ServeConfig | None = None):
        self.host, self.port = host, port
        config = http_server.uvicorn_config(app, limits or ServeConfig(), host=host, port=port)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=http_server.run, args=(self._server,), name="openclaw-http",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start on {host}:{port}")
            time.sleep(0.02)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout_s: float = 60.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
