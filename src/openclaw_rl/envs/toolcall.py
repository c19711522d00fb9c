"""The tool-call environment: math word problems solved with a Python tool (docs/method.md §4).

    env = ToolCallEnv()
    task = env.tasks("train")[0]
    env.reset(task)                                    # the question
    env.step(Action("python", {"code": "print(6 * 7)"}))   # observation "42"
    env.step(Action("answer", {"value": "42"}))        # done
    env.evaluate()                                     # Outcome(success=True, score=1.0, ...)

Tools: `python(code)` runs the code in a fresh sandboxed interpreter and shows its
output; `answer(value)` gives the final answer and ends the episode.

Decisions and why:

- Problems come from the project's GSM8K-style generator (`eval/problems.py`): training
  tasks from `train_problems`, evaluation tasks from `heldout_problems`. The generator
  draws the two from disjoint name pools, so no evaluation question can occur in training
  whatever the counts; task ids carry the split as well.
- The answer is compared as a number (`parse_answer`): "42", "42.0", "$42", "1,200" and
  "x = 42" all read as their number, so formatting never decides the outcome, while a
  wrong number, or a sign the answer does not have, never passes. A value with no number
  in it is an invalid action (the episode goes on), since there is nothing to grade.
- The outcome is only the answer given through `answer`: numbers printed by the Python
  tool or written in chat are not read, so the check never guesses at intent.
- `level="basic"` draws one-operation problems on small numbers (`BASIC_TEMPLATES`)
  instead of the multi-step ones, each followed by the operation it asks for with letters
  for the numbers (`BASIC_FORMS`: the form of the working, not its arithmetic), for a
  model too small for the standard ones, so that outcome rewards can vary (docs/agents.md,
  "Levels", with the measured base success). Its task ids say the level
  (`toolcall-basic-train-000`).
- `level="starter"`: the basic problems with the operation written out with the
  question's own numbers (`8 + 2 = C. The answer is C.`): the arithmetic and the sentence
  that states the answer are the model's. The first rung of a curriculum for a model
  that works the number out and then never states it (SmolLM2-135M, 8 of 120 basic
  episodes solved).
- Each `python` call is a new interpreter (variables do not carry over; files in the
  sandbox directory do), the tool description says so. The sandbox is made on the first
  call, not at reset, since many episodes never run code, and it is thrown away at the
  next reset.
"""

from __future__ import annotations

import math
import re
from openclaw_rl.envs.actions import InvalidAction, checked_arguments
from openclaw_rl.envs.base import Action, EnvError, Outcome, Split, StepResult, Task, tool_schema
from openclaw_rl.envs.sandbox import Limits, Sandbox, SandboxedEnv
from openclaw_rl.eval.problems import BASIC_FORMS, Problem, heldout_problems, train_problems
from openclaw_rl.eval.problems import LEVELS as PROBLEM_LEVELS

LEVELS = (*PROBLEM_LEVELS, "starter")  # starter: the basic problems, the operation shown with their numbers
_SYMBOLS = {"+": "+", "-": "-", "*": "×", "/": "÷"}

__all__ = ["ToolCallEnv", "parse_answer"]

PROMPT = (
    "{question}\n\n"
    "You can run Python with the python tool. When you know the answer, call the answer tool "
    "with the final number."
)

BASIC_PROMPT = (
    "{question}\n\n"
    "How to work it out: {form} Write it with the numbers of the question, or call the answer tool "
    "with the number."
)

