"""Use the environments of a pool server (`openclaw-rl envs serve`) as if they were local.

    with PoolClient("http://127.0.0.1:8100", token) as pool:
        with pool.lease() as env:  # a RemoteEnv: the Env protocol over HTTP
            observation = env.reset(env.tasks("train")[0])
            result = env.step(Action("run", {"command": "ls"}))
            outcome = env.evaluate()

Decisions and why:

- `RemoteEnv` follows the `Env` protocol, so the rollout driver plays a local env and a
  remote one alike. An env that crashed or hung on the server raises `RemoteEnvError`,
  which is an `EnvError` as a local crash would be; the server has already replaced the
  env, and the lease goes on after a reset. One difference: `tasks()` come without their
  `data` (answers, hidden tests), which the server keeps; reset needs only the id.
- While a lease is held, a daemon thread sends a heartbeat every `lease_timeout_s / 3`,
  so a worker that thinks for a long time between steps keeps its env and one that dies
  loses it after `lease_timeout_s`. A heartbeat that finds the lease gone stops and keeps
  the error (`heartbeat_error`); the next call raises `LeaseExpired` anyway.
- Every request has a timeout (the server's default `call_timeout_s` plus a margin), so a
  lost server is an error, never a hang; transport failures are `PoolError`s too.
"""

from __future__ import annotations

import base64
import logging
import threading
from typing import Any

import httpx

from openclaw_rl.envs.base import Action, EnvError, Outcome, Split, StepResult, Task

__all__ = ["LeaseExpired", "PoolClient", "PoolError", "PoolExhausted", "RemoteEnv", "RemoteEnvError", "Unauthorized"]

log = logging.getLogger(__name__)


class PoolError(RuntimeError):
    """The pool answered with an error, or could not be reached; `status` and `code` say which."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class Unauthorized(PoolError):
    """401: no token or the wrong one."""


class PoolExhausted(PoolError):
    """503: every environment is leased; release one or retry later."""


class LeaseExpired(PoolError):
    """410: the lease has ended (expired without heartbeats, or released); take a new one."""


class RemoteEnvError(PoolError, EnvError):
    """The environment crashed or hung on the server (500/504); the server replaced it."""


_BY_STATUS: dict[int, type[PoolError]] = {401: Unauthorized, 410: LeaseExpired, 503: PoolExhausted}


class PoolClient:
    """A connection to one pool server; thread-safe, so rollout workers may share it."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 660.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=timeout_s)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the JSON answer, or the PoolError its status stands for."""
        if self.closed:
            raise PoolError(f"{method} {path}: this PoolClient is closed")
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as error:
            raise PoolError(f"{method} {path}: no answer from the env pool at {self.base_url} "
                            f"within {self.timeout_s:g} s") from error
        except httpx.TransportError as error:
            raise PoolError(f"{method} {path}: cannot reach the env pool at {self.base_url}: {error}") from error
        except RuntimeError as error:  # closed by another thread since the check above
            raise PoolError(f"{method} {path}: this PoolClient is closed") from error
        if response.is_success:
            return response.json()
        try:
            problem = response.json()["error"]
            message, code = str(problem["message"]), problem.get("code")
        except (ValueError, KeyError, TypeError):
            message, code = response.text[:500] or response.reason_phrase, None
        cls = _BY_STATUS.get(response.status_code)
        if cls is None:
            cls = RemoteEnvError if code in ("env_crashed", "env_timeout") else PoolError
        raise cls(f"{method} {path}: {response.status_code} {message}", response.status_code, code)

    def tasks(self, split: Split | None = None) -> list[Task]:
        found = self.request("GET", "/tasks", params={"split": split} if split else None)
        return [Task(t["id"], t["prompt"], t["split"]) for t in found]  # the server keeps each task's data

    def tools(self) -> list[dict[str, Any]]:
        return self.request("GET", "/tools")

    def status(self) -> dict[str, Any]:
        return self.request("GET", "/status")

    def lease(self, heartbeat: bool = True) -> RemoteEnv:
        """Take one environment (raises PoolExhausted when all are taken); close() gives it back."""
        return RemoteEnv(self, self.request("POST", "/leases"), heartbeat)

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteEnv:
    """One leased environment of the pool, behind the `Env` protocol."""

    def __init__(self, client: PoolClient, lease: dict[str, Any], heartbeat: bool = True) -> None:
        self._client = client
        self.lease_id: str = lease["lease_id"]
        self.name: str = lease["env"]
        self.tools: list[dict[str, Any]] = lease["tools"]
        self.lease_timeout_s: float = lease["lease_timeout_s"]
        self.heartbeat_error: PoolError | None = None
        self._path = f"/leases/{self.lease_id}"
        self._stop = threading.Event()
        self._closed = False
        if heartbeat:
            threading.Thread(target=self._beat, name=f"heartbeat-{self.lease_id}", daemon=True).start()

    def tasks(self, split: Split | None = None) -> list[Task]:
        return self._client.tasks(split)

    def reset(self, task: Task | str) -> str:
        task_id = task if isinstance(task, str) else task.id
        return self._client.request("POST", f"{self._path}/reset", json={"task_id": task_id})["observation"]

    def step(self, action: Action) -> StepResult:
        found = self._client.request("POST", f"{self._path}/step",
                                     json={"tool": action.tool, "arguments": action.arguments})
        image = found.get("image_png_base64")
        return StepResult(found["observation"], found["done"], found["info"],
                          base64.b64decode(image) if image is not None else None)

    def evaluate(self) -> Outcome:
        found = self._client.request("POST", f"{self._path}/evaluate")
        return Outcome(found["success"], found["score"], found["detail"])

    def close(self) -> None:
        """Stop the heartbeats and release the lease; a lease that already ended is fine."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            self._client.request("DELETE", self._path)
        except LeaseExpired as error:
            log.debug("lease %s had already ended: %s", self.lease_id, error)

    def __enter__(self) -> RemoteEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _beat(self) -> None:
        interval_s = self.lease_timeout_s / 3
        while not self._stop.wait(interval_s) and not self._client.closed:
            try:  # a failure other than the lease being gone may pass before the lease times out
                self._client.request("POST", f"{self._path}/heartbeat")
            except PoolError as error:
                if isinstance(error, LeaseExpired) or error.status == 404:  # gone for good
                    self.heartbeat_error = error
                    return
                log.warning("heartbeat for lease %s failed: %s", self.lease_id, error)
