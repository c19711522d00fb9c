"""The durable store: sessions, turns, next states, verdicts, samples, the policy version.

The store is the hand-off between the asynchronous parts: serving writes turns and
next states, the judge and the trainer read them. Each write is one short transaction,
committed before the caller goes on, so a main turn is durable before its response is
returned and a SIGKILL loses nothing that a client has seen.

Two databases behind one class. SQLite (WAL) in DATA_DIR/openclaw.db is the embedded
default: nothing to run, and the judge and trainer processes of the same machine open
their own `Store` on the same file. PostgreSQL (`make_store("postgresql://...")`) is for
parts on several machines, which one SQLite file cannot serve (its locks do not work
over NFS); see docs/shared-state.md. Every query is written once, in the SQL both speak
(`?` placeholders, `ON CONFLICT` upserts); the small dialect classes at the end hold
what differs: connecting, column types, placeholders, how a read-modify-write
transaction starts and which rows it locks.

One connection per `Store`, guarded by a lock: SQLite serialises writers anyway, the
transactions are a few hundred microseconds (a millisecond or two to a PostgreSQL
server), and one connection keeps WAL checkpoints simple. Read-modify-write
transactions are serialised by `BEGIN IMMEDIATE` on SQLite and by row locks on
PostgreSQL: the session row while a turn index is chosen, `FOR UPDATE SKIP LOCKED` on the
samples a trainer claims, and the claim's primary key (turn, method) settles the rest, so
two trainers of one method never claim the same sample.

The judge writes one sample per turn, with every signal it has; a trainer claims samples
as its method assembles them (train/methods.py), and `claims` records, per method, which
turns it used, dropped as stale or rejected and why. One judge thus serves trainers of
different methods from one store, and the judge never needs to know a method.

It is one class over eleven tables (sessions, turns, verdicts, samples, claims, policy,
responses; versions, policy_requests and quarantine for safe updates) and runs
past 400 lines on purpose: every query sits next to the transaction rules it shares,
and the class is the whole contract between the processes.

Human-readable JSONL logs go to DATA_DIR/logs/, one file per policy version, opened in
append mode and never truncated. They hold what a person wants to read (the request's
last message, the response, the next state), not whole prompts or token ids. They stay
local files of the process that writes them; with PostgreSQL they go to
DATA_DIR/logs/HOSTNAME/, so machines sharing a data dir over NFS never append to one
file (appends from two NFS clients can interleave).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import logging
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from openclaw_rl.types import Message, NextState, Sample, Session, Turn, TurnKind, Verdict
from openclaw_rl.privacy import KINDS, redact
from openclaw_rl.users import LOCAL

LogText = Literal["off", "redacted", "full"]

log = logging.getLogger(__name__)

# {id}, {ref} and {real} are the column types that differ between the dialects.
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id          TEXT PRIMARY KEY,
    created_at  {real} NOT NULL,
    closed_at   {real},
    source      TEXT NOT NULL,
    owner       TEXT
);
CREATE TABLE IF NOT EXISTS turns (
    id                  {id},
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
    created_at          {real} NOT NULL,
    next_state          TEXT,
    next_state_at       {real},
    closed              INTEGER NOT NULL DEFAULT 0,
    owner               TEXT,
    UNIQUE (session_id, idx)
);
CREATE INDEX IF NOT EXISTS turns_by_continuation ON turns(continuation_hash);
CREATE TABLE IF NOT EXISTS verdicts (
    turn_id         {ref} PRIMARY KEY REFERENCES turns(id),
    status          TEXT NOT NULL CHECK (status IN ('ok', 'no_verdict')),
    reward          INTEGER,
    votes           TEXT NOT NULL,
    raw             TEXT NOT NULL,
    hints           TEXT NOT NULL,
    selected_hint   TEXT,
    overlap_scores  TEXT NOT NULL,
    judge           TEXT NOT NULL,
    latency_s       {real} NOT NULL,
    reason          TEXT,
    created_at      {real} NOT NULL,
    teacher_policy_version  INTEGER,
    owner           TEXT
);
CREATE TABLE IF NOT EXISTS samples (
    turn_id         {ref} NOT NULL REFERENCES turns(id),
    method          TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('ready', 'used', 'dropped', 'rejected')),
    reason          TEXT,
    policy_version  INTEGER NOT NULL,
    payload         TEXT,
    created_at      {real} NOT NULL,
    used_at         {real},
    train_step      INTEGER,
    owner           TEXT,
    PRIMARY KEY (turn_id, method)
);
CREATE INDEX IF NOT EXISTS samples_ready ON samples(method, status, created_at);
CREATE TABLE IF NOT EXISTS claims (
    turn_id     {ref} NOT NULL REFERENCES turns(id),
    method      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('used', 'dropped', 'rejected')),
    reason      TEXT,
    train_step  INTEGER,
    created_at  {real} NOT NULL,
    PRIMARY KEY (turn_id, method)
);
CREATE TABLE IF NOT EXISTS policy (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    version     INTEGER NOT NULL,
    train_step  INTEGER NOT NULL DEFAULT 0,
    updated_at  {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    version     INTEGER PRIMARY KEY,
    parent      INTEGER,
    train_step  INTEGER,
    created_at  {real} NOT NULL,
    gate        TEXT NOT NULL DEFAULT 'ungated',
    reason      TEXT,
    checks      TEXT,
    samples     TEXT,
    stats       TEXT,
    weights     TEXT,
    pinned      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS quarantine (
    id          {id},
    turn_id     {ref} NOT NULL REFERENCES turns(id),
    hint        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('held', 'released', 'dropped')),
    owner       TEXT,
    created_at  {real} NOT NULL,
    decided_at  {real},
    decided_by  TEXT
);
CREATE TABLE IF NOT EXISTS policy_requests (
    id            {id},
    kind          TEXT NOT NULL CHECK (kind IN ('rollback')),
    target        INTEGER NOT NULL,
    requested_by  TEXT,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    result        INTEGER,
    message       TEXT,
    created_at    {real} NOT NULL,
    done_at       {real}
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, idx);
CREATE TABLE IF NOT EXISTS responses (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    turn_id     {ref} REFERENCES turns(id),
    body        TEXT NOT NULL,
    created_at  {real} NOT NULL
);
"""