# A number: an optional sign not glued to a word or digit before it ("3-4" is not -4), digits,
# an optional fraction, exponent, or "/denominator".
_NUMBER = re.compile(r"(?:(?<![\w.])[-−])?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:/\d+(?!\.\d))?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def parse_answer(value: object) -> float | None:
    """The number an answer gives, or None when it gives none.

    A number is taken as it is; in text, thousands separators are dropped and the last
    number counts ("The answer is 42" -> 42.0, "$1,200.50" -> 1200.5, "84/2" -> 42.0).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    numbers = _NUMBER.findall(_THOUSANDS.sub("", value))
    if not numbers:
        return None
    text = numbers[-1].replace("−", "-")
    numerator, _, denominator = text.partition("/")
    number = float(numerator)
    if denominator:
        if float(denominator) == 0:
            return None
        number /= float(denominator)
    return number if math.isfinite(number) else None


def _is_correct(given: float, expected: float) -> bool:
    return math.isclose(given, expected, rel_tol=1e-9, abs_tol=1e-6)


def _task(problem: Problem, task_id: str, split: Split, starter: bool = False) -> Task:
    form = BASIC_FORMS.get(problem.template)
    if starter:
        step = problem.steps[0]
        form = f"{form.split(':')[0]}: {step.left} {_SYMBOLS[step.op]} {step.right} = C. The answer is C."
    prompt = (BASIC_PROMPT.format(question=problem.question, form=form) if form
              else PROMPT.format(question=problem.question))
    return Task(id=task_id, prompt=prompt, split=split,
                data={"question": problem.question, "answer": problem.answer, "problem": problem.id})


class ToolCallEnv(SandboxedEnv):
    """Word problems with a sandboxed Python tool; outcome = the exact numeric answer."""

    name = "toolcall"
    tools = [
        tool_schema(
            "python",
            "Run a Python 3 program in a sandbox (no network, standard library only) and see what it prints. "
            "Each call is a fresh interpreter: print() what you need; variables do not carry over.",
            code=("string", "the Python program to run"),
        ),
        tool_schema(
            "answer",
            "Give your final answer. This ends the episode.",
            value=("string", "the final answer, a number, e.g. 42"),
        ),
    ]

    def __init__(self, *, n_train: int = 48, n_eval: int = 24, seed: int = 0, max_steps: int = 12,
                 limits: Limits | None = None, level: str = "standard") -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown toolcall level {level!r}; choose one of {', '.join(LEVELS)}")
        if n_train < 1 or n_eval < 1:
            raise ValueError(f"n_train and n_eval must be at least 1, got {n_train} and {n_eval}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_steps = max_steps
        self.limits = limits or Limits(cpu_s=5, wall_s=10.0)
        self.level = level
        self._tasks = self._make_tasks(n_train, n_eval, seed, level)
        self._task: Task | None = None
        self._sandbox: Sandbox | None = None
        self._steps = 0
        self._done = False
        self._answer: str | None = None

    @staticmethod
    def _make_tasks(n_train: int, n_eval: int, seed: int, level: str) -> list[Task]:
        prefix = "toolcall" if level == "standard" else f"toolcall-{level}"
        starter, level = level == "starter", "basic" if level == "starter" else level  # its problems are basic's
        train: list[Task] = []
        seen: set[str] = set()
        for problem in train_problems(seed, 4 * n_train, level):  # spares stand in for repeated questions
            if problem.question not in seen and len(train) < n_train:
                seen.add(problem.question)
                train.append(_task(problem, f"{prefix}-train-{len(train):03d}", "train", starter))
        if len(train) < n_train:
            raise ValueError(f"the {level} level has fewer than {n_train} distinct training problems; ask for fewer")
        evaluation = [_task(problem, f"{prefix}-eval-{i:03d}", "eval", starter)
                      for i, problem in enumerate(heldout_problems(n_eval, level))]
        return train + evaluation

    def tasks(self, split: Split | None = None) -> list[Task]:
        return [task for task in self._tasks if split is None or task.split == split]

    def reset(self, task: Task) -> str:
        if "answer" not in task.data:
            raise ValueError(f"task {task.id!r} has no data['answer']; toolcall tasks come from ToolCallEnv.tasks()")
        self._close_sandbox()
        self._task, self._steps, self._done, self._answer = task, 0, False, None
        return task.prompt

    def step(self, action: Action) -> StepResult:
        if self._task is None:
            raise RuntimeError("step() before reset(): reset the environment with a task first")
        if self._done:
            message = "The episode is over; reset with a new task to go on."
            return StepResult(message, done=True, info={"error": message})
        self._steps += 1
        try:
            arguments = checked_arguments(action, self.tools)
            if action.tool == "python":
                result = self._run_python(arguments["code"])
            else:
                result = self._give_answer(arguments["value"])
        except InvalidAction as error:
            result = StepResult(f"Error: {error}", info={"error": str(error)})
        if not result.done and self._steps >= self.max_steps:
            result = StepResult(f"{result.observation}\n[step limit of {self.max_steps} reached: the episode is over]",
                                done=True, info={**result.info, "truncated": True})
        self._done = result.done
        return result

    def _run_python(self, code: str) -> StepResult:
        if not code.strip():
            raise InvalidAction("python(code): the code is empty; pass a program, e.g. print(6 * 7)")
        if self._sandbox is None:
            self._sandbox = Sandbox(self.limits)
        try:
            result = self._sandbox.run_python(code)
        except OSError as error:
            raise EnvError(f"the sandbox could not run python: {error}") from error
        return StepResult(result.text(), info={"exit_code": result.exit_code, "timed_out": result.timed_out})

    def _give_answer(self, value: str) -> StepResult:
        if parse_answer(value) is None:
            raise InvalidAction(f"answer(value): {value!r:.80} holds no number; give the final answer as a number, "
                                "e.g. answer(value=\"42\")")
        self._answer = value
        return StepResult(f"Your answer {value!r} is recorded. The episode is over.", done=True)

    def evaluate(self) -> Outcome:
        if self._task is None:
            raise RuntimeError("evaluate() before reset(): there is no episode to evaluate")
        expected = self._task.data["answer"]
        if self._answer is None:
            return Outcome(False, 0.0, f"no answer was given (expected {expected})")
        given = parse_answer(self._answer)
        assert given is not None  # _give_answer refuses values without a number
        if _is_correct(given, float(expected)):
            return Outcome(True, 1.0, f"answered {self._answer!r}, expected {expected}")
        return Outcome(False, 0.0, f"answered {self._answer!r} (read as {given:g}), expected {expected}")




