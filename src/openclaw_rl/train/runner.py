"""The training loop that runs beside serving (or on its own against the same store).

    carry out rollback requests (store.pending_requests)
    settled after adaptation? (optional) pause, or train at a lower learning rate
    claim a full batch of fresh samples, assembled for the trainer's method
    -> trainer.step (worker thread) -> the gate decides on v+1 (train/gate.py; optional)
    -> accepted: publish v+1, archive its weights, record and announce it in the store
       rejected: record why; back to the last accepted weights (or on from these)
    -> checkpoint every N steps -> TensorBoard, log, on_step

The model work runs in worker threads so the event loop keeps serving meanwhile. A step
runs at serving's CPU priority; the work around it (gate checks, exports, archive and
checkpoint writes, rollback loads) runs on the trainer's own two threads at a lower one
(nice +10, `TRAINER_NICE`), since on a machine with as many cores as busy threads (2 here)
it is a third thread that otherwise takes its share from decoding. Measured with
bench/serve_during_training.py (before serving borrowed the trainer's thread between
steps): p50 while training 2095 -> 1668 ms, p95 / idle p95 2.83 -> 1.31. Niced steps too
gave 1.18-1.41, but the trainer then got what decoding left (10-20 tokens/s in the demo)
and the demo took 9:07 instead of 6:33 (docs/experiments.md, runs F and G).
Each new version goes to one object, the `Publisher` (train/weights.py), whose channels
decide where weights go: an engine in this process, the files channel for a server in
another process, Ray's object store. The store learns about v+1 only after the publisher
returns, so no turn claims a version that serving does not have yet. Set `stop` to end
the loop: it finishes the step in progress and writes a final checkpoint. (Cancelling
the task instead skips that checkpoint; the last periodic one stays good.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from torch.utils.tensorboard import SummaryWriter

from openclaw_rl.allocator import release_freed_memory
from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.base import Weights
from openclaw_rl.store import Store
from openclaw_rl.train import checkpoint
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.versions import VersionArchive, kept_weights
from openclaw_rl.train.weights import Publisher
from openclaw_rl.users import Users

log = logging.getLogger(__name__)

TRAINER_NICE = 10  # how much lower than serving the trainer's threads run (Linux nice values, per thread)
_T = TypeVar("_T")


def _lower_priority() -> None:
    """Started in each of the trainer's threads: nice it (the threads torch starts from it inherit that)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), TRAINER_NICE))
    except (AttributeError, OSError) as error:  # not Linux, or not allowed: same priority as serving
        log.info("trainer threads keep serving's CPU priority: %s", error)


class _Work:
    """The trainer's low-priority threads: the writes of one version may overlap the next step."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="openclaw-trainer", initializer=_lower_priority)

    async def __call__(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=False)  # a step still running finishes on its own; nothing waits for it


@dataclass
class Flush:
    """Asks a running trainer to train what is ready, even less than a batch (`requested`), and
    says when a claim after that found nothing left (`done`): a finite run's last samples."""

    requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


async def run_trainer(
    store: Store,
    trainer: Trainer,
    config: TrainConfig,
    publisher: Publisher,
    stop: asyncio.Event,
    on_step: Callable[[dict[str, float]], None] | None = None,
    flush: Flush | None = None,
    gate: Gate | None = None,
    archive: VersionArchive | None = None,
    owners: Collection[str] | None = None,
) -> None:
    """Train until `stop` is set. Claims samples as the trainer's method assembles them from
    the store's per-turn samples (a turn it cannot learn from is skipped with the reason)
    and trains them with that method's loss; with `owners`, only those users' samples (a
    promotion: processes.promote).
    Every new version the `gate` accepts (all, without one) goes to `publisher` and, with an
    `archive`, is kept for rollback. `flush`: see Flush."""
    writer = SummaryWriter(str(store.data_dir / "tensorboard"))
    work = _Work()
    try:
        await _train(store, trainer, config, publisher, stop, on_step, flush, gate, archive, work, writer, owners)
    finally:
        work.close()
        writer.close()


