"""The environment pool: K environments served over HTTP and leased to rollout workers.

    openclaw-rl envs serve --env terminal --size 8

A worker takes a lease (`POST /leases`), plays episodes on it (reset, step, evaluate),
sends heartbeats in between and releases it (`DELETE /leases/{id}`). `envs/client.py`
wraps all this as a `RemoteEnv` that follows the same `Env` protocol as a local env.

Decisions and why:

- Environments run in this process, each on a thread of its own, not in worker
  subprocesses. The heavy and dangerous part of every env (the shell, the test run, the
  browser) already lives in a child process that the env owns, so a hard crash there
  reaches us as an exception, which we handle; the env objects themselves are thin and
  their calls are waits on I/O, so threads cost little; and a factory needs no pickling
  (the tests inject one). We give up isolation from a segfault in an env's own Python
  code: that takes the server down, and its supervisor restarts it.
- One thread per env for the env's whole life (created, reset, stepped, evaluated and
  closed on it), not a shared thread pool: some libraries, Playwright's sync API under the
  GUI env among them, only work on the thread that created them. A per-env lock keeps
  the calls of one env in order.
- An env call that raises (`EnvError` or anything else) or runs past `call_timeout_s`
  costs the env: it is closed and a fresh one takes its place, `/status` counts it as
  replaced, and the holder gets a 500 (`env_crashed`) or 504 (`env_timeout`) naming what
  happened. The lease stays, now on the fresh env, and must reset before it steps: the
  episode is lost but the worker keeps its place. A hung thread cannot be killed, so it is
  abandoned (it closes its env if the call ever returns) and a new thread takes over.
- Any request on a lease is a sign of life; heartbeats fill the gaps. A lease not heard
  from for `lease_timeout_s` expires and its env is closed and replaced, because what the
  vanished holder left running in it is unknown; later requests on it get 410. A
  released env is reused as it is: the next holder must reset before it may step or
  evaluate, and reset sets the task up from scratch (`fresh_on_release` replaces it
  instead, for an env whose reset does not clean up everything).
- `/tasks` lists each task's id, prompt and split, not its `data`: that holds answers,
  hidden tests and reference solutions, which a client never needs (reset takes the id),
  and what never leaves the server cannot leak into a prompt.
- One bearer token guards every endpoint but `/healthz`, compared in constant time, and
  the server binds 127.0.0.1 unless told otherwise: a lease runs commands on this machine.

(Over 400 lines: env threads, leases and then the HTTP routes are one unit, since every
part enacts the rules above and splitting them would scatter them.)
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import contextlib
import functools
import hmac
import ipaddress
import json
import logging
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from openclaw_rl.config import TOKEN_ENV_VAR, ConfigError, PoolConfig
from openclaw_rl.envs.base import Action, Env, Task
from openclaw_rl.envs.registry import env_class, make_env

__all__ = ["EnvPool", "PoolConfig", "PoolProblem", "TOKEN_ENV_VAR", "create_app", "resolve_token", "serve"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_RETRY_BROKEN_S = 5.0  # how often an env that could not be created is tried again
_ENDED_KEPT = 10_000  # ended leases remembered, so a late request gets 410 rather than 404


class PoolProblem(Exception):
    """A request the pool cannot serve: the HTTP status, a stable code and a message saying what to do."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# -- threads and slots -----------------------------------------------------------------


class _Hung(Exception):
    pass


