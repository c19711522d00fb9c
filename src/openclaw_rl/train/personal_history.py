"""Each user's personal adapter versions, on disk and in the store: serving them, rolling them
back, resetting and switching them, with or without the trainer in this process
(train/personal.py's `PersonalAdapters` adds the trainer to this class).

    DATA_DIR/personal/<user>/v000003/     a version of the user's adapter (peft's files)
    DATA_DIR/personal/<user>/LATEST       the version the user is served
    DATA_DIR/personal-adapters.lock       held by whoever writes or removes a user's versions
    store.adapter_versions                every candidate; a user's newest one not rejected serves

Across processes (docs/personal-adapters.md, "Across processes"): `serve --personal-adapters on
--no-train` beside `openclaw-rl train --personal-adapters on` on one data dir and store, the
channel the shared weights take, versions as files in the data dir and records in the store.

Decisions and why:

- **The store says what serves.** The trainer writes a user's version (files, then LATEST) and
  only then records it in the store, so a version the store names has its files. A serving
  process without the trainer asks the store (`sync`, every `FOLLOW_INTERVAL_S`, one query for
  every user) for each user's newest version that may serve, loads those its engine lacks from
  where they lie, and drops the adapters of users the store no longer holds (reset, deleted) or
  has turned off. A user's new version is served within a second of its record.
- **One writer at a time, across processes.** Rollback, reset and delete stay the serving
  process's (the API is there and answers at once, as in one process), and the trainer writes a
  user's versions in its step. Both hold one file lock (`fcntl.flock` on
  DATA_DIR/personal-adapters.lock) while they number, write or remove, the trainer for its
  whole step, as the in-process lock did: a number is never written twice, a rollback waits
  for the step in progress, and a step never lands on an adapter reset meanwhile. The trainer
  then starts its next step from what the user is served now: a rollback's version, with
  fresh moments and a gate rebuilt on it (train/personal_state.py drops state kept for
  another version). One lock for every user, not one each: a lock file per user would outlive
  a deleted user under their name. flock holds across the processes of one machine; across
  machines only where the shared storage carries it (untested), so keep the trainer and the
  server on one machine where in doubt.
- **Samples of a deleted user are not trained.** The trainer, holding the lock, keeps only the
  samples the store still has (deleting a user's data deletes them first): a step claimed
  before the deletion finished no longer brings their adapter back.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import LoraAdapter, StoredWeights
from openclaw_rl.store import Store
from openclaw_rl.train.personal_state import MOMENTS_FILE
from openclaw_rl.train.weights import Follower

log = logging.getLogger(__name__)

LOCK_FILE = "personal-adapters.lock"
FOLLOW_INTERVAL_S = 1.0  # a serving process asks the store for new versions this often (one indexed query)
_USER = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")


def adapter_dir(data_dir: str | Path, user: str) -> Path:
    """DATA_DIR/personal/<user>: the user's adapter versions; a name no directory can have is refused."""
    if not _USER.match(user):
        raise ValueError(f"user name {user!r} cannot name an adapter directory: use letters, digits and _.@-")
    return Path(data_dir) / "personal" / user


def remove_adapter(data_dir: str | Path, user: str, store: Store | None) -> bool:
    """Delete `user`'s adapter files and their history in `store` (what a reset removes, less
    what a running engine serves: `AdapterHistory.reset`); whether they had any."""
    directory = adapter_dir(data_dir, user)
    had = directory.is_dir()
    shutil.rmtree(directory, ignore_errors=True)
    if store is not None:
        had = store.delete_adapter_history(user) > 0 or had
    return had


