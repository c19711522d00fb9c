"""The experience gate's rule: does a new experience version make a user's own answers worse?

Every lesson the judge accepts makes a new version of its user's experience, served from
their next request. A block can also hurt: on SmolLM2-135M a student's 8-lesson block
served answers 0.12 below the base (docs/experiments.md, two users). So before a version
that adds or replaces lessons is served, the judge worker (judge/experience_gate.py)
scores the user's own labelled history under the block of the version before it and under
the new block, on one policy version, teacher-forced (no decoding), and this rule decides.

For each turn t (the user's latest approved, +1, and rejected, -1, main turns, up to
`GatePolicy.turns_per_side` of each), Δ_t = the mean per-token log π(y | new block) −
log π(y | old block) of its stored response. The statistic is

    D = mean Δ over approved turns − mean Δ over rejected turns

(a side enters only when it has at least two turns scored). D < 0: the new block makes
what the user approved less likely, or what they rejected more likely, than the old block
did. A version is **rejected** when D < −tolerance and a one-sided bootstrap over the
turns says so at `alpha` (0.05): the share of resamples (each side resampled with
replacement, `resamples` times, a fixed seed) whose D is at or above −tolerance is below
alpha. Otherwise it passes.

Decisions and why:

- **A difference of the two sides.** A response sampled under the old block is, on
  average, less likely under any other block (the mean of Δ over the old block's own
  samples is −KL(old ‖ new) ≤ 0), so a lesson that changes anything lowers both sides.
  The difference cancels that common shift: what counts is whether the new block moves
  the model *away from* what the user approved *relative to* what they rejected. With one
  side only, the shift is not cancelled: approved turns alone read a change of behaviour
  as harm, rejected turns alone as help; the tolerance and the test carry that side alone.
- **A bootstrap, not a sign test.** The statistic is a difference of two means over
  few turns (at most 8 a side) whose Δ are neither symmetric nor alike (a long response
  moves less per token than a short one). A sign test over all turns would test the
  median of a pooled, differently signed quantity, and a side of 8 harmed turns beside 8
  untouched ones would be a coin toss to it (8 of 16) although D is clearly negative. A
  bootstrap of D itself, stratified by side, tests the quantity the rule reads; seeded,
  it decides the same way every time for the same deltas.
- **The minimum, 5 labelled turns** (`min_turns`, over the sides that enter): a bootstrap
  of a handful of values is overconfident (all of 3 turns below the tolerance give p ≈ 0),
  and 5 is the fewest turns on which any exact test of "more harmed than not" can reach
  0.05 (all 5 harmed: 1/32). Fewer, and the version passes with "too few labelled turns":
  no evidence is not evidence of harm, and a new user has their corrections served at once.
- **The tolerance** (`tolerance`, 0.05 nats per token), measured on the default model by
  `scripts/experience_gate_calibration.py` (docs/experience.md, "The experience gate"): the
  parent's and the student's own lessons moved D by -0.042 to +0.034 one at a time, and the
  same turns with their labels shuffled reach a D of -0.006 to -0.052 one time in twenty.
  0.05 is about that chance level: a smaller D is what a change blind to the user's
  labels gives anyway.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from openclaw_rl.experience.lessons import Change, Experience, GateDecision, step

__all__ = ["GatePolicy", "gate_decision", "shift_statistic", "take_back", "too_few_turns"]


@dataclass(frozen=True)
class GatePolicy:
    """The experience gate's numbers (module docstring says where each comes from)."""

    tolerance: float = 0.05  # nats per token D may fall below 0 before a version can be rejected
    alpha: float = 0.05  # the bootstrap's one-sided level
    turns_per_side: int = 8  # the user's latest approved, and latest rejected, turns scored
    min_turns: int = 5  # fewer labelled turns over the sides that enter: passes, "too few labelled turns"
    min_side_turns: int = 2  # a side with fewer turns does not enter (its spread cannot be resampled)
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tolerance < 0 or not 0 < self.alpha < 1 or self.turns_per_side < 1 or self.resamples < 1:
            raise ValueError(f"an experience gate needs tolerance >= 0, 0 < alpha < 1, turns_per_side >= 1 and "
                             f"resamples >= 1; got {self.tolerance}, {self.alpha}, {self.turns_per_side}, "
                             f"{self.resamples}")
        if self.min_turns < 1 or self.min_side_turns < 1:
            raise ValueError(f"min_turns and min_side_turns must be at least 1, got {self.min_turns} and "
                             f"{self.min_side_turns}")

    def sides(self, approved: int, rejected: int) -> tuple[bool, bool]:
        """Which sides enter, given how many turns each has."""
        return approved >= self.min_side_turns, rejected >= self.min_side_turns

    def enough(self, approved: int, rejected: int) -> bool:
        """Whether that many labelled turns can decide anything (else the version passes)."""
        use_a, use_r = self.sides(approved, rejected)
        return approved * use_a + rejected * use_r >= self.min_turns


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def shift_statistic(approved: Sequence[float], rejected: Sequence[float]) -> float:
    """D = mean(approved) − mean(rejected), each side only when it has values; 0 with none."""
    return (_mean(approved) if approved else 0.0) - (_mean(rejected) if rejected else 0.0)


