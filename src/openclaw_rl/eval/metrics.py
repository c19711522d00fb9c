"""The personalization score and its curves (docs/method.md §5).

The score is the mean rubric score of the policy's *first* answers to a fixed held-out
set of problems, decoded greedily so that it measures the policy, not the sampler. The
evaluation requests are sent as `X-Turn-Type: side`: the server answers and logs them
but never pairs or trains on them, so measuring never leaks into training. A server that
never trains (the evaluator of `simulate`, with a store of its own) may be asked main
turns instead (`kind="main"`), which serving answers as it answers the user: the user's
experience block, and the answer checked against their lessons, compared with one
decoded without the block and maybe rewritten (serve/pipeline.py); side turns get the
block but none of that.
"""

from __future__ import annotations

import logging
import random
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import openai
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from openclaw_rl.eval.personas import Persona
from openclaw_rl.eval.problems import Problem
from openclaw_rl.types import TurnKind

__all__ = ["FirstAnswer", "curve_title", "first_answers", "personalization_score", "plot_curves"]

log = logging.getLogger(__name__)

CurvePoint = tuple[int, int, float]  # (sessions played, policy updates, score)


@dataclass(frozen=True)
class FirstAnswer:
    problem_id: str
    response: str
    score: float
    failed_checks: tuple[str, ...]
    policy_version: int | None


def first_answers(client: openai.OpenAI, model_name: str, persona: Persona, heldout: Sequence[Problem],
                  max_tokens: int = 256, concurrency: int = 4, kind: TurnKind = "side") -> list[FirstAnswer]:
    """The policy's greedy first answer to each held-out problem, scored by the rubric.

    Requests run `concurrency` at a time, because the engine batches concurrent requests. The
    server adds the caller's experience block as it does to any request; `kind="main"` asks main
    turns (see the module docstring): only of a server whose store is never trained on.
    """

    def answer(problem: Problem) -> FirstAnswer:
        raw = client.chat.completions.with_raw_response.create(
            model=model_name, messages=[{"role": "user", "content": persona.first_message(problem)}],
            temperature=0.0, max_tokens=max_tokens, extra_headers={"X-Turn-Type": kind})
        text = raw.parse().choices[0].message.content or ""
        version = raw.headers.get("x-policy-version")
        failed = tuple(c.name for c in persona.failed_checks(problem, text))
        return FirstAnswer(problem.id, text, persona.rubric(problem, text), failed,
                           int(version) if version is not None else None)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(answer, heldout))


def personalization_score(client: openai.OpenAI, model_name: str, persona: Persona, heldout: Sequence[Problem],
                          max_tokens: int = 256, concurrency: int = 4) -> float:
    """Mean rubric score of the greedy first answers on the held-out set, in [0, 1]."""
    if not heldout:
        raise ValueError("the held-out set is empty; pass at least one problem (e.g. heldout_problems(16))")
    answers = first_answers(client, model_name, persona, heldout, max_tokens, concurrency)
    return sum(a.score for a in answers) / len(answers)


def curve_title(judge: str, persona: str | None = None) -> str:
    """The plot's title: which persona, and which judge gave the rewards (the oracle loudly)."""
    judge_label = "ORACLE judge (reads the persona rubric)" if judge == "oracle" else f"judge: {judge}"
    return f"Personalization score, {persona + ' persona, ' if persona else ''}{judge_label}"


def plot_curves(runs: dict[str, Sequence[CurvePoint]], path: str | Path, *, judge: str,
                persona: str | None = None, accepted: dict[str, Sequence[bool]] | None = None) -> Path:
    """Score against sessions and against updates, one labelled line per method, as a PNG.

    `runs` maps a method name to its points (sessions, updates, score). The title names
    the judge, and says "ORACLE judge" when the reward came from the persona's rubric.
    `accepted` (per method, in session start order): beside the score against sessions,
    each accepted session as a tick at the bottom and the acceptance of the last 5
    sessions as a dashed line, so the adaptation metric can be read off the same plot.
    """
    if not runs or not any(runs.values()):
        raise ValueError("plot_curves got no points; pass {method: [(sessions, updates, score), ...]}")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a Figure of its own, not pyplot's: no backend or display to choose, no global state to close
    fig = Figure(figsize=(11, 4.2))
    by_sessions, by_updates = fig.subplots(1, 2, sharey=True)
    for method, points in runs.items():
        ordered = sorted(points)
        sessions, updates, scores = ([p[i] for p in ordered] for i in range(3))
        by_sessions.plot(sessions, scores, marker="o", label=method)
        line, = by_updates.plot(updates, scores, marker="o", label=method)
        flags = list((accepted or {}).get(method, ()))
        if flags:
            rolling = [sum(flags[max(0, i - 4): i + 1]) / len(flags[max(0, i - 4): i + 1]) for i in range(len(flags))]
            by_sessions.plot(range(1, len(flags) + 1), rolling, linestyle="--", color=line.get_color(), alpha=0.7,
                             label=f"{method}: accepted, last 5")
            hits = [i + 1 for i, ok in enumerate(flags) if ok]
            by_sessions.plot(hits, [0.02] * len(hits), linestyle="", marker="|", markersize=10, color=line.get_color())
    by_sessions.set_xlabel("sessions played")
    by_updates.set_xlabel("policy updates")
    by_sessions.set_ylabel("personalization score (held-out first answers)")
    for axis in (by_sessions, by_updates):
        axis.set_ylim(0.0, 1.0)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # sessions and updates are counts
        axis.grid(alpha=0.3)
    by_sessions.legend(title="method")
    fig.suptitle(curve_title(judge, persona))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def sessions_to_adaptation(accepted: list[bool], run: int = 3) -> int | None:
    """The paper's (v2) adaptation metric: the 1-based index, in start order, of the first
    session that begins `run` accepted sessions in a row (accepted: the user approved the
    first answer without a correction); None when the stream never has such a run."""
    streak = 0
    for index, ok in enumerate(accepted, start=1):
        streak = streak + 1 if ok else 0
        if streak == run:
            return index - run + 1
    return None


def bootstrap_mean_ci(values: Sequence[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile bootstrap interval of the mean of `values` (a study's runs or pairs)."""
    rng = random.Random(seed)
    means = sorted(statistics.mean(rng.choices(values, k=len(values))) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def acceptance(accepted: list[bool], last: int = 10) -> dict[str, float | int | None]:
    """Acceptance over the stream and over its last `last` sessions, and the adaptation index."""
    tail = accepted[-last:]
    return {
        "sessions_to_adaptation": sessions_to_adaptation(accepted),
        "accept_rate": round(sum(accepted) / len(accepted), 3) if accepted else None,
        f"accept_rate_last_{last}": round(sum(tail) / len(tail), 3) if tail else None,
    }

