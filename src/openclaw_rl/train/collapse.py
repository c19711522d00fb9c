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

`collapse_alarms(values, thresholds)` (openclaw_rl/collapse.py, with the thresholds and
ROUGE-L, shared with the served-traffic detector of serve/collapse.py) names each detector
beyond its threshold; a base whose own answers are already that alike (`base_self_rouge_l`
above the threshold, as a tiny random model's are) is compared with itself, as the gate's
repetition check does. The gate records the values and the alarms in every decision's
checks (`checks["collapse"]`) and the server shows the last ones in /metrics; an alarm is
recorded and logged, it does not reject by itself (the gate's own checks do).

Decisions and why:

- Defaults are CLaaS's (entropy ratio below 0.6, self-ROUGE-L above 0.85, drift above 2
  nats), **not calibrated here** on the known OPD collapse or healthy demo runs: they are
  alarms, not gate checks, until they are (openclaw_rl/collapse.py).
- The entropy is estimated from the top-k log-probs with the mass outside them as one
  more outcome: a lower bound of the full entropy, the same bound for base and candidate.
- The base entropy is the served version's at the gate's first decision (kept in memory:
  a restart takes it again from the version served then), so a slow slide is measured
  from where the model started, as the anchors do for the other checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from openclaw_rl.collapse import CollapseThresholds, collapse_alarms, lcs_length, rouge_l, self_rouge_l

__all__ = ["CollapseThresholds", "collapse_alarms", "lcs_length", "logprob_drift", "mean_entropy", "rouge_l",
           "self_rouge_l"]


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
