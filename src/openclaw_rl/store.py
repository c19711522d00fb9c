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

It is one class over seven tables (sessions, turns, verdicts, samples, claims, policy,
responses) and runs
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

import contextlib
import json
import logging
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from openclaw_rl.types import Message, NextState, Sample, Session, Turn, TurnKind, Verdict

log = logging.getLogger(__name__)

# {id}, {ref} and {real} are the column types that differ between the dialects.
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id          TEXT PRIMARY KEY,
    created_at  {real} NOT NULL,
    closed_at   {real},
    source      TEXT NOT NULL
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
    teacher_policy_version  INTEGER
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
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, idx);
CREATE TABLE IF NOT EXISTS responses (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    turn_id     {ref} REFERENCES turns(id),
    body        TEXT NOT NULL,
    created_at  {real} NOT NULL
);
"""

PER_TURN = ""  # `samples.method` of the one row per turn; rows of older databases name a method

_TURN_COLUMNS = (
    "id, session_id, idx, kind, policy_version, prompt_messages, prompt_token_ids, "
    "response_token_ids, behaviour_logprobs, response_text, tool_calls, sampling, "
    "finish_reason, created_at, next_state, closed, continuation_hash"
)


class StoreError(RuntimeError):
    """A store operation that cannot be done as asked (unknown session, nothing open, ...)."""


class StoreUnavailable(StoreError):
    """The store URL is malformed or its database cannot be reached."""


def make_store(url_or_data_dir: str | Path, *, data_dir: str | Path | None = None) -> Store:
    """The store the serve, judge and train processes share.

    A `postgresql://` (or `postgres://`) URL opens that database; `data_dir` is then still
    needed for the logs (and by the trainer for checkpoints). Anything else is a data dir
    and opens its SQLite file; an empty string means `data_dir`'s.
    """
    target = str(url_or_data_dir)
    if "://" not in target:
        return Store(target or _required(data_dir, target))
    return Store(_required(data_dir, target), url=target)


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
    def __init__(self, data_dir: str | Path, *, url: str = "", busy_timeout_s: float = 10.0):
        """The SQLite store in `data_dir`, or with `url` the PostgreSQL database it names."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.data_dir / "logs"
        if url:
            self._sql: _SQLite | _Postgres = _Postgres(url, busy_timeout_s)
            self.logs_dir = self.logs_dir / socket.gethostname()
            self.path: Path | None = None
        else:
            self.path = self.data_dir / "openclaw.db"
            self._sql = _SQLite(self.path, busy_timeout_s)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()  # re-entrant: helpers read inside a write

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

    def ensure_session(self, session_id: str, source: str) -> Session:
        with self._lock:
            self._execute(
                "INSERT INTO sessions (id, created_at, source) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
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
            rows = self._execute(
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
        """Commit a turn; it is durable when this returns."""
        if len(response_token_ids) != len(behaviour_logprobs):
            raise ValueError(
                f"{len(response_token_ids)} response ids but {len(behaviour_logprobs)} log-probs"
            )
        now = time.time()
        with self._lock:
            with self._write():
                if self._sql.lock_rows:  # the next index is chosen by one writer of this session at a time
                    self._execute(f"SELECT id FROM sessions WHERE id = ?{self._sql.lock_rows}", (session_id,))
                (idx,) = self._execute(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE session_id = ?", (session_id,)
                ).fetchone()
                cur = self._execute(
                    "INSERT INTO turns (session_id, idx, kind, policy_version, prompt_messages, "
                    "prompt_token_ids, response_token_ids, behaviour_logprobs, response_text, "
                    f"tool_calls, sampling, finish_reason, continuation_hash, created_at) "
                    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){self._sql.returning_id}",
                    (
                        session_id, idx, kind, policy_version, json.dumps(prompt_messages),
                        json.dumps(prompt_token_ids), json.dumps(response_token_ids),
                        json.dumps(behaviour_logprobs), response_text, json.dumps(tool_calls),
                        json.dumps(sampling), finish_reason, continuation_hash, now,
                    ),
                )
                turn_id = self._sql.inserted_id(cur)
            turn = self._turn_where("id = ?", (turn_id,))[0]
        self._log_turn(turn)
        return turn

    def set_next_state(self, turn_id: int, next_state: NextState) -> None:
        with self._write():
            self._set_next_state(turn_id, next_state)
        (turn,) = self._turn_where("id = ?", (turn_id,))
        self._log_next_state(turn.session_id, turn_id, next_state)

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
        return self._turn_where(
            "kind = 'main' AND next_state IS NOT NULL AND id NOT IN (SELECT turn_id FROM verdicts) "
            "ORDER BY id LIMIT ?",
            (limit,),
        )

    def write_verdict(self, verdict: Verdict) -> None:
        now = time.time()
        with self._lock:
            self._replace("verdicts", "turn_id", {
                "turn_id": verdict.turn_id, "status": verdict.status, "reward": verdict.reward,
                "votes": json.dumps(verdict.votes), "raw": json.dumps(verdict.raw), "hints": json.dumps(verdict.hints),
                "selected_hint": verdict.selected_hint, "overlap_scores": json.dumps(verdict.overlap_scores),
                "judge": verdict.judge, "latency_s": verdict.latency_s, "reason": verdict.reason, "created_at": now,
                "teacher_policy_version": verdict.teacher_policy_version,
            })
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

    def add_sample(self, sample: Sample) -> None:
        """Record a turn's sample, ready for every method (a turn judged again is replaced)."""
        with self._lock:
            self._replace("samples", "turn_id, method", {
                "turn_id": sample.turn_id, "method": PER_TURN, "status": "ready", "reason": None,
                "policy_version": sample.policy_version, "payload": json.dumps(sample.to_dict()),
                "created_at": time.time(), "used_at": None, "train_step": None,
            })

    def reject_sample(self, turn_id: int, policy_version: int, reason: str) -> None:
        """Record that a turn gives no method anything to learn (a side turn, an empty response)."""
        with self._lock:
            self._replace("samples", "turn_id, method", {
                "turn_id": turn_id, "method": PER_TURN, "status": "rejected", "reason": reason,
                "policy_version": policy_version, "payload": None, "created_at": time.time(), "used_at": None,
                "train_step": None,
            })

    def claim_samples(self, method: str, batch_size: int, current_version: int, max_staleness: int,
                      train_step: int, min_size: int | None = None,
                      assemble: Callable[[Sample], Sample | str] | None = None,
                      ) -> tuple[list[Sample], list[tuple[int, str]]]:
        """Take, for `method`, the oldest `batch_size` samples it has not seen yet, if at least
        `min_size` (default: `batch_size`) are fresh enough and usable; a smaller `min_size` lets
        a finished run train its last, partial batch.

        `assemble` turns a turn's sample into the method's (train/methods.py), or returns why
        the turn gives the method nothing: that turn is rejected for `method`, with the reason,
        and stays there for every other method. None takes samples as written. Samples more than
        `max_staleness` versions behind the current policy are dropped for `method`, each with
        its reason. Returns (claimed samples, dropped (turn id, reason)). Atomic across
        processes: no two claims of one method ever take the same turn.
        """
        need = batch_size if min_size is None else max(1, min_size)
        taken: list[Sample] = []
        outcomes: list[tuple[int, str, str | None]] = []  # (turn id, status, reason) of turns passed over
        with self._write():
            for turn_id, version, payload in self._unclaimed(method, batch_size):
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

    def _unclaimed(self, method: str, batch_size: int) -> Iterator[tuple[int, int, str]]:
        """(turn id, policy version, payload) of the ready samples `method` has no claim on,
        oldest first, a page at a time (a method may reject many before it has a batch)."""
        page = max(batch_size, 64)
        after: tuple[float, int] = (-1.0, -1)
        seen: set[int] = set()  # a database of the per-method era may hold a turn twice
        while True:
            rows = self._execute(
                "SELECT s.turn_id, s.policy_version, s.payload, s.created_at FROM samples s "
                "WHERE s.status = 'ready' AND s.method IN (?, ?) AND (s.created_at, s.turn_id) > (?, ?) "
                "AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.turn_id = s.turn_id AND c.method = ?) "
                f"ORDER BY s.created_at, s.turn_id LIMIT ?{self._sql.skip_locked}",
                (PER_TURN, method, *after, method, page),
            ).fetchall()
            for turn_id, version, payload, created_at in rows:
                after = (created_at, turn_id)
                if turn_id not in seen:
                    seen.add(turn_id)
                    yield turn_id, version, payload
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

    # -- policy version ---------------------------------------------------------------

    def policy_version(self) -> int:
        return self.policy()["policy_version"]

    def highest_policy_version(self) -> int:
        """The highest version the store knows of, announced by a trainer or recorded on a turn
        (a turn can name a version a crash kept from being announced); 0 if none."""
        with self._lock:
            (on_turns,) = self._execute("SELECT COALESCE(MAX(policy_version), 0) FROM turns").fetchone()
        return max(int(on_turns), self.policy_version())

    def policy(self) -> dict[str, Any]:
        """The latest published policy: version, training steps, when (None if never)."""
        with self._lock:
            row = self._execute("SELECT version, train_step, updated_at FROM policy WHERE id = 1").fetchone()
        version, step, at = row if row else (0, 0, None)
        return {"policy_version": version, "train_steps": step, "last_update_at": at}

    def set_policy_version(self, version: int, train_step: int | None = None) -> None:
        with self._lock:
            self._execute(
                "INSERT INTO policy (id, version, train_step, updated_at) VALUES (1, ?, COALESCE(?, 0), ?) "
                "ON CONFLICT(id) DO UPDATE SET version = excluded.version, "
                "train_step = COALESCE(?, policy.train_step), updated_at = excluded.updated_at",
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


def _content_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _turn_from_row(row: tuple) -> Turn:
    (tid, session_id, idx, kind, version, prompt_messages, prompt_ids, response_ids, logprobs,
     text, tool_calls, sampling, finish, created, next_state, closed, continuation) = row
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
    )
