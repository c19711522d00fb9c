"""Who is asking: the users of a server and their API keys.

    openclaw-rl users add alice --data-dir D     # prints alice's key once, on its last line
    openclaw-rl users list --data-dir D
    openclaw-rl users revoke alice --data-dir D
    openclaw-rl users set alice --experience off --data-dir D   # no lessons in alice's prompts

`DATA_DIR/users.json` (mode 0600) holds each user's name, whether they are an admin, the
SHA-256 of their key and when it was created or revoked, and their own `experience`
setting (true, false, or null: the server's `--experience`); never the key itself. A running
server re-reads the file when it changes, so a user added or revoked from another shell
counts from their next request. `--api-key KEY` is one more key, of the admin `admin`.

Keys are 256 random bits (`secrets.token_urlsafe(32)`), so a plain SHA-256 is the right
hash: password stretching (bcrypt, argon2) exists for secrets people choose and can
guess, and would cost every request tens of milliseconds for nothing here.

With no key at all (no user in the file, no `--api-key`), every request is the local
admin `local`: the laptop case, where `serve` binds to loopback only and says so. That mode
fails closed: once a registry has seen a key it never goes back to it, so revoking the last
user or emptying the file leaves every request unauthenticated (401), and a file that is gone
(with no `--api-key`) or unreadable makes `caller` raise, for the server to refuse with 503.
Back to keyless needs a restart with no key, on loopback (serve/server.py checks the bind).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY_PREFIX = "ocrl-"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
FILE = "users.json"


@dataclass(frozen=True)
class User:
    name: str
    admin: bool = False
    experience: bool | None = None  # serve this user's experience in their prompts; None: the server's --experience

    def may_see(self, owner: str | None) -> bool:
        """Whether this user may read or change what `owner` stored (None: data older than users)."""
        return self.admin or owner == self.name


LOCAL = User("local", admin=True)  # every request of a server with no key configured
ADMIN_KEY_USER = User("admin", admin=True)  # the user of `--api-key`


class UserError(ValueError):
    """A users command that cannot be done as asked (bad name, unknown or existing user)."""


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UserError(f"user name {name[:80]!r} is not valid: use 1-64 lowercase letters, digits, '.', '_' or '-', "
                        "starting with a letter or digit")
    return name


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Users:
    """The users of one data dir, plus the optional `--api-key` admin key."""

    def __init__(self, data_dir: str | Path, admin_key: str = "") -> None:
        self.path = Path(data_dir) / FILE
        self._admin_hash = key_hash(admin_key) if admin_key else ""
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of the file last read
        self._by_hash: dict[str, User] = {}
        self._keyed = bool(admin_key)  # a key was seen: never the keyless local admin again (fail closed)
        self._gone = False  # the file was missing at the last look

    # -- reading: what the server does on every request --------------------------------

    @property
    def keys_configured(self) -> bool:
        """Whether any key exists; without one every request is the local admin."""
        self._refresh()
        return bool(self._admin_hash or self._by_hash)

    @property
    def shared(self) -> bool:
        """Whether the users file holds an active user: a server several people use (the
        trainer's per-user batch cap defaults on then)."""
        self._refresh()
        return bool(self._by_hash)

    def authenticate(self, key: str) -> User | None:
        """The user whose key this is, or None (unknown, revoked, or empty)."""
        self._refresh()
        return self._lookup(key)

    def caller(self, key: str) -> User | None:
        """Who a request with `key` is: the key's user, or None (unknown, revoked, or empty);
        the local admin only while this registry has never seen a key. One look at the file
        per request (the server's guard). Raises UserError when no key can be checked: the
        file is unreadable, or gone from a registry that had keys and has no `--api-key`."""
        self._refresh()
        if not self._keyed:
            return LOCAL
        if self._gone and not self._admin_hash:
            raise UserError(f"no users configured: {self.path} is gone, and this server had keys, so it refuses "
                            "every request rather than serve without one; add a user (openclaw-rl users add NAME "
                            f"--data-dir {self.path.parent}) or restore the file")
        return self._lookup(key)

    def _lookup(self, key: str) -> User | None:
        if not key:
            return None
        digest = key_hash(key)
        if self._admin_hash and hmac.compare_digest(digest, self._admin_hash):
            return ADMIN_KEY_USER
        return self._by_hash.get(digest)

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._by_hash, self._gone = None, {}, True
            return
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen != self._seen:
            self._seen, self._by_hash = None, {}  # until the file reads well: no key from a file that does not
            records = _read(self.path)
            self._by_hash = {r["key_sha256"]: User(r["name"], bool(r["admin"]), r.get("experience"))
                             for r in records if r.get("revoked_at") is None}
            self._seen = seen
        self._gone = False
        self._keyed = self._keyed or bool(self._by_hash)

    # -- changing: what `openclaw-rl users` does -----------------------------------------

    def add(self, name: str, admin: bool = False, experience: bool | None = None) -> str:
        """Create `name` and return its key (shown once: only its hash is kept). A revoked
        name may be added again, with a new key. `experience` overrides the server's
        `--experience` for this user's requests (None: follow the server)."""
        check_name(name)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self._changing() as records:
            if any(r["name"] == name and r.get("revoked_at") is None for r in records):
                raise UserError(f"user {name!r} exists; revoke it first (openclaw-rl users revoke {name}) to give "
                                "it a new key")
            records.append({"name": name, "admin": admin, "key_sha256": key_hash(key), "created_at": time.time(),
                            "revoked_at": None, "experience": experience})
        return key

    def revoke(self, name: str) -> None:
        """Stop `name`'s key from working; what the user stored stays until deleted."""
        self._set_active(name, "revoked_at", time.time())

    def set_experience(self, name: str, experience: bool | None) -> None:
        """Serve `name`'s experience in their prompts (True), never (False), or as the server says (None)."""
        self._set_active(name, "experience", experience)

    def _set_active(self, name: str, field: str, value: Any) -> None:
        """Set `field` on `name`'s active record; a clear error naming the active users if there is none."""
        with self._changing() as records:
            live = [r for r in records if r["name"] == name and r.get("revoked_at") is None]
            if not live:
                known = sorted({r["name"] for r in records if r.get("revoked_at") is None})
                raise UserError(f"there is no active user {name!r}; active users: {', '.join(known) or 'none'}")
            for record in live:
                record[field] = value

    def list(self) -> list[dict[str, Any]]:
        """Every user, active or revoked, without key hashes."""
        return [{k: r.get(k) for k in ("name", "admin", "created_at", "revoked_at", "experience")}
                for r in _read(self.path)]

    @contextlib.contextmanager
    def _changing(self) -> Iterator[list[dict[str, Any]]]:
        """The records, to change in place; written back atomically (0600) under a lock, so two
        `users` commands at once cannot lose each other's change."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = self.path.with_suffix(".lock")
        with open(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            records = _read(self.path)
            yield records
            tmp = self.path.with_suffix(".tmp")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
                json.dump({"users": records}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        records = json.loads(text)["users"]
        readable = all(isinstance(r.get("name"), str) and isinstance(r.get("key_sha256"), str) for r in records)
    except (ValueError, KeyError, TypeError, AttributeError):
        readable = False
    if not readable:
        raise UserError(f"{path} is not a users file this version can read; restore it from a backup or move it "
                        "away and add the users again")
    return records
