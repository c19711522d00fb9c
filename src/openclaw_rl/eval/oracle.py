"""The oracle judge: reads the persona's rubric instead of the user's reply.

It exists to separate what the trainer learns from how well a judge reads next states:
with the oracle, the reward is exactly "does this response meet the hidden preference"
(+1 when the rubric score reaches the persona's approval threshold, else -1) and the
hints are the rubric's own failed checks, written as instructions. It is not a judge a
deployment could have (a real user's preference is hidden), so its name is "oracle" and
every raw output it writes says so.

The problem of a turn is found by the session's first user message, which is a pure
function of the problem (`Persona.first_message`): the simulator registers the problems
it plays. A turn whose problem is unknown gets no verdict (a `JudgeFailure`), never a
made-up reward.
"""

from __future__ import annotations

from typing import Iterable

from openclaw_rl.eval.personas import Persona
from openclaw_rl.eval.problems import Problem
from openclaw_rl.judge.worker import JudgeFailure, Reading
from openclaw_rl.chat import content_text
from openclaw_rl.types import Turn

__all__ = ["ORACLE_LABEL", "OracleJudge"]

ORACLE_LABEL = "ORACLE (reads the persona rubric)"


def _key(text: str) -> str:
    return " ".join(text.split())


class OracleJudge:
    """The `Judge` interface of `judge/worker.py`, scoring with the persona's rubric."""

    name = "oracle"

    def __init__(self, persona: Persona, problems: Iterable[Problem] = (), threshold: float | None = None,
                 max_hints: int = 3):
        self.persona = persona
        self.threshold = persona.approve_threshold if threshold is None else threshold
        self.max_hints = max_hints
        self._problems: dict[str, Problem] = {}
        for problem in problems:
            self.register(problem)

    def register(self, problem: Problem) -> None:
        """Make `problem` known, so the turns of its sessions can be judged."""
        self._problems[_key(self.persona.first_message(problem))] = problem

    def problem_of(self, turn: Turn) -> Problem | None:
        first = next((m for m in turn.prompt_messages if m.get("role") == "user"), None)
        return self._problems.get(_key(content_text(first))) if first is not None else None

    async def read(self, turn: Turn) -> Reading:
        problem = self.problem_of(turn)
        if problem is None:
            raise JudgeFailure(f"{ORACLE_LABEL}: turn {turn.id} is not about a registered problem; "
                               "register the problems the simulator plays (OracleJudge.register)")
        checks = self.persona.checks(problem, turn.response_text)
        score = sum(c.weight * c.score for c in checks)
        vote = 1 if score >= self.threshold else -1
        failed = ", ".join(f"{c.name} {c.score:.2f}" for c in checks if not c.passed) or "none"
        raw = (f"{ORACLE_LABEL}: {self.persona.name} rubric {score:.3f} "
               f"{'>=' if vote > 0 else '<'} {self.threshold:.2f} -> {vote:+d}; failed checks: {failed}")
        # Hints are given whenever a check fails, even on a +1: the oracle knows what is
        # still missing, and the directive signal is what it is there to supply.
        return Reading(votes=[vote], raw=[raw], hints=self.persona.hints(problem, turn.response_text, self.max_hints),
                       notes=[ORACLE_LABEL])