async def _train(store: Store, trainer: Trainer, config: TrainConfig, publisher: Publisher, stop: asyncio.Event,
                 on_step: Callable[[dict[str, float]], None] | None, flush: Flush | None, gate: Gate | None,
                 archive: VersionArchive | None, work: _Work, writer: Any, owners: Collection[str] | None) -> None:
    data_dir, method, saved_step = store.data_dir, trainer.method, trainer.train_step
    assemble = _without_probes(method.assemble, config) if gate is not None else method.assemble
    if archive is not None and not archive.has(trainer.policy_version):  # the start is restorable too
        await work(_archive_start, store, trainer, archive)
    settled = False
    users = Users(data_dir)  # whether people share this server: the per-user batch cap's default
    delivery = _Delivery()
    try:
        while not stop.is_set():
            await _carry_out_requests(store, trainer, publisher, archive, gate, delivery, work)
            settled = await asyncio.to_thread(_settle, store, trainer, config, settled)
            if settled and config.settle_lr_scale == 0:
                await _wait(stop, config.train_poll_interval_s)
                continue
            flushing = flush is not None and flush.requested.is_set()
            samples, dropped = await asyncio.to_thread(
                store.claim_samples, method.name, config.claim_size, trainer.policy_version,
                config.max_staleness, trainer.train_step + 1, 1 if flushing else config.batch_size, assemble,
                per_user_share(config, users.shared), owners=owners,
            )
            if not samples:
                if flushing and delivery.idle:
                    flush.done.set()  # type: ignore[union-attr]
                await _wait(stop, config.train_poll_interval_s)
                continue
            version = trainer.policy_version
            stats = await asyncio.to_thread(trainer.step, samples)  # at serving's priority: see the docstring
            stats["dropped_stale"], stats["samples"] = float(len(dropped)), float(len(samples))
            if trainer.policy_version != version:
                await _new_version(store, trainer, config, publisher, gate, archive,
                                   [s.turn_id for s in samples], stats, delivery, work)
            else:
                await delivery.wait()
                await asyncio.to_thread(store.set_policy_version, trainer.policy_version, trainer.train_step)
            if trainer.train_step % config.checkpoint_every == 0:
                await work(checkpoint.save, data_dir, trainer)
                saved_step = trainer.train_step
            await work(release_freed_memory)  # the step's activations, the last version's copies (allocator.py)
            for key, value in stats.items():
                writer.add_scalar(f"train/{key}", value, trainer.train_step)
            log.info("%s", step_line(trainer.train_step, trainer.policy_version, stats, len(samples)))
            if on_step is not None:
                on_step(stats)
        await delivery.wait()
    finally:
        delivery.cancel()  # only when the loop itself failed or was cancelled: otherwise it is done
    if trainer.train_step != saved_step:
        await work(checkpoint.save, data_dir, trainer)


