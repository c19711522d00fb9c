"""Advantages and losses of the trainer (docs/method.md §3), as pure functions of tensors.

Nothing here touches a model, an optimizer or the store, so every number can be worked
out by hand (tests/test_losses.py does). Shapes: B samples, T response tokens (right
padded), V vocabulary, K teacher top-k, N step records for long-horizon agents.

Decisions, and why:

- Aggregation is a per-sample token mean over `loss_mask`, then a mean over the samples
  that have at least one unmasked token (`masked_sample_mean`). Every turn weighs the
  same whatever its length, so one long answer cannot drown a batch of short ones, and a
  sample masked out entirely (no verdict, reward 0, no teacher) leaves the denominator
  instead of silently shrinking the step. With no sample left the loss is a zero that
  still has a graph, so backward works and changes nothing; `stats["samples"]` says so.
- Masked positions never reach an exp or a log. Padding may hold -inf, NaN or id -1, and
  `torch.where` does not stop a NaN made in the branch it discards from reaching the
  gradient (0 * NaN = NaN), so masked values are replaced *before* the arithmetic.
- Log-ratios are clamped to +-20 before exp: past that the sample is garbage either way,
  and an inf ratio turns the whole step into NaN.
- Arithmetic runs in at least float32: in bf16 a log-ratio of 0.01 is already rounded.
- Advantages are returned detached: they are constants of the surrogate, and a teacher
  scored with grad enabled must not push a gradient into the policy through them.
- The PPO clip is asymmetric (clip-higher: eps_high 0.28 > eps_low 0.2, the paper's
  values), so a rare token with positive advantage may rise further before the clip
  stops it, which keeps exploration alive.
- Reward 0 (a neutral or tied verdict) is no evaluative signal: it gives no direction.
  Binary RL masks such samples out, and combined keeps a token only for a term that can
  move it. No verdict (a judge failure) is a separate flag and never reads as 0.
- A missing teacher is a zero OPD term, never behaviour log-probs in its place: a
  filled-in teacher makes the sample look as if it had a directive signal (it stays in
  the batch and dilutes the mean), and any mismatch between the two log-prob sources
  (temperature, tokenization) would become a spurious advantage.
- Which terms a method trains is declared by the method (train/methods.py);
  `total_loss` adds up the terms it is given, and `surrogate_advantages` builds the
  binary, opd and combined advantages as one sum with absent terms. A batch that lacks
  a key a term needs raises instead of quietly training a smaller objective (the
  published LoRA path fell back to binary RL for opd/combined).
- The KL to the reference policy uses the k3 estimator exp(ref - lp) - (ref - lp) - 1:
  unbiased for KL(pi_theta || pi_ref) on tokens sampled from pi_theta, never negative,
  lower variance than log(pi_theta / pi_ref). Tokens come from the behaviour policy,
  which is pi_theta up to staleness; we accept that approximation, as GRPO does. Its
  log-probs may differ from the surrogate's (`kl_logprobs`): the trainer measures the
  surrogate after top-p, as sampling did, and the KL before it, where it is finite.
- Top-k distillation compares K + 1 bins per position: the teacher's top-K tokens and a
  tail holding the rest of the mass, 1 - sum(top-K probs) for both sides (the teacher
  reports nothing else), floored at `tail_floor` before the log. The tail's weight in
  the KL is its own tiny mass, so float32 cancellation in 1 - sum is harmless. The
  student may come as logits or log-probs (log_softmax of log-probs is the identity);
  only unmasked positions are normalized, which keeps a (B, T, V) copy off the heap.
  Under top-p either side may give a bin probability 0 (log-prob -inf, or vLLM's
  -9999): every bin is floored at `tail_floor` like the tail, which keeps the KL finite
  and leaves bins above the floor exactly as they were.
- Truncated importance sampling (TIS, `tis_cap` > 0) for an engine that samples in another
  precision than the trainer computes in: the trainer's own log-probs of the batch before
  the step (`proximal_logprobs`) are the PPO ratio's base, rho = pi_theta / pi_proximal,
  so the clip bounds how far one step moves the policy; each token's loss is then weighted
  by w = min(pi_proximal / pi_behaviour, cap), detached, which corrects the expectation
  for the tokens having come from the engine's distribution. The cap bounds the variance
  a token the engine rounded down (tiny pi_behaviour) would add. As in verl and slime;
  without TIS (cap 0) the ratio is against the engine's log-probs directly, and a
  precision gap shows up as a ratio that is not 1 at the first step, which the clip then
  reads as movement of the policy. Staleness is corrected by the same weight.
- Stepwise advantages standardize with the population std of a (task, step) group, so
  each kept group has unit variance exactly. Groups with std below `ZERO_STD`, or with
  one member, cannot say which trajectory did better and are dropped. A step with no
  PRM votes gets process term 0 (missing term = zero, as in combined); its outcome
  still counts.

(Over 400 lines: every loss term and advantage of every method, pure functions side by
side, so the shapes and sign conventions they share are read and tested in one place.)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from openclaw_rl.config import OPD_BASELINES

LOG_RATIO_LIMIT = 20.0
TAIL_FLOOR = 1e-8
ZERO_STD = 1e-6


def _f32(x: Tensor) -> Tensor:
    """x in float32, or float64 if it already is."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _check_shape(name: str, x: Tensor, shape: Sequence[int]) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(
            f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)} (B and T come from "
            "loss_mask); pad every tensor of a batch to the same samples and tokens"
        )


