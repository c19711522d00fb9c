"""Checkpoints of the trainer, written atomically, and export to a Hugging Face directory.

    DATA_DIR/checkpoints/step-000010/
        model.safetensors          every weight (full fine-tuning), or
        adapter/                   adapter_config.json + adapter_model.safetensors (LoRA, peft's format)
        optimizer.pt               AdamW state (torch.save)
        trainer_state.json         train step, policy version, method, base model, config
    DATA_DIR/checkpoints/latest    "step-000010"

A sharded trainer (train/sharded.py) writes `dcp/` instead of the weights and optimizer.pt:
a torch.distributed.checkpoint directory in which each rank wrote its shards of the
weights (the adapter's, for LoRA; then `adapter/` holds only adapter_config.json) and of
the AdamW state, by name. DCP reshards on load, so it resumes on any number of ranks, one
process included; a one-process checkpoint resumes sharded too (each rank reads the files
and keeps its shards).

Why it survives a kill at any moment: a checkpoint is written into a hidden temporary
directory, every file and the directory are fsynced, and only then is it renamed to
its `step-*` name (a rename is atomic); the `latest` pointer is replaced the same way
afterwards. A killed save leaves a temporary directory (removed by the next save) and
the previous `latest` untouched. `load_latest` follows the pointer and, should the
pointer be missing or name a broken directory, falls back to the newest complete one.

Resume: `load_latest(data_dir)` gives a `Checkpoint`; build a `Trainer` on the same
base model and config, then `restore(trainer, checkpoint)` loads weights (or adapter),
optimizer moments, train step and policy version. The learning rate comes from the
config, not the checkpoint, so a resumed run may change it. A version published after the
checkpoint (a crash between checkpoints) is newer than it: `compose.load_trainer` resumes
from that version's weights instead (train/versions.py), and gives the weights held a
fresh number (`Trainer.renumber`) only when a version above them served and is lost.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tempfile

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict,
)
from transformers import AutoModelForCausalLM

from openclaw_rl.engine.weight_files import fsync_dir, fsync_file, write_atomic

if TYPE_CHECKING:
    from openclaw_rl.train.trainer import Trainer

log = logging.getLogger(__name__)

FORMAT = 1
KEEP = 3  # complete checkpoints kept on disk
WEIGHTS_FILE = "model.safetensors"
ADAPTER_DIR = "adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.json"
PROVENANCE_FILE = "openclaw_rl.json"  # what an export was made from (train step, policy version, base)
ADAPTER_NAME = "default"  # peft's name for the single adapter the trainer trains
DCP_DIR = "dcp"  # a sharded trainer's weights and optimizer state (torch.distributed.checkpoint)
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json",
)
_STEP_DIR = re.compile(r"^step-(\d{6,})$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk; `state` is its trainer_state.json."""

    path: Path
    state: dict[str, Any]

    @property
    def train_step(self) -> int:
        return int(self.state["train_step"])

    @property
    def policy_version(self) -> int:
        return int(self.state["policy_version"])

    @property
    def lora(self) -> bool:
        return bool(self.state["lora"])

    @property
    def sharded(self) -> bool:
        """Written by a sharded trainer: a torch.distributed.checkpoint directory, resumable on any N."""
        return bool(self.state.get("sharded"))

    @property
    def model_dir(self) -> Path:
        """The base model the checkpoint was trained from."""
        return Path(self.state["model_dir"])

    def weights(self) -> dict[str, torch.Tensor]:
        """Every weight (full fine-tuning) or the adapter's weights (LoRA, peft's names), on the CPU."""
        if self.sharded:
            return _dcp_weights(self.path / DCP_DIR, self.lora)
        return load_file(str(self.path / ADAPTER_DIR / ADAPTER_WEIGHTS if self.lora else self.path / WEIGHTS_FILE))

    def optimizer_state(self) -> dict[str, Any]:
        return torch.load(self.path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)


def checkpoints_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "checkpoints"


METADATA_BYTES = 16 * 1024  # what a checkpoint or version writes beside its tensors, generously


def disk_needed(trainer: Trainer, keep_versions: int) -> int:
    """About the bytes a trainer's data dir grows to: KEEP checkpoints (the trainable weights
    and AdamW's two moments of each) and the version archive (`keep_versions` plus the
    pinned, last accepted and served ones it also keeps). For a start-up warning: a full disk
    otherwise stops the trainer at its first checkpoint, hours in."""
    trainable = sum(p.numel() * p.element_size() for p in trainer.model.parameters() if p.requires_grad)
    saved = KEEP + keep_versions + 3  # directories, each with its own small files (configs, state, metadata)
    return KEEP * 3 * trainable + (keep_versions + 3) * trainable + saved * METADATA_BYTES


