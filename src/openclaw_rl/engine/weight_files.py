"""Policy versions on disk: the one atomic versioned writer, and its reader.

    ROOT/v000007/model.safetensors              full weights of version 7, or
    ROOT/v000007/adapter_model.safetensors      its LoRA adapter, with
    ROOT/v000007/adapter_config.json            (peft's own format)
    ROOT/LATEST                                 "7"

Two users, one format: the files channel (train/weights.py, ROOT = DATA_DIR/weights)
and the remote engines (engine/remote.py, ROOT = their weights dir, which the vLLM or
SGLang server reads). A version directory is laid out as Hugging Face and peft save
models, so a remote server can load the files channel's own version where it lies;
nothing is copied between two directories.

Atomicity: a version is written into a temporary directory, every file and the directory
fsynced, then renamed into place; only then is LATEST replaced the same way. A reader
that sees v in LATEST finds a complete v, and a crash at any moment leaves the previous
LATEST and its version intact. Only the newest `keep` versions stay; a reader still
loading an older one keeps its open files (POSIX unlinks lazily). A directory left by a
killed write is removed by the next write.

Each safetensors file's metadata records its `policy_version` and, where known, its
`parent_version`: the version it was trained (or renumbered) from. Which versions a
root may hold (the files channel refuses any number it has seen) is the caller's rule,
not the writer's: a remote engine's dir may be rewritten with the same number after a
restart.

Data dirs written before this layout hold `vNNNNNN.safetensors` files: they count for
`highest_version` (so a number is never reused) and are pruned, but are not read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from openclaw_rl.engine.base import LoraAdapter, StoredWeights

FULL_FILE = "model.safetensors"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
LATEST = "LATEST"
_VERSION = re.compile(r"^v(\d{6,})(\.safetensors)?$")  # a version dir, or a file of the old layout


def version_dir(root: str | Path, version: int) -> Path:
    return Path(root) / f"v{version:06d}"


def write_version(root: str | Path, version: int, weights: dict[str, torch.Tensor] | LoraAdapter, *,
                  keep: int, parent: int | None = None, protect: frozenset[int] = frozenset()) -> StoredWeights:
    """Write `weights` as version `version` under `root`, point LATEST at it, keep the newest
    `keep` and the versions in `protect`."""
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    if keep < 1:
        raise ValueError(f"keep = {keep} would delete the version just written: keep at least 1")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt", "policy_version": str(version)}
    if parent is not None:
        metadata["parent_version"] = str(parent)
    target = version_dir(root, version)
    tmp = root / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if isinstance(weights, LoraAdapter):
        save_file(_cpu_tensors(weights.state_dict), str(tmp / ADAPTER_FILE), metadata=metadata)
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(weights.config, indent=2))
    else:
        save_file(_cpu_tensors(weights), str(tmp / FULL_FILE), metadata=metadata)
    for path in tmp.iterdir():
        fsync_file(path)
    fsync_dir(tmp)
    shutil.rmtree(target, ignore_errors=True)  # a remote engine's leftover of an earlier run with this number
    os.replace(tmp, target)
    fsync_dir(root)  # the version is durable before LATEST can name it
    write_atomic(root / LATEST, f"{version}\n")
    _prune(root, keep, protect)
    return StoredWeights(target, version, isinstance(weights, LoraAdapter))


def latest_version(root: str | Path) -> int | None:
    """The version LATEST names, or None if nothing was written."""
    try:
        return int((Path(root) / LATEST).read_text().strip())
    except FileNotFoundError:
        return None


def highest_version(root: str | Path) -> int | None:
    """The highest version LATEST names or a directory (or old-layout file) holds; None if none.
    A crash between the rename and LATEST leaves a version above LATEST: it still counts."""
    found = [v for v in (latest_version(root), *_versions(Path(root))) if v is not None]
    return max(found, default=None)


def stored(root: str | Path, version: int) -> StoredWeights:
    """The version `version` under `root`; FileNotFoundError names the versions kept."""
    path = version_dir(root, version)
    if (path / FULL_FILE).is_file():
        return StoredWeights(path, version, is_adapter=False)
    if (path / ADAPTER_FILE).is_file():
        return StoredWeights(path, version, is_adapter=True)
    raise FileNotFoundError(
        f"policy version {version} is not in {Path(root)} (versions on disk: {sorted(_versions(Path(root)))}); "
        "only the newest few are kept: read latest_version() instead")


def read(weights: StoredWeights) -> dict[str, torch.Tensor] | LoraAdapter:
    """The tensors (CPU) of a stored version: full weights, or the adapter with its config."""
    if weights.is_adapter:
        config = json.loads((weights.path / ADAPTER_CONFIG).read_text())
        return LoraAdapter(load_file(str(weights.path / ADAPTER_FILE)), config)
    return load_file(str(weights.path / FULL_FILE))


def tensor_names(weights: StoredWeights) -> set[str]:
    """The tensor names of a stored version, read from its header alone."""
    with safe_open(str(weights.path / (ADAPTER_FILE if weights.is_adapter else FULL_FILE)), framework="pt") as f:
        return set(f.keys())


def parent_version(weights: StoredWeights) -> int | None:
    """The version a stored version was trained (or renumbered) from, if its file says."""
    with safe_open(str(weights.path / (ADAPTER_FILE if weights.is_adapter else FULL_FILE)), framework="pt") as f:
        parent = (f.metadata() or {}).get("parent_version")
    return int(parent) if parent is not None else None


def _cpu_tensors(state_dict: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies safetensors accepts: a tied weight (lm_head = embedding) gets its own."""
    tensors, seen = {}, set()
    for name, t in state_dict.items():
        t = t.detach().to("cpu").contiguous()
        if t.data_ptr() in seen:
            t = t.clone()
        seen.add(t.data_ptr())
        tensors[name] = t
    return tensors


def _versions(root: Path) -> dict[int, Path]:
    if not root.is_dir():
        return {}
    found = {}
    for path in root.iterdir():
        match = _VERSION.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def kept_versions(root: str | Path) -> list[int]:
    """The versions whose weights are on disk under `root`, oldest first."""
    return sorted(_versions(Path(root)))


def _prune(root: Path, keep: int, protect: frozenset[int] = frozenset()) -> None:
    """Drop all but the newest `keep` versions and those in `protect`, and what writes that
    were killed left behind."""
    versions = _versions(root)
    for version in sorted(versions)[:-keep]:
        if version not in protect:
            _remove(versions[version])
    for leftover in root.glob(".v*.tmp-*"):
        if not leftover.name.endswith(f".tmp-{os.getpid()}"):
            _remove(leftover)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# -- atomic file helpers (shared with train/checkpoint.py) ------------------------------


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text`: readers see the old content or the new, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
