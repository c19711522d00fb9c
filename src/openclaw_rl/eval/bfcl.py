"""Tool calling as a retention probe: a fixed sample of the Berkeley Function-Calling Leaderboard.

    bfcl_items(per_category=8)          seeded items of BFCL's single-turn AST categories
    bfcl_probe(tokenizer, per_category) the RetentionProbe (what --gate-retention-bfcl 8 sets)
    calls_correct(item, calls)          the checker: do (name, arguments) pairs do what the item allows?

A user who teaches the model a style must not cost it its tool calls. BFCL (Patil et al.,
gorilla.cs.berkeley.edu) is the outside benchmark peers report tool calling on; its data
ship in the PyPI package `bfcl-eval`, installed by `make install` with --no-deps (its own
dependencies are the SDKs of every model it can call, none of which this probe needs). We
read its JSON files and nothing else: the package's checker imports its model handlers,
and with them those SDKs (`import bfcl_eval.eval_checker.ast_eval.ast_checker` fails on
`tree_sitter` under --no-deps), so the checker here is our own.

Each item is asked the way a client would ask the server: the question as the messages,
the item's functions as OpenAI tools (BFCL's Python type names mapped to JSON Schema's),
rendered by `chat.render_prompt`; the answer is read by `chat.parse_tool_calls`, as the
server reads a reply.

The checker, BFCL's AST rules in simplified form:

- simple, multiple, parallel: exactly as many calls as the answer key has. Parallel calls
  may come in any order (each expected call is matched to a different emitted one).
- A call matches an expected one when it names the same function, gives only parameters
  the function declares and the key lists, gives every required one, and each value is
  among the key's allowed values; a parameter left out is fine only where the key allows
  "" (BFCL's mark of "may be omitted").
- Values: strings compare case-insensitively, ignoring spaces and the characters
  , . / - _ * ^ (and ' counts as "), so "New York, NY" matches "new york ny"; numbers by
  value (5 matches 5.0), except that a float given for an integer parameter fails; a
  boolean only matches a boolean (true is not 1); lists element by element in order; a
  dict key by key, each against its own allowed values.
- irrelevance: right when the answer makes no call at all (none of the tools fits).
- Left out from BFCL's: its "variable" case (a value of another type than the declared one
  accepted when the answer key holds it as a name) and its per-model renaming of dotted
  function names (the tools are rendered with the names as BFCL writes them).

Decisions and why:

- `simple` is BFCL's simple_python (java and javascript call in those languages' syntax,
  not JSON), and the live_* categories are left out: the four non-live AST categories are
  the ones the issue names and the ones BFCL's summary starts from.
- The sample: each category's items shuffled by an RNG of its own ("bfcl:CATEGORY"), the
  first N taken, so a larger N keeps the smaller one's items. 8 per category (32 items)
  by default: the sign test of train/retention.py can reject on 32, and the cost is in
  docs/safe-updates.md. Parallel answers are 2 to 8 calls of ~30 tokens each: give the
  gate the tokens for them (--gate-max-new-tokens), or a cut answer counts as wrong for
  the served and the candidate versions alike.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from openclaw_rl.chat import call_parts, parse_tool_calls, render_prompt
from openclaw_rl.config import ConfigError
from openclaw_rl.eval.retention import RetentionProbe
from openclaw_rl.types import Message

__all__ = ["BFCL_PIN", "CATEGORIES", "BfclItem", "BfclMissing", "as_tool", "bfcl_items", "bfcl_probe",
           "calls_correct", "calls_of", "data_dir"]

BFCL_PACKAGE = "bfcl_eval"
BFCL_PIN = "bfcl-eval==2026.3.23"  # the release whose files these names are; the Makefile installs it
CATEGORIES = {"simple": "BFCL_v4_simple_python.json", "multiple": "BFCL_v4_multiple.json",
              "parallel": "BFCL_v4_parallel.json", "irrelevance": "BFCL_v4_irrelevance.json"}
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}  # BFCL's Python names; "any": no type
_IGNORED = re.compile(r"[ ,./\-_*^]")

Answer = dict[str, dict[str, list[Any]]]  # {function name: {parameter: allowed values}}, one per expected call


class BfclMissing(ConfigError):
    """The BFCL probe was asked for and the package with its data is not installed."""


@dataclass(frozen=True)
class BfclItem:
    """One BFCL question: its messages, the functions offered, and the calls that answer it ([]: none)."""

    id: str
    category: str
    messages: list[Message]
    functions: list[dict[str, Any]]
    answers: list[Answer]


def data_dir() -> Path:
    """The data folder of the installed bfcl-eval (found without importing the package)."""
    spec = importlib.util.find_spec(BFCL_PACKAGE)
    folder = Path(spec.origin).parent / "data" if spec is not None and spec.origin else None
    if folder is None or not (folder / CATEGORIES["simple"]).is_file():
        where = "is not installed" if folder is None else f"has no {CATEGORIES['simple']} in {folder}"
        raise BfclMissing(f"the BFCL retention probe (--gate-retention-bfcl) reads the data of the PyPI package "
                          f"bfcl-eval, which {where}: pip install --no-deps {BFCL_PIN} (make install does), or "
                          f"set --gate-retention-bfcl 0")
    return folder


def bfcl_items(per_category: int = 8, categories: tuple[str, ...] = tuple(CATEGORIES)) -> list[BfclItem]:
    """`per_category` items of each category, seeded: each category's stream of its own."""
    if per_category < 1:
        raise ValueError(f"the BFCL retention probe needs at least one item per category, got {per_category}")
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {unknown}; these are read: {', '.join(CATEGORIES)}")
    items = []
    for category in categories:
        pool = _category(category)
        order = list(range(len(pool)))
        random.Random(f"bfcl:{category}").shuffle(order)
        items += [pool[i] for i in order[:per_category]]
    return items


