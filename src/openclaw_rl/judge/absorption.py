"""Has the policy absorbed a lesson? The gap its log-probs show with the lesson in context and without.

For one lesson of a user and some of that user's turns (their recent ones, or the turns
the lesson was learned from), each turn's response is scored twice on one policy version:
on the client's messages with a block holding that lesson alone, and on the client's
messages with no block (rendered as serving rendered them: judge/teacher.py). On a
response sampled with the lesson in context, the mean per-token gap
log π(y | with) − log π(y | without) estimates KL(with ‖ without): how much the lesson
still changes what the model says.

**The rule** (`absorbed`, what the API and the dashboard show): a lesson is absorbed when
its gap has fallen to a quarter (`ABSORBED_SHARE`) of its first measured gap, and only a
lesson whose first gap was at least `MEASURABLE_GAP` can be told; otherwise "cannot tell".
Relative, because the size of a gap depends on where the lesson sits and on the lesson,
not only on the weights. Measured on SmolLM2-135M (`python scripts/absorption.py RUNS
--turns 4`, docs/experience.md): on the *base* weights, lessons served in the system
message move their responses by -0.003 to +0.010 nats per token (5 lessons) and lessons
in front of the user's message by +0.060 to +0.148 (9 lessons, two runs); after
`--method consolidate` trained one of those runs (its last checkpoint), the same 4
lessons' gaps fell to 0.33-0.37 of their base gaps (+0.020 to +0.049). No absolute
threshold fits both placements, and none says how far a lesson has gone. Nothing retires
or shrinks a lesson by the rule (docs/experience.md, "Into the weights"). A small gap also comes
from prompts the lesson does not bear on, so the turns should be ones it applies to.

**Personal adapters** (docs/personal-adapters.md): a user's weights are their adapter on the
frozen base, so when the engine serves the user one, every pass scores under it
(`personal_adapter`, as the judge's teacher does) and the measurement records both the
shared version and the adapter version (`adapter_version`; None: the shared model). The rule
compares a lesson's measurements along one line of weights (`weights_line`): the line of its
newest measurement. The shared line is every measurement without an adapter, by shared
version (all of them with personal adapters off: the rule as before). The adapter line is
the measurements under the user's adapter on one base, by adapter version, after the
measurement of that base without an adapter if there is one: the base is what the adapter
started from (peft's init adds nothing), so its gap is the adapter line's first.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openclaw_rl.experience import Experience, Lesson, render
from openclaw_rl.judge.teacher import (
    at_one_weights, block_prompt_ids, grammar_mask, logprob_temperature, logprob_top_p, personal_adapter, student_prompt_ids,
)
from openclaw_rl.types import Turn

ABSORBED_GAP = 0.05  # nats per token: `lesson_absorption`'s default threshold (its `absorbed` flag)
MEASURABLE_GAP = 0.02  # a first gap below this is within what base weights show (module docstring)
ABSORBED_SHARE = 0.25  # absorbed: the latest gap at most this share of the first


@dataclass(frozen=True)
class Absorption:
    """How far one lesson still moves the policy on some of its user's turns."""

    lesson_id: int
    gap_per_token: float  # mean over the turns of each turn's mean log π(y | with) − log π(y | without)
    turns: int  # how many turns it was measured on
    absorbed: bool  # gap_per_token < the threshold
    policy_version: int  # the shared weights every pass ran on
    adapter_version: int | None = None  # the user's personal adapter every pass ran under; None: none


def lesson_block(lesson: Lesson) -> str:
    """The experience block of `lesson` alone, as serving renders a block."""
    return render(Experience(lesson.owner, (lesson,)), sys.maxsize, len)


async def lesson_absorption(engine, tokenizer, lesson: Lesson, turns: Sequence[Turn], *,
                            threshold: float = ABSORBED_GAP) -> Absorption:
    """The lesson's gap on `turns` (those with a response), on one policy version of `engine`."""
    turns = [turn for turn in turns if turn.response_token_ids]
    if not turns:
        raise ValueError(f"lesson {lesson.id} needs at least one turn with a response to be measured on")
    (found,) = await _absorptions(engine, tokenizer, [(lesson, turns)], threshold, f"lesson {lesson.id}")
    return found


