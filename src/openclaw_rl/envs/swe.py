"""The SWE environment: fix a bug in a tiny Python repository; outcome = hidden tests pass.

    env = SWEEnv()
    task = env.tasks("train")[0]
    env.reset(task)                                  # the issue, as a user reported it
    env.step(Action("run_tests"))                    # the visible tests fail
    env.step(Action("edit_file", {"path": ..., "old": ..., "new": ...}))
    env.step(Action("submit"))                       # done
    env.evaluate()                                   # the hidden tests, in a fresh sandbox

Each task is a directory under `tasks/swe/<repo>/`, shipped as package data:

    task.json   split ("train" | "eval"), the issue text, and the reference `fix`
                (a list of {path, old, new} edits) that the tests check every task with
    repo/       what the agent gets: the package and tests/test_*.py, which fail as shipped
    hidden/     further tests, copied in only at evaluation, never into the agent's copy

Decisions and why:

- **Tests are plain `unittest`**, run by a small runner of our own (`_RUNNER`), not
  pytest: commands run under the sandbox's `/usr/bin/python3`, which has no third-party
  packages (the project's venv is deliberately not visible inside), so the tasks need
  nothing but the standard library.
- **The outcome is checked in a fresh sandbox** holding the agent's files minus its
  `tests/` directory, plus the shipped visible tests and the hidden tests. Edits to the
  tests therefore count for nothing, and nothing the agent left running in its own
  sandbox can touch the check.
- **The runner resists the simple ways to fake a pass.** The repository goes on the end
  of `sys.path`, so a planted `unittest.py` cannot stand in for the standard module; and
  success needs a final line carrying a nonce drawn for that one evaluation, so code that
  exits early with status 0 (`os._exit(0)` in the package) does not pass. Code that
  patches `unittest` from inside the package is not guarded against.
- **Tasks carry everything in `Task.data`** (the files, the hidden tests, the fix), so a
  task can be sent over the pool's HTTP API and reset on another machine as it is.
- **`search` runs grep inside the sandbox**, not a regex on the host: an agent's pattern
  could backtrack for minutes, and inside it runs under the sandbox's wall-clock limit.
  It takes grep's basic regular expressions, where most text matches itself.
- Files are read and written through `Sandbox.read`/`write`, which refuse paths and
  planted symlinks that leave the sandbox directory; host-side listings skip symlinks.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shlex
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from openclaw_rl.envs.actions import InvalidAction, checked_arguments
from openclaw_rl.envs.base import Action, EnvError, Outcome, Split, StepResult, Task, tool_schema
from openclaw_rl.envs.sandbox import Limits, RunResult, Sandbox, SandboxedEnv, SandboxPathError

__all__ = ["SWEEnv", "check_files", "load_tasks", "replace_unique"]

PROMPT = """You are working on `{repo}`, a small Python package. A user reported this issue:

{issue}

Fix the bug in the package's source code. You can list, read, search and edit the files, and \
run the tests in tests/ (plain unittest, standard library only). Your fix is checked with \
further tests you cannot see, so fix the cause, not only the example in the issue. Call \
submit() when you are done."""

MAX_FILE_CHARS = 20_000  # read_file shows at most this much of a file
MAX_WRITE_CHARS = 200_000  # the largest file write_file or edit_file will produce
MAX_LISTED_FILES = 200
_MAX_EVAL_FILE_BYTES = 1_000_000  # larger files of the agent's are left out of the evaluation copy

# Runs unittest test files by path; `{paths}` None means every tests/test*.py. Fed to
# python3 on stdin, so sys.path[0] is the cwd: it is moved to the end first (see above).
_RUNNER = """\
import os, sys
_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p not in ("", ".", _here)] + [_here]
import glob, importlib.util, traceback, unittest
paths = {paths!r}
if paths is None:
    paths = sorted(glob.glob("tests/test*.py"))
suite, broken = unittest.TestSuite(), 0
for path in paths:
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException:
        broken += 1
        print(f"ERROR: {{path}} could not be imported:")
        traceback.print_exc(file=sys.stdout)
        continue
    suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
if not paths:
    print("no test files found (tests/test*.py)")
result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
passed = result.wasSuccessful() and result.testsRun > 0 and not broken
if {tag!r}:
    print({tag!r}, "passed" if passed else "failed", f"ran={{result.testsRun}}")
sys.exit(0 if passed else 1)
"""


