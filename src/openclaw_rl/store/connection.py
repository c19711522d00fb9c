"""The store's one connection and the two databases behind it: what differs between SQLite and PostgreSQL.

Every query of the store is written once, in the SQL both databases speak (`?`
placeholders, `ON CONFLICT` upserts); the small dialect classes here hold what differs:
connecting, column types, placeholders, how a read-modify-write transaction starts and
which rows it locks. `Connection` is the base of the store's topic classes: it opens the
database and the data dir and gives them `_execute`, `_write` and `_replace`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal
from urllib.parse import urlsplit

from openclaw_rl.privacy import KINDS
from openclaw_rl.store.schema import LATE_INDEXES, SCHEMA, add_missing_columns

LogText = Literal["off", "redacted", "full"]

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """A store operation that cannot be done as asked (unknown session, nothing open, ...)."""


class StoreUnavailable(StoreError):
    """The store URL is malformed or its database cannot be reached."""


def redact_url(url: str) -> str:
    """`url` without its password, fit for error messages and logs."""
    url = re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    before_query, question, query = rest.partition("?")
    userinfo, at, host = before_query.rpartition("@")  # the last @: a password may hold one, unencoded
    if not (sep and at and ":" in userinfo):
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{question}{query}"


def private_dir(path: Path) -> Path:
    """`path`, created if needed, readable by its owner only (0700): what it holds is people's conversations."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def chunks(values: list, size: int = 500) -> Iterator[list]:
    """`values` in slices of `size`: one `IN (...)` list of a query holds at most that many."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


SQLITE_FILE = "openclaw.db"  # the SQLite store in a data dir


def marks(values: list) -> str:
    """The `?` placeholders of an `IN (...)` list of `values`."""
    return ",".join("?" * len(values))


class Connection:
    """One connection per `Store`, guarded by a lock, and the data dir with its logs."""

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
            self.path = self.data_dir / SQLITE_FILE
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
        self.psycopg = _import_psycopg(url)
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
            return self.psycopg.connect(self.url, autocommit=True,
                                        connect_timeout=max(1, round(self.connect_timeout_s)),
                                        application_name="openclaw-rl")
        except self.psycopg.Error as error:
            detail = " ".join(str(error).split())
            if self._password:
                detail = detail.replace(self._password, "***")
            raise StoreUnavailable(
                f"cannot open the store {redact_url(self.url)!r}: {detail}. Check that the PostgreSQL server runs "
                "and is reachable from this machine, that the database exists (createdb), and the user and password "
                "(better in PGPASSWORD or ~/.pgpass than in the URL); see docs/shared-state.md"
            ) from None

    def execute(self, sql: str, args: tuple) -> Any:
        sql = sql.replace("?", "%s")
        if self.db.broken:
            self.db = self._reconnect()
        outside_transaction = self.db.info.transaction_status == self.psycopg.pq.TransactionStatus.IDLE
        try:
            return self.db.execute(sql, args)
        except self.psycopg.OperationalError:
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


def _import_psycopg(url: str) -> ModuleType:
    """psycopg 3, or why the store at `url` cannot open without it."""
    try:
        # Imported here, not at the top: psycopg is the optional `postgres` extra, and a
        # tenth of a second of start-up that a SQLite store never needs.
        import psycopg
    except ImportError as error:
        raise StoreUnavailable(
            f"store {redact_url(url)!r} needs psycopg 3: pip install 'openclaw-rl[postgres]' (or 'psycopg[binary]')"
        ) from error
    return psycopg
