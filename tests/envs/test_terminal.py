"""The terminal environment: the protocol, scripted episodes, and every shipped task's health.

The parametrized tests are what keep the task file honest: a check that passes before the
agent did anything would reward doing nothing, and a reference solution that fails means
the task (or its check) is broken.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openclaw_rl.envs.base import Action, Env, EnvError, Task
from openclaw_rl.envs.sandbox import Limits, sandbox_available
from openclaw_rl.envs.terminal import TerminalEnv, load_tasks

AVAILABLE, WHY = sandbox_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY)
TASKS = load_tasks()
BASIC = load_tasks(level="basic")
STARTER = load_tasks(level="starter")
BY_ID = {task.id: task for task in TASKS}


@pytest.fixture
def env() -> Iterator[TerminalEnv]:
    with TerminalEnv(limits=Limits(wall_s=5.0, max_output_chars=2000), max_steps=8) as terminal:
        yield terminal


def run(command: str) -> Action:
    return Action("run", {"command": command})


def play(env: TerminalEnv, task_id: str, commands: list[str]) -> bool:
    env.reset(BY_ID[task_id])
    for command in commands:
        assert not env.step(run(command)).done
    assert env.step(Action("submit")).done
    return env.evaluate().success


# ---- the shipped tasks -------------------------------------------------------------------


def test_the_task_file_has_enough_tasks_in_both_splits() -> None:
    splits = [task.split for task in TASKS]
    assert len(TASKS) >= 20 and splits.count("train") >= 14 and splits.count("eval") >= 6
    assert len(BY_ID) == len(TASKS)
    assert all(task.prompt and task.data["check"] and task.data["solution"] for task in TASKS)


def test_the_basic_level_is_its_own_task_set_of_one_command_tasks() -> None:
    splits = [task.split for task in BASIC]
    assert splits.count("train") >= 12 and splits.count("eval") >= 8
    assert not {task.id for task in BASIC} & set(BY_ID), "the levels share task ids"
    assert all("```bash" in task.prompt and "&&" not in task.data["solution"] and "|" not in task.data["solution"]
               for task in BASIC)
    assert [task.id for task in TerminalEnv(level="basic").tasks()] == [task.id for task in BASIC]
    assert [task.id for task in TerminalEnv().tasks()] == [task.id for task in TASKS]
    with pytest.raises(ValueError, match="unknown terminal level 'hard'; choose one of standard, basic, starter"):
        TerminalEnv(level="hard")


def test_the_starter_level_writes_out_each_basic_tasks_own_command() -> None:
    """The same tasks, splits and checks as basic; each prompt shows the task's command, not
    the one with placeholders; ids of their own."""
    assert [(t.split, t.data) for t in STARTER] == [(t.split, t.data) for t in BASIC]
    assert [t.id for t in STARTER] == [t.id.replace("basic-", "starter-", 1) for t in BASIC]
    for starter, basic in zip(STARTER, BASIC):
        statement = basic.prompt.split("\n\n")[0]
        assert starter.prompt.startswith(statement + "\n\n")
        assert f"```bash\n{basic.data['solution']}\n```" in starter.prompt
        placeholder = basic.prompt.split("```bash\n")[1].split("\n```")[0]
        assert placeholder not in starter.prompt.split("\n\n", 1)[1]  # e.g. "mkdir NAME" is gone
    assert [t.id for t in TerminalEnv(level="starter").tasks("eval")] == [t.id for t in STARTER if t.split == "eval"]


@pytest.mark.parametrize("task", TASKS + BASIC, ids=[task.id for task in TASKS + BASIC])
def test_check_fails_at_the_start_and_the_reference_solution_passes(env: TerminalEnv, task: Task) -> None:
    env.reset(task)
    before = env.evaluate()
    assert not before.success and before.score == 0.0, f"{task.id} is solved before the agent acts"
    result = env.step(run(task.data["solution"]))
    assert result.info["exit_code"] == 0, result.observation
    after = env.evaluate()
    assert after.success and after.score == 1.0, f"the reference solution of {task.id} fails: {after.detail}"


# ---- scripted episodes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task_id", "solving", "failing"),
    [
        ("count-errors", ["grep ERROR app.log | wc -l > errors.txt"], ["grep -c INFO app.log > errors.txt"]),
        ("sort-unique", ["sort names.txt | uniq > unique.txt"], ["uniq names.txt > unique.txt"]),
        ("rename-extension", ["cd notes && for f in *.txt; do mv $f ${f%.txt}.md; done"], ["cd notes && for f in *.txt; do cp $f ${f%.txt}.md; done"]),
        ("copy-and-edit-config", ["cp config/default.conf config/local.conf", "sed -i s/8080/9090/ config/local.conf"],
         ["sed -i s/8080/9090/ config/default.conf", "cp config/default.conf config/local.conf"]),
        ("private-key", ["chmod u=rw,go= secret.key"], ["chmod 700 secret.key"]),
        ("link-latest", ["ln -s /work/releases/v2 latest"], ["ln -s releases/v1 latest"]),
        ("find-todo", ["grep -rl TODO src/ | sort > todo.txt"], ["grep -l TODO src/* > todo.txt"]),
    ],
)
def test_scripted_episodes_succeed_or_fail_by_the_files_alone(
    env: TerminalEnv, task_id: str, solving: list[str], failing: list[str]
) -> None:
    assert play(env, task_id, solving)
    assert not play(env, task_id, failing)


def test_an_episode_step_by_step(env: TerminalEnv) -> None:
    task = BY_ID["count-log-lines"]
    first = env.reset(task)
    assert first == "You are in /work. It contains:\nserver.log"
    looked = env.step(run("wc -l server.log"))
    assert looked.observation == "7 server.log" and not looked.done and looked.info["exit_code"] == 0
    failed = env.step(run("cat missing.txt"))
    assert failed.observation.endswith("[exit code 1]") and failed.info["exit_code"] == 1
    env.step(run("cd /tmp"))
    assert env.step(run("pwd")).observation == "/work"  # each command starts afresh in /work
    env.step(run("echo 6 > count.txt"))
    outcome = env.evaluate()
    assert not outcome.success and outcome.detail.startswith("check failed")
    env.step(run("echo 7 > count.txt"))
    done = env.step(Action("submit"))
    assert done.done and "error" not in done.info
    assert env.evaluate().success
    after = env.step(run("ls"))
    assert after.done and after.info["error"] == "episode is over"


def test_reset_starts_a_fresh_sandbox(env: TerminalEnv) -> None:
    env.reset(BY_ID["hello-file"])
    env.step(run("echo 'Hello, world!' > hello.txt"))
    assert env.evaluate().success
    env.reset(BY_ID["hello-file"])
    assert not env.evaluate().success
    assert env.step(run("ls")).observation == "(no output)"


@pytest.mark.parametrize(
    ("action", "problem"),
    [
        (Action("shell", {"command": "ls"}), "unknown tool 'shell'"),
        (Action("run", {}), "non-empty string command"),
        (Action("run", {"command": "  "}), "non-empty string command"),
        (Action("run", {"command": ["ls"]}), "non-empty string command"),
        (Action("run", {"command": "ls", "timeout": 3}), "unexpected ['timeout']"),
        (Action("submit", {"now": True}), "submit takes no arguments"),
    ],
)
def test_invalid_actions_are_observations_not_exceptions(env: TerminalEnv, action: Action, problem: str) -> None:
    env.reset(BY_ID["hello-file"])
    result = env.step(action)
    assert not result.done and problem in result.info["error"] and result.observation.startswith("Error: ")


def test_the_step_limit_ends_the_episode(env: TerminalEnv) -> None:
    env.reset(BY_ID["hello-file"])
    results = [env.step(run("true")) for _ in range(env.max_steps)]
    assert [result.done for result in results] == [False] * (env.max_steps - 1) + [True]
    assert results[-1].info["truncated"] and "step limit of 8 reached" in results[-1].observation
    assert env.step(run("true")).info["error"] == "episode is over"


def test_a_timed_out_command_is_reported_and_the_episode_goes_on() -> None:
    with TerminalEnv(limits=Limits(wall_s=0.5)) as env:
        env.reset(BY_ID["hello-file"])
        result = env.step(run("sleep 10"))
        assert result.info["timed_out"] and "timed out" in result.observation and not result.done
        assert env.step(run("echo ok")).observation == "ok"


def test_protocol_tools_and_splits() -> None:
    env = TerminalEnv(tasks=[Task("t", "p", "eval", {"check": "true", "solution": "true"})])
    assert isinstance(env, Env) and env.name == "terminal"
    assert [tool["function"]["name"] for tool in env.tools] == ["run", "submit"]
    assert env.tools[0]["function"]["parameters"]["required"] == ["command"]
    assert env.tasks("train") == [] and [task.id for task in env.tasks("eval")] == ["t"]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(run("ls"))
    with pytest.raises(RuntimeError, match="call reset"):
        env.evaluate()


def test_a_broken_setup_is_the_environments_fault() -> None:
    broken = Task("broken", "p", "train", {"setup": "exit 4", "check": "true", "solution": "true"})
    with TerminalEnv(tasks=[broken]) as env, pytest.raises(EnvError, match="setup of terminal task 'broken' failed"):
        env.reset(broken)


def test_close_removes_the_sandbox_and_allows_another_reset(env: TerminalEnv) -> None:
    env.reset(BY_ID["hello-file"])
    root = env._live_sandbox().root
    env.close()
    env.close()
    assert not root.exists()
    env.reset(BY_ID["hello-file"])
    assert env.step(run("echo again")).observation == "again"
