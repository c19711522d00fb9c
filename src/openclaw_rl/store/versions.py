"""The policy version, the history of versions, pins, and the rollback requests a trainer carries out.

`policy` is one row: the version a trainer last published and the training steps it
holds. `versions` keeps each version's metadata for safe updates: what it was trained
from and on, how the gate decided, where its weights are and whether a person pinned
them. A rollback asked for through the API is a row of `policy_requests`, carried out
by the trainer between steps (docs/architecture.md).
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Sequence
from typing import Any

from openclaw_rl.store.connection import Connection, StoreError, chunks, marks


class VersionsMixin(Connection):
    """The published policy version, the version history and its requests."""

    # -- policy version ---------------------------------------------------------------

    def policy_version(self) -> int:
        return self.policy()["policy_version"]

    def highest_policy_version(self) -> int:
        """The highest version the store knows of, announced by a trainer, in the history (a
        version the gate rejected keeps its number) or recorded on a turn (a turn can name a
        version a crash kept from being announced); 0 if none."""
        with self._lock:
            (on_turns,) = self._execute("SELECT COALESCE(MAX(policy_version), 0) FROM turns").fetchone()
            (in_history,) = self._execute("SELECT COALESCE(MAX(version), 0) FROM versions").fetchone()
        return max(int(on_turns), int(in_history), self.policy_version())

    def highest_served_version(self) -> int:
        """The highest version that may have been served: announced, in the history with a gate
        other than `rejected` (a rejected version reached no engine), or recorded on a turn; 0 if
        none. A trainer whose weights are below it holds other weights than that number names."""
        with self._lock:
            (on_turns,) = self._execute("SELECT COALESCE(MAX(policy_version), 0) FROM turns").fetchone()
            (in_history,) = self._execute("SELECT COALESCE(MAX(version), 0) FROM versions "
                                          "WHERE gate IS NULL OR gate != 'rejected'").fetchone()
        return max(int(on_turns), int(in_history), self.policy_version())

    def policy(self) -> dict[str, Any]:
        """The latest published policy: version, training steps, when (None if never)."""
        with self._lock:
            row = self._execute("SELECT version, train_step, updated_at FROM policy WHERE id = 1").fetchone()
        version, step, at = row if row else (0, 0, None)
        return {"policy_version": version, "train_steps": step, "last_update_at": at}

    def set_policy_version(self, version: int, train_step: int | None = None) -> None:
        """Announce the published version (and the training steps it holds), and keep it in the history."""
        now = time.time()
        with self._write():
            self._execute(
                "INSERT INTO policy (id, version, train_step, updated_at) VALUES (1, ?, COALESCE(?, 0), ?) "
                "ON CONFLICT(id) DO UPDATE SET version = excluded.version, "
                "train_step = COALESCE(?, policy.train_step), updated_at = excluded.updated_at",
                (version, train_step, now, train_step),
            )
            self._execute(
                "INSERT INTO versions (version, train_step, created_at) "
                "VALUES (?, (SELECT train_step FROM policy WHERE id = 1), ?) ON CONFLICT (version) DO NOTHING",
                (version, now))

    # -- version history and the requests a trainer carries out --------------------------

    def record_version(self, version: int, *, parent: int | None, train_step: int | None, gate: str,
                       reason: str | None = None, checks: dict[str, Any] | None = None,
                       turn_ids: Sequence[int] = (), stats: dict[str, float] | None = None,
                       weights: str | None = None) -> None:
        """Keep a version's metadata (every field replaced but `pinned`): what it was trained from
        and on (the samples by user and by session, from `turn_ids`), how the gate decided and
        where its weights are. `gate`: accepted | rejected | ungated (no gate ran) | rollback |
        base (the weights training started from)."""
        samples = self._samples_of(list(turn_ids))
        with self._write():
            self._execute(
                "INSERT INTO versions (version, parent, train_step, created_at, gate, reason, checks, samples, stats, "
                "weights) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (version) DO UPDATE SET "
                "parent = excluded.parent, train_step = excluded.train_step, gate = excluded.gate, "
                "reason = excluded.reason, checks = excluded.checks, samples = excluded.samples, "
                "stats = excluded.stats, weights = excluded.weights",
                (version, parent, train_step, time.time(), gate, reason, json.dumps(checks, default=float),
                 json.dumps(samples), json.dumps(stats, default=float), weights))

    def _samples_of(self, turn_ids: list[int]) -> dict[str, Any]:
        by_user: collections.Counter[str] = collections.Counter()
        by_session: collections.Counter[str] = collections.Counter()
        with self._lock:
            for chunk in chunks(turn_ids):
                for owner, session in self._execute(
                        f"SELECT owner, session_id FROM turns WHERE id IN ({marks(chunk)})", tuple(chunk)).fetchall():
                    by_user[owner or "?"] += 1
                    by_session[session] += 1
        return {"count": len(turn_ids), "by_user": dict(by_user), "by_session": dict(by_session)}

    def probe_prompts(self, every: int, limit: int, at_least: int = 0) -> list[list[int]]:
        """Prompt token ids of the newest distinct main turns kept as probes (turn id % `every`
        == 0: the trainer never trains on them); topped up to `at_least` with the newest other
        main turns while there are too few probes yet."""
        found: list[list[int]] = []
        with self._lock:
            for where in ("id % ? = 0", "id % ? != 0"):
                for (ids,) in self._execute(f"SELECT prompt_token_ids FROM turns WHERE kind = 'main' AND {where} "
                                            "ORDER BY id DESC LIMIT ?", (every, 4 * limit)).fetchall():
                    prompt = json.loads(ids)
                    if prompt not in found and len(found) < limit:
                        found.append(prompt)
                if len(found) >= at_least:
                    break
        return found

    def versions(self, limit: int = 100, version: int | None = None) -> list[dict[str, Any]]:
        """The version history, newest first (or the one `version`)."""
        where, args = ("WHERE version = ? ", (version,)) if version is not None else ("", ())
        with self._lock:
            rows = self._execute(
                "SELECT version, parent, train_step, created_at, gate, reason, checks, samples, stats, weights, pinned "
                f"FROM versions {where}ORDER BY version DESC LIMIT ?", (*args, limit)).fetchall()
        names = ("version", "parent", "train_step", "created_at", "gate", "reason", "checks", "samples", "stats",
                 "weights", "pinned")
        found = []
        for row in rows:
            record = dict(zip(names, row))
            for key in ("checks", "samples", "stats"):
                record[key] = json.loads(record[key]) if record[key] else None
            record["pinned"] = bool(record["pinned"])
            found.append(record)
        return found

    def version(self, version: int) -> dict[str, Any] | None:
        found = self.versions(limit=1, version=version)
        return found[0] if found else None

    def set_version_weights(self, version: int, weights: str | None) -> None:
        with self._lock:
            self._execute("UPDATE versions SET weights = ? WHERE version = ?", (weights, version))

    def pin_version(self, version: int, pinned: bool = True) -> None:
        """Keep (or stop keeping) a version's weights whatever the retention."""
        with self._write():
            if self._execute("UPDATE versions SET pinned = ? WHERE version = ?",
                             (int(pinned), version)).rowcount != 1:
                raise StoreError(f"there is no version {version} in the history")

    def protected_versions(self) -> set[int]:
        """Versions whose weights retention keeps: pinned ones and the last accepted (or served) one."""
        with self._lock:
            pinned = {r[0] for r in self._execute("SELECT version FROM versions WHERE pinned = 1").fetchall()}
            (last,) = self._execute("SELECT MAX(version) FROM versions WHERE gate != 'rejected'").fetchone()
        return pinned | ({int(last)} if last is not None else set()) | {self.policy_version()}

    def request_rollback(self, target: int, requested_by: str) -> int:
        with self._write():
            cursor = self._execute(
                "INSERT INTO policy_requests (kind, target, requested_by, status, created_at) "
                f"VALUES ('rollback', ?, ?, 'pending', ?){self._sql.returning_id}", (target, requested_by, time.time()))
            return self._sql.inserted_id(cursor)

    def pending_requests(self) -> list[tuple[int, str, int]]:
        """(id, kind, target) of requests no trainer has carried out yet, oldest first."""
        with self._lock:
            return [tuple(r) for r in self._execute(
                "SELECT id, kind, target FROM policy_requests WHERE status = 'pending' ORDER BY id").fetchall()]

    def finish_request(self, request_id: int, result: int | None, message: str, failed: bool = False) -> None:
        with self._lock:
            self._execute("UPDATE policy_requests SET status = ?, result = ?, message = ?, done_at = ? WHERE id = ?",
                          ("failed" if failed else "done", result, message, time.time(), request_id))

    def request(self, request_id: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._execute("SELECT id, kind, target, status, result, message FROM policy_requests WHERE id = ?",
                                (request_id,)).fetchone()
        return dict(zip(("id", "kind", "target", "status", "result", "message"), row)) if row else None
