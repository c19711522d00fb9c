"""Samples to a padded batch of tensors, as a method's loss (train/methods.py) and the trainer read it.

Pure: no model, no store, no tokenizer. The ids are the exact sampled ones a sample
carries (docs/method.md §2, step 1): nothing is rendered or re-tokenized here.

Layout, and why:

- `input_ids` (B, L) is prompt ⊕ response, right-padded. A causal model never attends
  forward, so right padding changes no real position's logits and the default
  position ids (0, 1, 2, ...) stay correct without computing them from the mask.
- Prompts differ in length, so response token t of sample b sits at column
  `response_positions[b, t]` of `input_ids`, and the logits that predict it at that
  column minus one. Padded entries repeat the sample's first response column, a valid
  index, so a gather never goes out of range; `loss_mask` hides them.
- Every padded float is 0 and every padded id is 0, except `teacher_top_ids`, padded
  with -1 (an id that names no token). Masks, not padding values, say what is real.
- A sample without a teacher gets `teacher_mask` False and zeros in
  `teacher_logprobs`, never its behaviour log-probs (see losses.py for why).
- No verdict is `has_reward` False with reward 0; a verdict of 0 is `has_reward` True.
  A step advantage is the same: `has_step_advantage` says whether there is one.
- A batch is split into micro-batches by length (`split_micro_batches`): every row of a
  micro-batch is as wide as its longest, and the logits are taken from the earliest
  response column on, so one short first turn beside a long third turn ran the model and
  its 49k-word head over hundreds of padded or prompt columns. The gradient is a sum over
  samples, so the grouping changes nothing but the time.
- With `top_k > 0` (top-k distillation) a teacher counts only if it also reported its
  top tokens. K is `top_k` or the shortest list in the batch if that is shorter: each
  list is best first, so cutting it keeps the teacher's best tokens and the tail bin
  of the loss takes up the rest of the mass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from openclaw_rl.types import Sample


def split_micro_batches(samples: Sequence[Sample], size: int) -> list[list[Sample]]:
    """`samples` in micro-batches of at most `size`, shortest first (prompt + response), so
    that the samples padded to one width are of about that width."""
    ordered = sorted(samples, key=lambda s: (len(s.prompt_token_ids) + len(s.response_token_ids),
                                             len(s.prompt_token_ids)))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def collate(samples: Sequence[Sample], *, top_k: int = 0) -> dict[str, Tensor]:
    """Pad `samples` into one batch. Shapes: B samples, L = max(P + T), T = max response, K.

    (Over 60 lines: one pass fills every tensor of the batch, row by row, so that each
    mask is built beside the values it masks; split up, the offsets would be computed
    twice.)

    Keys: input_ids, attention_mask (B, L); response_positions, response_ids,
    loss_mask, behaviour_logprobs, teacher_logprobs, teacher_mask (B, T); reward,
    has_reward, step_advantage, has_step_advantage, temperatures, top_ps (B,); with
    top_k > 0 also teacher_top_ids, teacher_top_logprobs (B, T, K).
    """
    if not samples:
        raise ValueError("collate needs at least one sample")
    for sample in samples:
        _validate(sample, top_k)
    batch_size = len(samples)
    width = max(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples)  # L
    tokens = max(len(s.response_token_ids) for s in samples)  # T
    with_top = [s for s in samples if _has_top(s)] if top_k > 0 else []
    k = min([top_k] + [len(row) for s in with_top for row in s.teacher_top_ids])  # type: ignore[union-attr]

    input_ids = torch.zeros(batch_size, width, dtype=torch.long)
    attention_mask = torch.zeros(batch_size, width, dtype=torch.long)
    response_positions = torch.zeros(batch_size, tokens, dtype=torch.long)
    response_ids = torch.zeros(batch_size, tokens, dtype=torch.long)
    loss_mask = torch.zeros(batch_size, tokens, dtype=torch.bool)
    behaviour_logprobs = torch.zeros(batch_size, tokens)
    teacher_logprobs = torch.zeros(batch_size, tokens)
    teacher_mask = torch.zeros(batch_size, tokens, dtype=torch.bool)
    reward = torch.zeros(batch_size)
    has_reward = torch.zeros(batch_size, dtype=torch.bool)
    step_advantage = torch.zeros(batch_size)
    has_step_advantage = torch.zeros(batch_size, dtype=torch.bool)
    temperatures = torch.tensor([s.temperature for s in samples], dtype=torch.float32)
    top_ps = torch.tensor([s.top_p for s in samples], dtype=torch.float32)
    top_ids = torch.full((batch_size, tokens, k), -1, dtype=torch.long)
    top_logprobs = torch.zeros(batch_size, tokens, k)

    for b, sample in enumerate(samples):
        prompt, response = sample.prompt_token_ids, sample.response_token_ids
        p, t = len(prompt), len(response)
        input_ids[b, : p + t] = torch.tensor(prompt + response)
        attention_mask[b, : p + t] = 1
        response_positions[b] = p
        response_positions[b, :t] = torch.arange(p, p + t)
        response_ids[b, :t] = torch.tensor(response)
        loss_mask[b, :t] = True
        behaviour_logprobs[b, :t] = torch.tensor(sample.behaviour_logprobs)
        if sample.reward is not None:
            reward[b], has_reward[b] = float(sample.reward), True
        if sample.step_advantage is not None:
            step_advantage[b], has_step_advantage[b] = float(sample.step_advantage), True
        if sample.teacher_logprobs is not None and (top_k == 0 or _has_top(sample)):
            teacher_logprobs[b, :t] = torch.tensor(sample.teacher_logprobs)
            teacher_mask[b, :t] = True
            if top_k > 0:
                ids, logprobs = sample.teacher_top_ids, sample.teacher_top_logprobs
                top_ids[b, :t] = torch.tensor([row[:k] for row in ids])  # type: ignore[union-attr]
                top_logprobs[b, :t] = torch.tensor([row[:k] for row in logprobs])  # type: ignore[union-attr]

    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_positions": response_positions,
        "response_ids": response_ids,
        "loss_mask": loss_mask,
        "behaviour_logprobs": behaviour_logprobs,
        "reward": reward,
        "has_reward": has_reward,
        "step_advantage": step_advantage,
        "has_step_advantage": has_step_advantage,
        "teacher_logprobs": teacher_logprobs,
        "teacher_mask": teacher_mask,
        "temperatures": temperatures,
        "top_ps": top_ps,
    }
    if top_k > 0:
        batch["teacher_top_ids"] = top_ids
        batch["teacher_top_logprobs"] = top_logprobs
    return batch


def _has_top(sample: Sample) -> bool:
    return bool(sample.teacher_top_ids) and all(sample.teacher_top_ids)  # type: ignore[arg-type]


def _validate(sample: Sample, top_k: int) -> None:
    t = len(sample.response_token_ids)
    where = f"sample of turn {sample.turn_id}"
    if not sample.prompt_token_ids or t == 0:
        raise ValueError(
            f"{where} has {len(sample.prompt_token_ids)} prompt and {t} response tokens; "
            "a trainable sample needs at least one of each, drop it before batching"
        )
    if not 0.0 < sample.top_p <= 1.0:
        raise ValueError(f"{where} has top_p {sample.top_p}; it must be in (0, 1], 1 being no truncation")
    if len(sample.behaviour_logprobs) != t:
        raise ValueError(f"{where} has {t} response tokens but {len(sample.behaviour_logprobs)} behaviour log-probs")
    if sample.teacher_logprobs is not None and len(sample.teacher_logprobs) != t:
        raise ValueError(f"{where} has {t} response tokens but {len(sample.teacher_logprobs)} teacher log-probs")
    if top_k > 0 and sample.teacher_top_ids is not None:
        top_logprobs = sample.teacher_top_logprobs or []
        if len(sample.teacher_top_ids) != t or len(top_logprobs) != t:
            raise ValueError(
                f"{where} has {t} response tokens but teacher top-k for "
                f"{len(sample.teacher_top_ids)} ids / {len(top_logprobs)} log-probs positions"
            )
        if any(len(i) != len(lp) for i, lp in zip(sample.teacher_top_ids, top_logprobs)):
            raise ValueError(f"{where} has teacher top-k ids and log-probs of different lengths")
