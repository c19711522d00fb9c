"""Environments by name: `make_env("terminal", **options)`.

Decisions and why:

- Imports are lazy: the GUI env pulls in a browser driver and SWE a repository toolkit, so
  naming one environment must not import the others, nor fail because another's
  dependency is missing.
- Besides the four built-in names, `module:Class` names any class with a keyword-only,
  argument-free constructor that follows the `Env` protocol, so a project can serve its
  own environment from the pool without registering it here.
"""

from __future__ import annotations

from typing import Any

from openclaw_rl.envs.base import Env
from openclaw_rl.plugins import import_named

__all__ = ["ENVS", "env_class", "make_env"]

ENVS: dict[str, str] = {
    "terminal": "openclaw_rl.envs.terminal:TerminalEnv",
    "toolcall": "openclaw_rl.envs.toolcall:ToolCallEnv",
    "swe": "openclaw_rl.envs.swe:SWEEnv",
    "gui": "openclaw_rl.envs.gui:GUIEnv",
}


def env_class(name: str) -> type:
    """The class `name` stands for; raises ValueError naming the choices when there is none."""
    target = ENVS.get(name) or (name if ":" in name else None)
    if target is None:
        raise ValueError(f"unknown environment {name!r}; choose one of {', '.join(sorted(ENVS))}, "
                         "or name your own class as module:Class")
    cls = import_named(target, f"environment {name!r}")
    if not isinstance(cls, type):
        raise ValueError(f"environment {name!r} cannot be loaded: {target} is not a class")
    return cls


def make_env(name: str, **options: Any) -> Env:
    """A new environment of kind `name`, built with keyword `options` (none gives the defaults)."""
    return env_class(name)(**options)
