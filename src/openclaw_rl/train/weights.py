"""Publishing weights: one interface from the trainer to whatever serves the policy.

    trainer --(version v)--> Publisher.publish --> for each channel: channel.publish(v, weights, parent=...)
                                                      EngineChannel    an engine in this process
                                                      FilesChannel     DATA_DIR/weights, for other processes
                                                      RayChannel       replicas and judges (cluster/actors.py)
                                                      CallbackChannel  a function (the simulator's evaluator)
    a process without the trainer:  follow(FilesChannel(data_dir), engine)   (or channel.refresh(engine))

A `WeightsChannel` is one transport: `publish(version, weights, parent=)`, `latest()` (the
newest version its receivers hold, None when it cannot tell) and `takes_lora_adapters`.
The trainer hands each new version to ONE object, the `Publisher`; the update gate
(train/gate.py) decides before that, in `train/runner._new_version`, so a rejected version
reaches no transport at all.

Decisions and why:

- What travels is chosen once per channel, from what its receiver declares: a LoRA
  trainer's adapter alone (a few MB, no merge) to a channel whose receivers hot-load
  adapters (an engine with `loads_lora_adapters`, Ray subscribers that all do), the full
  weights (LoRA merged) to any other. The files channel's readers are unknown to the
  trainer, so it carries full weights, which every engine takes.
- Channels are published to in the order given, each one completely before the next, and
  the store learns of v only after the Publisher returns (train/runner.py): no turn can
  claim a version that serving does not have yet.
- Who owns the policy version: the store (`Store.policy_version`, `set_policy_version`).
  It is the number the trainer announced last, after every channel took it; status,
  resume and version numbering read it (with `Store.highest_policy_version`). Every
  engine reports the version it serves (`engine.policy_version`, changed only by its
  `load_weights`), and every turn records the version of the engine that sampled it, never
  the store's. The trainer's `policy_version` is the number of the weights it holds: the
  next announcement, resumed from the newest published version (or checkpoint) and renumbered
  only when a higher number served weights that are lost (compose.load_trainer). A channel keeps no number of its
  own beyond its transport (the files channel's LATEST tells readers in other processes
  which complete version is newest).
- A new transport is one class with these three members, in the module of the code that
  owns its dependency (here for plain Python, cluster/ for Ray), plus the line that puts
  it in a Publisher's channel list (docs/architecture.md, "Publishing weights").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import Engine, LoraAdapter, StoredWeights, Weights

if TYPE_CHECKING:
    from openclaw_rl.train.trainer import Trainer

log = logging.getLogger(__name__)

Follower = Callable[[asyncio.Event], Awaitable[None]]  # a background loop: runs until the event is set
Exports = dict[bool, Weights]  # Publisher.export: keyed by "as a LoRA adapter"


class WeightsChannel(Protocol):
    @property
    def takes_lora_adapters(self) -> bool:
        """Whether `publish` may be handed a `LoraAdapter`; else it gets full weights."""
        ...

    async def publish(self, version: int, weights: Weights, *, parent: int | None) -> None:
        """Deliver policy `version` (trained, or renumbered, from `parent`); return once its
        receivers have it (or, for a transport that cannot know, once it is durable)."""
        ...

    async def latest(self) -> int | None:
        """The newest version this channel's receivers hold; None when it cannot tell."""
        ...


class Publisher:
    """The one object a trainer hands each new policy version to (train/runner.py).

    `full` and `adapter` export the trainer's weights (`for_trainer`); each is computed at
    most once per version, in a worker thread, whatever the number of channels.
    """

    def __init__(self, channels: Sequence[WeightsChannel], full: Callable[[], Weights],
                 adapter: Callable[[], LoraAdapter] | None = None) -> None:
        self.channels = list(channels)
        self._full, self._adapter = full, adapter

    @classmethod
    def for_trainer(cls, trainer: Trainer, channels: Sequence[WeightsChannel]) -> Publisher:
        return cls(channels, trainer.policy_state_dict, trainer.lora_adapter if trainer.config.lora else None)

    async def publish(self, version: int, *, parent: int | None) -> None:
        """Deliver `version` to every channel, in order (the gate has let it through: train/runner.py)."""
        await self.deliver(await asyncio.to_thread(self.export), version, parent=parent)

    def export(self) -> Exports:
        """Copies of the trainer's weights now, in every form a channel takes (the full weights
        and/or the adapter), each computed once. A trainer that steps on meanwhile changes
        none of them: the runner exports, then delivers while the next step runs."""
        exported: Exports = {}
        for channel in self.channels:
            if (as_adapter := self._as_adapter(channel)) not in exported:
                exported[as_adapter] = (self._adapter if as_adapter else self._full)()  # type: ignore[misc]
        return exported

    def _as_adapter(self, channel: WeightsChannel) -> bool:
        """Whether `channel` gets the adapter (a LoRA trainer, a receiver that loads adapters)."""
        return self._adapter is not None and channel.takes_lora_adapters

    async def deliver(self, exports: Exports, version: int, *, parent: int | None) -> None:
        """Hand `exports` (from `export`) to every channel, in order, each completely before the next."""
        for channel in self.channels:
            await channel.publish(version, exports[self._as_adapter(channel)], parent=parent)

    async def catch_up(self, version: int, *, parent: int | None) -> None:
        """Deliver the trainer's held `version` to the channels whose receivers lack it: a resumed
        trainer's weights, before anything serves (the files channel may already have them).
        Version 0 is the base model every receiver starts from: there is nothing to deliver."""
        if version == 0:
            return
        latest = [await channel.latest() for channel in self.channels]
        behind = Publisher([c for c, v in zip(self.channels, latest) if v is None or v < version],
                           self._full, self._adapter)
        await behind.deliver(await asyncio.to_thread(behind.export), version, parent=parent)


