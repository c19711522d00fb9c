"""Teacher scoring: the same model, told a hint in hindsight, re-reads the original response.

For each candidate hint the hint is appended, clearly delimited, to the last user message
of the turn's prompt as it was served (`served_messages`: the client's messages with the
user's experience block, if one was served, in the system message), i.e. the
hindsight-enhanced state s ⊕ hint; the prompt is rendered with the chat template exactly
as serving rendered it (same tools); and the **original** response token ids are scored
under it, so teacher and behaviour log-probs condition on the same context but the hint.
Log-probs are those of the distribution the behaviour log-probs were measured under: the
same temperature, then the same top-p truncation and renormalisation
(`SamplingParams.logprob_temperature` and `logprob_top_p`; greedy turns: T = 1, no
top-p), so teacher minus behaviour compares like with like and a
teacher told nothing new reproduces the behaviour log-probs. A response token that the
hinted teacher's own top-p cuts has log-prob -inf; the OPD advantage clips it to -C.

The teacher is the policy engine it is given, at whatever version that engine serves when
it scores; `TeacherResult.policy_version` records that version. An update can land
between the scoring passes of one turn (one per hint, then the student), so the version
is read before and after them: versions only increase, so an unchanged number means every
pass ran on the same weights, and a changed one means the turn is scored again.

The experience pass (`score_experience`, what `consolidate` trains on) scores a turn
served with its user's experience block twice, on one version: the student, the client's
own messages rendered as serving rendered them but without the block (same template,
tools and tool_choice), and the teacher, the exact ids served. Both are scored here, even
when the engine still serves the version that sampled the turn and the recorded behaviour
log-probs are in principle the teacher's: those come from decoding (KV cache, another
batch, on vLLM or SGLang another kernel and precision), the student from a prefill, and
their numerical difference would be an advantage on every token that no lesson caused
(losses.py never stands behaviour in for a teacher for the same reason). Scoring both
with one engine and one kind of pass leaves the block as the only difference; the cost
is one prefill, of a prompt that serving's prefix cache mostly holds. The served ids are
re-rendered first, and a turn whose served prompt does not re-render to its ids is not
scored (the student's ids would not be its prompt without the block).

Personal adapters (docs/personal-adapters.md): when the engine serves the turn's owner an
adapter of their own, every pass scores under that adapter (`personal_adapter`), since
that adapter sampled the turn and is what the user's trainer steps; scoring under the
shared base would add the adapter's whole difference from the base to every token's
advantage and pull the adapter back toward the base. The version check then covers the
adapter's version too.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from openclaw_rl.chat import content_text, render_prompt
from openclaw_rl.engine.base import scoring_adapter, weights_in_use
from openclaw_rl.experience import place
from openclaw_rl.judge.overlap import HintSelection, select_hint
from openclaw_rl.types import Constraint, ExperienceTargets, Message, SamplingParams, Score, Turn

HINT_PREFIX = "[Hint, written in hindsight for this request:"
VERSION_ATTEMPTS = 3  # scorings of one turn before weight updates landing mid-way are an error


class TeacherVersionError(RuntimeError):
    """Every scoring of a turn saw the teacher's weights change part way."""


class ExperienceRenderError(ValueError):
    """A turn's served prompt does not re-render to the ids it was served with."""


def hinted_messages(prompt_messages: list[Message], hint: str) -> list[Message]:
    """The prompt with `hint` appended to its last user message (a new one if there is none)."""
    messages = copy.deepcopy(prompt_messages)
    block = f"{HINT_PREFIX} {hint.strip()}]"
    for message in reversed(messages):
        if message.get("role") == "user":
            message["content"] = f"{content_text(message)}\n\n{block}"
            return messages
    return [*messages, {"role": "user", "content": block}]


def served_messages(turn: Turn) -> list[Message]:
    """The messages serving rendered `turn`'s prompt ids from: the client's, with the experience block served."""
    return place(turn.prompt_messages, turn.experience_block, turn.experience_placement)


def _sampling(turn: Turn) -> SamplingParams:
    return SamplingParams(temperature=float(turn.sampling.get("temperature", 1.0)),
                          top_p=float(turn.sampling.get("top_p", 1.0)))


def logprob_temperature(turn: Turn) -> float:
    return _sampling(turn).logprob_temperature


def logprob_top_p(turn: Turn) -> float:
    return _sampling(turn).logprob_top_p


def personal_adapter(engine, turn: Turn) -> dict[str, str]:
    """`adapter=` for `engine.score` when the engine serves `turn`'s owner a personal adapter
    now; nothing otherwise (the shared model, and engines without personal adapters)."""
    return scoring_adapter(engine, turn.owner)


def grammar_mask(turn: Turn) -> dict[str, Constraint]:
    """`constraint=` for `engine.score` when the turn was sampled under a grammar: scored under the
    same mask, as the trainer measures it (engine/grammar.py); nothing for a free turn."""
    constraint = Constraint.from_dict(turn.sampling.get("constraint"))
    return {"constraint": constraint} if constraint else {}


@dataclass(frozen=True)
class TeacherResult:
    """Targets from the selected hint(s), aligned with the response tokens."""

    hint: str  # the selected hint (token level: the hint used at the most positions)
    logprobs: list[float]  # (T,)
    top_ids: list[list[int]]  # (T, K)
    top_logprobs: list[list[float]]  # (T, K)
    selection: HintSelection
    temperature: float
    top_p: float
    policy_version: int | None = None  # the engine's version during every scoring pass


