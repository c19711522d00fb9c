"""The training loop that runs beside serving (or on its own against the same store).

    claim a full batch of fresh samples, assembled for the trainer's method
    -> trainer.step (worker thread) -> publish v+1
    -> announce v+1 in the store -> checkpoint every N steps -> TensorBoard, log, on_step

The model work runs in a worker thread so the event loop keeps serving meanwhile.
Each new version goes to one object, the `Publisher` (train/weights.py), whose channels
decide where weights go: an engine in this process, the files channel for a server in
another process, Ray's object store. The store learns about v+1 only after the publisher
returns, so no turn claims a version that serving does not have yet. Set `stop` to end
the loop: it finishes the step in progress and writes a final checkpoint. (Cancelling
the task instead skips that checkpoint; the last periodic one stays good.)
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from openclaw_rl.config import TrainConfig
from openclaw_rl.store import Store
from openclaw_rl.train import checkpoint
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.weights import Publisher

log = logging.getLogger(__name__)


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
) -> None:
    """Train until `stop` is set. Claims samples as the trainer's method assembles them from
    the store's per-turn samples (a turn it cannot learn from is skipped with the reason)
    and trains them with that method's loss.
    Every new version goes to `publisher`. `flush`: see Flush."""
    from torch.utils.tensorboard import SummaryWriter

    data_dir = store.data_dir
    method = trainer.method
    writer = SummaryWriter(str(data_dir / "tensorboard"))
    saved_step = trainer.train_step
    try:
        while not stop.is_set():
            flushing = flush is not None and flush.requested.is_set()
            samples, dropped = await asyncio.to_thread(
                store.claim_samples, method.name, config.batch_size, trainer.policy_version,
                config.max_staleness, trainer.train_step + 1, 1 if flushing else None, method.assemble,
                per_user_cap(config),
            )
            if not samples:
                if flushing:
                    flush.done.set()  # type: ignore[union-attr]
                await _wait(stop, config.train_poll_interval_s)
                continue
            version = trainer.policy_version
            stats = await asyncio.to_thread(trainer.step, samples)
            stats["dropped_stale"] = float(len(dropped))
            if trainer.policy_version != version:
                await publisher.publish(trainer.policy_version, parent=trainer.parent_version)
            await asyncio.to_thread(store.set_policy_version, trainer.policy_version, trainer.train_step)
            if trainer.train_step % config.checkpoint_every == 0:
                await asyncio.to_thread(checkpoint.save, data_dir, trainer)
                saved_step = trainer.train_step
            for key, value in stats.items():
                writer.add_scalar(f"train/{key}", value, trainer.train_step)
            log.info(
                "step %d -> policy v%d: loss %.4f, kl %.4f, clip %.3f, reward %.2f, |A_opd| %.3f, "
                "%d tokens in %.1fs (%.0f tok/s)",
                trainer.train_step, trainer.policy_version, stats["loss"], stats["kl"],
                stats.get("clip_fraction", 0.0), stats["reward_mean"], stats["opd_adv_abs_mean"],
                stats["tokens"], stats["seconds"], stats["tokens_per_s"],
            )
            if on_step is not None:
                on_step(stats)
    finally:
        writer.close()
    if trainer.train_step != saved_step:
        await asyncio.to_thread(checkpoint.save, data_dir, trainer)


async def _wait(stop: asyncio.Event, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout_s)
    except TimeoutError:
        pass


def per_user_cap(config: TrainConfig) -> int | None:
    """The most samples of one user a batch may hold (`max_user_share`); None: no cap."""
    if config.max_user_share >= 1:
        return None
    return max(1, math.floor(config.max_user_share * config.batch_size))
