"""The hint check: told the hint, does the model answer better than it did?

OPD pulls the response towards the hinted teacher's distribution. That can only help
where the teacher, told the hint, would itself answer better; a model too small to use a
hint gets a teacher no better than the student, and its OPD signal is noise (at 0.6B, SOD
reports hint self-distillation adding little: arXiv 2605.07725; the student-teacher gap
before training predicts the gain: arXiv 2605.30070). The check measures that gap
directly: for a judged turn with a hint, the same weights generate their own greedy
answer to the hinted prompt (`hinted_messages`, as the teacher scores it), and a
comparer says whether that answer is better than the recorded response.

Comparers (each answers better, same or worse, or unknown when it cannot tell):

- `RubricComparer`, simulation only: the persona's rubric of the problem the conversation
  asks, on both answers (the oracle's view).
- `PairwiseComparer`, a chat judge (`--judge local` or a URL): the comparison prompt
  (prompts.comparison_prompt) asked in both orders, so position bias cancels; better
  only when both orders prefer the hinted answer, worse only when both prefer the
  response, same otherwise.
- `HintAgreementComparer`, the embedding judge's: that judge reads next states, not
  answers, so it cannot say which of two answers is better. Its check is agreement with
  the hint: which answer's sentence embedding lies closer to the hint, by at least
  `margin`. A proxy: it says whether the hinted answer moved towards the hint, not
  whether it is right (docs/experiments.md measures it against the rubric).

Two uses: `openclaw-rl hints` reports over a store's hinted turns whether OPD can help
this model on these users (`summarize`: go when the hinted answer is better in a clear
majority of the decided turns), and the judge's `--hint-check on` keeps a hint for OPD
only when its teacher's answer is better (judge/worker.py).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Callable, Literal, Protocol

from openclaw_rl.chat import content_text, render_prompt, user_text
from openclaw_rl.judge.backends import SentenceEncoder
from openclaw_rl.judge.prompts import NEXT_STATE_ROLES, comparison_prompt
from openclaw_rl.judge.teacher import hinted_messages, personal_adapter, served_messages
from openclaw_rl.judge.votes import parse_preference
from openclaw_rl.types import SamplingParams, TokenStep, Turn

__all__ = ["DROPPED_BY_CHECK", "Comparison", "HintAgreementComparer", "HintCheck", "PairwiseComparer", "RubricComparer",
           "check_hint", "summarize", "teacher_answer"]

Outcome = Literal["better", "same", "worse", "unknown"]
OUTCOMES: tuple[Outcome, ...] = ("better", "same", "worse", "unknown")
DROPPED_BY_CHECK = "hint dropped by the check"  # how the judge's notes say it (store.verdicts_noting)
MIN_DECIDED = 8  # fewer turns where the comparer saw a difference than this: too few to call


@dataclass(frozen=True)
class Comparison:
    outcome: Outcome  # of the hinted answer against the response
    detail: str  # what the comparer read, for people


@dataclass(frozen=True)
class HintCheck:
    turn_id: int
    hint: str
    response: str
    teacher_answer: str
    outcome: Outcome
    detail: str
    by: str  # the comparer


class Comparer(Protocol):
    name: str

    async def compare(self, turn: Turn, hint: str, answer: str) -> Comparison: ...


async def teacher_answer(engine, tokenizer, turn: Turn, hint: str | None, max_tokens: int) -> str:
    """The engine's greedy answer to the turn's prompt as served with `hint` appended (the
    prompt the teacher scores the response under; None: the prompt as it was served,
    experience block included), rendered with the turn's tools."""
    served = served_messages(turn)
    messages = hinted_messages(served, hint) if hint is not None else served
    prompt = render_prompt(tokenizer, messages, turn.sampling.get("tools"), turn.sampling.get("tool_choice"))
    room = engine.max_context - len(prompt) - 1
    if room < 1:
        raise ValueError(f"turn {turn.id}: the hinted prompt ({len(prompt)} tokens) leaves no room to answer "
                         f"in the engine's context ({engine.max_context})")
    params = SamplingParams(max_new_tokens=min(max_tokens, room), temperature=0.0,
                            adapter=personal_adapter(engine, turn).get("adapter"))  # the user's own, if served
    ids = [e.token_id async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)]
    return tokenizer.decode(ids, skip_special_tokens=True)


async def check_hint(engine, tokenizer, comparer: Comparer, turn: Turn, hint: str, max_tokens: int) -> HintCheck:
    answer = await teacher_answer(engine, tokenizer, turn, hint, max_tokens)
    comparison = await comparer.compare(turn, hint, answer)
    return HintCheck(turn.id, hint, turn.response_text, answer, comparison.outcome, comparison.detail, comparer.name)


def _sign(delta: float, margin: float) -> Outcome:
    return "better" if delta > margin else "worse" if delta < -margin else "same"


