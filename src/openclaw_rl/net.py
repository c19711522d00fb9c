"""Small network helpers every layer may use (nothing above `types` in the layering)."""

from __future__ import annotations

import ipaddress
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it; another process could take it
    before the caller binds, which is fine for tests and for a child server we start)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_loopback(host: str) -> bool:
    """Whether binding to `host` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