def _runner(paths: list[str] | None, tag: str = "") -> str:
    return _RUNNER.format(paths=paths, tag=tag)


def replace_unique(text: str, old: str, new: str, path: str) -> str:
    """`text` with the one occurrence of `old` replaced; InvalidAction when there is not exactly one."""
    if not old:
        raise InvalidAction(f"edit_file({path!r}): `old` is empty; give the exact text to replace")
    count = text.count(old)
    if count == 0:
        hint = " (mind the indentation)" if old.strip() in text else ""
        raise InvalidAction(f"edit_file({path!r}): the `old` text was not found{hint}; read_file the file "
                            "and copy the text exactly, including whitespace")
    if count > 1:
        lines, start = [], 0
        for _ in range(count):
            start = text.index(old, start)
            lines.append(str(text.count("\n", 0, start) + 1))
            start += 1
        raise InvalidAction(f"edit_file({path!r}): the `old` text occurs {count} times (at lines "
                            f"{', '.join(lines)}); include more of the surrounding lines so it is unique")
    return text.replace(old, new, 1)


# -- tasks -----------------------------------------------------------------------------


def _read_tree(folder: Traversable, prefix: str = "") -> dict[str, str]:
    files: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda entry: entry.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            files |= _read_tree(entry, f"{prefix}{entry.name}/")
        else:
            files[f"{prefix}{entry.name}"] = entry.read_text(encoding="utf-8")
    return files


@functools.cache
def load_tasks() -> tuple[Task, ...]:
    """Every shipped SWE task, read from the package's `tasks/swe/` folder."""
    tasks = []
    root = resources.files("openclaw_rl.envs") / "tasks" / "swe"
    if not root.is_dir():
        raise EnvError(f"the SWE tasks are missing from this installation ({root}): they are package data, "
                       "shipped by pyproject's [tool.setuptools.package-data]; reinstall the package")
    for folder in sorted((entry for entry in root.iterdir() if entry.is_dir()), key=lambda entry: entry.name):
        spec = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        if spec.get("split") not in ("train", "eval") or not spec.get("issue") or not spec.get("fix"):
            raise ValueError(f"tasks/swe/{folder.name}/task.json needs split (train | eval), issue and fix; "
                             f"got keys {sorted(spec)} with split {spec.get('split')!r}")
        hidden = {f"tests/{name}": text for name, text in _read_tree(folder / "hidden").items()}
        tasks.append(Task(
            id=f"swe-{folder.name}",
            prompt=PROMPT.format(repo=folder.name, issue=spec["issue"]),
            split=spec["split"],
            data={"repo": folder.name, "files": _read_tree(folder / "repo"), "hidden_tests": hidden,
                  "fix": spec["fix"]},
        ))
    return tuple(tasks)


# -- checking --------------------------------------------------------------------------


def check_files(files: dict[str, str], test_paths: list[str], limits: Limits = Limits()) -> Outcome:
    """Run the unittest files `test_paths` over `files` in a fresh sandbox: success when all pass."""
    tag = f"openclaw-check-{secrets.token_hex(8)}"
    with Sandbox(limits, files=files) as box:
        try:
            result = box.run_python(_runner(test_paths, tag))
        except OSError as error:
            raise EnvError(f"the sandbox could not run the tests: {error}") from error
    summary = next((line for line in result.stdout.splitlines() if line.startswith(tag)), "")
    ran = summary.rpartition("ran=")[2]
    if result.exit_code == 0 and not result.timed_out and summary.split()[1:2] == ["passed"]:
        return Outcome(True, 1.0, f"all {ran} hidden tests passed")
    output = result.text().replace(summary, "").strip()
    return Outcome(False, 0.0, f"the hidden tests failed:\n{output[-4000:]}")


