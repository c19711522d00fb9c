"""Promotion: chosen users' samples trained into the shared model, which personal adapters then sit on.

    DATA_DIR/promoted/step-000012/<model name>/   the shared model of the last promotion, a Hugging
                                                  Face directory (checkpoint.export) with its
                                                  openclaw_rl.json: train step, policy version, base

`openclaw-rl promote` (processes.promote) trains the shared model with the standard trainer on
the named users' ready samples, then `export_promoted` writes the latest shared checkpoint
here. `serve --personal-adapters on` builds its engine and its personal trainer from this
directory (`promoted_base`, compose.py), so the promoted model is what a user without an
adapter is served and the frozen base under every adapter.

Decisions and why (docs/personal-adapters.md, "Promotion"):

- A model directory on disk, not the checkpoint's weights loaded into a running engine and
  trainer: every engine (local, a vLLM server) and the LoRA trainer start from a model
  directory already, so nothing in them changes, and a restart needs no merge.
- Only a promotion moves the personal base, not any shared checkpoint: a data dir that
  trained the shared model before personal adapters were turned on keeps serving its users'
  adapters on the base they were trained on.
- The directory keeps the base model's name, so clients call the model by the same name.
- A new promotion's directory appears whole (written aside, then renamed) before the
  previous one is removed: a crash leaves one complete base, never none.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from openclaw_rl.store import Store
from openclaw_rl.train import checkpoint
from openclaw_rl.users import Users

log = logging.getLogger(__name__)

PROMOTED = "promoted"


class PromotionError(ValueError):
    """A promotion that cannot run as asked: the message names what is wrong and what to do."""


@dataclass(frozen=True)
class PromotedBase:
    """The shared model of the last promotion as a model directory, and the version it is."""

    path: Path
    policy_version: int
    train_step: int
    base_model: Path


def check_promotable(store: Store, data_dir: str | Path, users: Sequence[str], method: str) -> dict[str, int]:
    """The ready samples of each of `users` that `method` (the shared trainer's claim name) has
    not claimed; raises PromotionError for no user, an unknown user or one with none ready."""
    if not users:
        raise PromotionError("--users names no one: give a comma list of users, e.g. --users alice,bob")
    registry = Users(data_dir)
    registered = {record["name"] for record in registry.list()}
    unknown = [user for user in users if user not in registered and not store.list_sessions(1, 0, user)]
    ready = store.ready_owners(method)
    waiting = ", ".join(f"{owner} ({count})" for owner, count in sorted(ready.items())) or "none"
    if unknown:
        raise PromotionError(f"unknown user {', '.join(map(repr, unknown))}: not in {registry.path} and no sessions "
                             f"of theirs in the store; users with ready samples for {method}: {waiting}")
    empty = [user for user in users if not ready.get(user)]
    if empty:
        raise PromotionError(f"{', '.join(map(repr, empty))} {'has' if len(empty) == 1 else 'have'} no ready samples "
                             f"that the shared method {method} has not trained (all promoted already, or not judged "
                             f"yet: `openclaw-rl judge --data-dir {data_dir} --once` judges what waits); users with "
                             f"ready samples: {waiting}")
    return {user: ready[user] for user in users}


def promoted_base(data_dir: str | Path, model_dir: Path) -> PromotedBase | None:
    """The data dir's promoted shared model, None if nothing was promoted. Raises PromotionError
    when it was trained from another base model than `model_dir` (its weights would not fit)."""
    base = _newest(Path(data_dir) / PROMOTED)
    if base is not None and base.base_model.resolve() != Path(model_dir).resolve():
        raise PromotionError(f"{base.path} was promoted from the base model {base.base_model}, and this server loads "
                             f"{model_dir}: serve with --model {base.base_model}, or move {base.path.parent} away to "
                             "serve the model without the promoted data (the users' adapters too were trained on it)")
    return base


def export_promoted(data_dir: str | Path) -> PromotedBase | None:
    """Write the latest shared checkpoint as the promoted model (left as it is when it is that
    checkpoint already), then remove earlier promotions; None without a checkpoint."""
    latest = checkpoint.load_latest(data_dir)
    if latest is None:
        return None
    root = Path(data_dir) / PROMOTED
    current = _newest(root)
    if current is not None and current.train_step == latest.train_step:
        return current
    target = root / f"step-{latest.train_step:06d}"
    staging = root / f".tmp-{target.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)  # an incomplete one (a crash before its provenance was written)
    checkpoint.export(data_dir, staging / latest.model_dir.name)
    os.replace(staging, target)
    for earlier in root.iterdir():
        if earlier != target:
            shutil.rmtree(earlier, ignore_errors=True)
    promoted = _newest(root)
    assert promoted is not None
    log.info("promoted shared model: policy v%d (step %d) in %s", promoted.policy_version, promoted.train_step,
             promoted.path)
    return promoted


def _newest(root: Path) -> PromotedBase | None:
    """The complete promoted model of the highest train step under `root`, if any."""
    steps = sorted((p for p in root.glob("step-*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    for step in steps:
        for model in step.iterdir():
            try:
                record = json.loads((model / checkpoint.PROVENANCE_FILE).read_text())
            except (OSError, ValueError):
                continue
            return PromotedBase(model, int(record["policy_version"]), int(record["train_step"]),
                                Path(record["base_model"]))
    return None