# Indexes on columns that `add_missing_columns` may have just added: created after it runs.
LATE_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions(owner, created_at);
CREATE INDEX IF NOT EXISTS turns_by_owner ON turns(owner);
"""

PER_TURN = ""  # `samples.method` of the one row per turn; rows of older databases name a method

_TURN_COLUMNS = (
    "id, session_id, idx, kind, policy_version, prompt_messages, prompt_token_ids, "
    "response_token_ids, behaviour_logprobs, response_text, tool_calls, sampling, "
    "finish_reason, created_at, next_state, closed, continuation_hash, owner"
)


# the turns the judge has yet to judge: a main turn whose next state arrived, with no verdict
_AWAITING_VERDICT = "kind = 'main' AND next_state IS NOT NULL AND id NOT IN (SELECT turn_id FROM verdicts)"

class StoreError(RuntimeError):
    """A store operation that cannot be done as asked (unknown session, nothing open, ...)."""


class StoreUnavailable(StoreError):
    """The store URL is malformed or its database cannot be reached."""


def make_store(url_or_data_dir: str | Path, *, data_dir: str | Path | None = None, log_text: LogText = "redacted",
               redact_kinds: Sequence[str] = KINDS) -> Store:
    """The store the serve, judge and train processes share.

    A `postgresql://` (or `postgres://`) URL opens that database; `data_dir` is then still
    needed for the logs (and by the trainer for checkpoints). Anything else is a data dir
    and opens its SQLite file; an empty string means `data_dir`'s.
    """
    target = str(url_or_data_dir)
    options = {"log_text": log_text, "redact_kinds": redact_kinds}
    if "://" not in target:
        return Store(target or _required(data_dir, target), **options)
    return Store(_required(data_dir, target), url=target, **options)


def _required(data_dir: str | Path | None, url: str) -> str | Path:
    if data_dir is None:
        raise ValueError(f"store {redact_url(url) or '(empty)'} needs a data dir for its logs: pass data_dir")
    return data_dir


def redact_url(url: str) -> str:
    """`url` without its password, fit for error messages and logs."""
    url = re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    before_query, question, query = rest.partition("?")
    userinfo, at, host = before_query.rpartition("@")  # the last @: a password may hold one, unencoded
    if not (sep and at and ":" in userinfo):
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{question}{query}"


class Store:
    def __init__(self, data_dir: str | Path, *, url: str = "", busy_timeout_s: float = 10.0,
                 log_text: LogText = "redacted", redact_kinds: Sequence[str] = KINDS):
        """The SQLite store in `data_dir`, or with `url` the PostgreSQL database it names.
        `log_text` says how much text the JSONL logs keep (`redacted`: with the personal data
        of `redact_kinds` masked, see privacy.py)."""
        if log_text not in ("off", "redacted", "full"):
            raise ValueError(f"log_text must be off, redacted or full, got {log_text!r}")
        self.log_text, self.redact_kinds = log_text, tuple(redact_kinds)
        self.data_dir = private_dir(Path(data_dir))
        self.logs_dir = self.data_dir / "logs"
        if url:
            self._sql: _SQLite | _Postgres = _Postgres(url, busy_timeout_s)
            self.logs_dir = self.logs_dir / socket.gethostname()
            self.path: Path | None = None
        else:
            self.path = self.data_dir / "openclaw.db"
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))  # SQLite's -wal and -shm copy its mode
            os.chmod(self.path, 0o600)
            self._sql = _SQLite(self.path, busy_timeout_s)
        private_dir(self.logs_dir)
        self._lock = threading.RLock()  # re-entrant: helpers read inside a write
        self._log_lock = threading.Lock()  # this process's appends; other processes: flock (_append_log)

    @property
    def _db(self) -> Any:
        """The open connection (sqlite3 or psycopg), for tests that poke at the tables."""
        return self._sql.db

    def close(self) -> None:
        with self._lock:
            self._sql.close()

    def _execute(self, sql: str, args: tuple = ()) -> Any:
        return self._sql.execute(sql, args)

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One read-modify-write transaction: committed at the end, rolled back on any error."""
        with self._lock:
            self._execute(self._sql.begin)
            try:
                yield
                self._execute("COMMIT")
            except BaseException:
                self._sql.rollback()
                raise

    def _replace(self, table: str, key: str, row: dict[str, Any]) -> None:
        """Insert `row`, or overwrite every column of the row with its key (SQLite's INSERT OR REPLACE)."""
        keys = {k.strip() for k in key.split(",")}
        updates = ", ".join(f"{column} = excluded.{column}" for column in row if column not in keys)
        self._execute(
            f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) "
            f"ON CONFLICT ({key}) DO UPDATE SET {updates}",
            tuple(row.values()),
        )

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
        owner: str = LOCAL.name,
        source: str = "new",
    ) -> Turn:
        """Commit a turn of `owner`'s session; it is durable when this returns. A session deleted
        while this turn was being generated is created again (with `source`): the request came
        before the deletion finished, and its client goes on with it."""
        if len(response_token_ids) != len(behaviour_logprobs):
            raise ValueError(
                f"{len(response_token_ids)} response ids but {len(behaviour_logprobs)} log-probs"
            )
        now = time.time()
        with self._lock:
            with self._write():
                if self._sql.lock_rows:  # the next index is chosen by one writer of this session at a time
                    self._execute(f"SELECT id FROM sessions WHERE id = ?{self._sql.lock_rows}", (session_id,))
                self._execute("INSERT INTO sessions (id, created_at, source, owner) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT DO NOTHING", (session_id, now, source, owner))
                (idx,) = self._execute(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE session_id = ?", (session_id,)
                ).fetchone()
                cur = self._execute(
                    "INSERT INTO turns (session_id, idx, kind, policy_version, prompt_messages, "
                    "prompt_token_ids, response_token_ids, behaviour_logprobs, response_text, "
                    "tool_calls, sampling, finish_reason, continuation_hash, created_at, owner) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT owner FROM sessions WHERE id = ?))"
                    f"{self._sql.returning_id}",
                    (
                        session_id, idx, kind, policy_version, json.dumps(prompt_messages),
                        json.dumps(prompt_token_ids), json.dumps(response_token_ids),
                        json.dumps(behaviour_logprobs), response_text, json.dumps(tool_calls),
                        json.dumps(sampling), finish_reason, continuation_hash, now, session_id,
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
        marks = ",".join("?" * len(turn_ids))
        with self._write():
            self._execute(f"UPDATE turns SET closed = 1 WHERE id IN ({marks}) AND next_state IS NULL",
                          tuple(turn_ids))

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
        marks = ",".join("?" * len(continuation_hashes))
        mine, args = (" AND owner = ?", (owner,)) if owner is not None else ("", ())
        found = self._turn_where(
            f"kind = 'main' AND continuation_hash IN ({marks}){mine} ORDER BY id DESC",
            (*continuation_hashes, *args),
        )
        return [(t.session_id, t) for t in found]

    def counts(self) -> dict[str, int]:
        with self._lock:
            (sessions,) = self._execute("SELECT COUNT(*) FROM sessions").fetchone()
            turns, main, paired = self._execute(
                "SELECT COUNT(*), COALESCE(SUM(CASE WHEN kind = 'main' THEN 1 ELSE 0 END), 0), "
                "COALESCE(SUM(CASE WHEN next_state IS NOT NULL THEN 1 ELSE 0 END), 0) FROM turns"
            ).fetchone()
        return {"sessions": sessions, "turns": turns, "main_turns": main, "paired_turns": paired}

    def _turn_where(self, where: str, args: tuple) -> list[Turn]:
        with self._lock:
            rows = self._execute(f"SELECT {_TURN_COLUMNS} FROM turns WHERE {where}", args).fetchall()
        return [_turn_from_row(r) for r in rows]

    # -- verdicts ---------------------------------------------------------------------

    def turns_awaiting_verdict(self, limit: int = 32) -> list[Turn]:
        """Main turns whose next state has arrived and that have no verdict yet, oldest first."""
        return self._turn_where(f"{_AWAITING_VERDICT} ORDER BY id LIMIT ?", (limit,))

    def write_verdict(self, verdict: Verdict) -> bool:
        """Record a turn's verdict; False (nothing written) if the turn was deleted meanwhile."""
        now = time.time()
        with self._write():
            found = self._owner_of_live_turn(verdict.turn_id)
            if found is None:
                return False
            self._replace("verdicts", "turn_id", {
                "turn_id": verdict.turn_id, "status": verdict.status, "reward": verdict.reward,
                "votes": json.dumps(verdict.votes), "raw": json.dumps(verdict.raw), "hints": json.dumps(verdict.hints),
                "selected_hint": verdict.selected_hint, "overlap_scores": json.dumps(verdict.overlap_scores),
                "judge": verdict.judge, "latency_s": verdict.latency_s, "reason": verdict.reason, "created_at": now,
                "teacher_policy_version": verdict.teacher_policy_version, "owner": found[0],
            })
        turn = self.get_turn(verdict.turn_id)
        if turn is not None:
            self._append_log(turn.policy_version, turn.id, {
                "event": "verdict", "at": now, "session_id": turn.session_id, "index": turn.index,
                **verdict.public_dict(),
            })
        return True

    def _owner_of_live_turn(self, turn_id: int) -> tuple[str | None] | None:
        """(owner,) of a turn, locked until the transaction ends so that a deletion waits; None if
        there is no such turn (a session deleted while the judge read it)."""
        row = self._execute(f"SELECT owner FROM turns WHERE id = ?{self._sql.lock_rows}", (turn_id,)).fetchone()
        if row is None:
            log.info("turn %d is gone (its session was deleted); nothing recorded for it", turn_id)
        return row

    def verdicts(self, turn_ids: list[int]) -> dict[int, Verdict]:
        if not turn_ids:
            return {}
        marks = ",".join("?" * len(turn_ids))
        with self._lock:
            rows = self._execute(
                "SELECT turn_id, status, reward, votes, raw, hints, selected_hint, overlap_scores, judge, "
                f"latency_s, reason, created_at, teacher_policy_version FROM verdicts WHERE turn_id IN ({marks})",
                tuple(turn_ids),
            ).fetchall()
        return {
            r[0]: Verdict(
                turn_id=r[0], status=r[1], reward=r[2], votes=json.loads(r[3]), raw=json.loads(r[4]),
                hints=json.loads(r[5]), selected_hint=r[6], overlap_scores=json.loads(r[7]), judge=r[8],
                latency_s=r[9], reason=r[10], created_at=r[11], teacher_policy_version=r[12],
            )
            for r in rows
        }

    def hinted_turns(self, limit: int = 32, owner: str | None = None) -> list[tuple[Turn, Verdict]]:
        """The newest `limit` judged turns whose verdict kept a hint (only `owner`'s when given),
        oldest first, each with its verdict (the hint check reads them: judge/hint_check.py)."""
        where, args = ("AND owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(f"SELECT turn_id FROM verdicts WHERE status = 'ok' AND hints != '[]' {where}"
                                 "ORDER BY turn_id DESC LIMIT ?", (*args, limit)).fetchall()
        ids = sorted(r[0] for r in rows)
        if not ids:
            return []
        verdicts = self.verdicts(ids)
        turns = self._turn_where(f"id IN ({','.join('?' * len(ids))}) ORDER BY id", tuple(ids))
        return [(t, verdicts[t.id]) for t in turns if t.id in verdicts]

    def verdicts_noting(self, text: str) -> int:
        """How many verdicts' notes (`reason`) contain `text`."""
        with self._lock:
            (count,) = self._execute("SELECT COUNT(*) FROM verdicts WHERE reason LIKE ?",
                                     (f"%{text}%",)).fetchone()
        return int(count)

    # -- quarantined hints: what the judge's screen (judge/screen.py) held back ----------

    def quarantine_hint(self, turn_id: int, hint: str, reason: str) -> bool:
        """Hold a hint back from training, with why; False if the turn was deleted meanwhile."""
        with self._write():
            found = self._owner_of_live_turn(turn_id)
            if found is None:
                return False
            self._execute("INSERT INTO quarantine (turn_id, hint, reason, status, owner, created_at) "
                          "VALUES (?, ?, ?, 'held', ?, ?)", (turn_id, hint, reason, found[0], time.time()))
        return True

    def quarantined(self, status: str | None = "held", limit: int = 100,
                    quarantine_id: int | None = None) -> list[dict[str, Any]]:
        """Quarantined hints, newest first: of one `status` (None: all), or the one `quarantine_id`."""
        where, args = ("WHERE q.status = ? ", (status,)) if status else ("", ())
        if quarantine_id is not None:
            where, args = "WHERE q.id = ? ", (quarantine_id,)
        with self._lock:
            rows = self._execute(
                "SELECT q.id, q.turn_id, t.session_id, q.owner, q.hint, q.reason, q.status, q.created_at, "
                f"q.decided_at, q.decided_by FROM quarantine q JOIN turns t ON t.id = q.turn_id {where}"
                "ORDER BY q.id DESC LIMIT ?", (*args, limit)).fetchall()
        names = ("id", "turn_id", "session_id", "owner", "hint", "reason", "status", "created_at", "decided_at",
                 "decided_by")
        return [dict(zip(names, row)) for row in rows]

    def released_hints(self, turn_id: int) -> set[str]:
        with self._lock:
            return {r[0] for r in self._execute("SELECT hint FROM quarantine WHERE turn_id = ? AND status = 'released'",
                                                (turn_id,)).fetchall()}

    def decide_quarantine(self, quarantine_id: int, status: str, decided_by: str) -> dict[str, Any]:
        """Release a held hint (its turn is judged again, the hint now allowed to train) or drop it."""
        if status not in ("released", "dropped"):
            raise ValueError(f"a quarantined hint is released or dropped, not {status!r}")
        with self._write():
            row = self._execute(f"SELECT turn_id, status FROM quarantine WHERE id = ?{self._sql.lock_rows}",
                                (quarantine_id,)).fetchone()
            if row is None or row[1] != "held":
                raise StoreError(f"there is no held hint {quarantine_id} in quarantine" +
                                 (f" (it was {row[1]})" if row else ""))
            self._execute("UPDATE quarantine SET status = ?, decided_at = ?, decided_by = ? WHERE id = ?",
                          (status, time.time(), decided_by, quarantine_id))
            if status == "released":  # judged again: the verdict, sample and claims of before go
                for table in ("claims", "samples", "verdicts"):
                    self._execute(f"DELETE FROM {table} WHERE turn_id = ?", (row[0],))
        return self.quarantined(None, limit=1, quarantine_id=quarantine_id)[0]

    # -- samples ----------------------------------------------------------------------
    #
    # One row per turn in `samples`, written by the judge (or the agent driver) with every
    # signal it found, for any method; `claims` records what each method's trainer did with
    # each turn (used, dropped as stale, rejected with the reason it gives the method nothing).
    #
    # Why a second table and not the old key: `samples` was keyed (turn_id, method), one row
    # per method the judge was told to build for, so the judge had to know the trainer's
    # method. A database of that era keeps its rows: they stay readable and claimable by the
    # method they name (`method` is legacy: rows written now hold PER_TURN there), the same
    # primary key now holds one row per turn, and nothing is migrated or rewritten. The
    # per-method outcome needed a key of its own, (turn_id, method), which is `claims`.

    def add_sample(self, sample: Sample) -> bool:
        """Record a turn's sample, ready for every method (a turn judged again is replaced);
        False if the turn was deleted meanwhile."""
        return self._write_sample(sample.turn_id, sample.policy_version, "ready", None, json.dumps(sample.to_dict()))

    def reject_sample(self, turn_id: int, policy_version: int, reason: str) -> bool:
        """Record that a turn gives no method anything to learn (a side turn, an empty response)."""
        return self._write_sample(turn_id, policy_version, "rejected", reason, None)

    def _write_sample(self, turn_id: int, policy_version: int, status: str, reason: str | None,
                      payload: str | None) -> bool:
        with self._write():
            found = self._owner_of_live_turn(turn_id)
            if found is None:
                return False
            self._replace("samples", "turn_id, method", {
                "turn_id": turn_id, "method": PER_TURN, "status": status, "reason": reason,
                "policy_version": policy_version, "payload": payload, "created_at": time.time(), "used_at": None,
                "train_step": None, "owner": found[0],
            })
        return True

    def claim_samples(self, method: str, batch_size: int, current_version: int, max_staleness: int,
                      train_step: int, min_size: int | None = None,
                      assemble: Callable[[Sample], Sample | str] | None = None,
                      max_per_owner: int | None = None,
                      ) -> tuple[list[Sample], list[tuple[int, str]]]:
        """Take, for `method`, the oldest `batch_size` samples it has not seen yet, if at least
        `min_size` (default: `batch_size`) are fresh enough and usable; a smaller `min_size` lets
        a finished run train its last, partial batch.

        `assemble` turns a turn's sample into the method's (train/methods.py), or returns why
        the turn gives the method nothing: that turn is rejected for `method`, with the reason,
        and stays there for every other method. None takes samples as written. Samples more than
        `max_staleness` versions behind the current policy are dropped for `method`, each with
        its reason. At most `max_per_owner` samples of one user go into a batch: the rest wait
        for a later one, so no single user's feedback fills a step. Returns (claimed samples,
        dropped (turn id, reason)). Atomic across processes: no two claims of one method ever
        take the same turn.
        """
        need = batch_size if min_size is None else max(1, min_size)
        taken: list[Sample] = []
        outcomes: list[tuple[int, str, str | None]] = []  # (turn id, status, reason) of turns passed over
        per_owner: collections.Counter[str | None] = collections.Counter()
        with self._write():
            for turn_id, version, payload, owner in self._unclaimed(method, batch_size):
                if max_per_owner is not None and per_owner[owner] >= max_per_owner:
                    continue  # stays ready for the next batch
                if version < current_version - max_staleness:
                    outcomes.append((turn_id, "dropped", f"stale: sampled by policy v{version}, current "
                                                         f"v{current_version}, max_staleness {max_staleness}"))
                    continue
                sample = Sample.from_dict(json.loads(payload))
                sample = assemble(sample) if assemble is not None else sample
                if isinstance(sample, str):
                    outcomes.append((turn_id, "rejected", sample))
                    continue
                taken.append(sample)
                per_owner[owner] += 1
                if len(taken) == batch_size:
                    break
            if len(taken) < need:
                taken = []
            self._claim(method, outcomes, "", train_step)
            won = self._claim(method, [(s.turn_id, "used", None) for s in taken], " RETURNING turn_id", train_step)
        taken = [s for s in taken if s.turn_id in won]  # a concurrent claim of the same method won the rest
        dropped = [(turn_id, reason) for turn_id, status, reason in outcomes if status == "dropped"]
        for turn_id, status, reason in outcomes:
            log.log(logging.INFO if status == "dropped" else logging.DEBUG, "%s sample of turn %d for %s: %s",
                    status, turn_id, method, reason)
        return taken, dropped

    def _unclaimed(self, method: str, batch_size: int) -> Iterator[tuple[int, int, str, str | None]]:
        """(turn id, policy version, payload, owner) of the ready samples `method` has no claim on,
        oldest first, a page at a time (a method may reject many before it has a batch)."""
        page = max(batch_size, 64)
        after: tuple[float, int] = (-1.0, -1)
        seen: set[int] = set()  # a database of the per-method era may hold a turn twice
        while True:
            rows = self._execute(
                "SELECT s.turn_id, s.policy_version, s.payload, s.created_at, s.owner FROM samples s "
                "WHERE s.status = 'ready' AND s.method IN (?, ?) AND (s.created_at, s.turn_id) > (?, ?) "
                "AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.turn_id = s.turn_id AND c.method = ?) "
                f"ORDER BY s.created_at, s.turn_id LIMIT ?{self._sql.skip_locked}",
                (PER_TURN, method, *after, method, page),
            ).fetchall()
            for turn_id, version, payload, created_at, owner in rows:
                after = (created_at, turn_id)
                if turn_id not in seen:
                    seen.add(turn_id)
                    yield turn_id, version, payload, owner
            if len(rows) < page:
                return

    def _claim(self, method: str, outcomes: list[tuple[int, str, str | None]], returning: str,
               train_step: int) -> set[int]:
        """Insert `method`'s claims in one statement (each is a round trip to a PostgreSQL server);
        a turn another claim of `method` recorded first is left as it is. With `returning`, the
        turn ids this call recorded."""
        if not outcomes:
            return set()
        now = time.time()
        values = ", ".join("(?, ?, ?, ?, ?, ?)" for _ in outcomes)
        args = [x for turn_id, status, reason in outcomes
                for x in (turn_id, method, status, reason, train_step if status == "used" else None, now)]
        cursor = self._execute(
            f"INSERT INTO claims (turn_id, method, status, reason, train_step, created_at) VALUES {values} "
            f"ON CONFLICT (turn_id, method) DO NOTHING{returning}", tuple(args))
        return {row[0] for row in cursor.fetchall()} if returning else set()

    def sample_counts(self, method: str | None = None) -> dict[str, int]:
        """How many turns are ready, used, dropped and rejected for `method`: each turn counted
        once, under its claim if `method` has one. Without a method: the ready turns no method
        has claimed yet, and every claim and rejection of every method."""
        with self._lock:
            if method is not None:
                rows = self._execute(
                    "SELECT COALESCE(c.status, s.status), COUNT(*) FROM samples s LEFT JOIN claims c "
                    "ON c.turn_id = s.turn_id AND c.method = ? WHERE s.method IN (?, ?) GROUP BY 1",
                    (method, PER_TURN, method),
                ).fetchall()
            else:
                rows = self._execute(
                    "SELECT s.status, COUNT(*) FROM samples s WHERE NOT EXISTS (SELECT 1 FROM claims c "
                    "WHERE c.turn_id = s.turn_id AND (s.method = ? OR c.method = s.method)) GROUP BY s.status "
                    "UNION ALL SELECT status, COUNT(*) FROM claims GROUP BY status",
                    (PER_TURN,),
                ).fetchall()
        counts = {"ready": 0, "used": 0, "dropped": 0, "rejected": 0}
        for status, count in rows:
            counts[status] += count
        return counts

    def sample_states(self, turn_ids: list[int]) -> dict[int, dict[str, Any]]:
        """What became of each turn's sample (turns without one are absent): `status` (ready,
        used, dropped, rejected) and `reason`, the sample's own or, once a method claimed it,
        that claim's (a used claim wins over the others, then dropped, then rejected), the
        `train_step` that used it, and every method's `claims`."""
        found: dict[int, dict[str, Any]] = {}
        with self._lock:
            for chunk in _chunks(turn_ids):
                for turn_id, status, reason in self._execute(
                        f"SELECT turn_id, status, reason FROM samples WHERE turn_id IN ({_marks(chunk)})",
                        tuple(chunk)).fetchall():
                    found[turn_id] = {"status": status, "reason": reason, "train_step": None, "claims": []}
                for turn_id, method, status, reason, step in self._execute(
                        f"SELECT turn_id, method, status, reason, train_step FROM claims WHERE turn_id IN "
                        f"({_marks(chunk)}) ORDER BY created_at", tuple(chunk)).fetchall():
                    state = found.setdefault(turn_id, {"status": status, "reason": reason, "train_step": None,
                                                       "claims": []})
                    state["claims"].append({"method": method, "status": status, "reason": reason, "train_step": step})
        for state in found.values():
            for wanted in ("used", "dropped", "rejected"):
                claim = next((c for c in state["claims"] if c["status"] == wanted), None)
                if claim is not None:
                    state.update(status=wanted, reason=claim["reason"], train_step=claim["train_step"])
                    break
        return found

    def quarantine_of(self, turn_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        """The quarantined hints of each turn (held, released or dropped), oldest first."""
        found: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        with self._lock:
            for chunk in _chunks(turn_ids):
                for qid, turn_id, hint, reason, status in self._execute(
                        f"SELECT id, turn_id, hint, reason, status FROM quarantine WHERE turn_id IN ({_marks(chunk)}) "
                        "ORDER BY id", tuple(chunk)).fetchall():
                    found[turn_id].append({"id": qid, "hint": hint, "reason": reason, "status": status})
        return dict(found)

    def judge_backlog(self) -> int:
        """Main turns whose next state arrived and that the judge has not judged yet."""
        with self._lock:
            (count,) = self._execute(f"SELECT COUNT(*) FROM turns WHERE {_AWAITING_VERDICT}").fetchone()
        return int(count)

    def judged_turns(self, limit: int = 5000, owner: str | None = None) -> list[dict[str, Any]]:
        """The newest `limit` turns with a reward (only `owner`'s when given), oldest first: session,
        its start, the turn's index and policy version, the reward and when it was judged."""
        where, args = ("AND t.owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(
                "SELECT t.session_id, s.created_at, t.idx, t.policy_version, v.reward, v.created_at FROM verdicts v "
                "JOIN turns t ON t.id = v.turn_id JOIN sessions s ON s.id = t.session_id "
                f"WHERE v.status = 'ok' AND v.reward IS NOT NULL {where}ORDER BY v.created_at DESC, v.turn_id DESC "
                "LIMIT ?", (*args, limit)).fetchall()
        names = ("session_id", "session_created_at", "index", "policy_version", "reward", "judged_at")
        return [dict(zip(names, row)) for row in reversed(rows)]

    def recent_rewards(self, count: int) -> list[int]:
        """The rewards of the newest `count` verdicts that have one (newest first): +1 the judge
        approved the turn, -1 it read a correction, 0 neither."""
        with self._lock:
            rows = self._execute("SELECT reward FROM verdicts WHERE status = 'ok' AND reward IS NOT NULL "
                                 "ORDER BY created_at DESC, turn_id DESC LIMIT ?", (count,)).fetchall()
        return [int(reward) for (reward,) in rows]

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
            for chunk in _chunks(turn_ids):
                for owner, session in self._execute(
                        f"SELECT owner, session_id FROM turns WHERE id IN ({_marks(chunk)})", tuple(chunk)).fetchall():
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

    # -- deletion ---------------------------------------------------------------------

    def delete_sessions(self, session_ids: Sequence[str] = (), owner: str | None = None) -> dict[str, Any]:
        """Remove the sessions named (or, with `owner`, all of that user's) with everything
        stored of them: turns, next states, verdicts, samples and claims, Responses objects,
        and their log lines. Returns the counts, and which removed samples a training step
        had already used (`trained`): those are in the weights of the versions named there,
        which cannot forget them. One transaction; every other session is left as it was."""
        with self._write():
            if owner is not None:
                ids = [r[0] for r in self._execute(f"SELECT id FROM sessions WHERE owner = ?{self._sql.lock_rows}",
                                                   (owner,)).fetchall()]
            else:
                ids = [r[0] for chunk in _chunks(list(session_ids))
                       for r in self._execute(f"SELECT id FROM sessions WHERE id IN ({_marks(chunk)}){self._sql.lock_rows}",
                                              tuple(chunk)).fetchall()]
            turn_ids = [r[0] for chunk in _chunks(ids) for r in self._execute(
                f"SELECT id FROM turns WHERE session_id IN ({_marks(chunk)}) ORDER BY id{self._sql.lock_rows}",
                tuple(chunk)).fetchall()]  # locked first, so a judge writing for one of them finishes before
            trained = [r for chunk in _chunks(turn_ids) for r in self._execute(
                f"SELECT turn_id, train_step FROM claims WHERE status = 'used' AND turn_id IN ({_marks(chunk)})",
                tuple(chunk)).fetchall()]
            counts = {"sessions": len(ids), "turns": len(turn_ids)}
            for table, key, keys in (("claims", "turn_id", turn_ids), ("samples", "turn_id", turn_ids),
                                     ("quarantine", "turn_id", turn_ids),
                                     ("verdicts", "turn_id", turn_ids), ("responses", "session_id", ids),
                                     ("turns", "session_id", ids), ("sessions", "id", ids)):
                deleted = sum(self._execute(f"DELETE FROM {table} WHERE {key} IN ({_marks(chunk)})",
                                            tuple(chunk)).rowcount for chunk in _chunks(keys))
                if table in ("samples", "verdicts", "responses"):
                    counts[table] = deleted
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

    # -- logs -------------------------------------------------------------------------

    def _append_log(self, policy_version: int, turn_id: int, record: dict[str, Any]) -> None:
        """Append one line about turn `turn_id`, holding the file's flock. A deletion deletes rows
        first and then rewrites each file under its flock (`_scrub_logs`), so checking here, under
        the flock, that the turn still exists means no line outlives its deletion, whatever the
        order; an append that raced a rewrite finds the new file by its inode and retries."""
        path = self.logs_dir / f"turns-v{policy_version:05d}.jsonl"
        line = (json.dumps(self._loggable(record), ensure_ascii=False) + "\n").encode()
        with self._log_lock:
            while True:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    with contextlib.suppress(FileNotFoundError):
                        if os.fstat(fd).st_ino == os.stat(path).st_ino:
                            if self._turn_exists(turn_id):
                                os.write(fd, line)
                            return
                finally:
                    os.close(fd)  # and with it the flock

    def _turn_exists(self, turn_id: int) -> bool:
        with self._lock:
            return self._execute("SELECT 1 FROM turns WHERE id = ?", (turn_id,)).fetchone() is not None

    def _loggable(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as `log_text` allows: its text fields dropped (off), masked (redacted) or kept."""
        if self.log_text == "full":
            return record
        kept = {k: v for k, v in record.items() if k not in _LOG_TEXT_FIELDS}
        if self.log_text == "off":
            return {**kept, "text": "off"}
        return {**kept, **{k: _redact_strings(v, self.redact_kinds) for k, v in record.items()
                           if k in _LOG_TEXT_FIELDS}}

    def _scrub_logs(self, session_ids: set[str]) -> int:
        """Remove every log line of these sessions, from the logs of every host under the data
        dir; returns how many. Each file is rewritten atomically under its flock."""
        removed = 0
        for path in sorted((self.data_dir / "logs").rglob("*.jsonl")):
            with open(path, "rb+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                lines = f.read().splitlines(keepends=True)
                kept = [line for line in lines if not _line_of(line, session_ids)]
                if len(kept) == len(lines):
                    continue
                tmp = path.with_suffix(".scrub")
                with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
                    out.writelines(kept)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
                removed += len(lines) - len(kept)
        return removed

    def _log_turn(self, turn: Turn) -> None:
        last = next(
            (m for m in reversed(turn.prompt_messages) if m.get("role") in ("user", "tool")), None
        )
        self._append_log(
            turn.policy_version, turn.id,
            {
                "event": "turn",
                "at": turn.created_at,
                "session_id": turn.session_id,
                "index": turn.index,
                "kind": turn.kind,
                "policy_version": turn.policy_version,
                "owner": turn.owner,
                "request_last_message": _content_text(last)[:500] if last else None,
                "response_text": turn.response_text,
                "tool_calls": turn.tool_calls or None,
                "response_tokens": len(turn.response_token_ids),
                "finish_reason": turn.finish_reason,
            },
        )

    def _log_next_state(self, turn: Turn, next_state: NextState) -> None:
        self._append_log(
            turn.policy_version, turn.id,
            {
                "event": "next_state",
                "at": next_state.at or time.time(),
                "session_id": turn.session_id,
                "index": turn.index,
                "role": next_state.role,
                "content": next_state.content[:2000],
            },
        )


# -- the dialects: what differs between SQLite and PostgreSQL ------------------------------


class _SQLite:
    """The embedded default: one file, WAL, `BEGIN IMMEDIATE` serialises every writer."""

    begin = "BEGIN IMMEDIATE"
    lock_rows = ""  # the whole database is locked by BEGIN IMMEDIATE
    skip_locked = ""
    returning_id = ""

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self.db = sqlite3.connect(path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        schema = SCHEMA.format(id="INTEGER PRIMARY KEY AUTOINCREMENT", ref="INTEGER", real="REAL")
        self.db.executescript(schema)
        self.db.execute("BEGIN IMMEDIATE")  # two processes opening an old file add each column once
        try:
            add_missing_columns(self.db.execute, schema)
            for statement in LATE_INDEXES.strip().splitlines():
                self.db.execute(statement)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def execute(self, sql: str, args: tuple) -> sqlite3.Cursor:
        return self.db.execute(sql, args)

    @staticmethod
    def inserted_id(cursor: sqlite3.Cursor) -> int:
        return cursor.lastrowid

    def rollback(self) -> None:
        self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.db.close()


class _Postgres:
    """A PostgreSQL server every machine reaches (psycopg 3, the `postgres` extra).

    Autocommit, as SQLite's `isolation_level=None`: a lone statement commits by itself and
    `_write` wraps read-modify-writes in BEGIN ... COMMIT (READ COMMITTED), locking the rows
    whose reading decides the write. A connection that broke (server restarted, network)
    is replaced, and a statement outside a transaction is sent again on the new one: every
    such statement of the store is a read, an idempotent upsert or a BEGIN. A break inside
    a transaction fails its call (the server rolled it back), and the next call reconnects.
    """

    begin = "BEGIN"
    lock_rows = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    returning_id = " RETURNING id"
    _SCHEMA_LOCK = 0x6F70656E636C6177  # "openclaw": an advisory lock, so two processes create tables one by one

    def __init__(self, url: str, connect_timeout_s: float) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        try:
            parts = urlsplit(url)
        except ValueError as error:  # e.g. an unclosed [IPv6] host
            raise StoreUnavailable(f"store URL {redact_url(url)!r} is malformed: {error}") from None
        self._password = parts.password
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise StoreUnavailable(
                f"store URL {redact_url(url)!r} is not supported: use postgresql://USER@HOST[:PORT]/DATABASE, "
                "or no --store for the SQLite file in the data dir"
            )
        self.db = self._connect()
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(%s)", (self._SCHEMA_LOCK,))
            schema = SCHEMA.format(id="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", ref="BIGINT",
                                   real="DOUBLE PRECISION")
            self.db.execute(schema)
            add_missing_columns(self.db.execute, schema)
            self.db.execute(LATE_INDEXES)

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError as error:
            raise StoreUnavailable(
                f"store {redact_url(self.url)!r} needs psycopg 3: pip install 'openclaw-rl[postgres]' "
                "(or 'psycopg[binary]')"
            ) from error
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, round(self.connect_timeout_s)),
                                   application_name="openclaw-rl")
        except psycopg.Error as error:
            detail = " ".join(str(error).split())
            if self._password:
                detail = detail.replace(self._password, "***")
            raise StoreUnavailable(
                f"cannot open the store {redact_url(self.url)!r}: {detail}. Check that the PostgreSQL server runs "
                "and is reachable from this machine, that the database exists (createdb), and the user and password "
                "(better in PGPASSWORD or ~/.pgpass than in the URL); see docs/shared-state.md"
            ) from None

    def execute(self, sql: str, args: tuple) -> Any:
        import psycopg

        sql = sql.replace("?", "%s")
        if self.db.broken:
            self.db = self._reconnect()
        outside_transaction = self.db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            return self.db.execute(sql, args)
        except psycopg.OperationalError:
            # Outside a transaction a statement is a read, an idempotent upsert or BEGIN, so it
            # is safe to send again; inside one, the server rolled the transaction back.
            if not (outside_transaction and self.db.broken):
                raise
            self.db = self._reconnect()
            return self.db.execute(sql, args)

    def _reconnect(self) -> Any:
        log.warning("store connection to %s broke; reconnecting", redact_url(self.url))
        return self._connect()

    @staticmethod
    def inserted_id(cursor: Any) -> int:
        return cursor.fetchone()[0]

    def rollback(self) -> None:
        if not self.db.broken:  # a broken connection has no transaction left to roll back
            self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.db.close()


_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", re.S)
_TABLE_CONSTRAINTS = ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT")


def add_missing_columns(execute: Callable[[str], Any], schema: str) -> list[str]:
    """Add to existing tables the columns `schema` declares and they lack; returns the statements run.

    The store has no migrations: CREATE TABLE IF NOT EXISTS leaves a table that an older
    version created as it was. So the schema stays the one description of every table,
    and a column added to it later reaches old databases here, by ALTER TABLE ... ADD
    COLUMN, which SQLite and PostgreSQL both speak. Rows written before read NULL in it, so
    a new column must allow NULL or have a default (SQLite refuses NOT NULL without one).
    The caller runs this inside a transaction that serialises the processes opening the
    database, so each column is added once.
    """
    statements = []
    for table, body in _TABLE.findall(schema):
        cursor = execute(f"SELECT * FROM {table} LIMIT 0")
        present = {column[0].lower() for column in cursor.description}
        for line in body.splitlines():
            definition = line.strip().rstrip(",")
            name = definition.split(" ", 1)[0]
            if definition and name.upper() not in _TABLE_CONSTRAINTS and name.lower() not in present:
                statements.append(f"ALTER TABLE {table} ADD COLUMN {definition}")
    for statement in statements:
        log.info("store: %s (a database made by an older version)", statement)
        execute(statement)
    return statements


_LOG_TEXT_FIELDS = frozenset({"request_last_message", "response_text", "tool_calls", "content", "raw", "hints",
                              "selected_hint", "reason"})


def _redact_strings(value: Any, kinds: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, kinds)
    if isinstance(value, list):
        return [_redact_strings(v, kinds) for v in value]
    if isinstance(value, dict):
        return {k: _redact_strings(v, kinds) for k, v in value.items()}
    return value


def _line_of(line: bytes, session_ids: set[str]) -> bool:
    """Whether a log line belongs to one of the sessions (a torn or foreign line is kept)."""
    if b'"session_id"' not in line:
        return False
    try:
        return json.loads(line).get("session_id") in session_ids
    except (ValueError, AttributeError):
        return False


def private_dir(path: Path) -> Path:
    """`path`, created if needed, readable by its owner only (0700): what it holds is people's conversations."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _chunks(values: list, size: int = 500) -> Iterator[list]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _marks(values: list) -> str:
    return ",".join("?" * len(values))


def _content_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _turn_from_row(row: tuple) -> Turn:
    (tid, session_id, idx, kind, version, prompt_messages, prompt_ids, response_ids, logprobs,
     text, tool_calls, sampling, finish, created, next_state, closed, continuation, owner) = row
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
    )
