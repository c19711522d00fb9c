"""The terminal environment: small shell tasks in a sandbox, checked by a script.

    env = TerminalEnv()
    task = env.tasks("train")[0]
    observation = env.reset(task)                      # the files the agent starts with
    env.step(Action("run", {"command": "ls -l"}))      # observation: the command's output
    env.step(Action("submit"))                          # done
    env.evaluate()                                      # Outcome(success=..., detail=check output)

Tasks ship in `envs/tasks/terminal.json`; each has an id, a prompt, a split, the files to
seed, an optional setup command, a check script (exit 0 = solved) and a reference
`solution` command that the tests run to prove the task is solvable and not solved from
the start.

Decisions and why:

- Two tools only, `run(command)` and `submit()`: the smallest interface that lets a model
  do anything a shell can and say when it is finished; a small model copes better with
  fewer tools.
- Each `run` is a fresh `bash -c` in /work (the sandbox), so `cd` and shell variables do
  not carry over; the tool description says so. Keeping no shell process between steps
  means nothing the agent starts can linger, and each step is reproducible from the files.
- `reset` returns the starting state (the working directory and its files), not the
  prompt: the prompt is the task's first user message, and the observation is what the
  agent would see by looking around.
- `evaluate` runs the check script, held on the host, inside the same sandbox and
  judges only the files: what the agent said it did does not count. The check runs from
  a fresh shell with a fixed PATH, so the agent cannot shadow the tools it uses.
- Output is capped at 2,000 characters per stream by default (not the sandbox's 8,000)
  because the policy is a small model with a short context.
- `level="basic"` loads `terminal-basic.json` instead: one-command tasks (make, copy,
  move, delete a file) whose prompts show the command with placeholders (`cp FROM TO`)
  and ask for a ```bash block, for a model too small for the standard ones, so that
  outcome rewards can vary (docs/agents.md, "Levels", with the measured base success).
- `level="starter"` is the basic tasks with the command written out for this task
  (`mkdir backup`, not `mkdir NAME`): the first rung of a curriculum for a model that
  copies placeholders verbatim (SmolLM2-135M solved 0 of 40 basic episodes that way). Its
  task ids say the level, so no store mixes its turns up with the basic ones.
- A setup command that fails is the environment's fault (`EnvError`), never the agent's.
"""

from __future__ import annotations

import functools
import json
import logging
from importlib import resources
from typing import Any

from openclaw_rl.envs.base import Action, EnvError, Outcome, Split, StepResult, Task, tool_schema
from openclaw_rl.envs.sandbox import SANDBOX_WORKDIR, Limits, Sandbox, SandboxedEnv

__all__ = ["TerminalEnv", "load_tasks"]

logger = logging.getLogger(__name__)

TASK_FILES = {"standard": "terminal.json", "basic": "terminal-basic.json"}  # by level, in openclaw_rl/envs/tasks/
LEVELS = (*TASK_FILES, "starter")  # starter: the basic tasks, each prompt with its own command written out
DEFAULT_LIMITS = Limits(wall_s=10.0, max_output_chars=2000)
_TASK_KEYS = {"id", "prompt", "split", "files", "setup", "check", "solution"}


def load_tasks(split: Split | None = None, level: str = "standard") -> list[Task]:
    """The shipped terminal tasks of `level` (standard, basic or starter), all or one split;
    each Task.data holds files, setup, check, solution."""
    if level not in LEVELS:
        raise ValueError(f"unknown terminal level {level!r}; choose one of {', '.join(LEVELS)}")
    tasks = _all_tasks(TASK_FILES["basic" if level == "starter" else level])
    if level == "starter":
        tasks = tuple(map(_written_out, tasks))
    return [task for task in tasks if split is None or task.split == split]


def _written_out(task: Task) -> Task:
    """A basic task whose prompt shows the task's own command (its solution) in place of the
    command with placeholders."""
    statement = task.prompt.split("\n\n", 1)[0]
    prompt = (f"{statement}\n\nThe command that does it is:\n```bash\n{task.data['solution']}\n```\n"
              "Write that command in a ```bash block.")
    return Task(task.id.replace("basic-", "starter-", 1), prompt, task.split, task.data)


@functools.cache
def _all_tasks(name: str) -> tuple[Task, ...]:
    text = resources.files("openclaw_rl.envs").joinpath("tasks", name).read_text(encoding="utf-8")
    tasks = tuple(_task_from_record(record, name) for record in json.loads(text))
    ids = [task.id for task in tasks]
    duplicates = sorted({task_id for task_id in ids if ids.count(task_id) > 1})
    if duplicates:
        raise ValueError(f"envs/tasks/{name} repeats task ids {duplicates}; ids must be unique")
    return tasks


