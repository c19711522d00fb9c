"""The version archive: every published version's trainable weights, for rollback.

    DATA_DIR/versions/v000007/model.safetensors            full fine-tuning: every weight
    DATA_DIR/versions/v000007/adapter_model.safetensors    LoRA: the adapter (peft's files)

Written by the one atomic versioned writer (engine/weight_files.py), as the trainer holds
the weights (`Trainer.trainable_state_dict`), so a rollback loads them back exactly, for
full fine-tuning and LoRA alike; the files channel (DATA_DIR/weights) carries what
*serving* loads and may prune on its own schedule. Retention: the newest `keep`, plus
what the store protects (pinned versions, the last accepted and the served one); a
pruned version's metadata stays in the store's history with `weights` unset.

Resume keeps what was accepted (`resume_from_published`, called by compose.load_trainer):
a crash between checkpoints (every `checkpoint_every` steps, 10 by default) loses no
published version, since the archive holds it as the trainer held it. A resumed trainer
starts from the newest published version on disk when it is newer than the checkpoint,
under that version's number (the same weights, the same number), with its train step and
fresh AdamW moments: the checkpoint's belong to older weights. Checkpointing on every
accepted version instead would write the optimizer state too, 3x the trainable bytes,
fsynced, per version (bench/checkpoint_cost.py); the archive's write is paid already.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import LoraAdapter, Weights
from openclaw_rl.store import Store
from openclaw_rl.train.weights import FilesChannel

if TYPE_CHECKING:
    from openclaw_rl.train.trainer import Trainer

log = logging.getLogger(__name__)


class VersionArchive:
    def __init__(self, data_dir: str | Path, keep: int, protected: Callable[[], set[int]] = set) -> None:
        self.root = Path(data_dir) / "versions"
        self.keep, self.protected = keep, protected

    def write(self, version: int, trainer: Trainer, parent: int | None, weights: Weights | None = None) -> list[int]:
        """Keep the trainer's weights as `version` (or `weights`, taken from it earlier by
        `kept_weights`); returns the versions pruned by this write."""
        before = set(self.versions())
        stored = weights if weights is not None else kept_weights(trainer)
        weight_files.write_version(self.root, version, stored, keep=self.keep, parent=parent,
                                   protect=frozenset(self.protected()))
        return sorted(before - set(self.versions()))

    def read(self, version: int) -> dict:
        """The trainable state of `version`, for `Trainer.load_trainable_state_dict`."""
        weights = weight_files.read(weight_files.stored(self.root, version))
        return weights.state_dict if isinstance(weights, LoraAdapter) else weights

    def has(self, version: int) -> bool:
        return version in self.versions()

    def versions(self) -> list[int]:
        return weight_files.kept_versions(self.root)

    def path(self, version: int) -> str:
        return str(weight_files.version_dir(self.root, version))


def kept_weights(trainer: Trainer, exports: dict[bool, Weights] | None = None) -> Weights:
    """What the archive keeps of the trainer now: the adapter (LoRA) or every weight, reusing
    a copy the publisher already exported (`Publisher.export`) where it is the same thing."""
    exports = exports or {}
    if trainer.config.lora:
        return exports[True] if True in exports else trainer.lora_adapter()
    return exports[False] if False in exports else trainer.trainable_state_dict()


@dataclass(frozen=True)
class Published:
    """A published version's trainable weights found on disk, as `Trainer.load_trainable_state_dict` takes them."""

    version: int
    weights: dict[str, torch.Tensor]
    where: str  # the directory they were read from


def newest_published(data_dir: str | Path, trainer: Trainer, above: int) -> Published | None:
    """The newest published version above `above` whose weights are on disk and fit `trainer`:
    the archive's (exactly as a trainer held them: every weight, or the LoRA adapter), else the
    files channel's (full weights, LoRA merged: they resume full fine-tuning only). Every
    version in either was served: the archive is written after the channels took a version,
    and neither ever holds one the gate rejected. A version that cannot be read or does not
    fit is passed over, with a warning, for the next older one."""
    archive, files = VersionArchive(data_dir, keep=1), FilesChannel(data_dir)
    found = {v: archive.path(v) for v in archive.versions() if v > above}
    if not trainer.config.lora:
        for version in weight_files.kept_versions(files.root):
            if version > above and version not in found:
                found[version] = str(weight_files.version_dir(files.root, version))
    if not found:
        return None
    shapes = {name: t.shape for name, t in trainer.trainable_state_dict().items()}
    for version in sorted(found, reverse=True):
        try:
            weights = archive.read(version) if archive.has(version) else files.read(version)
        except Exception as error:  # noqa: BLE001 - an unreadable version gives way to an older one
            log.warning("cannot resume from the published v%d in %s (%s); trying an older one", version,
                        found[version], error)
            continue
        state = weights.state_dict if isinstance(weights, LoraAdapter) else weights
        if {name: t.shape for name, t in state.items()} != shapes:
            log.warning("the published v%d in %s does not fit this trainer (lora=%s, rank %d); trying an older one",
                        version, found[version], trainer.config.lora, trainer.config.lora_rank)
            continue
        return Published(version, state, found[version])
    return None


def resume_from_published(trainer: Trainer, store: Store, published: Published, checkpoint_step: int) -> None:
    """Load `published` into a freshly built trainer under its own number, with the train step
    and parent the store recorded for it (without a record, a crash between the archive write
    and the record: the checkpoint's step). The optimizer state stays fresh."""
    record = store.version(published.version) or {}
    trainer.load_trainable_state_dict(published.weights)
    trainer.policy_version, trainer.parent_version = published.version, record.get("parent")
    step = record.get("train_step")
    trainer.train_step = int(step) if step is not None else checkpoint_step
    if trainer.config.kl_reference == "accepted":
        trainer.anchor_reference()  # it was served: the last accepted weights
    log.warning("resumed from the published v%d (%s, train step %d), newer than the latest checkpoint: "
                "AdamW moments start fresh", published.version, published.where, trainer.train_step)
