"""The human-readable JSONL logs beside the database: what is written, how much text, and scrubbing.

The logs go to DATA_DIR/logs/, one file per policy version, opened in append mode and
never truncated. They hold what a person wants to read (the request's last message, the
response, the next state), not whole prompts or token ids, with their text dropped,
masked (the personal data of privacy.py) or kept as `log_text` says. They stay local
files of the process that writes them; with PostgreSQL they go to DATA_DIR/logs/HOSTNAME/,
so machines sharing a data dir over NFS never append to one file (appends from two NFS
clients can interleave). Deleting a session scrubs its lines from the logs of every host.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from typing import Any

from openclaw_rl.chat import content_text
from openclaw_rl.privacy import redact
from openclaw_rl.store.connection import Connection
from openclaw_rl.types import NextState, Turn

# the fields of a log record that hold people's text: what `log_text` drops or masks
_LOG_TEXT_FIELDS = frozenset({"request_last_message", "response_text", "tool_calls", "content", "raw", "hints",
                              "selected_hint", "reason"})


class LogsMixin(Connection):
    """Appending to the JSONL logs and scrubbing a deleted session's lines out of them."""

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

    def as_logged(self, text: str) -> str:
        """`text` (a hint, a reason quoting one) as `log_text` lets it into any log, the console
        included: kept (full), with the personal data of `redact_kinds` masked (redacted), or
        withheld (off). A console line cannot be scrubbed when a user's data is deleted."""
        if self.log_text == "full":
            return text
        if self.log_text == "off":
            return "text withheld: --log-text off"
        return redact(text, self.redact_kinds)

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
                "request_last_message": content_text(last)[:500] if last else None,
                "response_text": turn.response_text,
                "tool_calls": turn.tool_calls or None,
                "response_tokens": len(turn.response_token_ids),
                "finish_reason": turn.finish_reason,
                "experience_version": turn.experience_version,
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
