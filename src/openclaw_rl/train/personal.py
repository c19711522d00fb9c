"""Personal adapters: each user's samples train that user's LoRA only, with its own history.

    DATA_DIR/personal/<user>/v000003/adapter_model.safetensors   the user's adapter, peft's files
    DATA_DIR/personal/<user>/LATEST                              the version served to them
    DATA_DIR/personal/<user>/gate-anchors.json                   their update gate's anchors
    DATA_DIR/personal/<user>/moments.safetensors                 their AdamW moments (train/personal_state.py)
    store.adapter_versions                                       every candidate: parent, gate decision

One LoRA trainer (train/trainer.py, `lora = true`) serves every user in turn: `train`
loads the user's adapter and their own AdamW moments, takes one step on their samples,
lets the user's own update gate decide, and publishes an accepted result under the user's
next version to every receiver (the local engine's `load_adapter`: engine/adapters.py).
Another user's step never starts from, or moves, this user's adapter or moments, so two
users who want opposite things no longer pull the same weights. The shared model is not
trained meanwhile: every adapter is a delta on the same frozen base, which is what a user
without an adapter is served (the model, or the shared model of the last promotion:
train/promotion.py). `run_personal` is the loop that feeds it (`serve
--personal-adapters on`, compose.py).

Decisions and why (docs/personal-adapters.md):

- Rank 8, alpha 16, every attention and MLP projection, lr 1e-4 (`personal_config`):
  the trainer's own LoRA targets, at half its default rank, since decode reads every
  adapter in a batch on every step (bench/personal_adapters.py measures the cost).
- A user with fewer than `min_samples` samples keeps the shared model: one noisy turn
  should not fork a personal model.
- One `Gate` (train/gate.py) per user, built when their first step is about to run, its
  snapshot their served adapter (the base for a new user): the candidate is held to what
  this user is served now and to their anchors, by the same checks as the shared model's.
  A rejected candidate takes a number (recorded with why) but is never written or served,
  and the user's moments stay those before the step.
- Version numbers only grow, per user, across rejections, rollbacks and restarts (the
  highest of the files and the store): a number names one set of weights forever.
- Rollback writes the chosen version's weights as a new version, with fresh moments and
  a gate rebuilt on them; reset and delete remove the user's directory (their saved moments
  with it), their history in the store and unload the adapter.
- Moments and gates of at most `max_resident` users stay in memory, the least recently
  stepped leaving first; every user's moments are on disk (train/personal_state.py).
- During a user's step the trainer's version is theirs (their served version, then the
  candidate's number), so their gate's snapshot and anchors are named by the user's versions.
- An admin can turn a user's adapter off (`set_on`, kept in the store's `adapters_off`):
  the user is served the shared model, and the adapter is frozen, not trained (their
  samples wait, unclaimed) and not served, a rollback meanwhile included; on again, its
  current version serves and training resumes. Frozen rather than trained unseen: an
  admin turns an adapter off because of what it learnt, so it should not go on learning.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import LoraAdapter
from openclaw_rl.store import Store
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.personal_state import MAX_RESIDENT, UserStates
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import Sample

log = logging.getLogger(__name__)

RANK, ALPHA, LR = 8, 16, 1e-4
MIN_SAMPLES = 4
_USER = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")

GateFor = Callable[[Path], Gate]  # a user's gate over the trainer, its anchors kept at the path given


def personal_config(config: TrainConfig) -> TrainConfig:
    """`config` as a personal-adapter trainer runs it: LoRA at the documented rank, alpha and lr."""
    return replace(config, lora=True, lora_rank=RANK, lora_alpha=ALPHA, lr=config.lr or LR)


def personal_claims(method: str) -> str:
    """The name personal steps claim samples under (store.claims): apart from the shared
    trainer's, so a turn trained into a user's adapter is still there for the shared model."""
    return f"personal:{method}"


def adapter_dir(data_dir: str | Path, user: str) -> Path:
    """DATA_DIR/personal/<user>: the user's adapter versions; a name no directory can have is refused."""
    if not _USER.match(user):
        raise ValueError(f"user name {user!r} cannot name an adapter directory: use letters, digits and _.@-")
    return Path(data_dir) / "personal" / user


