"""The environment protocol every agent environment follows (docs/method.md §4).

    reset(task) -> first observation
    step(action) -> StepResult(observation, done, info)
    evaluate() -> Outcome (success, score, detail)
    close()

An agent acts through tool calls: each environment names its tools as OpenAI function
schemas (`tools`), and an `Action` is one call of one of them. The rollout driver passes
`tools` to the policy's chat API, turns each returned tool call into an `Action`, and
sends the observation back as the tool message, so the observation is the next state of
the turn that produced the action.

Decisions and why:

- Observations are text (plus an optional PNG for the GUI), because the policy is a
  language model and the observation is what the next turn's prompt will hold.
- A bad action (an unknown tool, a missing argument) is not an exception: it returns an
  observation that names the problem, with `info["error"]` set, and the episode goes on.
  A real agent makes such mistakes and must see what they were; that is data, not a crash.
- `evaluate()` is separate from `step`: the outcome is checked from the environment's
  state (a script, the hidden tests, the page), never from what the agent claims.
- Tasks ship in the repository and carry their split, so training and evaluation never
  share a task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["Action", "Env", "EnvError", "Outcome", "StepResult", "Task", "tool_schema"]

Split = Literal["train", "eval"]


class EnvError(RuntimeError):
    """The environment itself broke (not the agent's action): the pool replaces it."""


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str  # what the agent is asked to do: the first user message
    split: Split = "train"
    data: dict[str, Any] = field(default_factory=dict)  # whatever the environment needs to set it up and check it


@dataclass(frozen=True)
class Action:
    """One tool call: the tool's name and its arguments."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tool_call(cls, name: str, arguments: str | dict[str, Any]) -> Action:
        """From an OpenAI tool call, whose arguments arrive as a JSON string."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as error:
                raise ValueError(f"arguments of {name!r} are not valid JSON: {error}") from error
        if not isinstance(arguments, dict):
            raise ValueError(f"arguments of {name!r} must be a JSON object, got {type(arguments).__name__}")
        return cls(name, arguments)


@dataclass(frozen=True)
class StepResult:
    observation: str
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # "error" when the action was invalid
    image_png: bytes | None = None  # a screenshot, where the environment has one


@dataclass(frozen=True)
class Outcome:
    success: bool
    score: float  # in [0, 1]; 1.0 for success unless the environment gives partial credit
    detail: str = ""  # why: the failing check, the test output


@runtime_checkable
class Env(Protocol):
    name: str
    tools: list[dict[str, Any]]  # OpenAI function-tool schemas

    def tasks(self, split: Split | None = None) -> list[Task]: ...

    def reset(self, task: Task) -> str: ...

    def step(self, action: Action) -> StepResult: ...

    def evaluate(self) -> Outcome: ...

    def close(self) -> None: ...


def tool_schema(name: str, description: str, **parameters: tuple[str, str]) -> dict[str, Any]:
    """An OpenAI function-tool schema; each parameter is (json type, description), all required.

    >>> tool_schema("run", "Run a shell command.", command=("string", "the command"))["function"]["name"]
    'run'
    """
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {key: {"type": kind, "description": text} for key, (kind, text) in parameters.items()},
                "required": list(parameters),
            },
        },
    }
