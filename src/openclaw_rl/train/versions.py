"""The version archive: every published version's trainable weights, for rollback.

    DATA_DIR/versions/v000007/model.safetensors            full fine-tuning: every weight
    DATA_DIR/versions/v000007/adapter_model.safetensors    LoRA: the adapter (peft's files)

Written by the one atomic versioned writer (engine/weight_files.py), as the trainer holds
the weights (`Trainer.trainable_state_dict`), so a rollback loads them back exactly, for
full fine-tuning and LoRA alike; the files channel (DATA_DIR/weights) carries what
*serving* loads and may prune on its own schedule. Retention: the newest `keep`, plus
what the store protects (pinned versions, the last accepted and the served one); a
pruned version's metadata stays in the store's history with `weights` unset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import LoraAdapter, Weights

if TYPE_CHECKING:
    from openclaw_rl.train.trainer import Trainer


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
