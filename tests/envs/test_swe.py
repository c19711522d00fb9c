"""The SWE env: every shipped task is broken as shipped and fixed by its reference fix;
scripted episodes that solve and fail a task; the tools' errors; the check's defences."""

from __future__ import annotations

import pytest

from openclaw_rl.envs.actions import InvalidAction
from openclaw_rl.envs.base import Action, Env
from openclaw_rl.envs.sandbox import sandbox_available
from openclaw_rl.envs.swe import SWEEnv, check_files, load_tasks, replace_unique

AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=WHY)

TASKS = load_tasks()


def fixed_files(task) -> dict[str, str]:
    files = dict(task.data["files"])
    for edit in task.data["fix"]:
        files[edit["path"]] = replace_unique(files[edit["path"]], edit["old"], edit["new"], edit["path"])
    return files


def visible_tests(files: dict[str, str]) -> list[str]:
    return sorted(path for path in files if path.startswith("tests/test"))


@pytest.fixture
def env():
    env = SWEEnv()
    yield env
    env.close()


def find(task_id: str):
    return next(task for task in TASKS if task.id == task_id)


def test_follows_the_protocol(env):
    assert isinstance(env, Env)
    assert [tool["function"]["name"] for tool in env.tools] == [
        "list_files", "read_file", "search", "edit_file", "write_file", "run_tests", "submit"]


def test_tasks_ship_with_both_splits():
    train = [task for task in TASKS if task.split == "train"]
    evaluation = [task for task in TASKS if task.split == "eval"]
    assert len(TASKS) >= 10 and len(train) >= 7 and len(evaluation) >= 3
    assert len({task.id for task in TASKS}) == len(TASKS)
    assert len({task.data["repo"] for task in TASKS}) == len(TASKS)  # no repository in both splits
    for task in TASKS:
        assert task.data["hidden_tests"] and visible_tests(task.data["files"])
        assert not set(task.data["hidden_tests"]) & set(task.data["files"])  # hidden tests stay out of the agent's copy
        assert task.data["repo"] in task.prompt


@needs_sandbox
@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
def test_task_fails_as_shipped_and_passes_with_its_fix(task):
    files, hidden = task.data["files"], task.data["hidden_tests"]
    assert not check_files(files, visible_tests(files)).success, "the visible tests must show the bug"
    assert not check_files(files | hidden, sorted(hidden)).success, "the hidden tests must catch the bug"
    fixed = fixed_files(task)
    outcome = check_files(fixed | hidden, visible_tests(fixed) + sorted(hidden))
    assert outcome.success, outcome.detail


@needs_sandbox
def test_scripted_episode_that_fixes_the_bug(env):
    task = find("swe-pager")
    edit = task.data["fix"][0]
    assert env.reset(task) == task.prompt
    listing = env.step(Action("list_files")).observation.splitlines()
    assert listing == ["pager/__init__.py", "pager/pages.py", "tests/test_pages.py"]
    before = env.step(Action("run_tests"))
    assert "FAIL: test_partial_last_page" in before.observation and before.info["exit_code"] != 0
    found = env.step(Action("search", {"pattern": "return total //"})).observation
    assert found.startswith("pager/pages.py:8:")
    assert "def page_count" in env.step(Action("read_file", {"path": "pager/pages.py"})).observation
    edited = env.step(Action.from_tool_call("edit_file", {key: edit[key] for key in ("path", "old", "new")}))
    assert "error" not in edited.info and "Edited pager/pages.py at line 8" in edited.observation
    after = env.step(Action("run_tests"))
    assert after.info["exit_code"] == 0 and "OK" in after.observation
    assert env.step(Action("submit")).done
    outcome = env.evaluate()
    assert (outcome.success, outcome.score) == (True, 1.0), outcome.detail


@needs_sandbox
def test_scripted_episode_that_fails(env):
    task = find("swe-bank")
    env.reset(task)
    # A change that makes the visible test pass without fixing the cause is caught by the hidden tests.
    env.step(Action("edit_file", {"path": "bank/account.py", "old": "        if amount >= self.balance:",
                                  "new": "        if amount >= self.balance + 1 and self.balance < 50:"}))
    assert env.step(Action("run_tests")).info["exit_code"] == 0
    assert env.step(Action("submit")).done
    outcome = env.evaluate()
    assert (outcome.success, outcome.score) == (False, 0.0)
    assert "FAIL" in outcome.detail or "ERROR" in outcome.detail