class _EnvThread:
    """The one thread that runs every call of one environment, in order, from creation to close."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, call: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((call, future))
        return future

    def retire(self) -> None:
        """Exit once the calls already queued are done (a hung one first, if it ever returns)."""
        self._calls.put(None)

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as error:  # the caller decides what it means
                    future.set_exception(error)


@dataclass(eq=False)
class _Slot:
    index: int
    thread: _EnvThread
    env: Env | None = None  # None: being replaced, or could not be created (broken)
    lease: str | None = None
    last_seen: float = 0.0
    needs_reset: bool = True
    recycling: bool = False  # being closed and made fresh; neither free nor leased
    broken_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _state(slot: _Slot) -> Literal["leased", "recycling", "broken", "free"]:
    if slot.lease is not None:
        return "leased"
    if slot.recycling or slot.lock.locked():  # locked: a released lease's last call is still running
        return "recycling"
    return "broken" if slot.env is None else "free"


def _close_quietly(env: Env | None) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception:  # it is being thrown away; a failed close must not stop its replacement
        log.warning("closing a %s environment failed", getattr(env, "name", "?"), exc_info=True)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


# -- the pool --------------------------------------------------------------------------


class EnvPool:
    """K environments, their leases and their replacement; lives on one event loop."""

    def __init__(self, config: PoolConfig, factory: Callable[[], Env]) -> None:
        self.config, self._factory = config, factory
        self.name = config.env
        self.tools: list[dict[str, Any]] = []
        self.tasks: dict[str, Task] = {}
        self.replaced = 0  # envs that crashed or hung and were swapped for fresh ones
        self.reclaimed = 0  # envs taken back from expired leases
        self._slots: list[_Slot] = []
        self._leases: dict[str, _Slot] = {}
        self._ended: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._background: set[asyncio.Task] = set()
        self._reaper: asyncio.Task | None = None

    async def start(self) -> None:
        """Create the K envs (all must come up) and read the task catalog and tools from the first."""
        self._slots = [_Slot(i, _EnvThread(f"env-{i}")) for i in range(self.config.size)]
        try:
            created = await asyncio.gather(*(self._create(slot) for slot in self._slots), return_exceptions=True)
            failures = [error for error in created if isinstance(error, BaseException)]
            if failures:
                raise RuntimeError(f"could not create {len(failures)} of {self.config.size} {self.name!r} "
                                   f"environments; the first failure: {failures[0]!r}") from failures[0]
            first = self._slots[0]
            assert first.env is not None
            self.name, self.tools = getattr(first.env, "name", self.name), list(first.env.tools)
            for task in await self._on_thread(first, first.env.tasks):
                if task.id in self.tasks:
                    raise RuntimeError(f"the {self.name} environment lists task id {task.id!r} twice; "
                                       "ids must be unique")
                self.tasks[task.id] = task
        except BaseException:
            await self.close()
            raise
        self._reaper = asyncio.create_task(self._reap())

    async def close(self) -> None:
        """Stop the reaper and any recycling, then close every env on its own thread (30 s each at most)."""
        for task in [self._reaper, *self._background]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

        async def close_slot(slot: _Slot) -> None:
            with contextlib.suppress(_Hung):
                await self._on_thread(slot, lambda env=slot.env: _close_quietly(env), min(self.config.call_timeout_s, 30))
            slot.env = None
            slot.thread.retire()

        await asyncio.gather(*(close_slot(slot) for slot in self._slots))

    # -- leases ----------------------------------------------------------------------

    def allocate(self) -> str:
        for slot in self._slots:
            if _state(slot) == "free":
                lease = "lease-" + secrets.token_hex(8)
                slot.lease, slot.last_seen, slot.needs_reset = lease, time.monotonic(), True
                self._leases[lease] = slot
                return lease
        counts = self.status()
        note = (f" ({counts['leased']} leased, {counts['recycling']} being made fresh, {counts['broken']} broken)"
                if counts["recycling"] or counts["broken"] else "")
        raise PoolProblem(503, "pool_exhausted", f"all {len(self._slots)} {self.name} environments are taken{note}; "
                          "release a lease (DELETE /leases/ID), retry later, or serve a larger --size")

    def heartbeat(self, lease: str) -> float:
        self._held(lease)
        return self.config.lease_timeout_s

    def release(self, lease: str) -> None:
        slot = self._held(lease)
        self._end(slot, "it was released by its holder")
        if self.config.fresh_on_release:
            self._recycle_later(slot)

    async def call(self, lease: str, what: Literal["reset", "step", "evaluate"], call: Callable[[Env], T]) -> T:
        """Run `call(env)` on the env of `lease`, on its thread; replace the env if it crashes or hangs."""
        slot = self._held(lease)
        async with slot.lock:
            if slot.lease != lease:  # it ended while this request waited its turn
                raise self._gone(lease)
            if what != "reset" and slot.needs_reset:
                raise PoolProblem(409, "reset_first", f"lease {lease} has no episode: reset it with a task "
                                  f"(POST /leases/{lease}/reset) before calling {what}")
            env = slot.env
            assert env is not None
            try:
                result = await self._on_thread(slot, lambda: call(env))
            except _Hung:
                note = await self._replace(slot, hung=True)
                raise PoolProblem(504, "env_timeout", f"the {self.name} environment did not finish {what} within "
                                  f"call_timeout_s={self.config.call_timeout_s:g}; {note}") from None
            except Exception as error:
                log.warning("a %s environment crashed during %s", self.name, what, exc_info=True)
                note = await self._replace(slot, hung=False)
                raise PoolProblem(500, "env_crashed", f"the {self.name} environment crashed during {what} "
                                  f"({type(error).__name__}: {error}); {note}") from error
            finally:
                slot.last_seen = time.monotonic()
            if what == "reset":
                slot.needs_reset = False
            return result

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        states = collections.Counter(_state(slot) for slot in self._slots)
        return {
            "env": self.name, "size": len(self._slots), "free": states["free"], "leased": states["leased"],
            "recycling": states["recycling"], "broken": states["broken"], "replaced": self.replaced,
            "reclaimed": self.reclaimed, "lease_timeout_s": self.config.lease_timeout_s,
            "leases": [{"lease_id": s.lease, "slot": s.index, "idle_s": round(now - s.last_seen, 3),
                        "needs_reset": s.needs_reset} for s in self._slots if s.lease is not None],
        }

    def _held(self, lease: str) -> _Slot:
        """The slot of a live lease, which this request keeps alive; 404 or 410 otherwise."""
        slot = self._leases.get(lease)
        if slot is None:
            raise self._gone(lease)
        idle_s = time.monotonic() - slot.last_seen
        if idle_s > self.config.lease_timeout_s and not slot.lock.locked():  # the reaper has not come by yet
            self._expire(slot, idle_s)
            raise self._gone(lease)
        slot.last_seen = time.monotonic()
        return slot

    def _gone(self, lease: str) -> PoolProblem:
        if lease in self._ended:
            return PoolProblem(410, "lease_gone", f"lease {lease} has ended: {self._ended[lease]}; "
                               "take a new one with POST /leases")
        return PoolProblem(404, "lease_not_found", f"there is no lease {lease!r}; take one with POST /leases")

    def _end(self, slot: _Slot, reason: str) -> None:
        assert slot.lease is not None
        self._leases.pop(slot.lease)
        self._ended[slot.lease] = reason
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        slot.lease = None

    def _expire(self, slot: _Slot, idle_s: float) -> None:
        log.info("lease %s expired after %.1f s without a request; reclaiming its env", slot.lease, idle_s)
        self._end(slot, f"it expired: no request or heartbeat for {idle_s:.1f} s "
                        f"(lease_timeout_s={self.config.lease_timeout_s:g}), and its environment was reclaimed")
        self.reclaimed += 1
        self._recycle_later(slot)

    async def _reap(self) -> None:
        """Expire silent leases; retry envs that could not be created."""
        tick_s = min(1.0, self.config.lease_timeout_s / 4)
        while True:
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            for slot in self._slots:
                state = _state(slot)
                if state == "leased" and not slot.lock.locked() and now - slot.last_seen > self.config.lease_timeout_s:
                    self._expire(slot, now - slot.last_seen)
                elif state == "broken" and now - slot.broken_at > _RETRY_BROKEN_S:
                    self._recycle_later(slot)

    # -- making envs -----------------------------------------------------------------

    async def _on_thread(self, slot: _Slot, call: Callable[[], T], timeout_s: float | None = None,
                         if_late: Callable[[T], None] | None = None) -> T:
        """`call()` on the slot's thread; raises _Hung after the timeout, and `if_late` gets a result that comes later."""
        submitted = slot.thread.submit(call)
        future = asyncio.wrap_future(submitted)
        done, _ = await asyncio.wait({future}, timeout=timeout_s or self.config.call_timeout_s)
        if not done:
            future.cancel()
            if if_late is not None:
                submitted.add_done_callback(
                    lambda f: if_late(f.result()) if not f.cancelled() and f.exception() is None else None)
            raise _Hung()
        return future.result()

    async def _create(self, slot: _Slot) -> None:
        try:
            slot.env = await self._on_thread(slot, self._factory, if_late=_close_quietly)
        except _Hung:  # its thread is stuck in the factory: leave it to close what it builds, if ever
            slot.broken_at = time.monotonic()
            slot.thread.retire()
            slot.thread = _EnvThread(f"env-{slot.index}")
            raise RuntimeError(f"creating a {self.name} environment took longer than "
                               f"call_timeout_s={self.config.call_timeout_s:g}") from None
        except BaseException:
            slot.broken_at = time.monotonic()
            raise

    async def _discard(self, slot: _Slot, hung: bool) -> None:
        """Close the slot's env; a hung thread is left to finish (and close it) while a new one takes over."""
        old, slot.env = slot.env, None
        if not hung:
            try:
                await self._on_thread(slot, lambda: _close_quietly(old))
                return
            except _Hung:
                log.warning("closing a %s environment hung; abandoning its thread", self.name)
        else:
            slot.thread.submit(lambda: _close_quietly(old))
        slot.thread.retire()
        slot.thread = _EnvThread(f"env-{slot.index}")

    async def _replace(self, slot: _Slot, hung: bool) -> str:
        """Swap a crashed or hung env for a fresh one (the slot's lock is held); says how it went."""
        self.replaced += 1
        await self._discard(slot, hung)
        slot.needs_reset = True
        lease = slot.lease
        try:
            await self._create(slot)
        except Exception as error:
            if lease is not None:
                self._end(slot, "its environment crashed and no fresh one could be created")
            return (f"it was closed but a fresh one could not be created ({type(error).__name__}: {error}), "
                    f"so lease {lease} has ended")
        return (f"it was closed and replaced by a fresh one (replacement #{self.replaced}); this episode is lost, "
                f"reset lease {lease} with a task to go on")

    def _recycle_later(self, slot: _Slot) -> None:
        slot.recycling = True
        task = asyncio.create_task(self._recycle(slot))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _recycle(self, slot: _Slot) -> None:
        async with slot.lock:
            try:
                await self._discard(slot, hung=False)
                await self._create(slot)
            except Exception:
                log.warning("could not make a fresh %s environment; retrying in %g s", self.name, _RETRY_BROKEN_S,
                            exc_info=True)
            finally:
                slot.needs_reset, slot.recycling = True, False