@cache
def _category(category: str) -> tuple[BfclItem, ...]:
    folder = data_dir()
    questions = _json_lines(folder / CATEGORIES[category])
    key_file = folder / "possible_answer" / CATEGORIES[category]
    keys = {row["id"]: row["ground_truth"] for row in _json_lines(key_file)} if category != "irrelevance" else {}
    return tuple(BfclItem(row["id"], category, row["question"][0], row["function"], keys.get(row["id"], []))
                 for row in questions)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def as_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function as an OpenAI tool: its parameters' type names in JSON Schema's."""
    return {"type": "function", "function": _schema(function)}


def _schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items()}
    kind = out.get("type")
    if kind == "any":
        del out["type"]
    elif isinstance(kind, str) and kind in _JSON_SCHEMA_TYPES:
        out["type"] = _JSON_SCHEMA_TYPES[kind]
    return out


def bfcl_probe(tokenizer: Any, per_category: int = 8, categories: tuple[str, ...] = tuple(CATEGORIES),
               ) -> RetentionProbe:
    """The probe: each item's messages with its functions as tools, the answer's calls checked."""
    items = bfcl_items(per_category, categories)
    prompts = [render_prompt(tokenizer, item.messages, [as_tool(f) for f in item.functions], None) for item in items]
    checks = [lambda text, item=item: calls_correct(item, calls_of(text)) for item in items]
    return RetentionProbe("bfcl", prompts, checks)


def calls_of(text: str) -> list[tuple[Any, Any]]:
    """(name, arguments) of each tool call in a reply, read as the server reads one."""
    return [call_parts(call) for call in parse_tool_calls(text)[1]]


def calls_correct(item: BfclItem, calls: list[tuple[Any, Any]]) -> bool:
    """Whether the calls answer the item (the rules in the module docstring)."""
    if not item.answers:
        return not calls
    if len(calls) != len(item.answers):
        return False
    functions = {f["name"]: f for f in item.functions}
    return _matched(list(calls), item.answers, functions)


def _matched(calls: list[tuple[Any, Any]], answers: list[Answer], functions: dict[str, dict]) -> bool:
    """Each expected call matched by a different emitted one, in any order (a small search: at most 8)."""
    if not answers:
        return True
    first, rest = answers[0], answers[1:]
    return any(_call_matches(call, first, functions) and _matched(calls[:i] + calls[i + 1:], rest, functions)
               for i, call in enumerate(calls))


def _call_matches(call: tuple[Any, Any], answer: Answer, functions: dict[str, dict]) -> bool:
    name, arguments = call
    (expected, allowed), = answer.items()
    if name != expected or not isinstance(arguments, dict) or expected not in functions:
        return False
    schema = functions[expected].get("parameters", {})
    declared = schema.get("properties", {})
    if any(p not in declared or p not in allowed for p in arguments):
        return False
    if any(p not in arguments for p in schema.get("required", [])):
        return False
    return all(_value_ok(arguments[p], values, declared[p].get("type")) if p in arguments else "" in values
               for p, values in allowed.items())


def _value_ok(value: Any, allowed: list[Any], declared: str | None) -> bool:
    if declared == "integer" and isinstance(value, float):
        return False
    return any(_same(value, expected) for expected in allowed)


def _same(value: Any, expected: Any) -> bool:
    """One value against one allowed value (a dict's keys each against their own allowed values)."""
    if isinstance(expected, bool) or expected is None:
        return value is expected
    if isinstance(expected, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) and value == expected
    if isinstance(expected, str):
        return isinstance(value, str) and _normal(value) == _normal(expected)
    if isinstance(expected, list):
        return (isinstance(value, list) and len(value) == len(expected)
                and all(_same(v, e) for v, e in zip(value, expected)))
    if isinstance(expected, dict):
        return (isinstance(value, dict)
                and all(k in expected and any(_same(v, a) for a in expected[k]) for k, v in value.items())
                and all(k in value or "" in options for k, options in expected.items()))
    return False


def _normal(text: str) -> str:
    return _IGNORED.sub("", text).lower().replace("'", '"')
