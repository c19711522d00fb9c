"""Each user's personal adapter versions (train/personal.py; docs/personal-adapters.md).

`adapter_versions` is the per-user counterpart of `versions`: one row per candidate a
user's samples made, under (owner, version), with the adapter it was trained from
(`parent`), how the update gate decided (`accepted`, `rejected`, `ungated`, `rollback`),
why, the gate's checks, the turns it was trained on, and whether a person pinned it. The
weights are files (DATA_DIR/personal/<owner>/vNNNNNN); a rejected candidate has a number
and a row but no weights, since it never serves. Deleting a user's data deletes their rows
(conversations.py, `delete_sessions(owner=...)`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from openclaw_rl.store.connection import Connection, StoreError

_COLUMNS = ("owner", "version", "parent", "gate", "reason", "checks", "samples", "created_at", "pinned")
GATES = ("accepted", "rejected", "ungated", "rollback")


class AdaptersMixin(Connection):
    """The history of every user's personal adapter."""

    def record_adapter_version(self, owner: str, version: int, *, parent: int | None, gate: str,
                               reason: str | None = None, checks: dict[str, Any] | None = None,
                               turn_ids: Sequence[int] = ()) -> None:
        """Keep one of `owner`'s adapter versions (a row written again keeps its pin)."""
        if gate not in GATES:
            raise ValueError(f"an adapter version's gate is one of {', '.join(GATES)}, not {gate!r}")
        with self._write():
            self._execute(
                "INSERT INTO adapter_versions (owner, version, parent, gate, reason, checks, samples, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (owner, version) DO UPDATE SET parent = excluded.parent, "
                "gate = excluded.gate, reason = excluded.reason, checks = excluded.checks, samples = excluded.samples",
                (owner, version, parent, gate, reason, json.dumps(checks, default=float) if checks else None,
                 json.dumps(list(turn_ids)), time.time()))

    def adapter_versions(self, owner: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """`owner`'s adapter versions (None: every user's), newest first; `samples` is the turn ids trained on."""
        where, args = ("WHERE owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(f"SELECT {', '.join(_COLUMNS)} FROM adapter_versions {where}"
                                 "ORDER BY created_at DESC, owner, version DESC LIMIT ?", (*args, limit)).fetchall()
        found = []
        for row in rows:
            record = dict(zip(_COLUMNS, row))
            record["checks"] = json.loads(record["checks"]) if record["checks"] else None
            record["samples"] = json.loads(record["samples"]) if record["samples"] else []
            record["pinned"] = bool(record["pinned"])
            found.append(record)
        return found

    def highest_adapter_version(self, owner: str) -> int:
        """The highest number `owner`'s adapter history holds (a rejected candidate's too); 0 if none."""
        with self._lock:
            (highest,) = self._execute("SELECT COALESCE(MAX(version), 0) FROM adapter_versions WHERE owner = ?",
                                       (owner,)).fetchone()
        return int(highest)

    def pin_adapter_version(self, owner: str, version: int, pinned: bool = True) -> None:
        """Keep (or stop keeping) one of `owner`'s adapter versions whatever the retention."""
        with self._write():
            if self._execute("UPDATE adapter_versions SET pinned = ? WHERE owner = ? AND version = ? "
                             "AND gate != 'rejected'", (int(pinned), owner, version)).rowcount != 1:
                raise StoreError(f"{owner!r} has no served adapter version {version} in the history")

    def pinned_adapter_versions(self, owner: str) -> set[int]:
        with self._lock:
            return {int(r[0]) for r in self._execute(
                "SELECT version FROM adapter_versions WHERE owner = ? AND pinned = 1", (owner,)).fetchall()}

    def delete_adapter_history(self, owner: str) -> int:
        """Forget `owner`'s adapter history (an admin's reset); how many versions it held."""
        with self._write():
            return max(self._execute("DELETE FROM adapter_versions WHERE owner = ?", (owner,)).rowcount, 0)
