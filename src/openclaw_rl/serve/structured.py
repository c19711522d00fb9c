"""What an API request asks the output to match, as one `Constraint` (types.py).

Every API says it its own way: chat's `response_format`, Responses' `text.format`,
Anthropic's `tool_choice: {type: any | tool}`, everyone's `tool_choice: required` or a
named function. Each becomes the same record here, checked (engine/grammar.py) before
the request reaches the engine, so a schema the server cannot enforce is a 400 naming
the problem and never a failure in the middle of a batch. docs/structured-outputs.md.

A forced tool call is the text `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
(chat.py's convention), the arguments under the tool's own parameter schema. When a
request both forces a tool and sets a response format, the tool call wins: the format is
for a final answer, which a forced call is not.
"""

from __future__ import annotations

from typing import Any

from openclaw_rl.chat import TOOL_CALL_OPEN
from openclaw_rl.engine.grammar import ConstraintError, check
from openclaw_rl.types import Constraint

TOOL_CALL_CLOSE = "</tool_call>"
ANY_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}  # json_object: open, unlike a schema


def response_format_constraint(value: dict[str, Any] | None, where: str = "response_format") -> Constraint | None:
    """An OpenAI response format: text (None), json_object (any object) or json_schema (its schema).
    Chat nests the schema (`json_schema.schema`); Responses' `text.format` has it at the top."""
    kind = (value or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return checked(Constraint(ANY_OBJECT))
    if kind != "json_schema":
        raise ValueError(f"{where} type {kind!r} is not supported; use text, json_object or json_schema")
    spec = value.get("json_schema", value) if isinstance(value.get("json_schema"), dict) else value
    schema = spec.get("schema")
    if schema is None:
        return checked(Constraint(ANY_OBJECT))  # OpenAI's default when no schema is given: any JSON object
    if not isinstance(schema, dict):
        raise ValueError(f"{where} json_schema.schema must be a JSON object, got {type(schema).__name__}")
    return checked(Constraint(schema))


def tool_constraint(tools: list[dict[str, Any]] | None, tool_choice: Any) -> Constraint | None:
    """`required` (any of the tools) or a named function (that one): one call under its
    parameter schema. `auto`, `none` and no choice constrain nothing."""
    if tool_choice in (None, "auto", "none"):
        return None
    functions = [t.get("function", t) for t in tools or ()]
    if not functions:
        raise ValueError(f"tool_choice {_describe(tool_choice)} needs tools to call; the request has none")
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or tool_choice).get("name")
        chosen = [f for f in functions if f.get("name") == name]
        if not chosen:
            raise ValueError(f"tool_choice names the function {name!r}, which is not among the tools "
                             f"{[f.get('name') for f in functions]}")
        functions = chosen
    calls = [_call_schema(f) for f in functions]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return checked(Constraint(schema, prefix=TOOL_CALL_OPEN, suffix=TOOL_CALL_CLOSE))


def request_constraint(response_format: dict[str, Any] | None, tools: list[dict[str, Any]] | None,
                       tool_choice: Any) -> Constraint | None:
    return tool_constraint(tools, tool_choice) or response_format_constraint(response_format)


def checked(constraint: Constraint) -> Constraint:
    """`constraint`, or a ValueError (a 400) naming what the server cannot enforce."""
    try:
        check(constraint)
    except ConstraintError as error:
        raise ValueError(str(error)) from error
    return constraint


def _call_schema(function: dict[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": function.get("name")}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def _describe(tool_choice: Any) -> str:
    return repr(tool_choice) if isinstance(tool_choice, str) else "naming a function"
