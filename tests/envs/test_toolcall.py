"""The tool-call env: disjoint task splits, answer parsing, scripted episodes, bad actions."""

from __future__ import annotations

import math
import re

import pytest

from openclaw_rl.envs.base import Action, Env
from openclaw_rl.envs.sandbox import sandbox_available
from openclaw_rl.envs.toolcall import ToolCallEnv, parse_answer

AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=WHY)


@pytest.fixture
def env():
    env = ToolCallEnv()
    yield env
    env.close()


def test_follows_the_protocol(env):
    assert isinstance(env, Env)
    assert [tool["function"]["name"] for tool in env.tools] == ["python", "answer"]


def test_splits_are_large_and_disjoint(env):
    train, evaluation = env.tasks("train"), env.tasks("eval")
    assert len(train) >= 40 and len(evaluation) >= 20
    assert len(env.tasks()) == len(train) + len(evaluation)
    assert {task.split for task in train} == {"train"} and {task.split for task in evaluation} == {"eval"}
    ids = [task.id for task in env.tasks()]
    assert len(set(ids)) == len(ids)
    train_questions = {task.data["question"] for task in train}
    assert len(train_questions) == len(train)  # no question repeated within training
    assert train_questions.isdisjoint(task.data["question"] for task in evaluation)
    assert all(task.data["question"] in task.prompt for task in env.tasks())


def test_the_basic_level_asks_one_operation_on_small_numbers():
    from openclaw_rl.eval.problems import computed_values

    env = ToolCallEnv(level="basic", n_train=48, n_eval=24)
    train, evaluation = env.tasks("train"), env.tasks("eval")
    assert len(train) == 48 and len(evaluation) == 24
    assert all(task.id.startswith(f"toolcall-basic-{task.split}-") for task in env.tasks())
    assert {task.data["question"] for task in train}.isdisjoint(task.data["question"] for task in evaluation)
    standard = {task.data["question"] for task in ToolCallEnv().tasks()}
    assert standard.isdisjoint(task.data["question"] for task in env.tasks())
    from openclaw_rl.eval.problems import BASIC_FORMS, heldout_problems, train_problems

    for problem in train_problems(0, 48, "basic") + heldout_problems(24, "basic"):
        assert len(problem.steps) == 1 and problem.template.startswith("basic_")
        assert computed_values(problem.steps)[-1] == problem.answer and 0 < problem.answer <= 25
        assert not any(ch.isdigit() for ch in BASIC_FORMS[problem.template]), "copying the form would pass"
    with pytest.raises(ValueError, match="unknown toolcall level 'easy'; choose one of standard, basic, starter"):
        ToolCallEnv(level="easy")


def test_the_starter_level_shows_the_operation_with_the_problems_own_numbers():
    basic = ToolCallEnv(level="basic", n_train=48, n_eval=24).tasks()
    starter = ToolCallEnv(level="starter", n_train=48, n_eval=24).tasks()
    assert [(t.split, t.data) for t in starter] == [(t.split, t.data) for t in basic]  # the same problems
    assert all(t.id.startswith(f"toolcall-starter-{t.split}-") for t in starter)
    for task in starter:
        working = task.prompt.split("How to work it out: ")[1]
        assert re.search(r"\d+ [+\-×÷] \d+ = C\. The answer is C\.", working), working  # C is the model's


def test_tasks_are_deterministic():
    assert [t.prompt for t in ToolCallEnv().tasks()] == [t.prompt for t in ToolCallEnv().tasks()]


@pytest.mark.parametrize(("value", "expected"), [
    ("42", 42), ("42.0", 42), ("$42", 42), (" 42 dollars", 42), ("The answer is 42.", 42),
    ("1,200", 1200), ("$1,234.50", 1234.5), ("\\boxed{42}", 42), ("x = -7", -7), ("−7", -7),
    ("84/2", 42), ("4.2e1", 42), ("3-4", 4), ("about 12, maybe 13", 13), (42, 42), (42.5, 42.5),
    ("", None), ("banana", None), ("1/0", None), (True, None), (None, None), (math.nan, None),
])
def test_parse_answer(value, expected):
    assert parse_answer(value) == expected


def test_wrong_answer_fails(env):
    task = env.tasks("eval")[0]
    assert env.reset(task) == task.prompt
    assert env.evaluate().success is False  # nothing answered yet
    assert "no answer" in env.evaluate().detail
    wrong = task.data["answer"] + 1
    result = env.step(Action("answer", {"value": str(wrong)}))
    assert result.done and "error" not in result.info
    outcome = env.evaluate()
    assert (outcome.success, outcome.score) == (False, 0.0)
    assert str(task.data["answer"]) in outcome.detail and str(wrong) in outcome.detail


