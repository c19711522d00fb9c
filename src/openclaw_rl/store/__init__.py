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
(`?` placeholders, `ON CONFLICT` upserts); the small dialect classes of connection.py
hold what differs: connecting, column types, placeholders, how a read-modify-write
transaction starts and which rows it locks.

One connection per `Store`, guarded by a lock: SQLite serialises writers anyway, the
transactions are a few hundred microseconds (a millisecond or two to a PostgreSQL
server), and one connection keeps WAL checkpoints simple. Read-modify-write
transactions are serialised by `BEGIN IMMEDIATE` on SQLite and by row locks on
PostgreSQL: the session row while a turn index is chosen, `FOR UPDATE SKIP LOCKED` on the
samples a trainer claims, and the claim's primary key (turn, method) settles the rest, so
two trainers of one method never claim the same sample.

`Store` is one class over sixteen tables (sessions, turns, verdicts, samples, claims,
policy, responses; versions, policy_requests and quarantine for safe updates;
experience, experience_changes, lesson_absorption and lesson_absorption_adapter for each
user's lessons;
adapter_versions and adapters_off for each user's personal adapter), because
it is the whole contract between the processes: one object that each process opens.
Its methods are written by topic, one module each, every query beside the others of
its tables:

    schema.py         the tables (written once for both databases) and added columns
    connection.py     the connection, the transaction helpers, the SQLite and PostgreSQL dialects
    logs.py           the human-readable JSONL logs: text kept, masked or dropped; scrubbing
    conversations.py  sessions, turns, next states, Responses objects; deleting sessions
    signals.py        verdicts, quarantined hints, samples and each method's claims
    versions.py       the published policy version, the version history, rollback requests
    experience.py     each user's lessons and the log of their changes (experience/)
    adapters.py       each user's personal adapter versions (train/personal.py)

Each topic class builds on the ones it calls (conversations write their log lines,
signals read turns), so every `self.` name a module uses is defined in it or in a base
it imports; `Store` joins the four lines of descent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from openclaw_rl.privacy import KINDS
from openclaw_rl.store.adapters import AdaptersMixin
from openclaw_rl.store.connection import SQLITE_FILE, LogText, StoreError, StoreUnavailable, redact_url
from openclaw_rl.store.experience import ExperienceConflict, ExperienceMixin
from openclaw_rl.store.schema import add_missing_columns
from openclaw_rl.store.signals import SignalsMixin
from openclaw_rl.store.versions import VersionsMixin

__all__ = ["SQLITE_FILE", "ExperienceConflict", "LogText", "Store", "StoreError", "StoreUnavailable", "add_missing_columns", "make_store", "redact_url"]


class Store(SignalsMixin, VersionsMixin, ExperienceMixin, AdaptersMixin):
    """The store the serve, judge and train processes share: see the module docstring.

    `Store(data_dir)` opens the SQLite file in `data_dir`; `Store(data_dir, url=...)` the
    PostgreSQL database at `url` (`make_store` chooses from one string).
    """


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
