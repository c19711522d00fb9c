"""Sessions, their turns and next states, the Responses API objects, and deleting sessions.

Serving writes here: a main turn is committed before its response is returned, its next
state when the client's next request (or feedback) pairs with it. The index of a turn
within its session is chosen inside the write, by one writer of that session at a time
(the session row is locked on PostgreSQL; SQLite's `BEGIN IMMEDIATE` locks everything).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from openclaw_rl.store.connection import StoreError, chunks, marks
from openclaw_rl.store.logs import LogsMixin
from openclaw_rl.types import NextState, Session, Turn, TurnRecord
from openclaw_rl.users import LOCAL

_TURN_COLUMNS = (
    "id, session_id, idx, kind, policy_version, prompt_messages, prompt_token_ids, "
    "response_token_ids, behaviour_logprobs, response_text, tool_calls, sampling, "
    "finish_reason, created_at, next_state, closed, continuation_hash, owner, experience_version, experience_block, "
    "experience_placement"
)


class ConversationsMixin(LogsMixin):
    """Sessions, turns, next states and Responses objects: what serving writes and reads back."""

    # -- sessions ---------------------------------------------------------------------

    def ensure_session(self, session_id: str, source: str, owner: str = LOCAL.name) -> Session:
        """The session, created for `owner` if new (an existing one keeps its owner)."""
        with self._lock:
            self._execute(
                "INSERT INTO sessions (id, created_at, source, owner) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (session_id, time.time(), source, owner),
            )
            return self._session(session_id)

    def get_session(self, session_id: str) -> Session | None:
        with self._lock:
            try:
                return self._session(session_id)
            except StoreError:
                return None

    def list_sessions(self, limit: int = 100, offset: int = 0, owner: str | None = None) -> list[Session]:
        """Newest first; only `owner`'s when given."""
        where, args = ("WHERE s.owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(
                "SELECT s.id, s.created_at, s.closed_at, s.source, COUNT(t.id), s.owner FROM sessions s "
                f"LEFT JOIN turns t ON t.session_id = s.id {where}GROUP BY s.id "
                "ORDER BY s.created_at DESC LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        return [Session(*row) for row in rows]

    def close_session(self, session_id: str) -> Session:
        """Mark a session closed; its open main turn will get no next state."""
        now = time.time()
        with self._lock:
            self._session(session_id)
            with self._write():
                self._execute(
                    "UPDATE sessions SET closed_at = COALESCE(closed_at, ?) WHERE id = ?", (now, session_id)
                )
                self._execute(
                    "UPDATE turns SET closed = 1 WHERE session_id = ? AND kind = 'main' AND next_state IS NULL",
                    (session_id,),
                )
            return self._session(session_id)

    def _session(self, session_id: str) -> Session:
        row = self._execute(
            "SELECT s.id, s.created_at, s.closed_at, s.source, "
            "(SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id), s.owner FROM sessions s WHERE s.id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            raise StoreError(f"unknown session {session_id!r}")
        return Session(*row)

    # -- turns ------------------------------------------------------------------------

    def record_turn(self, record: TurnRecord) -> Turn:
        """Commit a turn of `record.owner`'s session; it is durable when this returns. A session
        deleted while this turn was being generated is created again (with `record.source`): the
        request came before the deletion finished, and its client goes on with it."""
        if not isinstance(record, TurnRecord):
            raise TypeError(f"record_turn takes a TurnRecord (openclaw_rl.types), got {type(record).__name__}")
        now, session_id = time.time(), record.session_id
        with self._lock:
            with self._write():
                if self._sql.lock_rows:  # the next index is chosen by one writer of this session at a time
                    self._execute(f"SELECT id FROM sessions WHERE id = ?{self._sql.lock_rows}", (session_id,))
                self._execute("INSERT INTO sessions (id, created_at, source, owner) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT DO NOTHING", (session_id, now, record.source, record.owner))
                (idx,) = self._execute(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE session_id = ?", (session_id,)
                ).fetchone()
                cur = self._execute(
                    "INSERT INTO turns (session_id, idx, kind, policy_version, prompt_messages, "
                    "prompt_token_ids, response_token_ids, behaviour_logprobs, response_text, "
                    "tool_calls, sampling, finish_reason, continuation_hash, created_at, owner, "
                    "experience_version, experience_block, experience_placement) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT owner FROM sessions WHERE id = ?), ?, ?, ?)"
                    f"{self._sql.returning_id}",
                    (
                        session_id, idx, record.kind, record.policy_version, json.dumps(record.prompt_messages),
                        json.dumps(record.prompt_token_ids), json.dumps(record.response_token_ids),
                        json.dumps(record.behaviour_logprobs), record.response_text, json.dumps(record.tool_calls),
                        json.dumps(record.sampling), record.finish_reason, record.continuation_hash, now, session_id,
                        record.experience_version, record.experience_block, record.experience_placement,
                    ),
                )
                turn_id = self._sql.inserted_id(cur)
            turn = self._turn_where("id = ?", (turn_id,))[0]  # under the lock: no deletion of this process between
        self._log_turn(turn)
        return turn

    def set_next_state(self, turn_id: int, next_state: NextState) -> None:
        with self._write():
            self._set_next_state(turn_id, next_state)
        if (turn := self.get_turn(turn_id)) is not None:  # None: deleted the moment after
            self._log_next_state(turn, next_state)

    def _set_next_state(self, turn_id: int, next_state: NextState) -> None:
        cur = self._execute(
            "UPDATE turns SET next_state = ?, next_state_at = ? "
            "WHERE id = ? AND kind = 'main' AND next_state IS NULL",
            (json.dumps(next_state.to_dict()), next_state.at or time.time(), turn_id),
        )
        if cur.rowcount != 1:
            raise StoreError(f"turn {turn_id} is not an open main turn")

    def close_turns(self, turn_ids: list[int]) -> None:
        """Close main turns that will get no next state (the choices of an n > 1 request
        that the client did not continue); a turn already paired stays as it is."""
        if not turn_ids:
            return
        with self._write():
            self._execute(f"UPDATE turns SET closed = 1 WHERE id IN ({marks(turn_ids)}) AND next_state IS NULL",
                          tuple(turn_ids))

    def turns(self, session_id: str) -> list[Turn]:
        return self._turn_where("session_id = ? ORDER BY idx", (session_id,))

    def get_turn(self, turn_id: int) -> Turn | None:
        found = self._turn_where("id = ?", (turn_id,))
        return found[0] if found else None

    def last_main_turn(self, session_id: str) -> Turn | None:
        found = self._turn_where(
            "session_id = ? AND kind = 'main' ORDER BY idx DESC LIMIT 1", (session_id,)
        )
        return found[0] if found else None

    def sessions_continued_by(self, continuation_hashes: list[str], owner: str | None = None) -> list[tuple[str, Turn]]:
        """Main turns whose prompt+response hash is in the list, newest first; only `owner`'s when given."""
        if not continuation_hashes:
            return []
        mine, args = (" AND owner = ?", (owner,)) if owner is not None else ("", ())
        found = self._turn_where(
            f"kind = 'main' AND continuation_hash IN ({marks(continuation_hashes)}){mine} ORDER BY id DESC",
            (*continuation_hashes, *args),
        )
        return [(t.session_id, t) for t in found]

    def counts(self, owner: str | None = None) -> dict[str, int]:
        """How many sessions, turns, main turns and paired turns there are: every user's, or
        `owner`'s alone (what a user who is not an admin may see)."""
        where, args = ("WHERE owner = ?", (owner,)) if owner is not None else ("", ())
        with self._lock:
            (sessions,) = self._execute(f"SELECT COUNT(*) FROM sessions {where}", args).fetchone()
            turns, main, paired = self._execute(
                "SELECT COUNT(*), COALESCE(SUM(CASE WHEN kind = 'main' THEN 1 ELSE 0 END), 0), "
                f"COALESCE(SUM(CASE WHEN next_state IS NOT NULL THEN 1 ELSE 0 END), 0) FROM turns {where}", args
            ).fetchone()
        return {"sessions": sessions, "turns": turns, "main_turns": main, "paired_turns": paired}

    def main_answers(self, limit: int, owner: str | None = None, newest: bool = True) -> list[dict[str, Any]]:
        """The answers of the newest (`newest` False: the oldest) `limit` main turns, oldest first,
        only `owner`'s when given: id, created_at, owner, policy_version, response_token_ids and
        behaviour_logprobs (what the served-traffic collapse detector reads, serve/collapse.py)."""
        mine, args = ("AND owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(
                "SELECT id, created_at, owner, policy_version, response_token_ids, behaviour_logprobs FROM turns "
                f"WHERE kind = 'main' {mine}ORDER BY id {'DESC' if newest else 'ASC'} LIMIT ?", (*args, limit)
            ).fetchall()
        names = ("id", "created_at", "owner", "policy_version", "response_token_ids", "behaviour_logprobs")
        found = [dict(zip(names, (*row[:4], json.loads(row[4]), json.loads(row[5])))) for row in rows]
        return found[::-1] if newest else found

    def _turn_where(self, where: str, args: tuple) -> list[Turn]:
        with self._lock:
            rows = self._execute(f"SELECT {_TURN_COLUMNS} FROM turns WHERE {where}", args).fetchall()
        return [_turn_from_row(r) for r in rows]

    # -- Responses API objects: what `previous_response_id` and GET /v1/responses/{id} read --

    def record_response(self, response_id: str, session_id: str, turn_id: int | None, body: dict[str, Any]) -> None:
        with self._write():
            self._execute("INSERT INTO responses (id, session_id, turn_id, body, created_at) VALUES (?, ?, ?, ?, ?)",
                          (response_id, session_id, turn_id, json.dumps(body), time.time()))

    def get_response(self, response_id: str) -> tuple[str, int | None, dict[str, Any]] | None:
        """(session id, turn id, the response object) of a stored response, or None."""
        with self._lock:
            row = self._execute("SELECT session_id, turn_id, body FROM responses WHERE id = ?",
                                (response_id,)).fetchone()
        return (row[0], row[1], json.loads(row[2])) if row else None

    # -- deletion ---------------------------------------------------------------------

    def delete_sessions(self, session_ids: Sequence[str] = (), owner: str | None = None) -> dict[str, Any]:
        """Remove the sessions named (or, with `owner`, all of that user's) with everything
        stored of them: turns, next states, verdicts, samples and claims, Responses objects,
        and their log lines; with `owner`, also the user's experience (lessons and their
        change log: store/experience.py). Returns the counts, and which removed samples a training step
        had already used (`trained`): those are in the weights of the versions named there,
        which cannot forget them. One transaction; every other session is left as it was."""
        with self._write():
            if owner is not None:
                ids = [r[0] for r in self._execute(f"SELECT id FROM sessions WHERE owner = ?{self._sql.lock_rows}",
                                                   (owner,)).fetchall()]
            else:
                ids = [r[0] for chunk in chunks(list(session_ids)) for r in self._execute(
                    f"SELECT id FROM sessions WHERE id IN ({marks(chunk)}){self._sql.lock_rows}",
                    tuple(chunk)).fetchall()]
            turn_ids = [r[0] for chunk in chunks(ids) for r in self._execute(
                f"SELECT id FROM turns WHERE session_id IN ({marks(chunk)}) ORDER BY id{self._sql.lock_rows}",
                tuple(chunk)).fetchall()]  # locked first, so a judge writing for one of them finishes before
            trained = [r for chunk in chunks(turn_ids) for r in self._execute(
                f"SELECT turn_id, train_step FROM claims WHERE status = 'used' AND turn_id IN ({marks(chunk)})",
                tuple(chunk)).fetchall()]
            counts = {"sessions": len(ids), "turns": len(turn_ids)}
            for table, key, keys in (("claims", "turn_id", turn_ids), ("samples", "turn_id", turn_ids),
                                     ("quarantine", "turn_id", turn_ids),
                                     ("verdicts", "turn_id", turn_ids), ("responses", "session_id", ids),
                                     ("turns", "session_id", ids), ("sessions", "id", ids)):
                deleted = sum(self._execute(f"DELETE FROM {table} WHERE {key} IN ({marks(chunk)})",
                                            tuple(chunk)).rowcount for chunk in chunks(keys))
                if table in ("samples", "verdicts", "responses"):
                    counts[table] = deleted
            if owner is not None:  # the user's lessons came from their corrections: they go too
                row = self._execute("SELECT lessons FROM experience WHERE owner = ?", (owner,)).fetchone()
                counts["lessons"] = len(json.loads(row[0])) if row else 0
                counts["experience_changes"] = self._execute("DELETE FROM experience_changes WHERE owner = ?",
                                                             (owner,)).rowcount
                self._execute("DELETE FROM experience WHERE owner = ?", (owner,))
                self._execute("DELETE FROM lesson_absorption WHERE owner = ?", (owner,))
                self._execute("DELETE FROM lesson_absorption_adapter WHERE owner = ?", (owner,))
                # their personal adapter's history (store/adapters.py); its weights are the trainer's to delete
                counts["adapter_versions"] = max(self._execute("DELETE FROM adapter_versions WHERE owner = ?",
                                                               (owner,)).rowcount, 0)
                self._execute("DELETE FROM adapters_off WHERE owner = ?", (owner,))
            counts["trained"] = self._trained_into(trained)
        counts["log_lines"] = self._scrub_logs(set(ids)) if ids else 0
        return counts

    def _trained_into(self, used: list[tuple[int, int | None]]) -> dict[str, Any]:
        """Of (turn id, train step) claims: how many, the first published version holding each
        step, and how many are in steps not published yet."""
        (published_step,) = self._execute("SELECT COALESCE(MAX(train_step), 0) FROM policy").fetchone()
        versions, unpublished = set(), 0
        for step in {step for _, step in used if step is not None}:
            if step > published_step:
                unpublished += sum(1 for _, s in used if s == step)
                continue
            (first,) = self._execute("SELECT MIN(version) FROM versions WHERE train_step >= ? AND gate != 'rejected'",
                                     (step,)).fetchone()
            if first is not None:
                versions.add(int(first))
        return {"samples": len(used), "first_versions": sorted(versions), "unpublished": unpublished,
                "note": "weights cannot forget: these samples stay in the versions trained on them and their "
                        "descendants" if used else ""}


def _turn_from_row(row: tuple) -> Turn:
    (tid, session_id, idx, kind, version, prompt_messages, prompt_ids, response_ids, logprobs,
     text, tool_calls, sampling, finish, created, next_state, closed, continuation, owner, experience_version,
     experience_block, experience_placement) = row
    return Turn(
        id=tid,
        session_id=session_id,
        index=idx,
        kind=kind,
        policy_version=version,
        prompt_messages=json.loads(prompt_messages),
        prompt_token_ids=json.loads(prompt_ids),
        response_token_ids=json.loads(response_ids),
        behaviour_logprobs=json.loads(logprobs),
        response_text=text,
        tool_calls=json.loads(tool_calls),
        sampling=json.loads(sampling),
        finish_reason=finish,
        created_at=created,
        next_state=NextState.from_dict(json.loads(next_state)) if next_state else None,
        closed=bool(closed),
        continuation_hash=continuation,
        owner=owner,
        experience_version=experience_version,
        experience_block=experience_block or "",  # NULL: a turn stored before experience was served
        experience_placement=experience_placement or "system",  # NULL: stored before there was a choice
    )
