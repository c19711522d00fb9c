"""Personal LoRA adapters on the local engine: one decode batch, each row under its own user's adapter.

A LoRA adapter changes a projection `y = W h` into `y = W h + s B A h` (A: r x in, B: out x r,
s = alpha / r). Merging it into W would need a copy of the base per user and would make
one batch serve one user; instead the fused decoder (decoder.py) computes the base
product once for every row, as without adapters, and adds each row's own low-rank delta:

    z = (h @ A_cat^T) * mask        A_cat (U*r, in): the batch's U distinct adapters stacked
    y = W h + z @ B_cat^T           B_cat (out, U*r), already scaled by s

`mask` (N, U*r) keeps, for each of the N positions in the pass, only the r columns of its
own adapter, so a row with no adapter gets a delta of exactly zero (its logits are the
base model's, bit for bit) and no row ever sees another user's adapter.

Decisions and why:

- **Stacked per batch, not gathered per row.** Decode is bound by memory reads; gathering
  (B, r, in) per row and step would copy an adapter once per row that uses it, and
  per-adapter loops cost a Python call per adapter, layer and target. The stacked
  A_cat/B_cat read each distinct adapter once per step with two matrix products per
  target; they are rebuilt only when the batch's set of adapters changes (a row joins or
  leaves), not every step (`LoraPass` is cached by the decoder).
- **An adapter is an immutable object.** A new version of a user's adapter is a new
  `PersonalAdapter`; rows admitted under the old one keep it to their last token (every
  response comes from one adapter version), new rows get the new one, and nothing waits:
  the swap is one dict assignment between decode steps (engine/local.py).
- **peft's format in.** `prepare` reads exactly what `Trainer.lora_adapter()` exports and
  what vLLM's `LoRARequest` loads (peft's `adapter_model.safetensors` keys and
  `adapter_config.json`), so one published adapter serves on every engine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from openclaw_rl.engine.base import LoraAdapter

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.\w+)?\.weight$")

Shapes = dict[tuple[int, str], tuple[int, int]]  # (layer, target) -> the base weight's (out, in)


@dataclass(frozen=True, eq=False)
class PersonalAdapter:
    """One version of one user's adapter, ready for the decoder: (layer, target) -> (A, s*B)."""

    user: str
    version: int
    rank: int
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b in self.weights.values())


def model_shapes(model) -> Shapes:
    """The (out, in) of every LoRA-able projection of a Llama-family model."""
    shapes: Shapes = {}
    for i, layer in enumerate(model.model.layers):
        for part in (layer.self_attn, layer.mlp):
            for target in TARGETS:
                module = getattr(part, target, None)
                if module is not None:
                    shapes[(i, target)] = tuple(module.weight.shape)  # type: ignore[assignment]
    return shapes


def prepare(adapter: LoraAdapter, user: str, version: int, shapes: Shapes, *, dtype: torch.dtype,
            device: torch.device | str) -> PersonalAdapter:
    """`adapter` (peft's state dict and config) as the decoder reads it, checked against the
    base model's `shapes`; B is scaled by lora_alpha / r (or / sqrt(r) with rsLoRA)."""
    rank, alpha = int(adapter.config.get("r", 0)), float(adapter.config.get("lora_alpha", 0))
    if rank < 1 or alpha <= 0:
        raise ValueError(f"adapter of {user!r}: config r={rank}, lora_alpha={alpha}; both must be positive "
                         "(peft's adapter_config.json)")
    scale = alpha / (math.sqrt(rank) if adapter.config.get("use_rslora") else rank)
    parts: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for name, tensor in adapter.state_dict.items():
        match = _KEY.search(name)
        if match is None or (int(match[1]), match[2]) not in shapes:
            raise ValueError(f"adapter of {user!r}: {name!r} is not a LoRA weight of this model's projections "
                             f"({', '.join(TARGETS)} of layers 0..{max(i for i, _ in shapes)})")
        parts.setdefault((int(match[1]), match[2]), {})[match[3]] = tensor
    weights = {}
    for key, pair in sorted(parts.items()):
        out_features, in_features = shapes[key]
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None or a.shape != (rank, in_features) or b.shape != (out_features, rank):
            raise ValueError(f"adapter of {user!r}: layer {key[0]} {key[1]} has A {None if a is None else tuple(a.shape)}"
                             f" and B {None if b is None else tuple(b.shape)}; expected A ({rank}, {in_features}) and "
                             f"B ({out_features}, {rank}) for rank {rank}")
        weights[key] = (a.to(device, dtype).contiguous(), (b.float() * scale).to(device, dtype).contiguous())
    if not weights:
        raise ValueError(f"adapter of {user!r} has no LoRA weights")
    return PersonalAdapter(user, version, rank, weights)


class LoraPass:
    """The low-rank part of one forward pass over N positions, each under its own adapter or none."""

    def __init__(self, adapters: Sequence[PersonalAdapter | None], counts: Sequence[int]):
        """`adapters[g]` applies to the next `counts[g]` positions of the pass (a prompt, or a row)."""
        distinct: list[PersonalAdapter] = []
        for adapter in adapters:
            if adapter is not None and not any(adapter is d for d in distinct):
                distinct.append(adapter)
        offsets = [0]
        for adapter in distinct:
            offsets.append(offsets[-1] + adapter.rank)
        ref = next(iter(distinct[0].weights.values()))[0]
        mask = torch.zeros(sum(counts), offsets[-1], dtype=ref.dtype, device=ref.device)  # (N, U*r)
        start = 0
        for adapter, count in zip(adapters, counts):
            if adapter is not None:
                u = next(i for i, d in enumerate(distinct) if d is adapter)
                mask[start : start + count, offsets[u] : offsets[u + 1]] = 1
            start += count
        self.mask = None if bool(mask.all()) else mask  # every position under the one adapter: no mask
        self.stacked: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
        for key in {k for adapter in distinct for k in adapter.weights}:
            a_parts, b_parts = [], []
            for adapter in distinct:
                a, b = adapter.weights.get(key) or _zeros(distinct, key, adapter.rank)
                a_parts.append(a)
                b_parts.append(b)
            self.stacked[key] = (torch.cat(a_parts), torch.cat(b_parts, dim=1))  # (U*r, in), (out, U*r)

    def add(self, layer: int, target: str, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y` (the base projection of `h`) plus each position's own delta."""
        stacked = self.stacked.get((layer, target))
        if stacked is None:
            return y
        a, b = stacked
        flat = h.reshape(-1, h.shape[-1])  # (N, in)
        z = flat @ a.T  # (N, U*r)
        if self.mask is not None:
            z = z * self.mask
        return y + (z @ b.T).view(y.shape)


def lora_pass(adapters: Sequence[PersonalAdapter | None], counts: Sequence[int]) -> LoraPass | None:
    """The pass's low-rank part, or None when no position has an adapter (the base model, untouched)."""
    if all(adapter is None for adapter in adapters):
        return None
    return LoraPass(adapters, counts)


def _zeros(adapters: list[PersonalAdapter], key: tuple[int, str], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A zero block for an adapter that does not train `key` (others in the batch do)."""
    a, b = next(d.weights[key] for d in adapters if key in d.weights)
    return a.new_zeros(rank, a.shape[1]), b.new_zeros(b.shape[0], rank)
