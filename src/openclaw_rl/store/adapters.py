"""Each user's personal adapter versions (train/personal.py; docs/personal-adapters.md).

`adapter_versions` is the per-user counterpart of `versions`: one row per candidate a
user's samples made, under (owner, version), with the adapter it was trained from
(`parent`), how the update gate decided (`accepted`, `rejected`, `ungated`, `rollback`),
why, the gate's checks, the turns it was trained on, and whether a person pinned it. The
weights are files (DATA_DIR/personal/<owner>/vNNNNNN); a rejected candidate has a number
and a row but no weights, since it never serves. Deleting a user's data deletes their rows
(conversations.py, `delete_sessions(owner=...)`).

`adapters_off` holds the users whose adapter an admin turned off: while a user has a row
there they are served the shared model, and their adapter, its history and their samples
are kept (train/personal.py neither trains nor serves it). A row outlives a reset of the
adapter, since the switch is the admin's and a reset is the user's too, and goes with the
user's data.
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

    def served_adapter_versions(self) -> dict[str, int]:
        """Each user's newest adapter version that may serve (any gate but `rejected`): what a serving
        process loads when their trainer runs elsewhere (train/personal_history.py)."""
        with self._lock:
            rows = self._execute("SELECT owner, MAX(version) FROM adapter_versions WHERE gate != 'rejected' "
                                 "GROUP BY owner").fetchall()
        return {owner: int(version) for owner, version in rows}

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
        """Forget `owner`'s adapter history (a reset), and what lessons measured under it (the
        numbers start again: store/experience.py); how many versions it held."""
        with self._write():
            self._execute("DELETE FROM lesson_absorption_adapter WHERE owner = ?", (owner,))
            return max(self._execute("DELETE FROM adapter_versions WHERE owner = ?", (owner,)).rowcount, 0)

    def turn_adapter_off(self, owner: str, by: str | None = None) -> None:
        """Serve `owner` the shared model instead of their adapter, until `turn_adapter_on`; `by`: the admin."""
        with self._write():
            self._execute("INSERT INTO adapters_off (owner, turned_off_by, turned_off_at) VALUES (?, ?, ?) "
                          "ON CONFLICT (owner) DO NOTHING", (owner, by, time.time()))

    def turn_adapter_on(self, owner: str) -> bool:
        """Serve `owner` their adapter again; whether it was off."""
        with self._write():
            return self._execute("DELETE FROM adapters_off WHERE owner = ?", (owner,)).rowcount > 0

    def adapters_off(self) -> dict[str, dict[str, Any]]:
        """The users whose adapter is off: owner -> who turned it off (`by`) and when (`at`)."""
        with self._lock:
            rows = self._execute("SELECT owner, turned_off_by, turned_off_at FROM adapters_off").fetchall()
        return {owner: {"by": by, "at": at} for owner, by, at in rows}