class _Delivery:
    """The accepted version on its way to serving, at most one at a time: the trainer steps on
    while serving swaps (a local engine swaps once the requests in flight finish, which takes
    seconds when users never stop), and the store learns of the version once every channel has
    it. Whatever else announces a version (a step that made none, a rejection, a rollback, the
    end) waits for it first, so versions reach the store in order."""

    def __init__(self) -> None:
        self._task: asyncio.Task | None = None

    @property
    def idle(self) -> bool:
        return self._task is None or self._task.done()

    async def wait(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await task

    async def start(self, work: Awaitable[None]) -> None:
        await self.wait()
        self._task = asyncio.ensure_future(work)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


def shown(value: float | None, spec: str) -> str:
    """`value` for a log line a person reads: "n/a" where there is no number (None, NaN)."""
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def step_line(train_step: int, policy_version: int, stats: dict[str, float], samples: int) -> str:
    """The step's log line. A mean over nothing (a batch with no verdict: reward; with no
    hint: |A_opd|) stays NaN in the stats (TensorBoard, /metrics) and reads "n/a" here."""
    return (f"step {train_step} -> policy v{policy_version}: loss {stats['loss']:.4f}, kl {stats['kl']:.4f}, "
            f"clip {stats.get('clip_fraction', 0.0):.3f}, reward {shown(stats['reward_mean'], '.2f')}, "
            f"|A_opd| {shown(stats['opd_adv_abs_mean'], '.3f')}, {samples} samples, {stats['tokens']:.0f} tokens "
            f"in {stats['seconds']:.1f}s ({stats['tokens_per_s']:.0f} tok/s)"
            + (f", gate {stats['gate_seconds']:.1f}s" if "gate_seconds" in stats else ""))


async def _wait(stop: asyncio.Event, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout_s)
    except TimeoutError:
        pass


async def _new_version(store: Store, trainer: Trainer, config: TrainConfig, publisher: Publisher, gate: Gate | None,
                       archive: VersionArchive | None, turn_ids: list[int], stats: dict[str, float],
                       delivery: _Delivery, work: _Work) -> None:
    """Gate the version the trainer just made; a rejected one is recorded, an accepted one is
    exported (copies), then published, archived and recorded while the next step runs."""
    version, parent = trainer.policy_version, trainer.parent_version
    started = time.monotonic()
    decision = await work(gate.decide) if gate is not None else None
    if decision is not None:
        stats["gate_seconds"] = time.monotonic() - started  # the step's line, TensorBoard and bench/gpu_check.py
    record = {"parent": parent, "train_step": trainer.train_step, "turn_ids": turn_ids, "stats": stats}
    if decision is not None and not decision.accepted:
        await delivery.wait()
        await asyncio.to_thread(lambda: store.record_version(version, gate="rejected", reason=decision.reason,
                                                             checks=decision.checks, **record))
        assert gate is not None
        log.warning("policy v%d rejected by the update gate, not served: %s", version, decision.reason)
        if config.gate_on_reject == "restore":
            await work(gate.restore)
            log.warning("back to the weights and optimizer state of v%d", trainer.policy_version)
        await asyncio.to_thread(store.set_policy_version, gate.snapshot.version, trainer.train_step)
        return
    exports = await work(publisher.export)  # before the next step changes the weights
    kept = await work(kept_weights, trainer, exports) if archive is not None else None
    if gate is not None:
        await work(gate.accept)
    if config.kl_reference == "accepted":
        await work(trainer.anchor_reference)
    label = "accepted" if decision is not None else "ungated"
    reason, checks = (decision.reason, decision.checks) if decision is not None else (None, None)
    train_step = trainer.train_step

    async def deliver() -> None:
        await publisher.deliver(exports, version, parent=parent)
        await work(_archive_and_record, store, trainer, archive, version, parent, record, label, reason, checks, kept)
        await asyncio.to_thread(store.set_policy_version, version, train_step)

    await delivery.start(deliver())


def _archive_and_record(store: Store, trainer: Trainer, archive: VersionArchive | None, version: int,
                        parent: int | None, record: dict, gate: str, reason: str | None, checks: dict | None,
                        weights: Weights | None = None) -> None:
    path = None
    if archive is not None:
        for pruned in archive.write(version, trainer, parent, weights):
            store.set_version_weights(pruned, None)
        path = archive.path(version)
    store.record_version(version, gate=gate, reason=reason, checks=checks, weights=path, **record)


def _archive_start(store: Store, trainer: Trainer, archive: VersionArchive) -> None:
    version = trainer.policy_version
    if store.version(version) is not None:  # known already (resumed): only its weights are new
        archive.write(version, trainer, trainer.parent_version)
        store.set_version_weights(version, archive.path(version))
        return
    _archive_and_record(store, trainer, archive, version, trainer.parent_version,
                        {"parent": trainer.parent_version, "train_step": trainer.train_step, "turn_ids": [],
                         "stats": None}, "base" if version == 0 else "ungated", "the weights training started from", None)


async def _carry_out_requests(store: Store, trainer: Trainer, publisher: Publisher, archive: VersionArchive | None,
                              gate: Gate | None, delivery: _Delivery, work: _Work) -> None:
    """Rollbacks asked for through the API (`POST /v1/policy/rollback`): the weights of V,
    published as a new number (a number names one set of weights forever); training goes
    on from them, with fresh optimizer moments."""
    for request_id, kind, target in await asyncio.to_thread(store.pending_requests):
        await delivery.wait()  # the version on its way is recorded (and archived) first
        if archive is None or not archive.has(target):
            kept = archive.versions() if archive is not None else []
            await asyncio.to_thread(store.finish_request, request_id, None,
                                    f"the weights of v{target} are not kept (kept: {kept}); pin a version "
                                    "(POST /v1/policy/pin) to keep it", True)
            continue
        state = await work(archive.read, target)
        await work(trainer.load_trainable_state_dict, state)
        trainer.optimizer.state.clear()
        number = max(await asyncio.to_thread(store.highest_policy_version), trainer.policy_version) + 1
        trainer.renumber(number)
        trainer.parent_version = target
        await publisher.publish(number, parent=target)
        await work(_archive_and_record, store, trainer, archive, number, target,
                   {"parent": target, "train_step": trainer.train_step, "turn_ids": [], "stats": None},
                   "rollback", f"rollback to v{target}", None)
        if gate is not None:
            await work(gate.accept)
        await asyncio.to_thread(store.set_policy_version, number, trainer.train_step)
        await asyncio.to_thread(store.finish_request, request_id, number, f"v{number} serves the weights of v{target}")
        log.warning("rolled back: policy v%d serves the weights of v%d", number, target)


def _settle(store: Store, trainer: Trainer, config: TrainConfig, settled: bool) -> bool:
    """After adaptation (`settle_after`): settled while the judge's newest verdicts are all
    approvals; the learning rate follows (set on every pass: restoring a snapshot's optimizer
    state brings its rate back). Returns whether training is settled now."""
    if not config.settle_after:
        return False
    rewards = store.recent_rewards(config.settle_after)
    now = len(rewards) == config.settle_after and all(reward > 0 for reward in rewards)
    if now != settled:
        log.warning("%s", f"the judge approved the last {config.settle_after} turns: "
                    + ("updates paused" if config.settle_lr_scale == 0 else
                       f"learning rate x{config.settle_lr_scale:g}") + " until a correction" if now else
                    "a turn was judged otherwise: training resumes at the full learning rate")
    for group in trainer.optimizer.param_groups:
        group["lr"] = config.learning_rate * (config.settle_lr_scale if now else 1.0)
    return now


def _without_probes(assemble: Callable, config: TrainConfig) -> Callable:
    """The method's assembly, refusing the turns the gate keeps as probes."""
    def assemble_unless_probe(sample):
        if sample.turn_id % config.gate_probe_every == 0:
            return f"a probe of the update gate (one turn in {config.gate_probe_every}): never trained on"
        return assemble(sample) if assemble is not None else sample
    return assemble_unless_probe


SHARED_USER_SHARE = 0.25  # max_user_share's default on a server people share


def per_user_share(config: TrainConfig, shared: bool = False) -> float | None:
    """The largest share of what a step trains one user's samples may fill (`max_user_share`;
    unset: 0.25 on a `shared` server, no cap otherwise); None: no cap. A share, not a count
    per batch: how the store counts it over the last steps is `claim_samples`' rule."""
    share = config.max_user_share if config.max_user_share is not None else SHARED_USER_SHARE if shared else 1.0
    return None if share >= 1 else share