async def score_hints(engine, tokenizer, turn: Turn, hints: list[str], *, strategy: str, select_k: int,
                      teacher_k: int, rng=None) -> TeacherResult:
    """Score every hint's teacher, select among them, and return the chosen targets, all from
    one policy version (see the module docstring)."""
    async def once() -> TeacherResult:
        return await _score_hints_once(engine, tokenizer, turn, hints, strategy=strategy, select_k=select_k,
                                       teacher_k=teacher_k, rng=rng)

    result, version = await at_one_version(engine, f"turn {turn.id}", once, owner=turn.owner)
    return replace(result, policy_version=version)


def student_prompt_ids(tokenizer, turn: Turn) -> list[int]:
    """`turn`'s prompt without its experience block: the client's messages, rendered as serving rendered them."""
    return block_prompt_ids(tokenizer, turn, "")


def block_prompt_ids(tokenizer, turn: Turn, block: str, placement: str | None = None) -> list[int]:
    """`turn`'s prompt with experience block `block` instead of the one it was served with ("": none),
    placed where `placement` (default: the turn's own) puts it and rendered as serving rendered it
    (its chat template, tools and tool_choice): what absorption and the experience gate score."""
    messages = place(turn.prompt_messages, block, placement or turn.experience_placement)
    return render_prompt(tokenizer, messages, turn.sampling.get("tools"), turn.sampling.get("tool_choice"))


async def score_experience(engine, tokenizer, turn: Turn) -> ExperienceTargets | None:
    """The response of a turn served with an experience block under its prompt without the
    block (student) and with it (teacher, the ids served), on one policy version; None for a
    turn served without one. ExperienceRenderError when the served prompt does not re-render
    to its ids (see the module docstring)."""
    if not turn.experience_block or turn.experience_version is None:
        return None
    tools, tool_choice = turn.sampling.get("tools"), turn.sampling.get("tool_choice")
    if render_prompt(tokenizer, served_messages(turn), tools, tool_choice) != turn.prompt_token_ids:
        raise ExperienceRenderError(f"turn {turn.id}'s served prompt does not re-render to its "
                                    f"{len(turn.prompt_token_ids)} ids (another chat template?); no experience pass")
    student_ids = student_prompt_ids(tokenizer, turn)
    temperature, top_p = logprob_temperature(turn), logprob_top_p(turn)

    async def once() -> tuple[Score, Score]:
        mask = {**grammar_mask(turn), **personal_adapter(engine, turn)}
        student = await engine.score(student_ids, turn.response_token_ids, temperature=temperature, top_p=top_p,
                                     **mask)
        teacher = await engine.score(turn.prompt_token_ids, turn.response_token_ids, temperature=temperature,
                                     top_p=top_p, **mask)
        return student, teacher

    (student, teacher), version = await at_one_version(engine, f"turn {turn.id}", once, owner=turn.owner)
    return ExperienceTargets(prompt_token_ids=student_ids, student_logprobs=list(student.logprobs),
                             teacher_logprobs=list(teacher.logprobs), policy_version=version,
                             experience_version=turn.experience_version)


async def at_one_version(engine, what: str, scoring, owner: str | None = None):
    """(what `scoring()` returns, the version) from a run during which the engine's version (and
    `owner`'s personal adapter version) did not change; TeacherVersionError naming `what`
    (e.g. "turn 7") when every run saw it change."""
    result, (version, _) = await at_one_weights(engine, what, scoring, owner)
    return result, version


async def at_one_weights(engine, what: str, scoring, owner: str | None = None):
    """As `at_one_version`, with the weights: (result, (the engine's version, `owner`'s adapter
    version or None when the engine serves them none))."""
    for _ in range(VERSION_ATTEMPTS):
        before = weights_in_use(engine, owner)
        result = await scoring()
        if weights_in_use(engine, owner) == before:
            return result, before
    raise TeacherVersionError(
        f"the teacher's weights changed during each of {VERSION_ATTEMPTS} scorings of {what} "
        f"(now v{engine.policy_version}); updates come faster than one turn scores: publish less often")


async def _score_hints_once(engine, tokenizer, turn: Turn, hints: list[str], *, strategy: str, select_k: int,
                            teacher_k: int, rng=None) -> TeacherResult:
    temperature, top_p = logprob_temperature(turn), logprob_top_p(turn)
    tools = turn.sampling.get("tools")
    tool_choice = turn.sampling.get("tool_choice")
    response = turn.response_token_ids
    mask = {**grammar_mask(turn), **personal_adapter(engine, turn)}
    teachers: list[Score] = []
    for hint in hints:
        prompt = render_prompt(tokenizer, hinted_messages(served_messages(turn), hint), tools, tool_choice)
        teachers.append(await engine.score(prompt, response, temperature=temperature, top_p=top_p,
                                           top_k=max(select_k, teacher_k), **mask))
    if len(hints) == 1:  # nothing to choose between: skip the student's forward pass (a second prefill)
        selection = HintSelection(strategy, 0, None, [])
    else:
        student = await engine.score(turn.prompt_token_ids, response, temperature=temperature, top_p=top_p,
                                     top_k=select_k, **mask)
        selection = select_hint(
            strategy, hints, student_top=student.top_ids,
            teachers=[[row[:select_k] for row in t.top_ids] for t in teachers], rng=rng, k=select_k,
        )
    positions = range(len(response))
    chosen = [teachers[selection.hint_at(t)] for t in positions]
    used = [selection.hint_at(t) for t in positions]
    main = max(set(used), key=used.count) if used else 0
    return TeacherResult(
        hint=hints[main],
        logprobs=[chosen[t].logprobs[t] for t in positions],
        top_ids=[chosen[t].top_ids[t][:teacher_k] for t in positions],
        top_logprobs=[chosen[t].top_logprobs[t][:teacher_k] for t in positions],
        selection=selection,
        temperature=temperature,
        top_p=top_p,
    )
