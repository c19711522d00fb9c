"""Each personal-adapter user's trainer state between their steps (train/personal.py): their
AdamW moments and their update gate, in memory for at most `max_resident` users, the least
recently stepped leaving first; the moments of every user on disk.

    DATA_DIR/personal/<user>/moments.safetensors     AdamW's moments after the user's served version

Decisions and why (docs/personal-adapters.md, "Cost"):

- Resident: 5x the adapter a user (moments 2x, their gate's snapshot of weights 1x and
  moments 2x), so without a bound the trainer's state, not the engine, limits the users one
  machine holds. `MAX_RESIDENT` (32, `--personal-resident`) users stepping in turn stay in
  memory; more than that in one pass of the loop are each restored at their step.
- Written at every accepted step (after the version it follows), not at eviction: a restart,
  a crash included, continues every user from their moments, and an eviction is a drop, no
  write under the trainer's lock. The file names the version it follows (metadata `version`):
  moments of another version (a crash between the two writes) are not used, and the step
  starts from fresh moments, as after a rollback. Only the tensors are written
  (`state.<param index>.<name>`); the param groups (lr, betas) are the trainer's own, the same
  for every user. Temp file, fsync, rename: a reader sees the old file or the new.
- An evicted user's gate is dropped and built again at their next step over what the trainer
  then holds, their served adapter and moments, which are the old gate's snapshot; their
  anchors are read from gate-anchors.json, and what the weights cannot give back, the served
  version's score drift (with a scorer), travels in the file's metadata (`Gate.carried`). Not
  kept: the served answers the old gate had decoded (decoded again once, the cost of a
  restore) and the collapse detectors' base (recorded in the checks, never deciding).
- A user's state in memory names the version it follows: when what they are served is another
  version (a rollback or reset done by a serving process while this trainer runs apart,
  train/personal_history.py), it is dropped and read again for the version served, so the
  step starts from that version with fresh moments and a gate rebuilt on it, as after a
  rollback done here.
- The trainer is given a copy of the kept moments: torch's `Optimizer.load_state_dict` keeps
  the tensors it is given (same dtype and device) and the step moves them in place, so
  without a copy a rejected step would move the moments it should leave as they were.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from openclaw_rl.engine.weight_files import fsync_dir, fsync_file

if TYPE_CHECKING:
    from openclaw_rl.train.gate import Gate

log = logging.getLogger(__name__)

MOMENTS_FILE = "moments.safetensors"
MAX_RESIDENT = 32  # users whose moments and gate stay in memory (ServeConfig.personal_resident's default)
RESIDENT_COPIES = 5  # a resident user's state, in adapters: moments 2, their gate's snapshot 3


@dataclass
class Resident:
    """One user's state in memory."""

    moments: dict[str, Any] | None  # the optimizer's state dict after their served version; None: fresh
    carried: dict[str, float] = field(default_factory=dict)  # what their gate gets back when rebuilt
    gate: Gate | None = None
    version: int | None = None  # the served version this state follows (None: the base model)


class UserStates:
    def __init__(self, root: str | Path, fresh: dict[str, Any], max_resident: int = MAX_RESIDENT) -> None:
        """`root`: DATA_DIR/personal; `fresh`: a new user's optimizer state (param groups, no moments)."""
        if max_resident < 1:
            raise ValueError(f"max_resident is {max_resident}; at least the user stepping now is held")
        self.root, self.fresh, self.max_resident = Path(root), copy.deepcopy(fresh), max_resident
        self._resident: OrderedDict[str, Resident] = OrderedDict()  # the least recently stepped first

    def resident(self) -> list[str]:
        """The users whose state is in memory, the least recently stepped first."""
        return list(self._resident)

    def path(self, user: str) -> Path:
        return self.root / user / MOMENTS_FILE

    def moments(self, user: str, version: int | None) -> dict[str, Any]:
        """The user's moments after `version`, their served one (fresh with none), as a copy the
        trainer may step; the user becomes the most recently stepped, read from disk if evicted."""
        held = self._touch(user, version)
        return copy.deepcopy(held.moments if held.moments is not None else self.fresh)

    def gate(self, user: str, build: Callable[[], Gate]) -> Gate:
        """The user's gate (after `moments`, which makes them resident), built now if not held."""
        held = self._resident[user]
        if held.gate is None:
            held.gate = build()
            held.gate.carry(held.carried)
        return held.gate

    def save(self, user: str, version: int, moments: dict[str, Any], gate: Gate | None) -> None:
        """The moments after the user's accepted `version`: written, then kept in memory."""
        carried = gate.carried() if gate is not None else {}
        _write(self.path(user), version, moments["state"], carried)
        held = self._resident.get(user)
        if held is None:
            held = self._resident[user] = Resident(None)
            self._evict()
        held.moments, held.carried, held.version = copy.deepcopy(moments), carried, version

    def forget(self, user: str) -> None:
        """Drop the user's state, in memory and on disk (a rollback: fresh moments; a reset)."""
        self._resident.pop(user, None)
        self.path(user).unlink(missing_ok=True)

    def _touch(self, user: str, version: int | None) -> Resident:
        held = self._resident.get(user)
        if held is not None and held.version == version:
            self._resident.move_to_end(user)
            return held
        if held is not None:  # another process rolled back or reset the adapter this state follows
            log.info("%s is served %s, not the v%s their moments and gate follow: both start again", user,
                     f"v{version}" if version is not None else "the base model", held.version)
            del self._resident[user]
        held = self._resident[user] = self._read(user, version)
        self._evict()
        return held

    def _read(self, user: str, version: int | None) -> Resident:
        path = self.path(user)
        if version is None or not path.is_file():
            return Resident(None, version=version)
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        if metadata.get("version") != str(version):
            log.debug("%s's saved moments follow v%s, not their served v%d: fresh moments", user,
                      metadata.get("version"), version)
            return Resident(None, version=version)
        state: dict[int, dict[str, torch.Tensor]] = {}
        for name, tensor in load_file(str(path)).items():
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = tensor
        log.debug("%s's moments (v%d) read back from %s", user, version, path)
        moments = {"state": state, "param_groups": copy.deepcopy(self.fresh["param_groups"])}
        return Resident(moments, json.loads(metadata.get("gate", "{}")), version=version)

    def _evict(self) -> None:
        while len(self._resident) > self.max_resident:
            user, _ = self._resident.popitem(last=False)
            log.debug("%s's moments and update gate leave memory (%d users resident at most); their moments "
                      "stay in %s", user, self.max_resident, self.path(user))


def _write(path: Path, version: int, state: dict[int, dict[str, Any]], carried: dict[str, float]) -> None:
    """The optimizer's per-parameter state as one safetensors file, replaced atomically."""
    tensors = {}
    for index, values in state.items():
        for key, value in values.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"the optimizer's state {key!r} is not a tensor ({type(value).__name__})")
            tensors[f"state.{index}.{key}"] = value.detach().to("cpu").contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(tensors, str(tmp), metadata={"format": "pt", "version": str(version), "gate": json.dumps(carried)})
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
