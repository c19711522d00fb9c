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
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

KEEP = 3
_VERSION_FILE = re.compile(r"^v(\d{6,})\.safetensors$")


def weights_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "weights"


def version_path(data_dir: str | Path, version: int) -> Path:
    return weights_dir(data_dir) / f"v{version:06d}.safetensors"


def publish(data_dir: str | Path, state_dict: dict[str, torch.Tensor], version: int) -> Path:
    """Write policy `version` atomically, point LATEST at it, prune old versions."""
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    directory = weights_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = version_path(data_dir, version)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in state_dict.items()}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(tensors, str(tmp), metadata={"policy_version": str(version)})
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