def _bootstrap_p(approved: Sequence[float], rejected: Sequence[float], tolerance: float, policy: GatePolicy) -> float:
    """One-sided: the share of stratified resamples whose D is at or above −tolerance (add-one smoothed)."""
    rng = random.Random(policy.seed)
    within = 0
    for _ in range(policy.resamples):
        resampled_a = rng.choices(approved, k=len(approved)) if approved else []
        resampled_r = rng.choices(rejected, k=len(rejected)) if rejected else []
        within += shift_statistic(resampled_a, resampled_r) >= -tolerance
    return (within + 1) / (policy.resamples + 1)


def too_few_turns(approved: int, rejected: int, checked_version: int,
                  policy: GatePolicy = GatePolicy()) -> GateDecision | None:
    """The passing decision when `approved` and `rejected` labelled turns are too few to decide
    anything (nothing needs scoring then); None when they are enough."""
    if policy.enough(approved, rejected):
        return None
    return GateDecision("passed", checked_version,
                        f"too few labelled turns ({approved} approved, {rejected} rejected; the gate needs "
                        f"{policy.min_turns}, over sides of at least {policy.min_side_turns})",
                        approved, rejected, tolerance=policy.tolerance)


def gate_decision(approved: Sequence[float], rejected: Sequence[float], checked_version: int,
           policy: GatePolicy = GatePolicy(), **scored_on: int | None) -> GateDecision:
    """The gate's decision from the per-turn shifts Δ_t of the approved and rejected turns;
    `scored_on` (policy_version, adapter_version) is recorded as it is."""
    if few := too_few_turns(len(approved), len(rejected), checked_version, policy):
        return few
    use_a, use_r = policy.sides(len(approved), len(rejected))
    a, r = (list(approved) if use_a else []), (list(rejected) if use_r else [])
    d = shift_statistic(a, r)
    p = _bootstrap_p(a, r, policy.tolerance, policy)
    rejected_now = d < -policy.tolerance and p < policy.alpha
    sides = "; ".join(f"{name} answers {_mean(x):+.3f} nats/token over {len(x)} turns"
                      for name, x in (("approved", a), ("rejected", r)) if x)
    verdict = (f"makes the user's answers worse: D {d:+.3f} < -{policy.tolerance} (p {p:.3f} < {policy.alpha})"
               if rejected_now else
               f"D {d:+.3f} {'<' if d < -policy.tolerance else '>='} -{policy.tolerance}, p {p:.3f}")
    return GateDecision("rejected" if rejected_now else "passed", checked_version, f"{verdict}; {sides}",
                        len(approved), len(rejected), _mean(a) if a else None, _mean(r) if r else None, d, p,
                        policy.tolerance, **scored_on)


def take_back(experience: Experience, previous: Experience, decision: GateDecision,
              turn_id: str | None = None) -> tuple[Experience, Change]:
    """`experience` (a version the gate rejected) with `previous`'s lessons back, as one `undone`
    change carrying `decision`; undoing that change (POST /v1/experience/undo) puts the rejected
    lessons back."""
    now = {lesson.id: lesson for lesson in experience.lessons}
    old = {lesson.id: lesson for lesson in previous.lessons}
    removed = tuple(lesson for lesson in experience.lessons if old.get(lesson.id) != lesson)
    restored = tuple(lesson for lesson in previous.lessons if now.get(lesson.id) != lesson)
    reason = f"the experience gate rejected v{decision.checked_version}: {decision.reason}"
    back, change = step(experience, "undone", removed, restored, turn_id, reason)
    return back, replace(change, gate=decision)