def remove_adapter(data_dir: str | Path, user: str, store: Store | None) -> bool:
    """Delete `user`'s adapter files and their history in `store` (what a reset removes, less
    what a running engine serves: `PersonalAdapters.reset`); whether they had any."""
    directory = adapter_dir(data_dir, user)
    had = directory.is_dir()
    shutil.rmtree(directory, ignore_errors=True)
    if store is not None:
        had = store.delete_adapter_history(user) > 0 or had
    return had


class AdapterReceiver(Protocol):
    """What serves personal adapters (engine/local.py's LocalEngine, engine/vllm.py's VLLMEngine)."""

    async def load_adapter(self, user: str, adapter: LoraAdapter, version: int) -> None: ...

    async def drop_adapter(self, user: str) -> None: ...


class PersonalAdapters:
    def __init__(self, trainer: Trainer, data_dir: str | Path, receivers: Sequence[AdapterReceiver], *,
                 min_samples: int = MIN_SAMPLES, keep: int = 5, store: Store | None = None,
                 gate: GateFor | None = None, max_resident: int = MAX_RESIDENT) -> None:
        """`store`: where each version is recorded (and pins read); `gate`: each user's update gate;
        `max_resident`: the users whose moments and gate stay in memory (train/personal_state.py)."""
        if not trainer.config.lora:
            raise ValueError("personal adapters need a LoRA trainer (build it with personal_config(config))")
        if min_samples < 1:
            raise ValueError(f"min_samples is {min_samples}; a user's step needs at least 1 sample")
        self.trainer, self.receivers = trainer, list(receivers)
        self.root = Path(data_dir) / "personal"
        self.min_samples, self.keep, self.store, self.gate = min_samples, keep, store, gate
        self._initial = trainer.trainable_state_dict()  # every new user's adapter starts here (B = 0: the base)
        # user -> their AdamW moments and gate (its snapshot their served adapter), between their steps
        self.states = UserStates(self.root, trainer.optimizer.state_dict(), max_resident)
        self._lock = asyncio.Lock()  # one user's step at a time: the trainer holds one adapter
        self._off: set[str] = set(store.adapters_off()) if store is not None else set()  # served the shared model

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
                for receiver in self.receivers:
                    await receiver.drop_adapter(user)
        log.info("%s's personal adapter turned %s%s", user, "on" if on else "off", f" by {by}" if by else "")

    async def train(self, user: str, samples: Sequence[Sample]) -> int | None:
        """One step of `user`'s adapter on their `samples` (the caller's, all of this user), published
        as their next version; None, and nothing served, while they have fewer than `min_samples`
        or when their gate rejects the candidate."""
        if len(samples) < self.min_samples:
            return None
        async with self._lock:
            version, adapter = await asyncio.to_thread(self._step, user, list(samples))
            if adapter is not None:
                await self._publish(user, adapter, version)
        return version if adapter is not None else None

    async def rollback(self, user: str, version: int) -> int:
        """Serve `user` the weights of their `version` again, as a new version (returned)."""
        if version not in self.versions(user):
            raise ValueError(f"{user!r} has no kept adapter version {version} (kept: {self.versions(user)})")
        async with self._lock:
            adapter = self.adapter(user, version)
            new = self._next_number(user)
            weight_files.write_version(self._dir(user), new, adapter, keep=self.keep, parent=version,
                                       protect=self._protected(user))
            # the moments belong to the weights rolled back from; the gate is rebuilt on the rolled-back ones
            self.states.forget(user)
            if self.store is not None:
                await asyncio.to_thread(self.store.record_adapter_version, user, new, parent=version,
                                        gate="rollback", reason=f"rollback to v{version}")
            await self._publish(user, adapter, new)
        return new

    async def reset(self, user: str) -> None:
        """Delete `user`'s adapter and its whole history; they are served the shared model."""
        async with self._lock:
            self.states.forget(user)
            await asyncio.to_thread(remove_adapter, self.root.parent, user, self.store)
            for receiver in self.receivers:
                await receiver.drop_adapter(user)

    async def delete(self, user: str) -> None:
        """Deleting a user: their adapter, its history and an admin's switch of it."""
        await self.reset(user)
        if self.store is not None:
            await asyncio.to_thread(self.store.turn_adapter_on, user)
        self._off.discard(user)

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

    def _step(self, user: str, samples: list[Sample]) -> tuple[int, LoraAdapter | None]:
        """Train, gate, write: (the candidate's number, its adapter; None when rejected)."""
        latest = self.current(user)
        state = self._initial if latest is None else self.adapter(user, latest).state_dict
        self.trainer.load_trainable_state_dict(state)
        self.trainer.optimizer.load_state_dict(self.states.moments(user, latest))
        self.trainer.return_to(latest or 0, None)  # the gate's snapshot: named by the user's version
        gate = self._gate_of(user)
        self.trainer.step(samples)
        version, turn_ids = self._next_number(user), [s.turn_id for s in samples]
        self.trainer.return_to(version, latest)
        decision = gate.decide() if gate is not None else None
        record = {"parent": latest, "turn_ids": turn_ids,
                  "reason": decision.reason if decision else None, "checks": decision.checks if decision else None}
        if decision is not None and not decision.accepted:
            self._record(user, version, gate="rejected", **record)
            log.warning("%s's adapter v%d rejected by the update gate, not served: %s", user, version, decision.reason)
            return version, None
        if gate is not None:
            gate.accept()
        adapter = self.trainer.lora_adapter()
        weight_files.write_version(self._dir(user), version, adapter, keep=self.keep, parent=latest,
                                   protect=self._protected(user))
        self.states.save(user, version, self.trainer.optimizer.state_dict(), gate)  # after the version it follows
        self._record(user, version, gate="accepted" if decision else "ungated", **record)
        return version, adapter

    def _gate_of(self, user: str) -> Gate | None:
        """The user's gate, built now (with the user's served adapter in the trainer) if new."""
        if self.gate is None:
            return None
        make = self.gate

        def build() -> Gate:
            self._dir(user).mkdir(parents=True, exist_ok=True)
            return make(self._dir(user) / "gate-anchors.json")
        return self.states.gate(user, build)

    def _record(self, user: str, version: int, **record) -> None:
        if self.store is not None:
            self.store.record_adapter_version(user, version, **record)

    async def _publish(self, user: str, adapter: LoraAdapter, version: int) -> None:
        if not self.is_on(user):  # kept as their current version, served when turned on
            return
        for receiver in self.receivers:
            await receiver.load_adapter(user, adapter, version)