# -- HTTP ------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetBody(_Body):
    task_id: str = Field(min_length=1)


class StepBody(_Body):
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


def _problem_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def create_app(config: PoolConfig, factory: Callable[[], Env], token: str) -> FastAPI:
    """The pool's HTTP API; the envs are created at startup and closed at shutdown.

    (Over 60 lines: the routes are closures over one pool and one token check, and read
    best side by side, each a few lines.)"""
    if not token:
        raise ConfigError("the env pool needs a token: every request must send `Authorization: Bearer TOKEN`")
    pool = EnvPool(config, factory)
    expected = f"Bearer {token}".encode()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await pool.start()
        log.info("env pool ready: %d %s environments, %d tasks", config.size, pool.name, len(pool.tasks))
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(title="openclaw-rl env pool", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.pool = pool

    @app.middleware("http")
    async def authenticate(request: Request, call_next) -> Response:
        given = request.headers.get("authorization", "").encode()
        if request.url.path != "/healthz" and not hmac.compare_digest(given, expected):
            return _problem_response(401, "unauthorized", "missing or wrong token: send `Authorization: Bearer TOKEN` "
                                     "with the token the pool printed at start (or its --token)")
        return await call_next(request)

    @app.exception_handler(PoolProblem)
    async def problem(request: Request, error: PoolProblem) -> JSONResponse:
        return _problem_response(error.status, error.code, error.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return _problem_response(400, "invalid_request", f"{where}: {first['msg']}")

    @app.exception_handler(404)
    async def no_route(request: Request, error: Exception) -> JSONResponse:
        return _problem_response(404, "not_found", f"no route {request.method} {request.url.path}")

    @app.exception_handler(405)
    async def not_allowed(request: Request, error: Exception) -> JSONResponse:
        return _problem_response(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> JSONResponse:
        return _problem_response(500, "internal_error", f"the pool failed on {request.method} {request.url.path}: "
                                 f"{type(error).__name__}: {error}")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/status")
    async def status() -> dict[str, Any]:
        return pool.status()

    @app.get("/tasks")
    async def tasks(split: Literal["train", "eval"] | None = None) -> list[dict[str, Any]]:
        return [{"id": task.id, "prompt": task.prompt, "split": task.split}
                for task in pool.tasks.values() if split is None or task.split == split]

    @app.get("/tools")
    async def tools() -> list[dict[str, Any]]:
        return pool.tools

    @app.post("/leases", status_code=201)
    async def lease() -> dict[str, Any]:
        return {"lease_id": pool.allocate(), "env": pool.name, "tools": pool.tools,
                "lease_timeout_s": config.lease_timeout_s}

    @app.post("/leases/{lease_id}/reset")
    async def reset(lease_id: str, body: ResetBody) -> dict[str, Any]:
        task = pool.tasks.get(body.task_id)
        if task is None:
            raise PoolProblem(404, "task_not_found", f"the {pool.name} environment has no task {body.task_id!r}; "
                              f"GET /tasks lists its {len(pool.tasks)} tasks")
        return {"observation": await pool.call(lease_id, "reset", lambda env: env.reset(task))}

    @app.post("/leases/{lease_id}/step")
    async def step(lease_id: str, body: StepBody) -> dict[str, Any]:
        result = await pool.call(lease_id, "step", lambda env: env.step(Action(body.tool, body.arguments)))
        image = base64.b64encode(result.image_png).decode() if result.image_png is not None else None
        return {"observation": result.observation, "done": result.done, "info": _jsonable(result.info),
                "image_png_base64": image}

    @app.post("/leases/{lease_id}/evaluate")
    async def evaluate(lease_id: str) -> dict[str, Any]:
        outcome = await pool.call(lease_id, "evaluate", lambda env: env.evaluate())
        return {"success": outcome.success, "score": outcome.score, "detail": outcome.detail}

    @app.post("/leases/{lease_id}/heartbeat")
    async def heartbeat(lease_id: str) -> dict[str, Any]:
        return {"lease_id": lease_id, "expires_in_s": pool.heartbeat(lease_id)}

    @app.delete("/leases/{lease_id}")
    async def release(lease_id: str) -> dict[str, Any]:
        pool.release(lease_id)
        return {"lease_id": lease_id, "released": True}

    return app


def resolve_token(given: str = "") -> tuple[str, bool]:
    """The token to require: `given`, else $OPENCLAW_ENV_TOKEN, else a new random one (then True)."""
    token = given or os.environ.get(TOKEN_ENV_VAR, "")
    return (token, False) if token else (secrets.token_urlsafe(24), True)


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def serve(config: PoolConfig, token: str, options: dict[str, Any] | None = None) -> None:
    """Serve `config.env` (built by the registry with `options`) until interrupted."""
    env_class(config.env)  # an unknown name fails here, naming the choices, before anything binds
    if not _is_loopback(config.host):
        log.warning("binding %s: anyone who can reach it and holds the token runs commands in these environments",
                    config.host)
    app = create_app(config, functools.partial(make_env, config.env, **(options or {})), token)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
