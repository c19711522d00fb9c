"""The durable store: sessions, turns and next states in SQLite (WAL mode).

The store is the hand-off between the asynchronous parts: serving writes turns and
next states, the judge and the trainer read them. Each write is one short transaction,
committed before the caller goes on, so a main turn is on disk before its response is
returned and a SIGKILL loses nothing that a client has seen.

One connection guarded by a lock: SQLite serialises writers anyway, the transactions
are a few hundred microseconds, and a single connection keeps WAL checkpoints simple.
Other processes (judge, trainer) open their own `Store` on the same file.

It is one class over five tables (sessions, turns, verdicts, samples, policy) and runs
past 400 lines on purpose: every query sits next to the transaction rules it shares
(one lock, BEGIN IMMEDIATE for read-modify-write), and the class is the whole contract
between the processes.

Human-readable JSONL logs go to DATA_DIR/logs/, one file per policy version, opened in
append mode and never truncated. They hold what a person wants to read (the request's
last message, the response, the next state), not whole prompts or token ids.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from openclaw_rl.types import Message, NextState, Sample, Session, Turn, TurnKind, Verdict

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id          TEXT PRIMARY KEY,
    created_at  REAL NOT NULL,
    closed_at   REAL,
    source      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    idx                 INTEGER NOT NULL,
    kind                TEXT NOT NULL CHECK (kind IN ('main', 'side')),
    policy_version      INTEGER NOT NULL,
    prompt_messages     TEXT NOT NULL,
    prompt_token_ids    TEXT NOT NULL,
    response_token_ids  TEXT NOT NULL,
    behaviour_logprobs  TEXT NOT NULL,
    response_text       TEXT NOT NULL,
    tool_calls          TEXT NOT NULL,
    sampling            TEXT NOT NULL,
    finish_reason       TEXT NOT NULL,
    continuation_hash   TEXT,
    created_at          REAL NOT NULL,
    next_state          TEXT,
    next_state_at       REAL,
    closed              INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, idx)
);
CREATE INDEX IF NOT EXISTS turns_by_continuation ON turns(continuation_hash);
CREATE TABLE IF NOT EXISTS verdicts (
    turn_id         INTEGER PRIMARY KEY REFERENCES turns(id),
    status          TEXT NOT NULL CHECK (status IN ('ok', 'no_verdict')),
    reward          INTEGER,
    votes           TEXT NOT NULL,
    raw             TEXT NOT NULL,
    hints           TEXT NOT NULL,
    selected_hint   TEXT,
    overlap_scores  TEXT NOT NULL,
    judge           TEXT NOT NULL,
    latency_s       REAL NOT NULL,
    reason          TEXT,
    created_at      REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    turn_id         INTEGER NOT NULL REFERENCES turns(id),
    method          TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('ready', 'used', 'dropped', 'rejected')),
    reason          TEXT,
    policy_version  INTEGER NOT NULL,
    payload         TEXT,
    created_at      REAL NOT NULL,
    used_at         REAL,
    train_step      INTEGER,
    PRIMARY KEY (turn_id, method)
);
CREATE INDEX IF NOT EXISTS samples_ready ON samples(method, status, created_at);
CREATE TABLE IF NOT EXISTS policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    version     INTEGER NOT NULL,
    train_step  INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, idx);
"""

_TURN_COLUMNS = (
    "id, session_id, idx, kind, policy_version, prompt_messages, prompt_token_ids, "
    "response_token_ids, behaviour_logprobs, response_text, tool_calls, sampling, "
    "finish_reason, created_at, next_state, closed"
)


class StoreError(RuntimeError):
    """A store operation that cannot be done as asked (unknown session, nothing open, ...)."""


