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
--personal-adapters on`, compose.py), or in a process of its own (`openclaw-rl train
--personal-adapters on`, processes.py) beside a server that loads each version the store
records: the versions, rollback, reset and the switch are `AdapterHistory`'s
(train/personal_history.py), which says how the two processes share them.

Decisions and why (docs/personal-adapters.md):

- Rank 8, alpha 16, every attention and MLP projection, lr `--personal-lr` (`personal_config`):
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
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import LoraAdapter
from openclaw_rl.store import Store
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.personal_history import AdapterHistory, AdapterReceiver, writing
from openclaw_rl.train.personal_state import MAX_RESIDENT, UserStates
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import Sample

log = logging.getLogger(__name__)

RANK, ALPHA = 8, 16
MIN_SAMPLES = 4

GateFor = Callable[[Path, str], Gate]  # a user's gate over the trainer, its anchors kept at the path given


def personal_config(config: TrainConfig) -> TrainConfig:
    """`config` as a personal-adapter trainer runs it: LoRA at the documented rank and alpha, at
    `personal_lr` (not `lr`, which is the shared model's: a preset's full fine-tuning rate would
    leave an adapter that starts at zero almost where it started)."""
    return replace(config, lora=True, lora_rank=RANK, lora_alpha=ALPHA, lr=config.personal_lr)


def personal_claims(method: str) -> str:
    """The name personal steps claim samples under (store.claims): apart from the shared
    trainer's, so a turn trained into a user's adapter is still there for the shared model."""
    return f"personal:{method}"


class PersonalAdapters(AdapterHistory):
    def __init__(self, trainer: Trainer, data_dir: str | Path, receivers: Sequence[AdapterReceiver], *,
                 min_samples: int = MIN_SAMPLES, keep: int = 5, store: Store | None = None,
                 gate: GateFor | None = None, max_resident: int = MAX_RESIDENT) -> None:
        """`store`: where each version is recorded (and pins read); `gate`: each user's update gate;
        `max_resident`: the users whose moments and gate stay in memory (train/personal_state.py);
        `receivers`: none when the adapters are served by another process (train/personal_history.py)."""
        if not trainer.config.lora:
            raise ValueError("personal adapters need a LoRA trainer (build it with personal_config(config))")
        if min_samples < 1:
            raise ValueError(f"min_samples is {min_samples}; a user's step needs at least 1 sample")
        super().__init__(data_dir, receivers, keep=keep, store=store)
        self.trainer, self.min_samples, self.gate = trainer, min_samples, gate
        self._initial = trainer.trainable_state_dict()  # every new user's adapter starts here (B = 0: the base)
        # user -> their AdamW moments and gate (its snapshot their served adapter), between their steps
        self.states = UserStates(self.root, trainer.optimizer.state_dict(), max_resident)

    async def train(self, user: str, samples: Sequence[Sample]) -> int | None:
        """One step of `user`'s adapter on their `samples` (the caller's, all of this user), published
        as their next version; None, and nothing served, while they have fewer than `min_samples`
        or when their gate rejects the candidate."""
        if len(samples) < self.min_samples:
            return None
        async with self._lock:
            version, adapter = await asyncio.to_thread(self._locked_step, user, list(samples))
            if adapter is not None:
                await self._publish(user, adapter, version)
        return version if adapter is not None else None

    def _forget_state(self, user: str) -> None:
        self.states.forget(user)

    def _locked_step(self, user: str, samples: list[Sample]) -> tuple[int, LoraAdapter | None]:
        """`_step` holding the data dir's lock (train/personal_history.py), on the samples the store
        still holds: a user deleted since the claim is not trained again."""
        with writing(self.root.parent):
            if self.store is not None:
                kept = self.store.sample_states([s.turn_id for s in samples])
                if len(kept) < len(samples):
                    log.info("%d of %s's claimed samples were deleted before their step", len(samples) - len(kept),
                             user)
                    samples = [s for s in samples if s.turn_id in kept]
                if len(samples) < self.min_samples:
                    return 0, None
            return self._step(user, samples)

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
            return make(self._dir(user) / "gate-anchors.json", user)
        return self.states.gate(user, build)


async def run_personal(store: Store, personal: PersonalAdapters, config: TrainConfig, stop: asyncio.Event,
                       flush: Flush | None = None, on_step: Callable[[str, int | None], None] | None = None) -> None:
    """Until `stop`: each user with `min_samples` ready samples (and their adapter on) gets one
    step of their adapter on at most `batch_size` of them (`min_samples` if more), the oldest first (claimed as
    `personal_claims`, so the shared trainer's claims are untouched). The staleness window is the shared policy's: a
    user's behaviour log-probs were sampled under their own adapter, which the trainer's
    importance ratio corrects. `flush`: set `done` once no user has enough ready. `on_step`: called with
    the user and their new version (None: none served) after each step. Each pass reads the admins'
    switches again: with the trainer in a process of its own, they are turned in the serving one."""
    claims = personal_claims(personal.trainer.method.name)
    assemble = _assembly(personal.trainer, config, personal.gate is not None)
    while not stop.is_set():
        flushing = flush is not None and flush.requested.is_set()
        await personal.refresh_switches()
        ready = await asyncio.to_thread(store.ready_owners, claims)
        stepped = False
        for user in sorted(u for u, count in ready.items() if count >= personal.min_samples and personal.is_on(u)):
            if stop.is_set():  # after the step in progress, not the pass (SIGTERM, --max-steps)
                break
            # a step takes at least min_samples: with a smaller --batch-size (the demo's 2) none ever would
            samples, _ = await asyncio.to_thread(lambda owner=user: store.claim_samples(
                claims, max(config.batch_size, personal.min_samples), store.policy_version(), config.max_staleness,
                None, personal.min_samples, assemble, None, owner))
            if samples:
                version = await personal.train(user, samples)
                stepped = True
                if on_step is not None:
                    on_step(user, version)
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
