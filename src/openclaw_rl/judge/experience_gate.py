"""The experience gate: a new version of a user's experience is served only if their own history allows it.

    learn_lessons(learner, gate, turn, candidates)   the judge worker's learning step, gated

The update gate checks a new version of the weights before it serves (train/gate.py);
this checks a new version of one user's experience. When a judged turn's lessons add or
replace a lesson, the versions before and after are compared on the user's own labelled
history before anything is saved: up to 8 of their latest approved (+1) and 8 of their
latest rejected (-1) main turns (theirs only: `Store.labelled_turns`), each turn's stored
response scored teacher-forced under the old version's block and under the new one's. The
blocks are rendered as serving renders them (`experience.render` within
`--experience-budget-tokens`, counted with the policy tokenizer) and placed where serving
places them (`--experience-placement`), in the turn's own messages, chat template and
tools (judge/teacher.py `block_prompt_ids`); every pass runs on one policy version, under
the user's personal adapter when the engine serves them one (`personal_adapter`,
`at_one_weights`). The rule is experience/gate.py's.

Decisions and why:

- **Before the save, in the same version check.** The changes and the gate's decision are
  saved together (`Store.save_experience`, compare and swap on the version read); a
  rejected version is saved *with* the `undone` change that takes it back
  (experience/gate.py `take_back`), in one transaction, so serving, which reads only the
  stored row, never sees it, while the history shows it and one undo re-applies it
  (`POST /v1/experience/undo {"version": N}`). A concurrent writer (the user editing) makes
  the save fail, and the whole step is read, proposed and checked again.
- **Which versions.** Those whose changes add or replace a lesson (the judge's `added`,
  `replaced`; a `dropped` that the cap makes beside them is part of that version). A merge
  alone adds no text; the user's own edits, deletes and undos are their decision. A
  version whose rendered block is the same as before passes unscored.
- **Scored like the teacher, at top-p 1.** The turn's log-prob temperature and grammar
  mask, but no top-p truncation: a token cut under one block would score -inf and no mean
  would be left to compare.
- **A failure passes, and says so.** When the scoring fails (an engine error, a timeout,
  weights changing under every attempt) the version is saved as without a gate, its
  decision "passed" with the error as the reason: no evidence of harm is not harm, and the
  user's correction is what they asked for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from openclaw_rl.experience import (
    Change, Experience, GateDecision, GatePolicy, gate_decision, render, take_back, too_few_turns,
)
from openclaw_rl.judge.lessons import LessonLearner, owner_of, policy_token_counter
from openclaw_rl.judge.teacher import (
    at_one_weights, block_prompt_ids, grammar_mask, logprob_temperature, personal_adapter,
)
from openclaw_rl.store import ExperienceConflict, Store
from openclaw_rl.types import Turn

__all__ = ["GATED_KINDS", "ExperienceGate", "learn_lessons"]

log = logging.getLogger(__name__)

GATED_KINDS = ("added", "replaced")  # a version made by such a change is checked before it is served
SAVE_ATTEMPTS = 5  # as Store.update_experience: reads of a user's experience before a conflict is an error


class ExperienceGate:
    """Scores a user's labelled turns under two versions' blocks and applies experience/gate.py's rule."""

    def __init__(self, store: Store, engine, tokenizer, *, budget_tokens: int, placement: str,
                 policy: GatePolicy = GatePolicy(), timeout_s: float = 300.0,
                 on_decision: Callable[[GateDecision], None] | None = None):
        """`engine` is the policy served (under personal adapters, the engine that serves them);
        `budget_tokens` and `placement` are serving's (`--experience-budget-tokens`,
        `--experience-placement`); `on_decision` sees every decision saved (the server's metrics)."""
        self.store, self.engine, self.tokenizer = store, engine, tokenizer
        self.budget_tokens, self.placement, self.policy, self.timeout_s = budget_tokens, placement, policy, timeout_s
        self.count_tokens = policy_token_counter(tokenizer)
        self.on_decision = on_decision

    def block(self, experience: Experience) -> str:
        """The block serving renders for `experience` ("" for none)."""
        return render(experience, self.budget_tokens, self.count_tokens) if self.budget_tokens > 0 else ""

    async def check(self, before: Experience, after: Experience) -> GateDecision:
        """The decision on version `after` against `before` (the version it was made from)."""
        old, new = self.block(before), self.block(after)
        if old == new:
            return GateDecision("passed", after.version, "the block served is unchanged",
                                tolerance=self.policy.tolerance)
        approved, rejected = await asyncio.to_thread(self.labelled, after.owner)
        if few := too_few_turns(len(approved), len(rejected), after.version, self.policy):
            return few
        try:
            shifts, (version, adapter) = await asyncio.wait_for(
                self.shifts(after.owner, [*approved, *rejected], old, new), self.timeout_s)
        except Exception as error:  # noqa: BLE001 - module docstring: a failure passes, and says so
            return GateDecision("passed", after.version, f"not checked: scoring failed: {type(error).__name__}: "
                                f"{error}", len(approved), len(rejected), tolerance=self.policy.tolerance)
        return gate_decision(shifts[:len(approved)], shifts[len(approved):], after.version, self.policy,
                             policy_version=version, adapter_version=adapter)

    def labelled(self, owner: str) -> tuple[list[Turn], list[Turn]]:
        """`owner`'s latest approved and rejected main turns (theirs only), up to `turns_per_side` each."""
        n = self.policy.turns_per_side
        return self.store.labelled_turns(owner, 1, n), self.store.labelled_turns(owner, -1, n)

    async def shifts(self, owner: str, turns: Sequence[Turn], old: str, new: str
                     ) -> tuple[list[float], tuple[int, int | None]]:
        """Each turn's Δ = mean per-token log π(y | `new` block) − log π(y | `old` block), all on one
        version of the weights (under `owner`'s adapter when they are served one), and those weights."""

        async def once() -> list[float]:
            found = []
            for turn in turns:
                params = dict(temperature=logprob_temperature(turn), top_p=1.0, **grammar_mask(turn),
                              **personal_adapter(self.engine, turn))
                scores = [(await self.engine.score(block_prompt_ids(self.tokenizer, turn, block, self.placement),
                                                   turn.response_token_ids, **params)).logprobs for block in (old, new)]
                found.append(sum(n - o for o, n in zip(*scores)) / len(turn.response_token_ids))
            return found

        return await at_one_weights(self.engine, f"the experience of {owner!r}", once, owner=owner)

    def report(self, decision: GateDecision, owner: str) -> None:
        """The one log line of a saved decision, and the metric."""
        level = logging.WARNING if decision.outcome == "rejected" else logging.INFO
        log.log(level, "experience gate: v%d of %r %s: %s", decision.checked_version, owner, decision.outcome,
                decision.reason)
        if self.on_decision is not None:
            self.on_decision(decision)