class Store:
    def __init__(self, data_dir: str | Path, *, busy_timeout_s: float = 10.0):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.data_dir / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.path = self.data_dir / "openclaw.db"
        self._lock = threading.RLock()  # re-entrant: helpers read inside a write
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- sessions ---------------------------------------------------------------------

    def ensure_session(self, session_id: str, source: str) -> Session:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO sessions (id, created_at, source) VALUES (?, ?, ?)",
                (session_id, time.time(), source),
            )
            return self._session(session_id)

    def get_session(self, session_id: str) -> Session | None:
        with self._lock:
            try:
                return self._session(session_id)
            except StoreError:
                return None

    def list_sessions(self, limit: int = 100, offset: int = 0) -> list[Session]:
        with self._lock:
            rows = self._db.execute(
                "SELECT s.id, s.created_at, s.closed_at, s.source, COUNT(t.id) FROM sessions s "
                "LEFT JOIN turns t ON t.session_id = s.id GROUP BY s.id "
                "ORDER BY s.created_at DESC LIMIT ? OFFSET ?",
                (limit, offset),
            ).fetchall()
        return [Session(*row) for row in rows]

    def close_session(self, session_id: str) -> Session:
        """Mark a session closed; its open main turn will get no next state."""
        now = time.time()
        with self._lock:
            self._session(session_id)
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "UPDATE sessions SET closed_at = COALESCE(closed_at, ?) WHERE id = ?", (now, session_id)
            )
            self._db.execute(
                "UPDATE turns SET closed = 1 WHERE session_id = ? AND kind = 'main' AND next_state IS NULL",
                (session_id,),
            )
            self._db.execute("COMMIT")
            return self._session(session_id)

    def _session(self, session_id: str) -> Session:
        row = self._db.execute(
            "SELECT s.id, s.created_at, s.closed_at, s.source, "
            "(SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) FROM sessions s WHERE s.id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            raise StoreError(f"unknown session {session_id!r}")
        return Session(*row)

    # -- turns ------------------------------------------------------------------------

    def record_turn(
        self,
        *,
        session_id: str,
        kind: TurnKind,
        policy_version: int,
        prompt_messages: list[Message],
        prompt_token_ids: list[int],
        response_token_ids: list[int],
        behaviour_logprobs: list[float],
        response_text: str,
        tool_calls: list[dict[str, Any]],
        sampling: dict[str, Any],
        finish_reason: str,
        continuation_hash: str | None,
    ) -> Turn:
        """Commit a turn; it is on disk when this returns."""
        if len(response_token_ids) != len(behaviour_logprobs):
            raise ValueError(
                f"{len(response_token_ids)} response ids but {len(behaviour_logprobs)} log-probs"
            )
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (idx,) = self._db.execute(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE session_id = ?", (session_id,)
                ).fetchone()
                cur = self._db.execute(
                    "INSERT INTO turns (session_id, idx, kind, policy_version, prompt_messages, "
                    "prompt_token_ids, response_token_ids, behaviour_logprobs, response_text, "
                    "tool_calls, sampling, finish_reason, continuation_hash, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session_id, idx, kind, policy_version, json.dumps(prompt_messages),
                        json.dumps(prompt_token_ids), json.dumps(response_token_ids),
                        json.dumps(behaviour_logprobs), response_text, json.dumps(tool_calls),
                        json.dumps(sampling), finish_reason, continuation_hash, now,
                    ),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            turn = self._turn_where("id = ?", (cur.lastrowid,))[0]
        self._log_turn(turn)
        return turn

    def set_next_state(self, turn_id: int, next_state: NextState) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._set_next_state(turn_id, next_state)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        (turn,) = self._turn_where("id = ?", (turn_id,))
        self._log_next_state(turn.session_id, turn_id, next_state)

    def _set_next_state(self, turn_id: int, next_state: NextState) -> None:
        cur = self._db.execute(
            "UPDATE turns SET next_state = ?, next_state_at = ? "
            "WHERE id = ? AND kind = 'main' AND next_state IS NULL",
            (json.dumps(next_state.to_dict()), next_state.at or time.time(), turn_id),
        )
        if cur.rowcount != 1:
            raise StoreError(f"turn {turn_id} is not an open main turn")

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

    def sessions_continued_by(self, continuation_hashes: list[str]) -> list[tuple[str, Turn]]:
        """Main turns whose prompt+response hash is in the list, newest first."""
        if not continuation_hashes:
            return []
        marks = ",".join("?" * len(continuation_hashes))
        found = self._turn_where(
            f"kind = 'main' AND continuation_hash IN ({marks}) ORDER BY id DESC",
            tuple(continuation_hashes),
        )
        return [(t.session_id, t) for t in found]

    def counts(self) -> dict[str, int]:
        with self._lock:
            (sessions,) = self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()
            turns, main, paired = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(kind = 'main'), 0), "
                "COALESCE(SUM(next_state IS NOT NULL), 0) FROM turns"
            ).fetchone()
        return {"sessions": sessions, "turns": turns, "main_turns": main, "paired_turns": paired}

    def _turn_where(self, where: str, args: tuple) -> list[Turn]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_TURN_COLUMNS} FROM turns WHERE {where}", args).fetchall()
        return [_turn_from_row(r) for r in rows]

    # -- verdicts ---------------------------------------------------------------------

    def turns_awaiting_verdict(self, limit: int = 32) -> list[Turn]:
        """Main turns whose next state has arrived and that have no verdict yet, oldest first."""
        return self._turn_where(
            "kind = 'main' AND next_state IS NOT NULL AND id NOT IN (SELECT turn_id FROM verdicts) "
            "ORDER BY id LIMIT ?",
            (limit,),
        )

    def write_verdict(self, verdict: Verdict) -> None:
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO verdicts (turn_id, status, reward, votes, raw, hints, selected_hint, "
                "overlap_scores, judge, latency_s, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    verdict.turn_id, verdict.status, verdict.reward, json.dumps(verdict.votes),
                    json.dumps(verdict.raw), json.dumps(verdict.hints), verdict.selected_hint,
                    json.dumps(verdict.overlap_scores), verdict.judge, verdict.latency_s, verdict.reason, now,
                ),
            )
        turn = self.get_turn(verdict.turn_id)
        if turn is not None:
            self._append_log(turn.policy_version, {
                "event": "verdict", "at": now, "session_id": turn.session_id, "index": turn.index,
                **verdict.public_dict(),
            })

    def verdicts(self, turn_ids: list[int]) -> dict[int, Verdict]:
        if not turn_ids:
            return {}
        marks = ",".join("?" * len(turn_ids))
        with self._lock:
            rows = self._db.execute(
                "SELECT turn_id, status, reward, votes, raw, hints, selected_hint, overlap_scores, judge, "
                f"latency_s, reason, created_at FROM verdicts WHERE turn_id IN ({marks})",
                tuple(turn_ids),
            ).fetchall()
        return {
            r[0]: Verdict(
                turn_id=r[0], status=r[1], reward=r[2], votes=json.loads(r[3]), raw=json.loads(r[4]),
                hints=json.loads(r[5]), selected_hint=r[6], overlap_scores=json.loads(r[7]), judge=r[8],
                latency_s=r[9], reason=r[10], created_at=r[11],
            )
            for r in rows
        }

    # -- samples ----------------------------------------------------------------------

    def add_sample(self, sample: Sample, method: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO samples (turn_id, method, status, policy_version, payload, created_at) "
                "VALUES (?, ?, 'ready', ?, ?, ?)",
                (sample.turn_id, method, sample.policy_version, json.dumps(sample.to_dict()), time.time()),
            )

    def reject_sample(self, turn_id: int, method: str, policy_version: int, reason: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO samples (turn_id, method, status, reason, policy_version, created_at) "
                "VALUES (?, ?, 'rejected', ?, ?, ?)",
                (turn_id, method, reason, policy_version, time.time()),
            )

    def claim_samples(self, method: str, batch_size: int, current_version: int, max_staleness: int,
                      train_step: int) -> tuple[list[Sample], list[tuple[int, str]]]:
        """Take the oldest `batch_size` ready samples, if that many are fresh enough.

        Samples more than `max_staleness` versions behind the current policy are dropped
        first, each with its reason. Returns (claimed samples, dropped (turn id, reason)).
        """
        now = time.time()
        dropped: list[tuple[int, str]] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                stale = self._db.execute(
                    "SELECT turn_id, policy_version FROM samples WHERE method = ? AND status = 'ready' "
                    "AND policy_version < ?",
                    (method, current_version - max_staleness),
                ).fetchall()
                for turn_id, version in stale:
                    reason = (f"stale: sampled by policy v{version}, current v{current_version}, "
                              f"max_staleness {max_staleness}")
                    self._db.execute(
                        "UPDATE samples SET status = 'dropped', reason = ? WHERE turn_id = ? AND method = ?",
                        (reason, turn_id, method),
                    )
                    dropped.append((turn_id, reason))
                rows = self._db.execute(
                    "SELECT turn_id, payload FROM samples WHERE method = ? AND status = 'ready' "
                    "ORDER BY created_at, turn_id LIMIT ?",
                    (method, batch_size),
                ).fetchall()
                if len(rows) < batch_size:
                    rows = []
                for turn_id, _ in rows:
                    self._db.execute(
                        "UPDATE samples SET status = 'used', used_at = ?, train_step = ? WHERE turn_id = ? AND method = ?",
                        (now, train_step, turn_id, method),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        for turn_id, reason in dropped:
            log.info("dropped sample of turn %d: %s", turn_id, reason)
        return [Sample.from_dict(json.loads(payload)) for _, payload in rows], dropped

    def sample_counts(self, method: str | None = None) -> dict[str, int]:
        where, args = ("WHERE method = ?", (method,)) if method else ("", ())
        with self._lock:
            rows = self._db.execute(f"SELECT status, COUNT(*) FROM samples {where} GROUP BY status", args).fetchall()
        counts = {"ready": 0, "used": 0, "dropped": 0, "rejected": 0}
        counts.update(dict(rows))
        return counts

    # -- policy version ---------------------------------------------------------------

    def policy_version(self) -> int:
        return self.policy()["policy_version"]

    def policy(self) -> dict[str, Any]:
        """The latest published policy: version, training steps, when (None if never)."""
        with self._lock:
            row = self._db.execute("SELECT version, train_step, updated_at FROM policy WHERE id = 1").fetchone()
        version, step, at = row if row else (0, 0, None)
        return {"policy_version": version, "train_steps": step, "last_update_at": at}

    def set_policy_version(self, version: int, train_step: int | None = None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO policy (id, version, train_step, updated_at) VALUES (1, ?, COALESCE(?, 0), ?) "
                "ON CONFLICT(id) DO UPDATE SET version = excluded.version, "
                "train_step = COALESCE(?, train_step), updated_at = excluded.updated_at",
                (version, train_step, time.time(), train_step),
            )

    # -- logs -------------------------------------------------------------------------

    def _append_log(self, policy_version: int, record: dict[str, Any]) -> None:
        path = self.logs_dir / f"turns-v{policy_version:05d}.jsonl"
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _log_turn(self, turn: Turn) -> None:
        last = next(
            (m for m in reversed(turn.prompt_messages) if m.get("role") in ("user", "tool")), None
        )
        self._append_log(
            turn.policy_version,
            {
                "event": "turn",
                "at": turn.created_at,
                "session_id": turn.session_id,
                "index": turn.index,
                "kind": turn.kind,
                "policy_version": turn.policy_version,
                "request_last_message": _content_text(last)[:500] if last else None,
                "response_text": turn.response_text,
                "tool_calls": turn.tool_calls or None,
                "response_tokens": len(turn.response_token_ids),
                "finish_reason": turn.finish_reason,
            },
        )

    def _log_next_state(self, session_id: str, turn_id: int, next_state: NextState) -> None:
        turn = self.get_turn(turn_id)
        self._append_log(
            turn.policy_version if turn else 0,
            {
                "event": "next_state",
                "at": next_state.at or time.time(),
                "session_id": session_id,
                "index": turn.index if turn else None,
                "role": next_state.role,
                "content": next_state.content[:2000],
            },
        )


def _content_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _turn_from_row(row: tuple) -> Turn:
    (tid, session_id, idx, kind, version, prompt_messages, prompt_ids, response_ids, logprobs,
     text, tool_calls, sampling, finish, created, next_state, closed) = row
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
    )
