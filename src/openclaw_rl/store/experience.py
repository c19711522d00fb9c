"""Each user's experience (experience/): the current lessons and the log of every change.

Three tables. `experience` holds one row per owner: the version and the lessons as JSON,
what serving reads for every request (one primary-key lookup). `experience_changes` is
the append-only log, one row per `Change` (`Change.to_dict()`), which the API lists and
undoes and from which `experience.replay` rebuilds any version. `lesson_absorption` keeps
each measurement of how far a lesson still moves the policy (judge/absorption.py), per
lesson and policy version, which the API and the dashboard show; one measured under the
user's personal adapter goes to `lesson_absorption_adapter`, per lesson, policy version and
adapter version. A table of its own, not a column: the first table's key (owner, lesson,
policy version) cannot be widened on a database that has it, and under personal adapters the
shared version stays one while the adapter's versions follow each other.

Decisions and why:

- **The current lessons are stored, not only the log.** Serving reads a user's
  experience on every request; replaying a log that grows with every correction there
  would cost more each day. The log is still complete, so `replay(owner, log)` equals the
  stored row (a test checks it).
- **One transaction, a version check (compare and swap).** `save_experience` writes the
  row and its changes together, and only if the stored version is still the one the
  changes start from: `UPDATE ... WHERE version = ?` (or an insert that fails on the
  owner's key when a first row appeared meanwhile). Under SQLite's `BEGIN IMMEDIATE` and
  PostgreSQL's READ COMMITTED (an UPDATE waits for the other writer's row lock, then
  reads the committed version) the second of two writers sees the first's version and
  gets `ExperienceConflict`, never a lost change. `update_experience` is the retry: read,
  apply, save, again on a conflict.
- The log's key is (owner, version), so a change can never be written twice either.
- Lessons name their turns as text (`Lesson.sources`), not as foreign keys: deleting a
  session leaves its user's standing preferences; "delete my data" removes all of them
  (`delete_sessions(owner=...)` clears both tables in its transaction). A change learned
  from a turn is saved only while that turn exists (checked and locked in the same
  transaction), so a judge still learning from a session being deleted adds nothing after
  the deletion.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from openclaw_rl.experience import Change, Experience, Lesson
from openclaw_rl.store.connection import Connection, StoreError, chunks, marks

__all__ = ["ExperienceConflict", "ExperienceMixin"]

Update = Callable[[Experience], tuple[Experience, list[Change]]]
_FROM_TURNS = ("added", "merged", "replaced")  # the kinds a judged turn causes (an undo names the change's turn)


class ExperienceConflict(StoreError):
    """Another writer changed this user's experience since it was read: read it again and redo the change."""