async def run_personal(store: Store, personal: PersonalAdapters, config: TrainConfig, stop: asyncio.Event,
                       flush: Flush | None = None) -> None:
    """Until `stop`: each user with `min_samples` ready samples (and their adapter on) gets one
    step of their adapter on at most `batch_size` of them (`min_samples` if more), the oldest first (claimed as
    `personal_claims`, so the shared trainer's claims are untouched). The staleness window is the shared policy's: a
    user's behaviour log-probs were sampled under their own adapter, which the trainer's
    importance ratio corrects. `flush`: set `done` once no user has enough ready."""
    claims = personal_claims(personal.trainer.method.name)
    assemble = _assembly(personal.trainer, config, personal.gate is not None)
    while not stop.is_set():
        flushing = flush is not None and flush.requested.is_set()
        ready = await asyncio.to_thread(store.ready_owners, claims)
        stepped = False
        for user in sorted(u for u, count in ready.items() if count >= personal.min_samples and personal.is_on(u)):
            # a step takes at least min_samples: with a smaller --batch-size (the demo's 2) none ever would
            samples, _ = await asyncio.to_thread(lambda owner=user: store.claim_samples(
                claims, max(config.batch_size, personal.min_samples), store.policy_version(), config.max_staleness,
                None, personal.min_samples, assemble, None, owner))
            if samples:
                await personal.train(user, samples)
                stepped = True
        if stepped:
            continue
        if flushing:
            flush.done.set()  # type: ignore[union-attr]
        try:
            await asyncio.wait_for(stop.wait(), config.train_poll_interval_s)
        except TimeoutError:
            pass


def _assembly(trainer: Trainer, config: TrainConfig, gated: bool) -> Callable[[Sample], Sample | str]:
    """The method's assembly; with a gate, refusing the turns it keeps as probes (as train/runner.py does)."""
    assemble = trainer.method.assemble

    def personal_sample(sample: Sample) -> Sample | str:
        if gated and sample.turn_id % config.gate_probe_every == 0:
            return f"a probe of the update gate (one turn in {config.gate_probe_every}): never trained on"
        return assemble(sample) if assemble is not None else sample
    return personal_sample