@contextlib.contextmanager
def writing(data_dir: str | Path) -> Iterator[None]:
    """Hold the data dir's personal adapter lock (blocking): the one writer of users' versions."""
    path = Path(data_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:  # a lock of its own: flock excludes other open files of this process too
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


class AdapterReceiver(Protocol):
    """What serves personal adapters (engine/local.py's LocalEngine, engine/vllm.py's VLLMEngine)."""

    async def load_adapter(self, user: str, adapter: LoraAdapter | StoredWeights, version: int) -> None: ...

    async def drop_adapter(self, user: str) -> None: ...


class AdapterHistory:
    """Every user's adapter versions in one data dir and store, served to `receivers`."""

    def __init__(self, data_dir: str | Path, receivers: Sequence[AdapterReceiver], *, keep: int = 5,
                 store: Store | None = None) -> None:
        """`receivers`: the engines that serve the adapters; `store`: where each version is recorded
        (and pins and switches read); `keep`: the newest versions kept per user, besides the pinned."""
        self.root = Path(data_dir) / "personal"
        self.receivers, self.keep, self.store = list(receivers), keep, store
        self.loaded: dict[str, int] = {}  # user -> the version handed to the receivers
        self._lock = asyncio.Lock()  # this process's: one change of the users' adapters at a time
        self._off: set[str] = set(store.adapters_off()) if store is not None else set()  # served the shared model
        self._unreadable: set[tuple[str, int]] = set()  # named by the store, not on disk: said once

    def users(self) -> list[str]:
        """The users with an adapter on disk."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []

    def versions(self, user: str) -> list[int]:
        """The user's kept adapter versions, oldest first."""
        return weight_files.kept_versions(self._dir(user))

    def current(self, user: str) -> int | None:
        """The version the user is served, None while they get the shared model."""
        return weight_files.latest_version(self._dir(user))

    def adapter(self, user: str, version: int) -> LoraAdapter:
        weights = weight_files.read(weight_files.stored(self._dir(user), version))
        assert isinstance(weights, LoraAdapter)
        return weights

    async def load_all(self) -> list[str]:
        """Serve every user the adapter version they were last served (a restart); who has one."""
        users = [user for user in self.users() if self.current(user) is not None]
        for user in users:
            version = self.current(user)
            assert version is not None
            await self._publish(user, self.adapter(user, version), version)
        return users

    async def sync(self) -> list[str]:
        """Serve every user what the store says (a trainer in another process records each
        version after writing it); the users whose adapter changed here."""
        assert self.store is not None, "sync reads the store: build the history with one"
        store = self.store
        async with self._lock:  # after a rollback here, never before it: the store then names the rollback
            served, off = await asyncio.to_thread(lambda: (store.served_adapter_versions(), set(store.adapters_off())))
            self._off = off
            gone = sorted(user for user in self.loaded if user not in served or user in off)
            for user in gone:
                await self._drop(user)
            changed = []
            for user, version in sorted(served.items()):
                if user not in off and self.loaded.get(user) != version and await self._load(user, version):
                    changed.append(user)
        return gone + changed

    async def refresh_switches(self) -> None:
        """Read the admins' switches again (a serving process may have turned an adapter off or on)."""
        if self.store is not None:
            async with self._lock:  # not between a switch's store write and its own update of the set
                self._off = set(await asyncio.to_thread(self.store.adapters_off))

    def is_on(self, user: str) -> bool:
        """Whether the user's adapter may serve and train (an admin has not turned it off)."""
        return user not in self._off

    async def set_on(self, user: str, on: bool, by: str | None = None) -> None:
        """Turn `user`'s adapter off (they are served the shared model; it is kept, frozen) or back on
        (its current version serves again, if they have one); `by`: the admin, for the record."""
        self._dir(user)  # a name no adapter directory can have is refused here too
        async with self._lock:
            if self.store is not None:
                if on:
                    await asyncio.to_thread(self.store.turn_adapter_on, user)
                else:
                    await asyncio.to_thread(self.store.turn_adapter_off, user, by)
            if on:
                self._off.discard(user)
                if (version := self.current(user)) is not None:
                    await self._publish(user, self.adapter(user, version), version)
            else:
                self._off.add(user)
                await self._drop(user)
        log.info("%s's personal adapter turned %s%s", user, "on" if on else "off", f" by {by}" if by else "")

    async def rollback(self, user: str, version: int) -> int:
        """Serve `user` the weights of their `version` again, as a new version (returned)."""
        async with self._lock:
            new, adapter = await asyncio.to_thread(self._roll_back, user, version)
            await self._publish(user, adapter, new)
        return new

    async def reset(self, user: str) -> None:
        """Delete `user`'s adapter and its whole history; they are served the shared model."""
        async with self._lock:
            await asyncio.to_thread(self._remove, user)
            await self._drop(user)

    async def delete(self, user: str) -> None:
        """Deleting a user: their adapter, its history and an admin's switch of it."""
        await self.reset(user)
        if self.store is not None:
            await asyncio.to_thread(self.store.turn_adapter_on, user)
        self._off.discard(user)

    def _roll_back(self, user: str, version: int) -> tuple[int, LoraAdapter]:
        with writing(self.root.parent):
            if version not in self.versions(user):
                raise ValueError(f"{user!r} has no kept adapter version {version} (kept: {self.versions(user)})")
            adapter = self.adapter(user, version)
            new = self._next_number(user)
            weight_files.write_version(self._dir(user), new, adapter, keep=self.keep, parent=version,
                                       protect=self._protected(user))
            self._forget_state(user)  # the moments belong to the weights rolled back from
            self._record(user, new, parent=version, gate="rollback", reason=f"rollback to v{version}")
        return new, adapter

    def _remove(self, user: str) -> None:
        with writing(self.root.parent):
            self._forget_state(user)
            remove_adapter(self.root.parent, user, self.store)

    def _forget_state(self, user: str) -> None:
        """The user's trainer state goes (a rollback, a reset): here their moments on disk."""
        (self._dir(user) / MOMENTS_FILE).unlink(missing_ok=True)

    def _dir(self, user: str) -> Path:
        return adapter_dir(self.root.parent, user)

    def _next_number(self, user: str) -> int:
        on_disk = weight_files.highest_version(self._dir(user)) or 0
        return max(on_disk, self.store.highest_adapter_version(user) if self.store is not None else 0) + 1

    def _protected(self, user: str) -> frozenset[int]:
        """Versions pruning keeps: the pinned ones and the one served."""
        pinned = self.store.pinned_adapter_versions(user) if self.store is not None else set()
        served = self.current(user)
        return frozenset(pinned | ({served} if served is not None else set()))

    def _record(self, user: str, version: int, **record) -> None:
        if self.store is not None:
            self.store.record_adapter_version(user, version, **record)

    async def _load(self, user: str, version: int) -> bool:
        """Serve `user` their `version` from where it lies on disk; whether it was there."""
        try:
            stored = await asyncio.to_thread(weight_files.stored, self._dir(user), version)
        except (FileNotFoundError, ValueError) as error:  # pruned meanwhile, or a name no directory can have
            if (user, version) not in self._unreadable:
                self._unreadable.add((user, version))
                log.warning("%s's adapter v%d is in the store but cannot be read (%s); still serving %s", user,
                            version, error, f"v{self.loaded[user]}" if user in self.loaded else "the shared model")
            return False
        await self._publish(user, stored, version)
        log.info("%s's adapter v%d loaded from %s", user, version, stored.path)
        return True

    async def _publish(self, user: str, adapter: LoraAdapter | StoredWeights, version: int) -> None:
        if not self.is_on(user):  # kept as their current version, served when turned on
            return
        for receiver in self.receivers:
            await receiver.load_adapter(user, adapter, version)
        self.loaded[user] = version

    async def _drop(self, user: str) -> None:
        for receiver in self.receivers:
            await receiver.drop_adapter(user)
        self.loaded.pop(user, None)


def follow_adapters(history: AdapterHistory, interval_s: float = FOLLOW_INTERVAL_S) -> Follower:
    """The watch loop of a serving process whose users' adapters train elsewhere (`serve
    --personal-adapters on --no-train`): `history.sync()` every `interval_s`. A failed read is
    logged and tried again at the next poll, as `train.weights.follow` does for the shared model."""

    async def watch(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await history.sync()
            except Exception as error:  # noqa: BLE001 - the watcher must outlive any one bad read
                log.warning("could not load new personal adapters from %s (will retry): %s", history.root, error)
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass

    return watch
