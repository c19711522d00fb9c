"""The tables, written once for both databases, and how an older database gains new columns.

The store has no migrations: CREATE TABLE IF NOT EXISTS leaves a table that an older
version created as it was, so the schema stays the one description of every table and
`add_missing_columns` brings old tables up to it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

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
    experience_version  INTEGER,
    experience_block    TEXT,
    experience_placement TEXT,
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
CREATE TABLE IF NOT EXISTS experience (
    owner       TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    lessons     TEXT NOT NULL,
    updated_at  {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS adapter_versions (
    owner       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    parent      INTEGER,
    gate        TEXT NOT NULL,
    reason      TEXT,
    checks      TEXT,
    samples     TEXT,
    created_at  {real} NOT NULL,
    pinned      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, version)
);
CREATE TABLE IF NOT EXISTS adapters_off (
    owner           TEXT PRIMARY KEY,
    turned_off_by   TEXT,
    turned_off_at   {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS lesson_absorption (
    owner           TEXT NOT NULL,
    lesson_id       INTEGER NOT NULL,
    policy_version  INTEGER NOT NULL,
    gap             {real} NOT NULL,
    turns           INTEGER NOT NULL,
    measured_at     {real} NOT NULL,
    PRIMARY KEY (owner, lesson_id, policy_version)
);
CREATE TABLE IF NOT EXISTS lesson_absorption_adapter (
    owner           TEXT NOT NULL,
    lesson_id       INTEGER NOT NULL,
    policy_version  INTEGER NOT NULL,
    adapter_version INTEGER NOT NULL,
    gap             {real} NOT NULL,
    turns           INTEGER NOT NULL,
    measured_at     {real} NOT NULL,
    PRIMARY KEY (owner, lesson_id, policy_version, adapter_version)
);
CREATE TABLE IF NOT EXISTS experience_changes (
    owner       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    change      TEXT NOT NULL,
    created_at  {real} NOT NULL,
    PRIMARY KEY (owner, version)
);
"""

# Indexes on columns that `add_missing_columns` may have just added: created after it runs.
LATE_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions(owner, created_at);
CREATE INDEX IF NOT EXISTS turns_by_owner ON turns(owner);
"""

_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", re.S)
_TABLE_CONSTRAINTS = ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT")


def add_missing_columns(execute: Callable[[str], Any], schema: str) -> list[str]:
    """Add to existing tables the columns `schema` declares and they lack; returns the statements run.

    A column added to the schema later reaches old databases here, by ALTER TABLE ... ADD
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