async def experience_absorption(engine, tokenizer, lessons: Sequence[Lesson], served: Sequence[Turn],
                                per_lesson: int) -> list[Absorption]:
    """Each lesson's gap on up to `per_lesson` of `served` (newest first) whose block held it, all on
    one policy version; a lesson no turn was served with is left out."""
    pairs = [(lesson, [turn for turn in served if turn.response_token_ids
                       and lesson.text in turn.experience_block][:per_lesson]) for lesson in lessons]
    pairs = [(lesson, turns) for lesson, turns in pairs if turns]
    return await _absorptions(engine, tokenizer, pairs, ABSORBED_GAP, "the lessons") if pairs else []


def served_with_block(store, owner: str, sessions: int) -> list[Turn]:
    """`owner`'s main turns served with an experience block and answered, of their `sessions`
    latest sessions, newest first: what `experience_absorption` measures on."""
    found = []
    for session in store.list_sessions(limit=sessions, owner=owner):
        found += [turn for turn in reversed(store.turns(session.id))
                  if turn.kind == "main" and turn.experience_block and turn.response_token_ids]
    return found


async def _absorptions(engine, tokenizer, pairs: list[tuple[Lesson, list[Turn]]], threshold: float,
                       what: str) -> list[Absorption]:
    """Each (lesson, its turns)'s mean gap, on one version (and under the owner's adapter when the
    engine serves them one); a turn several lessons share is scored without a block once."""

    async def once() -> list[list[float]]:
        plain: dict[int, list[float]] = {}
        gaps = []
        for lesson, turns in pairs:
            block, mine = lesson_block(lesson), []
            for turn in turns:
                params = dict(temperature=logprob_temperature(turn), top_p=logprob_top_p(turn), **grammar_mask(turn),
                              **personal_adapter(engine, turn))
                if turn.id not in plain:
                    plain[turn.id] = (await engine.score(student_prompt_ids(tokenizer, turn), turn.response_token_ids,
                                                         **params)).logprobs
                taught = (await engine.score(block_prompt_ids(tokenizer, turn, block), turn.response_token_ids,
                                             **params)).logprobs
                mine.append(sum(t - s for t, s in zip(taught, plain[turn.id])) / len(taught))
            gaps.append(mine)
        return gaps

    owners = {turn.owner for _, turns in pairs for turn in turns}
    if len(owners) != 1:
        raise ValueError(f"{what}: one user's turns at a time (their adapter is the weights), not {sorted(owners)}")
    gaps, (version, adapter) = await at_one_weights(engine, what, once, owner=owners.pop())
    return [Absorption(lesson.id, sum(g) / len(g), len(g), sum(g) / len(g) < threshold, version, adapter)
            for (lesson, _), g in zip(pairs, gaps)]


def absorbed(measurements: Sequence[Mapping[str, Any]]) -> bool | None:
    """A lesson's state from its measurements (store.absorption, oldest weights first), along the
    line of its newest (`weights_line`): True when the line's latest gap is at most
    `ABSORBED_SHARE` of its first, False when not, None when it cannot be told (fewer than two
    weights measured on the line, or a first gap below `MEASURABLE_GAP`: the lesson never
    moved the model measurably)."""
    return _rule(weights_line(measurements))


def absorbed_by_adapter_version(measurements: Sequence[Mapping[str, Any]]) -> dict[int, bool | None]:
    """For each adapter version a lesson was measured under: the rule on its adapter line up to that version."""
    return {m["adapter_version"]: _rule(weights_line(measurements, m)) for m in measurements
            if m.get("adapter_version") is not None}


def _rule(line: Sequence[Mapping[str, Any]]) -> bool | None:
    if len(line) < 2 or line[0]["gap"] < MEASURABLE_GAP:
        return None
    return line[-1]["gap"] <= ABSORBED_SHARE * line[0]["gap"]


def weights_line(measurements: Sequence[Mapping[str, Any]],
                 last: Mapping[str, Any] | None = None) -> list[Mapping[str, Any]]:
    """The measurements the rule compares, oldest first, up to `last` (default: the newest measured,
    `measured_at`): without an adapter, every one without an adapter; under an adapter, the
    latest measurement of its base without an adapter, then the adapter's versions on that base
    up to `last`'s (module docstring)."""
    if not measurements:
        return []
    if last is None:  # the newest measured; a tie (or no times): the last
        last = max(reversed(measurements), key=lambda m: m.get("measured_at", 0.0))
    if last.get("adapter_version") is None:
        return [m for m in measurements if m.get("adapter_version") is None]
    base = [m for m in measurements if m["policy_version"] == last["policy_version"]]
    return ([m for m in base if m.get("adapter_version") is None][-1:]
            + [m for m in base if m.get("adapter_version") is not None
               and m["adapter_version"] <= last["adapter_version"]])