@needs_sandbox
def test_editing_the_tests_does_not_pass(env):
    task = find("swe-stats")
    env.reset(task)
    env.step(Action("write_file", {"path": "tests/test_summary.py", "content": "import unittest\n"
                                   "class T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"}))
    for name in task.data["hidden_tests"]:  # even a planted copy of the hidden tests' name
        env.step(Action("write_file", {"path": name, "content": "import unittest\n"}))
    assert env.step(Action("run_tests")).info["exit_code"] == 0
    assert not env.evaluate().success


@needs_sandbox
@pytest.mark.parametrize(("path", "content"), [
    ("stats/__init__.py", "import os\nos._exit(0)\n"),  # exits with status 0 before any test runs
    ("unittest.py", "import sys\nsys.exit(0)\n"),  # would shadow the standard module if the repo came first
])
def test_faked_passes_are_caught(env, path, content):
    env.reset(find("swe-stats"))
    env.step(Action("write_file", {"path": path, "content": content}))
    assert not env.evaluate().success


@needs_sandbox
def test_reset_restores_the_shipped_files(env):
    task = find("swe-thermo")
    env.reset(task)
    env.step(Action("write_file", {"path": "thermo/convert.py", "content": "broken"}))
    env.step(Action("write_file", {"path": "notes.txt", "content": "x"}))
    env.reset(task)
    shipped = task.data["files"]["thermo/convert.py"]
    assert env.step(Action("read_file", {"path": "thermo/convert.py"})).observation == shipped
    assert "notes.txt" not in env.step(Action("list_files")).observation


@needs_sandbox
@pytest.mark.parametrize(("action", "complaint"), [
    (Action("read_file", {"path": "slugs/missing.py"}), "there is no file 'slugs/missing.py'"),
    (Action("read_file", {"path": "slugs"}), "is a directory"),
    (Action("read_file", {"path": "../../etc/passwd"}), "outside the sandbox"),
    (Action("write_file", {"path": "/etc/passwd", "content": "x"}), "absolute path"),
    (Action("edit_file", {"path": "slugs/slugify.py", "old": "no such text", "new": "x"}), "was not found"),
    (Action("edit_file", {"path": "slugs/slugify.py", "old": "return slug\n", "new": "return slug.strip()\n"}),
     "occurs 2 times (at lines 9, 18)"),
    (Action("edit_file", {"path": "slugs/slugify.py", "old": "", "new": "x"}), "`old` is empty"),
    (Action("search", {"pattern": ""}), "pattern is empty"),
    (Action("search", {"pattern": "a\\{1"}), "search('a\\\\{1') failed"),
    (Action("read_file", {}), "missing the argument path"),
    (Action("edit_file", "{'path': 1}"), "not valid JSON"),
    (Action("git", {"command": "diff"}), "unknown tool 'git'"),
])
def test_invalid_actions_are_observations(env, action, complaint):
    env.reset(find("swe-slugs"))
    result = env.step(action)
    assert complaint in result.info["error"], result.info["error"]
    assert complaint in result.observation and not result.done


@needs_sandbox
def test_search_takes_grep_patterns(env):
    env.reset(find("swe-slugs"))
    missing = env.step(Action("search", {"pattern": "nowhere to be found"}))
    assert missing.observation == "No matches for 'nowhere to be found'." and "error" not in missing.info
    found = env.step(Action("search", {"pattern": "^def .*(title"})).observation.splitlines()
    assert [line.split(":")[:2] for line in found] == [["slugs/slugify.py", "6"], ["slugs/slugify.py", "12"]]


@needs_sandbox
def test_step_limit_and_steps_after_the_end():
    env = SWEEnv(max_steps=2)
    try:
        env.reset(TASKS[0])
        assert not env.step(Action("list_files")).done
        result = env.step(Action("list_files"))
        assert result.done and result.info["truncated"]
        assert "episode is over" in env.step(Action("submit")).info["error"]
    finally:
        env.close()


def test_steps_before_reset_are_a_programming_error(env):
    with pytest.raises(RuntimeError, match="reset"):
        env.step(Action("submit"))
    with pytest.raises(RuntimeError, match="reset"):
        env.evaluate()


def test_replace_unique():
    assert replace_unique("a = 1\nb = 1\n", "b = 1", "b = 2", "f.py") == "a = 1\nb = 2\n"
    with pytest.raises(InvalidAction, match="occurs 2 times"):
        replace_unique("x\nx\n", "x", "y", "f.py")
    with pytest.raises(InvalidAction, match="mind the indentation"):
        replace_unique("    x = 1\n", "  x = 1\n    ", "y", "f.py")


@needs_sandbox
def test_close_removes_the_sandbox():
    with SWEEnv() as env:
        env.reset(TASKS[0])
        root = env._sandbox.root
        assert (root / "tests").is_dir()
    assert not root.exists()