def save(data_dir: str | Path, trainer: Trainer, *, keep: int = KEEP) -> Path:
    """Write the trainer's checkpoint for its current step; returns its directory."""
    root = checkpoints_dir(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{trainer.train_step:06d}"
    final = root / name
    for leftover in root.glob(".tmp-*"):  # from saves that were killed
        shutil.rmtree(leftover, ignore_errors=True)
    if final.exists():
        if _pointer(root) == name and _read(final) is not None:
            return final  # already saved, and no step since
        shutil.rmtree(final)  # left by a run that died before pointing `latest` at it

    tmp = root / f".tmp-{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        if trainer.sharded:  # every rank writes its shards (a collective the trainer leads)
            trainer.save_sharded(tmp / DCP_DIR)
            if trainer.config.lora:
                (tmp / ADAPTER_DIR).mkdir()
                trainer.save_adapter_config(tmp / ADAPTER_DIR)
        else:
            weights = trainer.trainable_state_dict()
            if trainer.config.lora:
                (tmp / ADAPTER_DIR).mkdir()
                save_file(weights, str(tmp / ADAPTER_DIR / ADAPTER_WEIGHTS))
                trainer.save_adapter_config(tmp / ADAPTER_DIR)
            else:
                save_file(weights, str(tmp / WEIGHTS_FILE))
            torch.save(trainer.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        state = {"format": FORMAT, "saved_at": time.time(), **trainer.state()}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2))
        _fsync_tree(tmp)
        os.replace(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_atomic(root / "latest", name + "\n")
    _prune(root, keep)
    log.info("checkpoint %s (policy version %d)", final, trainer.policy_version)
    return final


def load_latest(data_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint, or None if there is none."""
    root = checkpoints_dir(data_dir)
    name = _pointer(root)
    if name is not None:
        checkpoint = _read(root / name)
        if checkpoint is not None:
            return checkpoint
        log.warning("checkpoints/latest names %r, which is not a complete checkpoint; using the newest complete one",
                    name)
    for path in reversed(_step_dirs(root)):
        checkpoint = _read(path)
        if checkpoint is not None:
            return checkpoint
    return None


def restore(trainer: Trainer, checkpoint: Checkpoint) -> None:
    """Load a checkpoint into a trainer built on the same base model and kind of fine-tuning."""
    state, config = checkpoint.state, trainer.config
    if checkpoint.lora != config.lora:
        raise ValueError(
            f"checkpoint {checkpoint.path} was trained with lora={checkpoint.lora} but the config has "
            f"lora={config.lora}; resume with the same setting, or start a fresh data dir"
        )
    if config.lora and (state["lora_rank"], state["lora_alpha"]) != (config.lora_rank, config.lora_alpha):
        raise ValueError(
            f"checkpoint {checkpoint.path} has a LoRA adapter of rank {state['lora_rank']}, alpha "
            f"{state['lora_alpha']}, the config asks for rank {config.lora_rank}, alpha {config.lora_alpha}; "
            "resume with the checkpoint's values"
        )
    if state["method"] != config.method:
        log.warning("checkpoint was trained with method %s; continuing with %s", state["method"], config.method)
    if checkpoint.sharded:
        trainer.load_sharded(checkpoint.path / DCP_DIR)
    else:
        trainer.load_checkpoint_files(checkpoint)
    for group in trainer.optimizer.param_groups:
        group["lr"] = config.learning_rate
    trainer.train_step = checkpoint.train_step
    trainer.policy_version = checkpoint.policy_version
    trainer.parent_version = state.get("parent_version")  # absent from checkpoints of older versions
    log.info("resumed from %s: step %d, policy version %d", checkpoint.path, trainer.train_step,
             trainer.policy_version)


def export(data_dir: str | Path, out_dir: str | Path, *, model_dir: str | Path | None = None) -> Path:
    """Write the latest checkpoint's policy as a standard Hugging Face model directory.

    LoRA is merged into the base weights; the base model's tokenizer files are copied.
    `model_dir` overrides the base model path recorded in the checkpoint (if it moved).
    """
    checkpoint = load_latest(data_dir)
    if checkpoint is None:
        raise FileNotFoundError(
            f"no checkpoint in {checkpoints_dir(data_dir)}; the trainer writes one every checkpoint_every "
            "steps and when it stops"
        )
    base_dir = Path(model_dir) if model_dir is not None else checkpoint.model_dir
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"the base model {base_dir} of checkpoint {checkpoint.path} is not a Hugging Face model "
            "directory (no config.json); pass the base model's directory as model_dir"
        )
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; remove it or export somewhere else")

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if checkpoint.lora and checkpoint.sharded:  # the adapter's config beside it, its weights in dcp/
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict  # LoRA only (see trainer.py)

        model = get_peft_model(model, LoraConfig.from_pretrained(str(checkpoint.path / ADAPTER_DIR)))
        set_peft_model_state_dict(model, checkpoint.weights())
        model = model.merge_and_unload()
    elif checkpoint.lora:
        from peft import PeftModel  # LoRA only (see trainer.py)

        model = PeftModel.from_pretrained(model, str(checkpoint.path / ADAPTER_DIR)).merge_and_unload()
    else:
        _load_full(model, checkpoint.weights())

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    copied = [name for name in TOKENIZER_FILES if (base_dir / name).is_file()]
    for name in copied:
        shutil.copy2(base_dir / name, tmp / name)
    if not copied:
        log.warning("the base model %s has no tokenizer files; the export has none either", base_dir)
    provenance = {k: checkpoint.state[k] for k in ("train_step", "policy_version", "method", "lora")}
    (tmp / PROVENANCE_FILE).write_text(json.dumps({**provenance, "base_model": str(base_dir)}, indent=2))
    os.replace(tmp, out)  # onto nothing or an empty directory
    log.info("exported policy version %d (step %d) to %s", checkpoint.policy_version, checkpoint.train_step, out)
    return out


def _load_full(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    weights = {k: v for k, v in weights.items() if k in params or k not in model.state_dict()}  # tied aliases
    missing, unknown = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    if missing or unknown:
        raise ValueError(f"checkpoint weights do not fit the base model: missing {missing[:5]}, unknown {unknown[:5]}")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor)


def _pointer(root: Path) -> str | None:
    try:
        return (root / "latest").read_text().strip() or None
    except FileNotFoundError:
        return None


def _step_dirs(root: Path) -> list[Path]:
    """The `step-*` directories, oldest step first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _read(path: Path) -> Checkpoint | None:
    """The checkpoint at `path` if every file it needs is there, else None."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if state.get("sharded"):
        return Checkpoint(path, state) if (path / DCP_DIR / ".metadata").is_file() else None
    weights = path / ADAPTER_DIR / ADAPTER_WEIGHTS if state.get("lora") else path / WEIGHTS_FILE
    if not (weights.is_file() and (path / OPTIMIZER_FILE).is_file()):
        return None
    return Checkpoint(path, state)


# -- torch.distributed.checkpoint: sharded weights and optimizer state -------------------------


def _dcp_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trainable_only: bool) -> dict[str, Any]:
    """The state DCP saves and loads in place: weights and AdamW state by parameter name, each
    rank's shards of them (whole tensors in one process)."""
    options = StateDictOptions(ignore_frozen_params=trainable_only)
    return {"model": get_model_state_dict(model, options=options),
            "optimizer": get_optimizer_state_dict(model, optimizer, options=options)}


def save_dcp(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path, *,
             trainable_only: bool) -> None:
    """Write the state as a DCP directory; every rank of a process group calls it together."""
    dcp.save(_dcp_state(model, optimizer, trainable_only), checkpoint_id=str(directory))


def load_dcp(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path, *,
             trainable_only: bool) -> None:
    """Load a DCP directory written on any number of ranks into this model and optimizer."""
    state = _dcp_state(model, optimizer, trainable_only)
    dcp.load(state, checkpoint_id=str(directory))
    options = StateDictOptions(ignore_frozen_params=trainable_only, strict=not trainable_only)
    set_model_state_dict(model, state["model"], options=options)
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)


def _dcp_weights(directory: Path, lora: bool) -> dict[str, torch.Tensor]:
    """The weights of a DCP directory as one process holds them (LoRA: peft's names)."""
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(str(directory), f"{tmp}/state.pt")
        model = torch.load(f"{tmp}/state.pt", map_location="cpu", weights_only=True)["model"]
    if lora:  # the model's parameter names -> peft's saved ones (the adapter's name left out)
        return {k.replace(f".{ADAPTER_NAME}.", "."): v for k, v in model.items()}
    return model


def _prune(root: Path, keep: int) -> None:
    latest = _pointer(root)
    complete = [p for p in _step_dirs(root) if _read(p) is not None]
    for path in complete[:-keep] if keep > 0 else complete:
        if path.name != latest:
            shutil.rmtree(path, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            fsync_file(Path(directory) / name)
        fsync_dir(Path(directory))
