"""The judge worker: every paired main turn gets a verdict, off the request path.

    loop: find main turns whose next state arrived and that have no verdict
          -> read them (m evaluative + m directive votes, or the embedding judge's one)
          -> teacher-score the candidate hints and select one by overlap
          -> a turn served with an experience block: score it without and with the block
          -> write the verdict, then the turn's one sample with every signal found
          (beside it: the screened hints and corrections become lessons of the turn's user)

The worker knows no training method: each sample carries whatever signals the turn has
(reward, teacher log-probs and top-k) and every trainer's method takes from it what it
reads when it claims it (judge/samples.py, train/methods.py), so one judge serves
trainers of any methods. Teacher scoring costs a prefill per hint; a worker without a
`teacher_engine`, or with `--no-teacher-targets`, scores none (the composition root
leaves the engine out when the only method that will train reads no teacher).

Failures are data, never rewards: a judge call that errors or times out is retried with
exponential backoff; when every evaluative call of a turn has failed, the turn gets a
`no_verdict` verdict with the reason, and no sample. An answer that cannot be parsed is
one dropped vote; a turn whose votes all failed to parse has reward 0 (no signal).
Concurrency is bounded by a semaphore on judge calls.

Teacher weights: the worker scores with whatever policy the teacher engine holds, and
each verdict records that version (`teacher_policy_version`). An engine that serving or
a trainer updates is current by itself; one that must fetch new versions (the standalone
`openclaw-rl judge`, reading the files channel) passes `refresh`, which the worker awaits
before each batch of waiting turns, so no batch is scored with older weights than the
newest published when it was picked up.

Stale turns are not judged: with `max_staleness` (the trainer's, which the composition
root passes when it trains in the same stack), a turn sampled by a policy more than
`max_staleness` versions behind the announced one (`Store.policy_version`), the same test
a trainer's claim applies, gets a `dropped` sample with the reason and no verdict. After a
restart, the turns served before a crash would be judged for minutes, then dropped by the
trainer at once. Such a turn's explicit correction (a feedback next state) still becomes a
lesson, which takes no judge call; hints only the judge's reading would give are not
sought. The announced version trails the trainer's by at most the one version on its way,
so the judge skips no turn the trainer would still take.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol

from openclaw_rl.config import JudgeConfig
from openclaw_rl.judge.backends import ChatBackend
from openclaw_rl.judge.classifier import NextStateClassifier
from openclaw_rl.judge.evidence import action_fix, material
from openclaw_rl.judge.experience_gate import ExperienceGate, learn_lessons
from openclaw_rl.judge.hint_check import DROPPED_BY_CHECK, Comparer, check_hint
from openclaw_rl.judge.lessons import LessonLearner
from openclaw_rl.judge.prompts import directive_prompt, evaluative_prompt
from openclaw_rl.judge.rules import MAX_HINTS, correction_hints
from openclaw_rl.judge.samples import turn_sample
from openclaw_rl.judge.screen import screen_hint, turn_conversation
from openclaw_rl.judge.teacher import TeacherResult, score_experience, score_hints
from openclaw_rl.judge.votes import VoteParseError, dedupe_hints, majority, parse_directive, parse_score
from openclaw_rl.store import Store
from openclaw_rl.types import ExperienceTargets, Turn, Verdict

log = logging.getLogger(__name__)

_ROLES = ("user", "tool", "environment", "feedback")


class JudgeFailure(RuntimeError):
    """No verdict can be given for this turn (every judge call failed)."""


@dataclass
class Reading:
    votes: list[int]
    raw: list[str]
    hints: list[str]
    notes: list[str] = field(default_factory=list)


class Judge(Protocol):
    name: str

    async def read(self, turn: Turn) -> Reading: ...


async def call_with_retries(call: Callable[[], Awaitable[str]], *, attempts: int, timeout_s: float,
                            backoff_s: float, limit: asyncio.Semaphore) -> str:
    """One judge call: a timeout per attempt, exponential backoff between attempts."""
    errors = []
    for attempt in range(attempts):
        try:
            async with limit:
                return await asyncio.wait_for(call(), timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure of the judge is retried, then recorded
            errors.append(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
            if attempt + 1 < attempts:
                await asyncio.sleep(backoff_s * 2**attempt)
    raise JudgeFailure(f"{attempts} attempts failed; last: {errors[-1]}")


def _next_state_role(turn: Turn) -> str:
    role = turn.next_state.role if turn.next_state else "user"
    return role if role in _ROLES else "environment"


class LLMJudge:
    """m evaluative and m directive votes from a chat model."""

    def __init__(self, backend: ChatBackend, config: JudgeConfig, count_tokens: Callable[[str], int]):
        self.backend, self.config, self.count_tokens = backend, config, count_tokens
        self.name = backend.name
        self._limit = asyncio.Semaphore(config.concurrency)

    async def read(self, turn: Turn) -> Reading:
        c = self.config
        material = (turn.prompt_messages, turn.response_text, turn.tool_calls, _next_state_role(turn),
                    turn.next_state.content, c.context_token_budget, self.count_tokens)
        prompts = [evaluative_prompt(*material)] * c.votes + [directive_prompt(*material)] * c.votes

        def call(messages, seed):
            return call_with_retries(
                lambda: self.backend.complete(messages, max_tokens=c.judge_max_tokens, temperature=c.judge_temperature,
                                              seed=seed),
                attempts=c.max_attempts, timeout_s=c.call_timeout_s, backoff_s=c.backoff_s, limit=self._limit)

        results = await asyncio.gather(*(call(p, turn.id * 100 + i) for i, p in enumerate(prompts)),
                                       return_exceptions=True)
        evaluative, directive = results[: c.votes], results[c.votes :]
        failures = [r for r in results if isinstance(r, BaseException)]
        if all(isinstance(r, BaseException) for r in evaluative):
            raise JudgeFailure(f"every evaluative call failed: {failures[0]}")
        reading = Reading(votes=[], raw=[r for r in results if isinstance(r, str)], hints=[])
        reading.notes += [str(f) for f in failures]
        for answer in evaluative:
            if isinstance(answer, str):
                try:
                    reading.votes.append(parse_score(answer))
                except VoteParseError as error:
                    reading.notes.append(f"dropped vote: {error}")
        for answer in directive:
            if isinstance(answer, str):
                try:
                    corrected, hint = parse_directive(answer)
                except VoteParseError as error:
                    reading.notes.append(f"dropped directive vote: {error}")
                    continue
                if corrected and hint:
                    reading.hints.append(hint)
        return reading


class EmbeddingJudge:
    """One deterministic vote from the request, the action and the next state (judge/classifier.py);
    hints only on a correction, from what its next state says should have been done (judge/rules.py)."""

    name = "embedding"

    def __init__(self, classifier: NextStateClassifier | None = None):
        self.classifier = classifier or NextStateClassifier()

    async def read(self, turn: Turn) -> Reading:
        m = material(turn, _next_state_role(turn))
        reading = await asyncio.to_thread(self.classifier.read, m)
        hints = []
        if reading.vote < 0:  # what the request named, then what the next state says should have been done
            fix = action_fix(m)
            hints = dedupe_hints(([fix] if fix else []) + correction_hints(m.next_state, m.role), MAX_HINTS)
        return Reading(votes=[reading.vote], raw=[reading.explain()], hints=hints)


class JudgeWorker:
    def __init__(self, store: Store, judge: Judge, config: JudgeConfig, teacher_engine=None, tokenizer=None,
                 seed: int = 0, on_verdict: Callable[[Verdict], None] | None = None,
                 refresh: Callable[[], Awaitable[object]] | None = None, *, write_samples: bool = True,
                 comparer: Comparer | None = None, lessons: LessonLearner | None = None,
                 max_staleness: int | None = None, experience_gate: ExperienceGate | None = None):
        """`teacher_engine` (with its `tokenizer`) scores the hints (None: no teacher targets).
        With `config.hint_check` on, `comparer` decides which hints the teacher answers better
        with (judge/hint_check.py); only those are scored and kept.
        `write_samples` False writes verdicts only, for a caller that writes the turns' samples
        itself (the agent rollout driver's step advantages need a whole group of trajectories,
        see drivers/agent.py). `refresh` brings the teacher engine to the newest policy (see the
        module docstring). `lessons` turns screened hints and corrections into lessons of the
        turn's user (None: none are learned). `max_staleness`: turns that far behind the announced
        policy are passed over unjudged (module docstring; None: every turn is judged). `experience_gate`
        checks a new version of a user's experience before it is saved (judge/experience_gate.py;
        None: every version is served)."""
        self.store, self.judge, self.config, self.write_samples = store, judge, config, write_samples
        self.lessons, self.experience_gate = lessons, experience_gate
        self.on_verdict, self.refresh = on_verdict, refresh
        self.teacher_engine, self.tokenizer = teacher_engine, tokenizer
        if config.hint_check == "on" and comparer is None:
            raise ValueError("hint_check on needs a comparer (compose.hint_comparer builds the judge's)")
        self.comparer = comparer if config.hint_check == "on" else None
        self.rng = random.Random(seed)
        self.judged = 0
        self.max_staleness = max_staleness if write_samples else None  # a caller's own samples: it decides

    async def run(self, stop: asyncio.Event) -> None:
        pending: dict[int, asyncio.Task] = {}
        while not stop.is_set():
            waiting = await asyncio.to_thread(self.store.turns_awaiting_verdict, 64)
            candidates = [t for t in waiting if t.id not in pending]
            fresh = await self._pass_over_stale(candidates)
            batch = fresh[: max(0, 2 * self.config.concurrency - len(pending))]
            if batch:
                await self._refresh()
            for turn in batch:
                pending[turn.id] = asyncio.create_task(self.process(turn))
            for turn_id in [t for t, task in pending.items() if task.done()]:
                task = pending.pop(turn_id)
                if task.exception() is not None:
                    log.error("judging turn %d crashed: %r", turn_id, task.exception())
            if len(fresh) < len(candidates):
                continue  # stale turns passed over: the next page may hold more, no need to wait
            try:
                await asyncio.wait_for(stop.wait(), self.config.poll_interval_s)
            except TimeoutError:
                pass
        for task in pending.values():
            task.cancel()

    async def drain(self) -> int:
        """Judge every turn waiting now; return how many were judged (for CLIs and tests)."""
        turns = await asyncio.to_thread(self.store.turns_awaiting_verdict, 10_000)
        turns = await self._pass_over_stale(turns)
        if turns:
            await self._refresh()
        await asyncio.gather(*(self.process(t) for t in turns))
        return len(turns)

    async def _pass_over_stale(self, turns: list[Turn]) -> list[Turn]:
        """The turns worth judging; the others, sampled more than `max_staleness` versions behind
        the announced policy, get a dropped sample with the reason (module docstring)."""
        if self.max_staleness is None or not turns:
            return turns
        current = await asyncio.to_thread(self.store.policy_version)
        fresh = []
        for turn in turns:
            if turn.policy_version >= current - self.max_staleness:
                fresh.append(turn)
                continue
            notes = [f"stale, not judged: sampled by policy v{turn.policy_version}, current v{current}, "
                     f"max_staleness {self.max_staleness}"]
            if self.lessons is not None:  # an explicit correction needs no judge call: still a lesson
                await self._learn(turn, [], [], notes)
            await asyncio.to_thread(self.store.drop_sample, turn.id, turn.policy_version, "; ".join(notes))
        if len(fresh) < len(turns):
            log.info("passed over %d turns unjudged: sampled more than %d versions before the current v%d",
                     len(turns) - len(fresh), self.max_staleness, current)
        return fresh

    async def _refresh(self) -> None:
        """`refresh`, whose failure keeps the weights held (each verdict still names them)."""
        if self.refresh is None:
            return
        try:
            await self.refresh()
        except Exception as error:  # noqa: BLE001 - judging goes on with the weights held
            log.warning("could not bring the teacher to the newest policy (will retry): %s", error)

    async def process(self, turn: Turn) -> Verdict:
        started = time.monotonic()
        try:
            reading = await self.judge.read(turn)
        except JudgeFailure as failure:
            verdict = Verdict(turn_id=turn.id, status="no_verdict", reward=None, votes=[], raw=[], hints=[],
                              selected_hint=None, overlap_scores=[], judge=self.judge.name,
                              latency_s=time.monotonic() - started, reason=str(failure))
            await asyncio.to_thread(self._save, turn, verdict, None, None)
            return verdict
        hints = offered = dedupe_hints(reading.hints, self.config.max_hints)
        if hints and self.config.screen_hints:
            hints = await asyncio.to_thread(self._screened, turn, hints, reading.notes)
        if self.lessons is not None:
            await self._learn(turn, offered, hints, reading.notes)
        if hints and self.comparer is not None and self.teacher_engine is not None and self.config.teacher_targets:
            hints = await self._checked(turn, hints, reading.notes)
        teacher: TeacherResult | None = None
        if hints and self.teacher_engine is not None and self.config.teacher_targets:
            try:
                teacher = await asyncio.wait_for(
                    score_hints(self.teacher_engine, self.tokenizer, turn, hints, strategy=self.config.hint_selection,
                                select_k=self.config.selection_top_k, teacher_k=self.config.teacher_top_k,
                                rng=self.rng),
                    self.config.call_timeout_s)
            except Exception as error:  # the verdict stands; only the directive signal is lost
                reading.notes.append(f"teacher scoring failed: {type(error).__name__}: {error}")
        experience = await self._experience(turn, reading.notes)
        verdict = Verdict(
            turn_id=turn.id, status="ok", reward=majority(reading.votes), votes=reading.votes, raw=reading.raw,
            hints=hints, selected_hint=teacher.hint if teacher else None,
            overlap_scores=[float(x) for x in teacher.selection.overlap_totals] if teacher else [],
            judge=self.judge.name, latency_s=time.monotonic() - started,
            reason="; ".join(reading.notes) or None,
            teacher_policy_version=teacher.policy_version if teacher else None,
        )
        await asyncio.to_thread(self._save, turn, verdict, teacher, experience)
        return verdict

    async def _experience(self, turn: Turn, notes: list[str]) -> ExperienceTargets | None:
        """The experience pass of a turn served with a block (judge/teacher.py), when experience
        targets are scored here; a failure is noted and the turn's other signals stand."""
        if not (turn.experience_block and self.teacher_engine is not None and self.config.experience_targets
                and self.write_samples):
            return None
        try:
            return await asyncio.wait_for(score_experience(self.teacher_engine, self.tokenizer, turn),
                                          self.config.call_timeout_s)
        except Exception as error:  # noqa: BLE001 - only the experience signal is lost
            notes.append(f"experience scoring failed: {type(error).__name__}: {error}")
            return None

    async def _checked(self, turn: Turn, hints: list[str], notes: list[str]) -> list[str]:
        """The hints whose teacher answers better than the response (the hint check); a check
        that fails keeps nothing (not known to be better)."""
        kept = []
        for hint in hints:
            try:
                check = await asyncio.wait_for(
                    check_hint(self.teacher_engine, self.tokenizer, self.comparer, turn, hint,
                               self.config.hint_check_max_tokens), self.config.call_timeout_s)
            except Exception as error:  # noqa: BLE001 - the verdict stands without this hint
                notes.append(f"hint check failed: {type(error).__name__}: {error}")
                continue
            if check.outcome == "better":
                kept.append(hint)
            else:
                notes.append(f"{DROPPED_BY_CHECK} ({check.by}: {check.outcome}, {check.detail})")
        return kept

    def _screened(self, turn: Turn, hints: list[str], notes: list[str]) -> list[str]:
        """The hints that may train; the others go to quarantine with the reason (judge/screen.py),
        unless an admin released them for this turn before."""
        conversation, released = turn_conversation(turn), self.store.released_hints(turn.id)
        kept = []
        for hint in hints:
            reason = None if hint in released else screen_hint(hint, conversation)
            if reason is None:
                kept.append(hint)
            elif self.store.quarantine_hint(turn.id, hint, reason):
                notes.append(f"hint quarantined: {reason}")
                log.warning("turn %d: hint quarantined (%s)", turn.id, self.store.as_logged(reason))
        return kept

    async def _learn(self, turn: Turn, offered: list[str], hints: list[str], notes: list[str]) -> None:
        """The turn's screened `hints` (of the `offered`) and its explicit correction as lessons of
        its owner (judge/lessons.py), through the experience gate when there is one."""
        assert self.lessons is not None
        candidates = await asyncio.to_thread(self._lesson_candidates, turn, offered, hints, notes)
        try:
            await learn_lessons(self.lessons, self.experience_gate, turn, candidates)
        except Exception as error:  # noqa: BLE001 - the verdict and sample stand without the lesson
            notes.append(f"learning lessons failed: {type(error).__name__}: {error}")
            log.warning("turn %d: learning lessons failed: %r", turn.id, error)

    def _lesson_candidates(self, turn: Turn, offered: list[str], hints: list[str], notes: list[str]) -> list[str]:
        """The turn's screened `hints` (of the `offered`) and its explicit correction (a feedback
        next state, screened like a hint). The screen always runs first: with --no-screen-hints a
        held candidate is left out without a quarantine entry."""
        feedback = turn.next_state.content if turn.next_state and turn.next_state.role == "feedback" else ""
        correction = [feedback] if feedback.strip() and feedback not in offered else []
        if self.config.screen_hints:
            return hints + (self._screened(turn, correction, notes) if correction else [])
        conversation = turn_conversation(turn)
        return [text for text in hints + correction if screen_hint(text, conversation) is None]

    def _save(self, turn: Turn, verdict: Verdict, teacher: TeacherResult | None,
              experience: ExperienceTargets | None) -> None:
        self.store.write_verdict(verdict)
        if self.write_samples:
            sample = turn_sample(turn, verdict, teacher, experience)
            if isinstance(sample, str):
                self.store.reject_sample(turn.id, turn.policy_version, sample)
            else:
                self.store.add_sample(sample)
        self.judged += 1
        if self.on_verdict is not None:
            self.on_verdict(verdict)
