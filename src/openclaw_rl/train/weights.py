"""The weights channel: the trainer publishes policy versions, serving picks them up.

Files in the data dir, so trainer and server can be separate processes:

    DATA_DIR/weights/v000007.safetensors   the full policy of version 7
    DATA_DIR/weights/LATEST                "7"

A version file is written under a temporary name, fsynced and renamed into place; only
then is LATEST replaced the same way. A reader that sees version v in LATEST therefore
finds a complete v file, and a crash at any moment leaves the previous LATEST and its
file intact. Only the newest `KEEP` versions stay on disk; a reader still loading an
older one keeps its open file (POSIX unlinks lazily), and the pruned ones are at least
`KEEP` versions behind LATEST.

A version number names one set of weights forever: `publish` refuses a version that is
not above every version the channel has seen (LATEST, and any file on disk, which a crash
between the rename and LATEST can leave above it), so a resumed trainer can never
replace v11 by other weights that a serve-only process would never load. Each file's
metadata records its `policy_version` and, where known, its `parent_version`: the
version whose weights it was trained from (or renumbered from, on resume).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

KEEP = 3
_VERSION_FILE = re.compile(r"^v(\d{6,})\.safetensors$")


def weights_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "weights"


def version_path(data_dir: str | Path, version: int) -> Path:
    return weights_dir(data_dir) / f"v{version:06d}.safetensors"


def publish(data_dir: str | Path, state_dict: dict[str, torch.Tensor], version: int,
            parent_version: int | None = None) -> Path:
    """Write policy `version` atomically, point LATEST at it, prune old versions."""
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    highest = highest_version(data_dir)
    if highest is not None and version <= highest:
        raise ValueError(
            f"policy version {version} is not above v{highest}, which {weights_dir(data_dir)} already has: a version "
            "names one set of weights forever; build the trainer with loop.load_trainer, which numbers its versions "
            "above every version published or recorded"
        )
    metadata = {"policy_version": str(version)}
    if parent_version is not None:
        metadata["parent_version"] = str(parent_version)
    directory = weights_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = version_path(data_dir, version)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in state_dict.items()}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(tensors, str(tmp), metadata=metadata)
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(directory)  # the version file is durable before LATEST can name it
    write_atomic(directory / "LATEST", f"{version}\n")
    _prune(directory)
    return path


def latest_version(data_dir: str | Path) -> int | None:
    """The newest published version, or None if nothing was published."""
    try:
        return int((weights_dir(data_dir) / "LATEST").read_text().strip())
    except FileNotFoundError:
        return None


def highest_version(data_dir: str | Path) -> int | None:
    """The highest version LATEST names or a file on disk holds, or None if there is none."""
    found = [v for v in (latest_version(data_dir), *_versions(weights_dir(data_dir))) if v is not None]
    return max(found, default=None)


def parent_version(data_dir: str | Path, version: int) -> int | None:
    """The version a published version was trained (or renumbered) from, if its file says."""
    with safe_open(str(version_path(data_dir, version)), framework="pt") as f:
        parent = (f.metadata() or {}).get("parent_version")
    return int(parent) if parent is not None else None


def load(data_dir: str | Path, version: int) -> dict[str, torch.Tensor]:
    """The state dict of a published version (CPU tensors)."""
    path = version_path(data_dir, version)
    if not path.is_file():
        kept = sorted(_versions(weights_dir(data_dir)))
        raise FileNotFoundError(
            f"policy version {version} is not in {path.parent} (versions on disk: {kept}); "
            f"only the newest {KEEP} are kept, load latest_version() instead"
        )
    return load_file(str(path))


def _versions(directory: Path) -> dict[int, Path]:
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        match = _VERSION_FILE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _prune(directory: Path) -> None:
    """Drop all but the newest KEEP versions, and files left by publishes that were killed."""
    versions = _versions(directory)
    for version in sorted(versions)[:-KEEP]:
        versions[version].unlink(missing_ok=True)
    for leftover in directory.glob(".v*.tmp-*"):
        if not leftover.name.endswith(f".tmp-{os.getpid()}"):
            leftover.unlink(missing_ok=True)


# -- atomic file helpers (shared with checkpoint.py) -----------------------------------


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
