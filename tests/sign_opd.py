"""A training method from outside the package: OPD by direction only.

    openclaw-rl train --method sign_opd:SIGN_OPD      # with this file's folder on PYTHONPATH

A_t = sign(log pi_teacher(a_t | s + hint) - log pi_old(a_t | s)) on every token the hinted
teacher scored: a token the hint makes more likely is pushed up by 1, one it makes less
likely down by 1, however large the gap, so a few tokens with huge gaps cannot dominate
the step the way they can under the clipped OPD advantage.

The worked example of docs/architecture.md ("Adding a training method"); this module is
the whole method, and tests/test_methods.py trains it for a step on the tiny model.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from openclaw_rl.train.losses import LossParams, opd_advantages
from openclaw_rl.train.methods import Method


def sign_advantages(batch: Mapping[str, Tensor], params: LossParams) -> tuple[Tensor, Tensor]:
    """A_t = sign(teacher - behaviour) where a teacher scored token t; other tokens are masked out."""
    taught = batch["loss_mask"].bool() & batch["teacher_mask"].bool()  # (B, T)
    gap = opd_advantages(batch["teacher_logprobs"], batch["behaviour_logprobs"], taught, params.opd_clip_c)  # (B, T)
    return torch.sign(gap), taught


SIGN_OPD = Method("sign_opd", signals=("teacher_logprobs",), advantages=sign_advantages)
