"""Checking an `Action` against an environment's tool schemas (shared by the tool-using envs).

An invalid action is the agent's mistake, not the environment's (base.py): the env raises
`InvalidAction` wherever it finds one (an unknown tool, a missing argument, a file that is
not there, an edit whose text does not match) and turns it into an observation with
`info["error"]` in one place, so every message names the problem and what to do instead.

Decisions and why:

- Arguments that arrive as a raw JSON string are decoded here too. `Action.from_tool_call`
  refuses malformed JSON with a ValueError; a driver that wants the agent to see that
  mistake can pass the string through (`Action(name, raw)`) and get the same observation
  as for any other bad call, instead of ending the episode.
- Unknown arguments are refused rather than ignored: an agent that passes `timeout=5` to a
  tool without one should learn that it had no effect.
- A number given for a string parameter is accepted as its text: models often write
  `answer(value=42)`, and the meaning is unambiguous.
"""

from __future__ import annotations

import json
from typing import Any

from openclaw_rl.envs.base import Action

__all__ = ["InvalidAction", "checked_arguments"]

_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list,
}


class InvalidAction(ValueError):
    """The agent's action cannot be carried out; the message is what the agent is shown."""


def checked_arguments(action: Action, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The action's arguments, checked against the schema of the tool it calls."""
    schemas = {tool["function"]["name"]: tool["function"] for tool in tools}
    schema = schemas.get(action.tool)
    if schema is None:
        raise InvalidAction(f"unknown tool {action.tool!r}; the tools are: {', '.join(schemas)}")
    properties: dict[str, dict[str, Any]] = schema["parameters"].get("properties", {})
    signature = f"{action.tool}({', '.join(properties)})"
    arguments: Any = action.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise InvalidAction(f"the arguments of {signature} are not valid JSON ({error}); "
                                "send one JSON object with the argument names as keys") from error
    if not isinstance(arguments, dict):
        raise InvalidAction(f"the arguments of {signature} must be a JSON object, got {type(arguments).__name__}")
    missing = [name for name in schema["parameters"].get("required", []) if name not in arguments]
    if missing:
        raise InvalidAction(f"{signature} is missing the argument {', '.join(missing)}")
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        accepted = ", ".join(properties) or "none"
        raise InvalidAction(f"{signature} has no argument {', '.join(map(repr, unknown))}; it takes: {accepted}")
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        kind = properties[name].get("type", "")
        if kind == "string" and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        expected = _JSON_TYPES.get(kind)
        wrong_bool = isinstance(value, bool) and kind in ("integer", "number")
        if expected is not None and (not isinstance(value, expected) or wrong_bool):
            raise InvalidAction(f"{signature}: {name} must be a {kind}, got {type(value).__name__} {value!r:.60}")
        checked[name] = value
    return checked
