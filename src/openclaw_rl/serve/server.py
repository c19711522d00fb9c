"""What every route of the serving app reads: the engine, the store, the config, metrics, users;
and who may reach it (`check_exposure`).

Its own module so that the API modules (chat, Responses, Messages, completions) and the
request path can name it without importing the app that imports them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import Request

from openclaw_rl.config import ConfigError, ServeConfig
from openclaw_rl.engine.base import Engine
from openclaw_rl.net import is_loopback
from openclaw_rl.serve.limits import UserLimits
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.schema import ApiError
from openclaw_rl.store import Store
from openclaw_rl.users import User, Users

log = logging.getLogger(__name__)


class LoopDied(RuntimeError):
    """A background loop of the server (a judge's, the trainer's) stopped on an error."""


class PersonalAdmin(Protocol):
    """What the API reaches of the users' personal adapters (train/personal.py's `PersonalAdapters`)."""

    def versions(self, user: str) -> list[int]: ...  # the versions whose weights are kept

    def current(self, user: str) -> int | None: ...  # the version the user is served; None: the base model

    async def rollback(self, user: str, version: int) -> int: ...  # the new version serving `version`'s weights

    async def reset(self, user: str) -> None: ...  # the adapter and its history deleted

    async def delete(self, user: str) -> None: ...  # reset, and an admin's switch of it removed (a deleted user)

    def is_on(self, user: str) -> bool: ...  # False: an admin turned it off, the user gets the shared model

    async def set_on(self, user: str, on: bool, by: str | None = None) -> None: ...  # an admin's switch, kept


@dataclass
class Server:
    engine: Engine
    tokenizer: Any
    store: Store
    config: ServeConfig
    model_name: str
    metrics: Metrics
    users: Users = None  # type: ignore[assignment]  # default: the data dir's users and config.api_key
    limits: UserLimits = None  # type: ignore[assignment]  # default: the config's per-user limits
    # background loops (judge, trainer) that stopped on an error while serving went on: name -> the error
    failed_loops: dict[str, str] = field(default_factory=dict)
    personal: PersonalAdmin | None = None  # with --personal-adapters on (compose.py)

    def sampling(self, temperature: float | None, top_p: float | None) -> tuple[float, float]:
        """A request's (temperature, top_p): what it set, else the server's defaults
        (--default-temperature, --default-top-p). The turn records the values used, so the
        trainer scores its tokens under the distribution they were sampled from."""
        config = self.config
        return (config.default_temperature if temperature is None else temperature,
                config.default_top_p if top_p is None else top_p)

    def check_loops(self) -> None:
        """Raise LoopDied, naming each stopped loop and its error, if any background loop died:
        for drivers that would otherwise go on without it (simulate, agent)."""
        if self.failed_loops:
            raise LoopDied("; ".join(f"{name}: {error}" for name, error in self.failed_loops.items()))

    def wait_for(self, event: threading.Event, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) for `event`, saying a loop that dies meanwhile at once
        (LoopDied) rather than after `timeout_s`; whether the event was set in time."""
        deadline = time.monotonic() + timeout_s
        while not event.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            self.check_loops()
            if time.monotonic() >= deadline:
                return False
        return True

    def __post_init__(self) -> None:
        if self.users is None:
            self.users = Users(self.store.data_dir, self.config.api_key)
        if self.limits is None:
            config = self.config
            self.limits = UserLimits.of(config.user_requests_per_minute, config.user_feedback_per_minute,
                                        config.user_max_streams)


Background = Callable[[asyncio.Event], Awaitable[None]]  # a loop run beside the app until the event is set


def caller_of(request: Request) -> User:
    """The user the guard (serve/app.py) authenticated this request as."""
    return request.scope["state"]["user"]


def exposure_problem(config: ServeConfig, users: Users) -> str | None:
    """Why serving `config.host` now would let other machines in without a key (no key
    configured, a non-loopback bind), or None. Checked at start (`check_exposure`) and by the
    guard on every request (serve/app.py), so a server whose last key goes away later refuses
    (503) rather than serve the network open."""
    if users.keys_configured or is_loopback(config.host):
        return None
    return (f"refusing to serve on {config.host} with no API key: anyone who can reach it could read and steer "
            f"every conversation. Add a user (openclaw-rl users add NAME --data-dir {config.data_dir}) or pass "
            "--api-key KEY, or bind to 127.0.0.1")


def check_exposure(config: ServeConfig, users: Users) -> None:
    """Refuse to serve other machines without a key; say what is in force either way (`serve`,
    and the Ray gateway, whose replicas need the same keys)."""
    if users.keys_configured:
        log.info("API keys required: %s", "users of " + str(users.path) if users.list() else "--api-key")
        return
    if (problem := exposure_problem(config, users)) is not None:
        raise ConfigError(problem)
    log.warning("no API key configured: serving on loopback (%s) only, every request is the local admin; "
                "add users with `openclaw-rl users add NAME --data-dir %s`", config.host, config.data_dir)


def owner_for(request: Request, user: str | None) -> str:
    """Whose data a request acts on: the caller's, or for an admin `user`'s; another user's name
    is unknown to a non-admin (a 404, as if there were no such user)."""
    caller = caller_of(request)
    if user is None or user == caller.name:
        return caller.name
    if not caller.admin:
        raise ApiError(404, f"no user {user[:64]!r}", param="user", code="user_not_found")
    return user
