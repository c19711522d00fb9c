"""Actions written as text, for a policy that does not emit tool calls.

    text_action("Let me compute:\\n```python\\nprint(8 * 11)\\n```", ToolCallEnv.tools)
    # -> ("python", {"code": "print(8 * 11)\\n"})
    text_action("So the answer is 88.", ToolCallEnv.tools)   # -> ("answer", {"value": "88"})

SmolLM2-135M, the default model, never writes the tool-call format (docs/experiments.md,
"Agents": 0 of 20 probe replies), but it does write fenced code blocks and "the answer
is N" in a share of its replies. Agent frameworks that let a model act in code (the
CodeAct style) read those as actions; the rollout driver does the same when a reply has
no tool call, so a small model's attempts reach the environment, its observations vary,
and the judge's process votes and the outcomes have something to tell apart.

Decisions and why:

- The rules are keyed on the environment's tool names, not on the environment, so they
  work for a pool lease as for a local env: a fenced block runs as `python(code)` when
  the env has a `python` tool (blocks tagged python/py/python3 or untagged) and as
  `run(command)` when it has a `run` tool (bash/sh/shell/console or untagged); otherwise
  a sentence "the answer is N" / "answer: N" / "#### N" gives `answer(value)` when the
  env has an `answer` tool. Envs without these tools (SWE, GUI) get no text actions.
- The first fenced block counts, and code wins over an answer in the same reply: running
  the code is what the reply proposes first, and answering can follow on the next step.
- The driver records such a step with `"from_text": true` and sends the action back in
  the history as the tool call it stands for, so the observation is a real `tool` message
  (the judge's rules for tool output apply) and the model sees the canonical call in its
  own context. The stored turn keeps the text the model actually sampled.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TEXT_ACTION_HINTS", "text_action", "text_action_hint"]

# (tool, its one argument, fence languages it takes); "" is an untagged fence.
_CODE_TOOLS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("python", "code", frozenset({"python", "py", "python3", ""})),
    ("run", "command", frozenset({"bash", "sh", "shell", "console", "zsh", ""})),
)
_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ANSWER = re.compile(
    r"(?:\bfinal answer\b|\bthe answer is\b|\banswer\s*[:=]|####)\s*(?:is\s*)?[:=]?\s*\**\s*\$?\s*"
    r"(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)",
    re.IGNORECASE,
)
TEXT_ACTION_HINTS = {"python": "a ```python block", "run": "a ```bash block", "answer": "\"The answer is N.\""}


def _tool_names(tools: list[dict[str, Any]]) -> set[str]:
    return {tool.get("function", {}).get("name", "") for tool in tools}


def text_action(text: str, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The (tool, arguments) a reply without a tool call stands for, or None if it stands for none."""
    names = _tool_names(tools)
    for match in _FENCE.finditer(text or ""):
        language, body = match.group(1).lower(), match.group(2)
        if not body.strip():
            continue
        for tool, argument, languages in _CODE_TOOLS:
            if tool in names and language in languages:
                return tool, {argument: body}
    if "answer" in names:
        answers = _ANSWER.findall(text or "")
        if answers:
            return "answer", {"value": answers[-1].replace(",", "")}
    return None


def text_action_hint(tools: list[dict[str, Any]]) -> str:
    """What the driver tells a model that called no tool about the text it may write instead."""
    ways = [hint for tool, hint in TEXT_ACTION_HINTS.items() if tool in _tool_names(tools)]
    return f" You can also write {' or '.join(ways)}." if ways else ""