class ExperienceMixin(Connection):
    """Per-user lessons and their change log."""

    def experience(self, owner: str) -> Experience:
        """`owner`'s experience as last saved; an empty one (version 0) when nothing was learned."""
        with self._lock:
            row = self._execute("SELECT version, lessons FROM experience WHERE owner = ?", (owner,)).fetchone()
        if row is None:
            return Experience(owner)
        return Experience(owner, tuple(_lesson(x) for x in json.loads(row[1])), int(row[0]))

    def save_experience(self, experience: Experience, changes: list[Change]) -> None:
        """Store `experience` and the `changes` that led to it from the stored version, in one
        transaction; `ExperienceConflict` when the stored version is no longer the one they start from."""
        if not changes:
            return
        _check_chain(experience, changes)
        base = changes[0].version - 1
        lessons = json.dumps([asdict(lesson) for lesson in experience.lessons])
        now = time.time()
        learned_from = sorted({int(c.turn_id) for c in changes if c.kind in _FROM_TURNS and (c.turn_id or "").isdigit()})
        with self._write():
            self._check_turns_kept(learned_from)
            if base == 0:
                written = self._execute(
                    "INSERT INTO experience (owner, version, lessons, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (owner) DO NOTHING", (experience.owner, experience.version, lessons, now)).rowcount
            else:
                written = self._execute(
                    "UPDATE experience SET version = ?, lessons = ?, updated_at = ? WHERE owner = ? AND version = ?",
                    (experience.version, lessons, now, experience.owner, base)).rowcount
            if written != 1:
                raise ExperienceConflict(
                    f"the experience of {experience.owner!r} is no longer at version {base} (another writer saved "
                    "first); read it again and redo the change (Store.update_experience retries)")
            for change in changes:
                self._execute("INSERT INTO experience_changes (owner, version, kind, change, created_at) "
                              "VALUES (?, ?, ?, ?, ?)",
                              (change.owner, change.version, change.kind, json.dumps(change.to_dict()), now))

    def _check_turns_kept(self, turn_ids: list[int]) -> None:
        """Inside the write: the turns a lesson is learned from still exist (locked until the
        commit). A session deleted while the judge was learning from it keeps nothing: the
        deletion either ran first (refused here) or waits, then deletes the experience too."""
        for chunk in chunks(turn_ids):
            kept = {row[0] for row in self._execute(
                f"SELECT id FROM turns WHERE id IN ({marks(chunk)}){self._sql.lock_rows}", tuple(chunk)).fetchall()}
            if gone := sorted(set(chunk) - kept):
                raise StoreError(f"turn(s) {gone} were deleted while a lesson was learned from them; nothing "
                                 "learned from a deleted session is kept")

    def update_experience(self, owner: str, update: Update, attempts: int = 5) -> tuple[Experience, list[Change]]:
        """Read `owner`'s experience, apply `update`, save; on a conflict read again and redo it.
        Returns what was saved (the experience as read and no changes when `update` made none)."""
        for attempt in range(attempts):
            experience, changes = update(self.experience(owner))
            try:
                self.save_experience(experience, changes)
                return experience, changes
            except ExperienceConflict:
                if attempt + 1 == attempts:
                    raise
        raise AssertionError("unreachable")

    def experience_changes(self, owner: str, limit: int = 100) -> list[Change]:
        """`owner`'s latest changes, newest first."""
        with self._lock:
            rows = self._execute("SELECT change FROM experience_changes WHERE owner = ? ORDER BY version DESC LIMIT ?",
                                 (owner, limit)).fetchall()
        return [Change.from_dict(json.loads(row[0])) for row in rows]

    def experience_change(self, owner: str, version: int) -> Change | None:
        """The change that produced `owner`'s `version`, or None."""
        with self._lock:
            row = self._execute("SELECT change FROM experience_changes WHERE owner = ? AND version = ?",
                                (owner, version)).fetchone()
        return Change.from_dict(json.loads(row[0])) if row else None

    def lesson_turns(self, owner: str, turn_ids: list[str]) -> dict[str, tuple[str, int]]:
        """Where a lesson's sources are: turn id -> (session id, index in it), for the turns of
        `owner` still stored (a deleted session's turns are gone; another user's are never shown)."""
        ids = sorted({int(x) for x in turn_ids if x.isdigit()})
        found: dict[str, tuple[str, int]] = {}
        with self._lock:
            for chunk in chunks(ids):
                for turn_id, session_id, index in self._execute(
                        f"SELECT id, session_id, idx FROM turns WHERE owner = ? AND id IN ({marks(chunk)})",
                        (owner, *chunk)).fetchall():
                    found[str(turn_id)] = (session_id, int(index))
        return found

    def experience_owners(self) -> list[str]:
        """Every user with an experience (lessons now, or a change log), by name."""
        with self._lock:
            rows = self._execute("SELECT owner FROM experience ORDER BY owner").fetchall()
        return [row[0] for row in rows]

    def record_absorption(self, owner: str, measured: list[tuple[int, int, float, int]],
                          adapter_version: int | None = None) -> None:
        """Save absorption measurements of `owner`'s lessons: (lesson id, policy version, gap per
        token, turns measured on) each (judge/absorption.py), under `owner`'s adapter
        `adapter_version` (None: none); a repeat on the same weights replaces."""
        now = time.time()
        table, key, extra = (("lesson_absorption", "", ()) if adapter_version is None else
                             ("lesson_absorption_adapter", " AND adapter_version = ?", (adapter_version,)))
        columns = "owner, lesson_id, policy_version, gap, turns, measured_at" + (", adapter_version" if extra else "")
        with self._write():
            for lesson_id, version, gap, turns in measured:
                self._execute(f"DELETE FROM {table} WHERE owner = ? AND lesson_id = ? AND policy_version = ?{key}",
                              (owner, lesson_id, version, *extra))
                self._execute(f"INSERT INTO {table} ({columns}) VALUES (?, ?, ?, ?, ?, ?{', ?' if extra else ''})",
                              (owner, lesson_id, version, gap, turns, now, *extra))

    def absorption(self, owner: str) -> dict[int, list[dict[str, Any]]]:
        """Every absorption measurement of `owner`'s lessons: lesson id -> its measurements, oldest
        weights first (by policy version, then the shared model before each adapter version);
        `adapter_version` None: measured without an adapter."""
        with self._lock:
            rows = self._execute(
                "SELECT lesson_id, policy_version, NULL, gap, turns, measured_at FROM lesson_absorption WHERE owner = ? "
                "UNION ALL SELECT lesson_id, policy_version, adapter_version, gap, turns, measured_at "
                "FROM lesson_absorption_adapter WHERE owner = ?", (owner, owner)).fetchall()
        found: dict[int, list[dict[str, Any]]] = {}
        weights = lambda row: (row[0], row[1], -1 if row[2] is None else row[2])  # noqa: E731 - the base first
        for lesson_id, version, adapter, gap, turns, at in sorted(rows, key=weights):
            found.setdefault(int(lesson_id), []).append(
                {"policy_version": int(version), "adapter_version": None if adapter is None else int(adapter),
                 "gap": float(gap), "turns": int(turns), "measured_at": float(at)})
        return found

    def delete_experience(self, owner: str) -> dict[str, int]:
        """Forget `owner`'s lessons and change log; returns how many of each were removed."""
        with self._write():
            current = self._execute("SELECT lessons FROM experience WHERE owner = ?", (owner,)).fetchone()
            changes = self._execute("DELETE FROM experience_changes WHERE owner = ?", (owner,)).rowcount
            self._execute("DELETE FROM experience WHERE owner = ?", (owner,))
            self._execute("DELETE FROM lesson_absorption WHERE owner = ?", (owner,))
            self._execute("DELETE FROM lesson_absorption_adapter WHERE owner = ?", (owner,))
        return {"lessons": len(json.loads(current[0])) if current else 0, "experience_changes": changes}


def _lesson(data: dict[str, Any]) -> Lesson:
    return Lesson(**{**data, "sources": tuple(data["sources"])})


def _check_chain(experience: Experience, changes: list[Change]) -> None:
    versions = [change.version for change in changes]
    owners = {change.owner for change in changes}
    if owners != {experience.owner} or versions != list(range(versions[0], versions[0] + len(versions))) \
            or versions[-1] != experience.version:
        raise ValueError(f"changes v{versions} of {sorted(owners)} do not lead to v{experience.version} of "
                         f"{experience.owner!r}; pass the changes learn/edit/undo returned, in order")