def masked_sample_mean(values: Tensor, loss_mask: Tensor) -> Tensor:
    """Token mean within each sample, then mean over samples with any unmasked token.

    values, loss_mask: (B, T). Masked entries are ignored, even NaN ones.
    """
    mask = loss_mask.bool()  # (B, T)
    values = torch.where(mask, values, 0.0)  # (B, T)
    tokens = mask.sum(-1)  # (B,)
    per_sample = values.sum(-1) / tokens.clamp(min=1)  # (B,)
    has_tokens = tokens > 0  # (B,)
    return (per_sample * has_tokens).sum() / has_tokens.sum().clamp(min=1)


def ppo_clip_loss(
    logprobs: Tensor,  # (B, T) current policy, sampled tokens
    behaviour_logprobs: Tensor,  # (B, T) recorded at sampling time
    advantages: Tensor,  # (B, T)
    loss_mask: Tensor,  # (B, T) bool
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    proximal_logprobs: Tensor | None = None,  # (B, T) the trainer's, before this step; TIS needs them
    tis_cap: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate L = -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A).

    With `tis_cap` > 0: rho = pi / pi_proximal and L is weighted per token by
    min(pi_proximal / pi_behaviour, tis_cap) (truncated importance sampling; module docstring).
    stats: clip_fraction (tokens where the clip binds, so they give no gradient),
    ratio_mean, approx_kl (k3 estimate of KL(base || current)) and samples (how
    many samples have a token in the loss); with TIS also tis_weight_mean,
    tis_capped_fraction and mismatch (mean |log pi_proximal - log pi_behaviour| per token);
    all aggregated like the loss.
    """
    if tis_cap and tis_cap < 1:
        raise ValueError(f"tis_cap must be 0 (off) or >= 1, got {tis_cap}; verl and slime use 2")
    if tis_cap and proximal_logprobs is None:
        raise ValueError("tis_cap > 0 needs proximal_logprobs: the trainer's log-probs of the batch before the step")
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(
            f"need 0 <= eps_low < 1 and eps_high >= 0, got eps_low={eps_low}, "
            f"eps_high={eps_high}; the paper uses 0.2 and 0.28"
        )
    mask = loss_mask.bool()  # (B, T)
    _check_shape("logprobs", logprobs, mask.shape)
    _check_shape("behaviour_logprobs", behaviour_logprobs, mask.shape)
    _check_shape("advantages", advantages, mask.shape)

    base, weight, gap = behaviour_logprobs, None, None
    if tis_cap:
        base, weight, gap = _truncated_importance(proximal_logprobs, behaviour_logprobs, mask, tis_cap)
    log_ratio = torch.where(mask, _f32(logprobs) - _f32(base), 0.0)  # (B, T)
    log_ratio = log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = log_ratio.exp()  # (B, T)
    adv = torch.where(mask, _f32(advantages).detach(), 0.0)  # (B, T)
    unclipped = ratio * adv  # (B, T)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv  # (B, T)
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    loss = masked_sample_mean(per_token if weight is None else per_token * weight, mask)

    with torch.no_grad():
        stats = {
            "clip_fraction": masked_sample_mean((clipped < unclipped).float(), mask).item(),
            "ratio_mean": masked_sample_mean(ratio, mask).item(),
            "approx_kl": masked_sample_mean(ratio - 1.0 - log_ratio, mask).item(),
            "samples": float(mask.any(-1).sum().item()),
        }
        if weight is not None:
            stats["tis_weight_mean"] = masked_sample_mean(weight, mask).item()
            stats["tis_capped_fraction"] = masked_sample_mean((gap > math.log(tis_cap)).float(), mask).item()
            stats["mismatch"] = masked_sample_mean(gap.abs(), mask).item()
    return loss, stats


def _truncated_importance(proximal_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor,
                          tis_cap: float) -> tuple[Tensor, Tensor, Tensor]:
    """TIS for `ppo_clip_loss`: the ratio's base log-probs, each token's weight
    min(pi_proximal / pi_behaviour, tis_cap), and the log-gap log pi_proximal / pi_behaviour, all (B, T)."""
    _check_shape("proximal_logprobs", proximal_logprobs, mask.shape)
    proximal = _f32(proximal_logprobs.detach())
    gap = torch.where(mask, proximal - _f32(behaviour_logprobs), 0.0)  # (B, T)
    gap = gap.nan_to_num(neginf=-LOG_RATIO_LIMIT).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    weight = gap.clamp(max=math.log(tis_cap)).exp()  # (B, T)
    # a token the trainer's own nucleus cut (-inf) weighs ~0; its ratio is taken against behaviour
    base = torch.where(torch.isfinite(proximal), proximal, _f32(behaviour_logprobs))
    return base, weight, gap


def k3_kl(
    logprobs: Tensor,  # (B, T) current policy, sampled tokens
    ref_logprobs: Tensor,  # (B, T) reference (initial) policy, same tokens
    loss_mask: Tensor,  # (B, T) bool
) -> Tensor:
    """k3 estimate of KL(current || reference): exp(ref - lp) - (ref - lp) - 1."""
    mask = loss_mask.bool()  # (B, T)
    _check_shape("logprobs", logprobs, mask.shape)
    _check_shape("ref_logprobs", ref_logprobs, mask.shape)
    delta = torch.where(mask, _f32(ref_logprobs) - _f32(logprobs), 0.0)  # (B, T)
    delta = delta.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return masked_sample_mean(delta.exp() - delta - 1.0, mask)


def opd_advantages(
    teacher_logprobs: Tensor,  # (B, T) response tokens scored under prompt + hint
    behaviour_logprobs: Tensor,  # (B, T)
    teacher_mask: Tensor,  # (B, T) bool: a teacher scored this token
    clip_c: float = 1.0,
    baseline: str = "none",
) -> Tensor:  # (B, T)
    """OPD advantage clip(teacher - behaviour, -C, C); 0 where there is no teacher.

    baseline "mean" subtracts each sample's mean advantage over its teacher tokens. On
    tokens sampled from the policy the advantage averages -KL(policy || teacher) <= 0,
    so without a baseline every step also pushes down whatever was sampled; a constant
    per sample leaves the expected gradient unchanged and removes that push.
    """
    if clip_c <= 0:
        raise ValueError(f"clip_c must be > 0, got {clip_c}; the paper uses C = 1")
    if baseline not in OPD_BASELINES:
        raise ValueError(f"unknown OPD baseline {baseline!r}; choose one of {', '.join(OPD_BASELINES)}")
    mask = teacher_mask.bool()  # (B, T)
    _check_shape("teacher_logprobs", teacher_logprobs, mask.shape)
    _check_shape("behaviour_logprobs", behaviour_logprobs, mask.shape)
    gap = (_f32(teacher_logprobs) - _f32(behaviour_logprobs)).clamp(-clip_c, clip_c)  # (B, T)
    gap = torch.where(mask, gap, 0.0)
    if baseline == "mean":
        count = mask.sum(-1, keepdim=True)  # (B, 1)
        gap = torch.where(mask, gap - gap.sum(-1, keepdim=True) / count.clamp(min=1), 0.0)
    return gap.detach()


def combined_advantages(
    reward: Tensor,  # (B,) majority verdict in {+1, 0, -1}
    has_reward: Tensor,  # (B,) bool: the judge gave a verdict
    opd_adv: Tensor,  # (B, T) from opd_advantages
    has_teacher: Tensor,  # (B,) or (B, T) bool
    loss_mask: Tensor,  # (B, T) bool
    w_rl: float = 1.0,
    w_opd: float = 1.0,
) -> tuple[Tensor, Tensor]:  # advantages (B, T), loss_mask (B, T)
    """A_t = w_rl r + w_opd A_opd_t; a missing term is 0; tokens with neither are masked.

    A term with weight 0 counts as absent, so it keeps nothing in the batch.
    """
    mask = loss_mask.bool()  # (B, T)
    batch, tokens = mask.shape
    _check_shape("reward", reward, (batch,))
    _check_shape("has_reward", has_reward, (batch,))
    _check_shape("opd_adv", opd_adv, mask.shape)
    if has_teacher.dim() == 1:
        _check_shape("has_teacher", has_teacher, (batch,))
        has_teacher = has_teacher[:, None].expand(batch, tokens)
    _check_shape("has_teacher", has_teacher, mask.shape)

    reward = _f32(reward)
    evaluative = has_reward.bool() & (reward != 0) & (w_rl != 0)  # (B,)
    directive = has_teacher.bool() & (w_opd != 0)  # (B, T)
    rl_term = torch.where(evaluative, reward, 0.0)[:, None] * w_rl  # (B, 1)
    opd_term = torch.where(directive, _f32(opd_adv), 0.0) * w_opd  # (B, T)
    keep = mask & (evaluative[:, None] | directive)  # (B, T)
    return torch.where(keep, rl_term + opd_term, 0.0).detach(), keep


def binary_advantages(
    reward: Tensor,  # (B,)
    has_reward: Tensor,  # (B,) bool
    loss_mask: Tensor,  # (B, T) bool
) -> tuple[Tensor, Tensor]:  # advantages (B, T), loss_mask (B, T)
    """A_t = r on every token; samples with r == 0 or no verdict are masked out."""
    batch, tokens = loss_mask.shape
    no_teacher = torch.zeros(batch, dtype=torch.bool, device=loss_mask.device)
    no_opd = torch.zeros(batch, tokens, device=loss_mask.device)
    return combined_advantages(reward, has_reward, no_opd, no_teacher, loss_mask, w_opd=0.0)


def topk_reverse_kl(
    student_logits: Tensor,  # (B, T, V) logits or log-probs over the full vocabulary
    teacher_top_ids: Tensor,  # (B, T, K)
    teacher_top_logprobs: Tensor,  # (B, T, K)
    loss_mask: Tensor,  # (B, T) bool
    tail_floor: float = TAIL_FLOOR,
) -> Tensor:
    """KL(student || teacher) over the teacher's top-K tokens plus one tail bin."""
    mask = loss_mask.bool()  # (B, T)
    _check_shape("student_logits", student_logits, (*mask.shape, student_logits.shape[-1]))
    _check_shape("teacher_top_ids", teacher_top_ids, teacher_top_logprobs.shape)
    _check_shape("teacher_top_logprobs", teacher_top_logprobs, (*mask.shape, teacher_top_logprobs.shape[-1]))

    floor = math.log(tail_floor)
    student = torch.log_softmax(_f32(student_logits[mask]), dim=-1)  # (N, V)
    student_top = student.gather(-1, teacher_top_ids[mask].long()).clamp(min=floor)  # (N, K)
    teacher_top = _f32(teacher_top_logprobs[mask]).clamp(min=floor)  # (N, K)

    def with_tail(top: Tensor) -> Tensor:  # (N, K) -> (N, K + 1)
        tail = 1.0 - top.exp().sum(-1, keepdim=True)  # (N, 1)
        # A tail within the float32 rounding of the sum is empty: floored, whatever the
        # CPU's exp and sum rounded it to (0 on one, 6e-8 on another).
        tail = torch.where(tail > top.shape[-1] * torch.finfo(torch.float32).eps, tail, tail_floor)
        return torch.cat([top, tail.log()], dim=-1)

    s, t = with_tail(student_top), with_tail(teacher_top)  # (N, K + 1)
    kl = (s.exp() * (s - t)).sum(-1)  # (N,)
    per_token = kl.new_zeros(mask.shape).masked_scatter(mask, kl)  # (B, T)
    return masked_sample_mean(per_token, mask)


