"""What the collapse detectors share (issue 40): their thresholds, their alarms, ROUGE-L.

Two places measure collapse, on two kinds of answers, and neither may import the other
(serve/ and train/ are siblings of one layer): the update gate on its probe answers
(train/collapse.py, which adds the detectors that need the model: entropy from top-k
log-probs, log-prob drift) and the server on the answers users were actually served
(serve/collapse.py). Both alarm on the same thresholds by the same rule, written here once.

Decisions and why:

- Defaults are CLaaS's (entropy ratio below 0.6, self-ROUGE-L above 0.85, drift above 2
  nats), **not calibrated here** on the known OPD collapse or healthy demo runs: they are
  alarms, not gate checks, until they are (docs/safe-updates.md#collapse-detectors).
- ROUGE-L by a bit-parallel LCS (Hyyrö 2004) on token ids: 16 answers of 200 tokens are
  120 pairs of 200 big-integer steps each, milliseconds in Python.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CollapseThresholds", "collapse_alarms", "lcs_length", "rouge_l", "self_rouge_l"]


@dataclass(frozen=True)
class CollapseThresholds:
    """Where each detector raises its alarm (CLaaS's values; uncalibrated here)."""

    min_entropy_ratio: float = 0.6
    max_self_rouge_l: float = 0.85
    max_logprob_drift_nats: float = 2.0
    # the base's own answers under the candidate (the gate): calibrated on SmolLM2-135M, where the
    # OPD collapse read 0.31-0.42 nats/token from its third version on and healthy demo versions
    # at most 0.05 (scripts/base_drift.py, docs/safe-updates.md)
    max_base_drift_nats: float = 0.15

    def __post_init__(self) -> None:
        if not 0 < self.min_entropy_ratio < 1:
            raise ValueError(f"min_entropy_ratio must be in (0, 1), got {self.min_entropy_ratio}")
        if not 0 < self.max_self_rouge_l <= 1:
            raise ValueError(f"max_self_rouge_l must be in (0, 1], got {self.max_self_rouge_l}")
        if self.max_logprob_drift_nats <= 0:
            raise ValueError(f"max_logprob_drift_nats must be positive, got {self.max_logprob_drift_nats}")
        if self.max_base_drift_nats <= 0:
            raise ValueError(f"max_base_drift_nats must be positive, got {self.max_base_drift_nats}")


def lcs_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common subsequence of two token lists (bit-parallel, Hyyrö 2004)."""
    if not a or not b:
        return 0
    masks: dict[int, int] = {}
    for i, token in enumerate(a):
        masks[token] = masks.get(token, 0) | (1 << i)
    width = (1 << len(a)) - 1
    v = width
    for token in b:
        u = v & masks.get(token, 0)
        v = ((v + u) | (v - u)) & width
    return len(a) - v.bit_count()


def rouge_l(a: Sequence[int], b: Sequence[int]) -> float:
    """ROUGE-L F1 of two token lists: 2 LCS / (|a| + |b|); 0 when either is empty."""
    return 2 * lcs_length(a, b) / (len(a) + len(b)) if a and b else 0.0


def self_rouge_l(answers: Sequence[Sequence[int]]) -> float | None:
    """Mean pairwise ROUGE-L F1 among answers; None with fewer than two non-empty answers."""
    kept = [a for a in answers if a]
    pairs = list(itertools.combinations(kept, 2))
    return sum(rouge_l(a, b) for a, b in pairs) / len(pairs) if pairs else None


def collapse_alarms(values: dict[str, float | None], thresholds: CollapseThresholds) -> list[str]:
    """Each detector beyond its threshold, with its value and the threshold (None: not measured);
    self-ROUGE-L beyond the larger of its threshold and `values["base_self_rouge_l"]`."""
    alarms = []
    ratio, rouge, drift = values.get("entropy_ratio"), values.get("self_rouge_l"), values.get("logprob_drift_nats")
    if ratio is not None and ratio < thresholds.min_entropy_ratio:
        alarms.append(f"entropy ratio {ratio:.2f} < {thresholds.min_entropy_ratio:g}")
    base_rouge = values.get("base_self_rouge_l")
    limit = max(thresholds.max_self_rouge_l, base_rouge if base_rouge is not None else 0.0)
    if rouge is not None and rouge > limit + 1e-9:
        alarms.append(f"self-ROUGE-L {rouge:.2f} > {limit:.2f}" + (
            f" (the base's {base_rouge:.2f})" if limit > thresholds.max_self_rouge_l else ""))
    if drift is not None and drift > thresholds.max_logprob_drift_nats:
        alarms.append(f"log-prob drift {drift:.2f} nats/token > {thresholds.max_logprob_drift_nats:g}")
    base_drift = values.get("base_drift_nats")
    if base_drift is not None and base_drift > thresholds.max_base_drift_nats:
        alarms.append(f"the base's answers drifted {base_drift:.2f} nats/token > {thresholds.max_base_drift_nats:g}")
    return alarms