class RubricComparer:
    """The persona's rubric on both answers (simulation: the problem is found by its question
    text in the conversation)."""

    name = "rubric"

    def __init__(self, persona, problems: list):
        self.persona, self.problems = persona, problems

    def problem_of(self, turn: Turn):
        text = user_text(turn.prompt_messages)
        return next((p for p in self.problems if p.question in text), None)

    async def compare(self, turn: Turn, hint: str, answer: str) -> Comparison:
        problem = self.problem_of(turn)
        if problem is None:
            return Comparison("unknown", "no known problem in the conversation")
        before, after = self.persona.rubric(problem, turn.response_text), self.persona.rubric(problem, answer)
        return Comparison(_sign(after - before, 1e-9), f"rubric {before:.2f} -> {after:.2f}")


class PairwiseComparer:
    """A chat judge's preference, asked in both orders (see the module docstring)."""

    def __init__(self, backend, *, max_tokens: int = 256, temperature: float = 0.0, context_token_budget: int = 1024,
                 count_tokens: Callable[[str], int] = lambda text: len(text) // 4):
        self.backend, self.max_tokens, self.temperature = backend, max_tokens, temperature
        self.context_token_budget, self.count_tokens = context_token_budget, count_tokens
        self.name = f"judge:{backend.name}"

    async def compare(self, turn: Turn, hint: str, answer: str) -> Comparison:
        if turn.next_state is None:
            return Comparison("unknown", "the turn has no next state to compare by")
        role = turn.next_state.role if turn.next_state.role in NEXT_STATE_ROLES else "environment"

        async def prefer(first: str, second: str, seed: int) -> str | None:
            messages = comparison_prompt(turn.prompt_messages, first, second, role, turn.next_state.content,
                                         self.context_token_budget, self.count_tokens)
            try:
                text = await self.backend.complete(messages, max_tokens=self.max_tokens,
                                                   temperature=self.temperature, seed=seed)
                return parse_preference(text)
            except Exception:  # noqa: BLE001 - a failed or unreadable asking decides nothing
                return None

        # the hinted answer is A in the first asking and B in the second
        first, second = await asyncio.gather(prefer(answer, turn.response_text, turn.id * 10),
                                             prefer(turn.response_text, answer, turn.id * 10 + 1))
        named = ({"A": "hinted", "B": "response", "same": "same"}, {"A": "response", "B": "hinted", "same": "same"})
        picks = [named[i].get(p, "unparsed") if p else "unparsed" for i, p in enumerate((first, second))]
        read = f"hinted shown first: {picks[0]}; response shown first: {picks[1]}"
        if picks == ["unparsed", "unparsed"]:
            return Comparison("unknown", read)
        if picks == ["hinted", "hinted"]:
            return Comparison("better", read)
        if picks == ["response", "response"]:
            return Comparison("worse", read)
        return Comparison("same", read)


class HintAgreementComparer:
    """The embedding judge's check: which answer lies closer to the hint (a proxy, see the module
    docstring)."""

    name = "hint-agreement"

    def __init__(self, encoder=None, margin: float = 0.02):
        self._encoder, self.margin = encoder, margin

    def _similarities(self, hint: str, texts: list[str]) -> list[float]:
        if self._encoder is None:
            self._encoder = SentenceEncoder()
        vectors = self._encoder.encode([hint, *texts])
        return [float(vectors[0] @ v) for v in vectors[1:]]

    async def compare(self, turn: Turn, hint: str, answer: str) -> Comparison:
        before, after = await asyncio.to_thread(self._similarities, hint, [turn.response_text, answer])
        return Comparison(_sign(after - before, self.margin), f"closeness to the hint {before:.2f} -> {after:.2f}")


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default)."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(checks: list[HintCheck]) -> dict:
    """Counts per outcome, and over the decided turns (better or worse) the share where the
    hinted answer was better, with its 95 % Wilson interval. The call: go when that interval
    lies above one half, no-go when below, else undecided (also with fewer than
    MIN_DECIDED decided turns)."""
    counts = {outcome: sum(c.outcome == outcome for c in checks) for outcome in OUTCOMES}
    decided = counts["better"] + counts["worse"]
    low, high = wilson(counts["better"], decided)
    if decided < MIN_DECIDED:
        call = "undecided"
        why = f"only {decided} turns where the answers differed (at least {MIN_DECIDED} needed)"
    elif low > 0.5:
        call, why = "go", "the hinted answer is better in a clear majority of the turns where they differ"
    elif high < 0.5:
        call, why = "no-go", "the hinted answer is worse in a clear majority: OPD would pull towards worse answers"
    else:
        call, why = "undecided", "better and worse are within chance of each other"
    return {"checked": len(checks), **counts,
            "better_share": round(counts["better"] / decided, 3) if decided else None,
            "better_share_ci95": [round(low, 3), round(high, 3)] if decided else None,
            "call": call, "why": why}

