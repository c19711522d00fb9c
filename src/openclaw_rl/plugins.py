"""`module:ATTR` names: how a user plugs in a method, an environment, ... from outside the package."""

from __future__ import annotations

import importlib
from typing import Any


def import_named(name: str, what: str) -> Any:
    """The object `name` ("module:ATTR") names; ValueError saying what could not be loaded and why.
    `what` names the kind of thing ("method 'x:Y'"), for the message."""
    module_name, colon, attribute = name.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"{what} cannot be loaded: {name!r} is not of the form module:ATTR")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{what} cannot be loaded: importing {module_name} failed: {error}") from error
    if not hasattr(module, attribute):
        raise ValueError(f"{what} cannot be loaded: {module_name} has no {attribute!r}")
    return getattr(module, attribute)