def stepwise_advantages(
    task_ids: Sequence[Hashable] | Tensor,  # (N,) the task each step belongs to
    step_index: Sequence[int] | Tensor,  # (N,) position of the step in its trajectory
    outcome: Sequence[float] | Tensor,  # (N,) outcome of the step's trajectory
    prm_votes: Sequence[Sequence[float]] | Tensor,  # (N, m) or ragged: PRM votes per step
) -> tuple[Tensor, Tensor]:  # advantages (N,), keep (N,) bool
    """r = outcome + mean(PRM votes), standardized within each (task, step) group.

    Dropped records (zero-variance or single-member groups) get advantage 0, keep False.
    """
    tasks = task_ids.tolist() if isinstance(task_ids, Tensor) else list(task_ids)
    steps = [int(s) for s in step_index]
    n = len(tasks)
    if not (len(steps) == len(outcome) == len(prm_votes) == n):
        raise ValueError(
            f"task_ids, step_index, outcome and prm_votes must have one entry per step, "
            f"got lengths {n}, {len(steps)}, {len(outcome)}, {len(prm_votes)}"
        )
    if isinstance(prm_votes, Tensor):
        votes = prm_votes.double().reshape(n, -1)  # (N, m)
        process = votes.mean(-1) if votes.shape[1] else votes.new_zeros(n)  # (N,)
    else:
        process = torch.tensor([sum(v) / len(v) if len(v) else 0.0 for v in prm_votes], dtype=torch.float64)
    reward = torch.as_tensor(outcome, dtype=torch.float64).reshape(n) + process  # (N,)

    groups: dict[tuple[Hashable, int], int] = {}
    group = torch.tensor([groups.setdefault(key, len(groups)) for key in zip(tasks, steps)])  # (N,)
    zeros = torch.zeros(len(groups), dtype=torch.float64)  # (G,)
    size = zeros.index_add(0, group, torch.ones_like(reward))  # (G,)
    mean = zeros.index_add(0, group, reward) / size  # (G,)
    centered = reward - mean[group]  # (N,)
    std = (zeros.index_add(0, group, centered**2) / size).sqrt()  # (G,)
    keep = ((size > 1) & (std > ZERO_STD))[group]  # (N,)
    advantages = torch.where(keep, centered / std[group].clamp(min=ZERO_STD), 0.0)  # (N,)
    return advantages.float(), keep


