"""Retention probes: can a candidate still do what the base could, on tasks apart from the preference?

    retention_check(held, candidate, alpha)     the paired sign test the update gate applies to
                                                an eval.retention.RetentionProbe's answers

The update gate (train/gate.py, `Gate.retention`) answers each probe's prompts greedily with
the served weights (cached) and the candidate's, checks every answer, and rejects a
candidate that lost significantly more of them than it gained, against the served version
and against the base (the version served at the gate's first decision, so a slide of small
losses cannot creep in). `eval/retention.py` builds the arithmetic probe: held-out word
problems whose final number is checked whatever the answer's style.

Decisions and why:

- The tolerance is a significance level, not a fixed drop: greedy answers do not vary by
  sampling, but which problems a slightly changed model gets right does. On the prompts
  where served and candidate disagree, a change of no consequence loses as many as it
  gains; the candidate is rejected when its losses beyond its gains are less likely than
  `alpha` (one-sided exact binomial test, p = 1/2). With 16 problems that is 5 lost and
  none gained (p 0.031), or 7 lost and 1 gained (p 0.035); 4 lost and none gained (p
  0.0625) pass. This is the noise of the paired design, not a noise band measured on runs.
- A probe that neither version answers right (a model too small for it) never rejects:
  there is nothing to lose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_ALPHA", "retention_check", "sign_test_p"]

DEFAULT_ALPHA = 0.05


def sign_test_p(lost: int, gained: int) -> float:
    """P(at least `lost` losses among lost + gained discordant prompts | each side equally likely)."""
    n = lost + gained
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / 2**n if n else 1.0


def retention_check(held: Sequence[bool], candidate: Sequence[bool], alpha: float = DEFAULT_ALPHA,
                    ) -> dict[str, Any]:
    """The candidate's correctness against the held version's on the same prompts: accuracies,
    prompts lost and gained, the sign test's p-value and whether the loss is significant."""
    if len(held) != len(candidate) or not held:
        raise ValueError(f"retention needs the same non-empty prompts for both versions; got {len(held)} "
                         f"and {len(candidate)} answers")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lost = sum(h and not c for h, c in zip(held, candidate))
    gained = sum(c and not h for h, c in zip(held, candidate))
    p = sign_test_p(lost, gained)
    return {"held_accuracy": sum(held) / len(held), "candidate_accuracy": sum(candidate) / len(candidate),
            "lost": lost, "gained": gained, "p_value": p, "dropped": lost > gained and p <= alpha}