# -- the environment -------------------------------------------------------------------


class SWEEnv(SandboxedEnv):
    """Tiny repositories with one bug each; the agent edits files until the hidden tests pass."""

    name = "swe"
    tools = [
        tool_schema("list_files", "List the files of the repository."),
        tool_schema("read_file", "Show the text of a file.",
                    path=("string", "the file's path relative to the repository root, e.g. pkg/module.py")),
        tool_schema("search", "Find the lines that match a pattern in all files (grep -n, basic regular "
                              "expressions: plain text matches itself, except . * [ ] ^ $ \\).",
                    pattern=("string", "the text or pattern to look for")),
        tool_schema("edit_file", "Replace one exact snippet of a file with new text. The snippet must occur "
                                 "exactly once; include surrounding lines to make it unique.",
                    path=("string", "the file's path relative to the repository root"),
                    old=("string", "the exact text to replace, including indentation"),
                    new=("string", "the text to put in its place")),
        tool_schema("write_file", "Create a file, or replace a file's whole content.",
                    path=("string", "the file's path relative to the repository root"),
                    content=("string", "the complete new content of the file")),
        tool_schema("run_tests", "Run the tests in tests/ (unittest) and show the output."),
        tool_schema("submit", "Submit the repository as it is now. This ends the episode."),
    ]

    def __init__(self, *, max_steps: int = 40, limits: Limits | None = None) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_steps = max_steps
        self.limits = limits or Limits(wall_s=30.0)
        self._task: Task | None = None
        self._sandbox: Sandbox | None = None
        self._steps = 0
        self._done = False

    def tasks(self, split: Split | None = None) -> list[Task]:
        return [task for task in load_tasks() if split is None or task.split == split]

    def reset(self, task: Task) -> str:
        if not isinstance(task.data.get("files"), dict) or not isinstance(task.data.get("hidden_tests"), dict):
            raise ValueError(f"task {task.id!r} needs data['files'] and data['hidden_tests'] (path -> text); "
                             "SWE tasks come from SWEEnv.tasks()")
        self._close_sandbox()
        self._task, self._steps, self._done = task, 0, False
        self._sandbox = Sandbox(self.limits, files=task.data["files"])
        return task.prompt

    def step(self, action: Action) -> StepResult:
        if self._task is None or self._sandbox is None:
            raise RuntimeError("step() before reset(): reset the environment with a task first")
        if self._done:
            message = "The episode is over; reset with a new task to go on."
            return StepResult(message, done=True, info={"error": message})
        self._steps += 1
        try:
            arguments = checked_arguments(action, self.tools)
            result = getattr(self, f"_tool_{action.tool}")(**arguments)
        except InvalidAction as error:
            result = StepResult(f"Error: {error}", info={"error": str(error)})
        except OSError as error:  # the sandbox itself failed, not the agent
            raise EnvError(f"{action.tool} failed in the sandbox: {error}") from error
        if not result.done and self._steps >= self.max_steps:
            result = StepResult(f"{result.observation}\n[step limit of {self.max_steps} reached: the episode is over]",
                                done=True, info={**result.info, "truncated": True})
        self._done = result.done
        return result

    def evaluate(self) -> Outcome:
        """The hidden tests over the agent's files (its tests/ replaced by the shipped ones)."""
        if self._task is None or self._sandbox is None:
            raise RuntimeError("evaluate() before reset(): there is no episode to evaluate")
        files = {path: self._sandbox.read(path) for path in self._files()
                 if not path.startswith("tests/")
                 and (self._sandbox.root / path).stat().st_size <= _MAX_EVAL_FILE_BYTES}
        files |= {path: text for path, text in self._task.data["files"].items() if path.startswith("tests/")}
        files |= self._task.data["hidden_tests"]
        return check_files(files, sorted(self._task.data["hidden_tests"]), self.limits)





    # -- the tools -------------------------------------------------------------------------

    def _files(self) -> list[str]:
        """Regular files of the agent's copy, sorted; symlinks and __pycache__ are left out."""
        assert self._sandbox is not None
        root = self._sandbox.root
        found = []
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(name for name in subfolders
                                   if name != "__pycache__" and not os.path.islink(os.path.join(folder, name)))
            for name in sorted(names):
                path = Path(folder, name)
                if path.is_file() and not path.is_symlink():
                    found.append(path.relative_to(root).as_posix())
        return found

    def _read(self, path: str) -> str:
        assert self._sandbox is not None
        try:
            return self._sandbox.read(path)
        except (SandboxPathError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
            raise InvalidAction(_path_problem(path, error)) from error

    def _write(self, path: str, text: str) -> None:
        assert self._sandbox is not None
        if len(text) > MAX_WRITE_CHARS:
            raise InvalidAction(f"{path}: {len(text)} characters is more than this repository's files may hold "
                                f"({MAX_WRITE_CHARS})")
        try:
            self._sandbox.write(path, text)
        except (SandboxPathError, IsADirectoryError, NotADirectoryError, FileExistsError) as error:
            raise InvalidAction(_path_problem(path, error)) from error

    def _tool_list_files(self) -> StepResult:
        files = self._files()
        shown = "\n".join(files[:MAX_LISTED_FILES]) or "(the repository is empty)"
        if len(files) > MAX_LISTED_FILES:
            shown += f"\n[... {len(files) - MAX_LISTED_FILES} more files not shown]"
        return StepResult(shown)

    def _tool_read_file(self, path: str) -> StepResult:
        text = self._read(path)
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[... {len(text) - MAX_FILE_CHARS} more characters not shown]"
        return StepResult(text or "(the file is empty)")

    def _tool_search(self, pattern: str) -> StepResult:
        assert self._sandbox is not None
        if not pattern:
            raise InvalidAction("search(pattern): the pattern is empty; give the text to look for")
        result = self._sandbox.run(f"grep -rnI --exclude-dir=__pycache__ -e {shlex.quote(pattern)} .")
        if result.timed_out:
            raise InvalidAction(f"search({pattern!r}) took too long and was stopped; use a simpler pattern")
        if result.exit_code == 1:
            return StepResult(f"No matches for {pattern!r}.")
        if result.exit_code != 0:
            raise InvalidAction(f"search({pattern!r}) failed: {result.stderr.strip() or result.text()}")
        lines = [line.removeprefix("./") for line in result.stdout.splitlines()]
        return StepResult("\n".join(lines))

    def _tool_edit_file(self, path: str, old: str, new: str) -> StepResult:
        text = self._read(path)
        edited = replace_unique(text, old, new, path)
        self._write(path, edited)
        first = text.count("\n", 0, text.index(old)) + 1
        shown = edited.splitlines()[max(0, first - 3): first + new.count("\n") + 2]
        numbered = "\n".join(f"{number:4d}  {line}" for number, line in enumerate(shown, start=max(1, first - 2)))
        return StepResult(f"Edited {path} at line {first}. The lines around the edit now read:\n{numbered}")

    def _tool_write_file(self, path: str, content: str) -> StepResult:
        self._write(path, content)
        return StepResult(f"Wrote {path} ({len(content.splitlines())} lines).")

    def _tool_run_tests(self) -> StepResult:
        assert self._sandbox is not None
        result: RunResult = self._sandbox.run_python(_runner(None))
        return StepResult(result.text(), info={"exit_code": result.exit_code, "timed_out": result.timed_out})

    def _tool_submit(self) -> StepResult:
        return StepResult("Submitted. The episode is over.", done=True)


def _path_problem(path: str, error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return f"there is no file {path!r}; list_files() shows the files there are"
    if isinstance(error, IsADirectoryError):
        return f"{path!r} is a directory, not a file; list_files() shows the files there are"
    if isinstance(error, NotADirectoryError | FileExistsError):
        return f"{path!r}: part of the path is a file, not a directory"
    return str(error)