class EngineChannel:
    """In process: hands an engine the weights. The local engine swaps the tensors in between
    decode steps; a vLLM or SGLang engine carries them to its server (engine/remote.py)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def takes_lora_adapters(self) -> bool:
        return self.engine.loads_lora_adapters

    async def publish(self, version: int, weights: Weights, *, parent: int | None = None) -> None:
        await self.engine.load_weights(weights, version)

    async def latest(self) -> int | None:
        return self.engine.policy_version


class FilesChannel:
    """Split processes: full weights in DATA_DIR/weights, the newest KEEP versions, written by
    the one atomic versioned writer (engine/weight_files.py says what a reader may rely on).

    A version number names one set of weights forever: `write` refuses a version that is not
    above every version the channel has seen (LATEST, and any version on disk, which a crash
    between the rename and LATEST can leave above it), so a resumed trainer can never replace
    v11 by other weights that a serve-only process would never load.
    """

    KEEP = 3
    takes_lora_adapters = False  # its readers are unknown to the trainer: every engine takes full weights

    def __init__(self, data_dir: str | Path) -> None:
        self.root = Path(data_dir) / "weights"

    async def publish(self, version: int, weights: Weights, *, parent: int | None = None) -> None:
        await asyncio.to_thread(self.write, version, weights, parent)

    async def latest(self) -> int | None:
        return await asyncio.to_thread(self.highest_version)

    def write(self, version: int, weights: Weights, parent: int | None = None) -> StoredWeights:
        """Publish `version` now (synchronously); see the class docstring for what is refused."""
        highest = self.highest_version()
        if highest is not None and version <= highest:
            raise ValueError(
                f"policy version {version} is not above v{highest}, which {self.root} already has: a version names "
                "one set of weights forever; build the trainer with compose.load_trainer, which numbers its versions "
                "above every version published or recorded")
        return weight_files.write_version(self.root, version, weights, keep=self.KEEP, parent=parent)

    def latest_version(self) -> int | None:
        """The newest complete version (LATEST), or None if nothing was published."""
        return weight_files.latest_version(self.root)

    def highest_version(self) -> int | None:
        return weight_files.highest_version(self.root)

    def stored(self, version: int) -> StoredWeights:
        return weight_files.stored(self.root, version)

    def read(self, version: int) -> Weights:
        """The weights of a published version (CPU tensors)."""
        return weight_files.read(self.stored(version))

    def parent_version(self, version: int) -> int | None:
        return weight_files.parent_version(self.stored(version))

    async def refresh(self, engine: Engine) -> int | None:
        """Load the newest published version into `engine` if it is newer than the one the engine
        serves; the version loaded, else None. The engine gets the stored version itself: a remote
        engine's server reads it where it lies, the local engine reads the tensors."""
        latest = await asyncio.to_thread(self.latest_version)
        if latest is None or latest <= engine.policy_version:
            return None
        await engine.load_weights(await asyncio.to_thread(self.stored, latest), latest)
        log.info("policy v%d loaded from %s", latest, self.root)
        return latest


@dataclass
class CallbackChannel:
    """A function of (version, weights) as a channel: the simulator's evaluator, tests. It cannot
    tell what its receiver holds, so `Publisher.catch_up` always calls it. It runs in a worker
    thread, so it may block (the evaluator holds serving at a version while it scores it:
    the next version's delivery waits) without stalling the event loop."""

    deliver: Callable[[int, Weights], None]
    takes_lora_adapters: bool = False

    async def publish(self, version: int, weights: Weights, *, parent: int | None = None) -> None:
        await asyncio.to_thread(self.deliver, version, weights)

    async def latest(self) -> int | None:
        return None


def follow(channel: FilesChannel, engine: Engine, interval_s: float = 2.0) -> Follower:
    """The one watch loop of a process without the trainer (`serve --no-train`, Ray replicas
    beside `openclaw-rl train`): `channel.refresh(engine)` every `interval_s`.

    A failed read (on NFS, a version pruned by the trainer's machine mid-load reads as ESTALE)
    keeps the current version and is tried again at the next poll."""

    async def watch(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await channel.refresh(engine)
            except Exception as error:  # noqa: BLE001 - the watcher must outlive any one bad read
                log.warning("could not load new weights from %s (will retry): %s", channel.root, error)
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass

    return watch