def test_a_sign_the_answer_lacks_fails(env):
    task = env.tasks("train")[0]
    env.reset(task)
    env.step(Action("answer", {"value": f"-{task.data['answer']}"}))
    assert env.evaluate().success is False


@pytest.mark.parametrize("form", ["{}", "{}.0", "${}", "The answer is {}."])
def test_right_answer_in_any_form_succeeds(env, form):
    task = env.tasks("train")[1]
    env.reset(task)
    env.step(Action("answer", {"value": form.format(task.data["answer"])}))
    assert env.evaluate() == env.evaluate()
    assert env.evaluate().success and env.evaluate().score == 1.0


def test_number_argument_is_taken_as_text(env):
    task = env.tasks("train")[2]
    env.reset(task)
    assert env.step(Action("answer", {"value": task.data["answer"]})).done
    assert env.evaluate().success


@needs_sandbox
def test_scripted_episode_with_python_succeeds(env):
    task = env.tasks("eval")[3]
    env.reset(task)
    result = env.step(Action.from_tool_call("python", '{"code": "x = 6 * 7\\nprint(x)"}'))
    assert result.observation.strip() == "42" and not result.done and "error" not in result.info
    result = env.step(Action("python", {"code": "print(x)"}))  # a fresh interpreter: x is gone
    assert "NameError" in result.observation and result.info["exit_code"] != 0
    result = env.step(Action("python", {"code": f"print({task.data['answer']} * 1.0)"}))
    computed = result.observation.strip()
    assert env.step(Action("answer", {"value": computed})).done
    assert env.evaluate().success


@needs_sandbox
def test_reset_starts_a_fresh_episode(env):
    first, second = env.tasks("train")[:2]
    env.reset(first)
    env.step(Action("python", {"code": "open('left.txt', 'w').write('x')"}))
    env.step(Action("answer", {"value": str(first.data["answer"])}))
    env.reset(second)
    assert env.evaluate().success is False  # the answer to the first task is gone
    result = env.step(Action("python", {"code": "import os; print(os.path.exists('left.txt'))"}))
    assert result.observation.strip() == "False"


@pytest.mark.parametrize(("action", "complaint"), [
    (Action("calculator", {"expression": "1+1"}), "unknown tool 'calculator'"),
    (Action("python", {}), "missing the argument code"),
    (Action("python", "{not json"), "not valid JSON"),  # a raw string the driver could not decode
    (Action("python", {"code": ["print(1)"]}), "code must be a string"),
    (Action("python", {"code": "print(1)", "timeout": 5}), "no argument 'timeout'"),
    (Action("python", {"code": "   "}), "the code is empty"),
    (Action("answer", {"value": "I am not sure"}), "holds no number"),
    (Action("answer", {"value": True}), "value must be a string"),
])
def test_invalid_actions_are_observations(env, action, complaint):
    env.reset(env.tasks("train")[0])
    result = env.step(action)
    assert complaint in result.info["error"] and complaint in result.observation
    assert not result.done
    assert env.evaluate().success is False


def test_step_limit_ends_the_episode():
    env = ToolCallEnv(max_steps=2)
    env.reset(env.tasks("train")[0])
    assert not env.step(Action("nothing")).done
    result = env.step(Action("nothing"))
    assert result.done and result.info["truncated"] and "step limit of 2" in result.observation
    after = env.step(Action("answer", {"value": "1"}))
    assert after.done and "episode is over" in after.info["error"]


def test_steps_before_reset_are_a_programming_error(env):
    with pytest.raises(RuntimeError, match="reset"):
        env.step(Action("answer", {"value": "1"}))
    with pytest.raises(RuntimeError, match="reset"):
        env.evaluate()


def test_constructor_checks_its_arguments():
    with pytest.raises(ValueError, match="max_steps"):
        ToolCallEnv(max_steps=0)
    with pytest.raises(ValueError, match="n_train"):
        ToolCallEnv(n_train=0)


@needs_sandbox
def test_close_removes_the_sandbox():
    with ToolCallEnv() as env:
        env.reset(env.tasks("train")[0])
        env.step(Action("python", {"code": "print(1)"}))
        root = env._sandbox.root
        assert root.is_dir()
    assert not root.exists()
