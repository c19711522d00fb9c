"""Collapse detectors on the update gate's probe answers (issue 40): pure functions.

    entropy_ratio      mean per-token entropy of the candidate's greedy answers / the base's
                       (the version served when the gate started), from the top-k log-probs
                       the gate keeps of each answer; a model that collapses onto one
                       continuation grows sure of every token: the ratio falls
    self_rouge_l       mean pairwise ROUGE-L F1 between the candidate's answers to different
                       probes; a model that says the same thing whatever it is asked: it rises
    logprob_drift      mean per-token log-prob the served version's greedy answers lose under
                       the candidate (log p_served(a_t) - log p_candidate(a_t), nats/token);
                       a model that no longer recognises what it used to say: it rises

`collapse_alarms(values, thresholds)` names each detector beyond its threshold; a base
whose own answers are already that alike (`base_self_rouge_l` above the threshold, as a
tiny random model's are) is compared with itself, as the gate's repetition check does. The gate
records the values and the alarms in every decision's checks (`checks["collapse"]`) and
the server shows the last ones in /metrics; an alarm is recorded and logged, it does not
reject by itself (the gate's own checks do).

Decisions and why:

- Defaults are CLaaS's (entropy ratio below 0.6, self-ROUGE-L above 0.85, drift above 2
  nats), **not calibrated here** on the known OPD collapse or healthy demo runs: they are
  alarms, not gate checks, until they are.
- The entropy is estimated from the top-k log-probs with the mass outside them as one
  more outcome: a lower bound of the full entropy, the same bound for base and candidate.
- The base entropy is the served version's at the gate's first decision (kept in memory:
  a restart takes it again from the version served then), so a slow slide is measured
  from where the model started, as the anchors do for the other checks.
- ROUGE-L by a bit-parallel LCS (Hyyrö 2004) on token ids: 16 answers of 200 tokens are
  120 pairs of 200 big-integer steps each, milliseconds in Python.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["CollapseThresholds", "collapse_alarms", "lcs_length", "logprob_drift", "mean_entropy", "rouge_l",
           "self_rouge_l"]


@dataclass(frozen=True)
class CollapseThresholds:
    """Where each detector raises its alarm (CLaaS's values; uncalibrated here)."""

    min_entropy_ratio: float = 0.6
    max_self_rouge_l: float = 0.85
    max_logprob_drift_nats: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.min_entropy_ratio < 1:
            raise ValueError(f"min_entropy_ratio must be in (0, 1), got {self.min_entropy_ratio}")
        if not 0 < self.max_self_rouge_l <= 1:
            raise ValueError(f"max_self_rouge_l must be in (0, 1], got {self.max_self_rouge_l}")
        if self.max_logprob_drift_nats <= 0:
            raise ValueError(f"max_logprob_drift_nats must be positive, got {self.max_logprob_drift_nats}")


def mean_entropy(top_logprobs: Sequence[torch.Tensor]) -> float | None:
    """Mean per-token entropy (nats) over answers given as their top-k log-probs, (T, K) each,
    the mass outside the top-k counted as one outcome; None when there is no token."""
    total, tokens = 0.0, 0
    for top in top_logprobs:
        if top.numel() == 0:
            continue
        p = top.double().exp()  # (T, K)
        rest = (1 - p.sum(-1)).clamp_min(0.0)  # (T,)
        inside = -(p * top.double()).sum(-1)
        outside = -(rest * rest.clamp_min(1e-12).log())
        total += float((inside + outside).sum())
        tokens += top.shape[0]
    return total / tokens if tokens else None


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


def logprob_drift(served_top: Sequence[torch.Tensor], candidate_token_logprobs: Sequence[torch.Tensor]) -> float | None:
    """Mean per-token log p_served(a_t) - log p_candidate(a_t) over the served version's greedy
    answers: `served_top` (T, K) top-k log-probs per answer, sorted (greedy: column 0 is the
    chosen token's), `candidate_token_logprobs` (T,) the candidate's log-prob of the same tokens."""
    total, tokens = 0.0, 0
    for top, candidate in zip(served_top, candidate_token_logprobs, strict=True):
        if top.shape[0] != candidate.shape[0]:
            raise ValueError(f"an answer has {top.shape[0]} served positions but {candidate.shape[0]} candidate "
                             "log-probs; score the candidate on exactly the served answer's tokens")
        total += float((top[:, 0].double() - candidate.double()).sum())
        tokens += top.shape[0]
    return total / tokens if tokens else None


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
    return alarms