@dataclass(frozen=True)
class LossParams:
    """Coefficients of the loss terms; defaults are the paper's."""

    eps_low: float = 0.2  # PPO clip below 1
    eps_high: float = 0.28  # PPO clip above 1 (clip-higher)
    opd_clip_c: float = 1.0  # C: OPD advantages are clipped to [-C, C]
    w_rl: float = 1.0  # weight of the evaluative reward in combined
    w_opd: float = 1.0  # weight of the OPD advantage in combined
    kl_beta: float = 0.0  # k3 KL penalty to the reference policy; paper 0.02, 0 = off
    tail_floor: float = TAIL_FLOOR  # smallest tail mass before the log in top-k KL
    opd_baseline: str = "none"  # "mean": subtract each sample's mean OPD advantage (not in the paper)
    tis_cap: float = 0.0  # truncated importance sampling's cap on pi_trainer / pi_engine; 0 = off

    def __post_init__(self) -> None:
        if self.kl_beta < 0:
            raise ValueError(f"kl_beta must be >= 0, got {self.kl_beta}; use 0 to turn the KL penalty off")
        if self.tis_cap and self.tis_cap < 1:
            raise ValueError(f"tis_cap must be 0 (off) or >= 1, got {self.tis_cap}; verl and slime use 2")
        if not 0 < self.tail_floor < 1:
            raise ValueError(
                f"tail_floor must be in (0, 1), got {self.tail_floor}; the default is {TAIL_FLOOR}"
            )