def _task_from_record(record: dict[str, Any], name: str) -> Task:
    where = f"terminal task {record.get('id')!r} in envs/tasks/{name}"
    missing = {"id", "prompt", "split", "check", "solution"} - set(record)
    if missing:
        raise ValueError(f"{where} lacks {sorted(missing)}")
    unknown = set(record) - _TASK_KEYS
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; known: {sorted(_TASK_KEYS)}")
    if record["split"] not in ("train", "eval"):
        raise ValueError(f"{where} has split {record['split']!r}; use 'train' or 'eval'")
    files = record.get("files", {})
    if not all(isinstance(path, str) and isinstance(text, str) for path, text in files.items()):
        raise ValueError(f"{where}: files must map relative paths to text")
    data = {
        "files": dict(files),
        "setup": record.get("setup"),
        "check": record["check"],
        "solution": record["solution"],
    }
    return Task(record["id"], record["prompt"], record["split"], data)


class TerminalEnv(SandboxedEnv):
    """Shell tasks in a bubblewrap sandbox; one episode at a time (see the module docstring)."""

    name = "terminal"
    tools = [
        tool_schema(
            "run",
            f"Run a bash command in your working directory {SANDBOX_WORKDIR} and see its output. "
            "Each command starts fresh in that directory (cd does not carry over); there is no network.",
            command=("string", "the shell command, e.g. `ls -l` or `grep -c ERROR app.log > errors.txt`"),
        ),
        tool_schema("submit", "Say that you have finished the task; it is then checked and the episode ends."),
    ]

    def __init__(self, *, tasks: list[Task] | None = None, limits: Limits = DEFAULT_LIMITS, max_steps: int = 20,
                 level: str = "standard") -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.limits = limits
        self.max_steps = max_steps
        self.level = level
        self._tasks = load_tasks(level=level) if tasks is None else list(tasks)
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._steps = 0
        self._done = False

    # ---- the protocol --------------------------------------------------------------------

    def tasks(self, split: Split | None = None) -> list[Task]:
        return [task for task in self._tasks if split is None or task.split == split]

    def reset(self, task: Task) -> str:
        """A fresh sandbox seeded with the task's files and setup; returns what the directory holds."""
        self._close_sandbox()
        self._sandbox = Sandbox(self.limits, files=task.data.get("files") or {})
        self._task, self._steps, self._done = task, 0, False
        logger.debug("terminal task %s in %s", task.id, self._sandbox.root)
        setup = task.data.get("setup")
        if setup:
            result = self._sandbox.run(setup)
            if result.exit_code != 0 or result.timed_out:
                raise EnvError(f"setup of terminal task {task.id!r} failed: {result.text()}")
        listing = self._sandbox.run("find . -mindepth 1 -not -path '*/.*' | sed 's|^\\./||' | sort | head -n 50")
        files = listing.stdout.strip()
        return f"You are in {SANDBOX_WORKDIR}." + (f" It contains:\n{files}" if files else " It is empty.")

    def step(self, action: Action) -> StepResult:
        sandbox = self._live_sandbox()
        if self._done:
            return StepResult("Error: the episode is over; reset to start another.", True, {"error": "episode is over"})
        self._steps += 1
        result = self._act(sandbox, action)
        if not result.done and self._steps >= self.max_steps:
            self._done = True
            note = f"\n[step limit of {self.max_steps} reached: the episode is over]"
            return StepResult(result.observation + note, True, {**result.info, "truncated": True})
        self._done = result.done
        return result

    def evaluate(self) -> Outcome:
        """Run the task's check script in the sandbox: exit 0 is success; detail is its output."""
        sandbox = self._live_sandbox()
        assert self._task is not None
        result = sandbox.run(self._task.data["check"])
        success = result.exit_code == 0 and not result.timed_out
        output = result.text()
        if success:
            detail = "check passed" + ("" if output == "(no output)" else f": {output}")
        else:
            detail = f"check failed: {output}"
        return Outcome(success, 1.0 if success else 0.0, detail)




    # ---- helpers -------------------------------------------------------------------------

    def _act(self, sandbox: Sandbox, action: Action) -> StepResult:
        if action.tool == "submit":
            if action.arguments:
                return _invalid(f"submit takes no arguments, got {sorted(action.arguments)}")
            return StepResult("Submitted; the task will now be checked.", True)
        if action.tool != "run":
            return _invalid(f"unknown tool {action.tool!r}; the tools are run(command) and submit()")
        unexpected = sorted(set(action.arguments) - {"command"})
        if unexpected:
            return _invalid(f"run takes one argument, command; unexpected {unexpected}")
        command = action.arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return _invalid(f"run needs a non-empty string command, got {command!r}")
        result = sandbox.run(command)
        return StepResult(result.text(), False, {"exit_code": result.exit_code, "timed_out": result.timed_out})

    def _live_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("no episode: call reset(task) first")
        return self._sandbox



def _invalid(message: str) -> StepResult:
    return StepResult(f"Error: {message}", False, {"error": message})