async def learn_lessons(learner: LessonLearner, gate: ExperienceGate | None, turn: Turn,
                        candidates: list[str]) -> list[Change]:
    """The candidates of a judged `turn` learned into its owner's experience, saved with their
    changes; with a `gate`, a version that adds or replaces a lesson is checked first, and a
    rejected one is saved together with the change that takes it back (module docstring).
    Returns the changes saved."""
    if gate is None or not learner.rules(candidates):
        return await asyncio.to_thread(learner.learn, turn, candidates)
    owner, store = owner_of(turn), learner.store
    for _ in range(SAVE_ATTEMPTS):
        before = await asyncio.to_thread(store.experience, owner)
        after, changes = await asyncio.to_thread(learner.propose, before, turn, candidates)
        decision = await gate.check(before, after) if any(c.kind in GATED_KINDS for c in changes) else None
        final, saved = after, changes
        if decision is not None:
            saved = [*changes[:-1], replace(changes[-1], gate=decision)]
            if decision.outcome == "rejected":
                final, back = take_back(after, before, decision, str(turn.id))
                saved.append(back)
        try:
            await asyncio.to_thread(store.save_experience, final, saved)
        except ExperienceConflict:
            continue  # another writer saved first: read, propose and check again
        learner.logged(turn, saved)
        if decision is not None:
            gate.report(decision, owner)
        return saved
    raise ExperienceConflict(f"the experience of {owner!r} changed under each of {SAVE_ATTEMPTS} attempts to "
                             f"learn from turn {turn.id}")