def surrogate_advantages(
    batch: Mapping[str, Tensor],  # loss_mask (B, T), and the keys of the terms asked for
    params: LossParams,
    *,
    reward: bool,  # A += w_rl * r (reads reward, has_reward)
    opd: bool,  # A += w_opd * clip(teacher - behaviour, -C, C) (reads teacher_logprobs, teacher_mask)
) -> tuple[Tensor, Tensor]:  # advantages (B, T), loss_mask (B, T)
    """Advantages of the clipped surrogate from the reward and/or OPD terms; a term not asked
    for enters as absent, so binary, opd and combined are this one sum (combined_advantages)."""
    loss_mask = batch["loss_mask"].bool()  # (B, T)
    batch_size, _ = loss_mask.shape
    device = loss_mask.device
    if reward:
        rewards, has_reward = batch["reward"], batch["has_reward"]
    else:
        rewards = torch.zeros(batch_size, device=device)
        has_reward = torch.zeros(batch_size, dtype=torch.bool, device=device)
    if opd:
        teacher_mask = batch["teacher_mask"].bool()
        opd_adv = opd_advantages(
            batch["teacher_logprobs"], batch["behaviour_logprobs"], teacher_mask, params.opd_clip_c,
            params.opd_baseline,
        )
    else:
        teacher_mask = torch.zeros_like(loss_mask)
        opd_adv = torch.zeros(loss_mask.shape, device=device)
    return combined_advantages(rewards, has_reward, opd_adv, teacher_mask, loss_mask, params.w_rl, params.w_opd)


def total_loss(
    batch: Mapping[str, Tensor],  # loss_mask (B, T); behaviour_logprobs with a surrogate; teacher top-k with topk_kl
    logprobs: Tensor,  # (B, T) current policy, sampled tokens
    *,
    surrogate: tuple[Tensor, Tensor] | None,  # (advantages, loss_mask) of the clipped surrogate, (B, T) each
    topk_kl: bool = False,  # add the reverse KL to the teacher's top-K + tail
    logits: Tensor | None = None,  # (B, T, V) current policy; the top-k term needs it
    ref_logprobs: Tensor | None = None,  # (B, T) reference policy; needed when kl_beta > 0
    params: LossParams = LossParams(),
    kl_logprobs: Tensor | None = None,  # (B, T) current policy measured as ref_logprobs are; default logprobs
) -> tuple[Tensor, dict[str, float]]:
    """The sum of a method's terms (train/methods.py says which): the clipped surrogate on the
    advantages given, the top-k distillation KL, and the k3 KL to the reference over every
    token some term trains."""
    if surrogate is None and not topk_kl:
        raise ValueError("total_loss needs a term: pass surrogate=(advantages, loss_mask) or topk_kl=True")
    if topk_kl and logits is None:
        raise ValueError("the top-k distillation term needs the student's full-vocabulary logits; pass logits=")
    if params.kl_beta > 0 and ref_logprobs is None:
        raise ValueError(f"kl_beta={params.kl_beta} needs ref_logprobs; pass them or set kl_beta=0")

    loss_mask = batch["loss_mask"].bool()  # (B, T)
    trained = torch.zeros_like(loss_mask)  # (B, T) tokens some term trains on
    total = _f32(logprobs).new_zeros(())
    stats: dict[str, float] = {}
    if surrogate is not None:
        advantages, pg_mask = surrogate
        pg_loss, stats = ppo_clip_loss(
            logprobs, batch["behaviour_logprobs"], advantages, pg_mask, params.eps_low, params.eps_high,
            proximal_logprobs=batch.get("proximal_logprobs"), tis_cap=params.tis_cap,
        )
        total, trained = total + pg_loss, trained | pg_mask.bool()
        stats["pg_loss"] = pg_loss.item()
    if topk_kl:
        kl_mask = loss_mask & batch["teacher_mask"].bool()  # (B, T)
        topk = topk_reverse_kl(
            logits, batch["teacher_top_ids"], batch["teacher_top_logprobs"], kl_mask, params.tail_floor
        )
        total, trained = total + topk, trained | kl_mask
        stats["topk_kl"] = topk.item()
    if params.kl_beta > 0:
        ref_kl = k3_kl(logprobs if kl_logprobs is None else kl_logprobs, ref_logprobs, trained)
        total = total + params.kl_beta * ref_kl
        stats["ref_kl"] = ref_kl.item()
    stats["loss"] = total.item()
    stats["tokens"] = float(trained.sum().item())
    return total, stats
