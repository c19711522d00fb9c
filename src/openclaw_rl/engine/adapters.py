"""Personal LoRA adapters on the local engine: one decode batch, each row under its own user's adapter.

A LoRA adapter changes a projection `y = W h` into `y = W h + s B A h` (A: r x in, B: out x r,
s = alpha / r). Merging it into W would need a copy of the base per user and would make
one batch serve one user; instead the fused decoder (decoder.py) computes the base
product once for every row, as without adapters, and adds each row's own low-rank delta,
one of two ways:

- A decode step on the CPU (float32, at most 16 rows: the compiled kernels' step) calls
  `add_rows`, one compiled call per projection (kernels.py `lora_add`): row j multiplies
  its own adapter u only, `y_j += Bt_u^T (A_u h_j)` with Bt = (s B)^T, read where it lies.
- Every other pass (a prefill, a step of more than 16 rows, a GPU) calls `add`: torch's
  products over the pass's distinct adapters, stacked,

      z = (h @ A_cat^T) * mask        A_cat (R, in): their A one after another (R: their ranks summed)
      y = W h + z @ Bt_cat            Bt_cat (R, out): their (s B)^T

  where `mask` (N, R) keeps, for each of the N positions, only its own adapter's columns.

Either way a row with no adapter gets no delta (its logits are the base model's, bit for
bit) and no row ever sees another user's adapter.

Decisions and why:

- **A decode step reads each distinct adapter once, copies nothing, and makes one call
  per projection.** Decode is bound by memory reads, so a step should cost the base's
  bytes plus the distinct adapters' bytes (bench/personal_adapters.py). With the stacked
  products a step was two products, a mask and an add per projection (840 torch calls on
  a 30-layer model, whose products on a few rows read the adapters at ~6 GB/s here), and
  every time a row joined or left, all the batch's adapters were copied into a new stack
  (tens of ms for eight of SmolLM2-135M's). The kernel reads each row's own adapter in
  place; rows that share one find it in cache.
- **Stacked per pass elsewhere.** A prefill's products have hundreds of positions, where
  torch's GEMM is the right tool; its stack is built once per pass, and a lone adapter
  (one user's prompt) is used in place, without a copy.
- **An adapter is an immutable object.** A new version of a user's adapter is a new
  `PersonalAdapter`; rows admitted under the old one keep it to their last token (every
  response comes from one adapter version), new rows get the new one, and nothing waits:
  the swap is one dict assignment between decode steps (engine/local.py).
- **peft's format in.** `prepare` reads exactly what `Trainer.lora_adapter()` exports and
  what vLLM's `LoRARequest` loads (peft's `adapter_model.safetensors` keys and
  `adapter_config.json`), so one published adapter serves on every engine.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from openclaw_rl.engine import kernels
from openclaw_rl.engine.base import LoraAdapter

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.\w+)?\.weight$")

Shapes = dict[tuple[int, str], tuple[int, int]]  # (layer, target) -> the base weight's (out, in)


@dataclass(frozen=True, eq=False)
class PersonalAdapter:
    """One version of one user's adapter, ready for the decoder: (layer, target) -> (A (r, in), (s*B)^T (r, out))."""

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
        weights[key] = (a.to(device, dtype).contiguous(), (b.float() * scale).T.to(device, dtype).contiguous())
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
        self.adapters = tuple(distinct)
        self.counts = tuple(counts)
        self.groups = tuple(next(u for u, d in enumerate(distinct) if d is adapter) if adapter is not None else -1
                            for adapter in adapters)  # each group's index into `adapters`, -1: none
        # (N,) each position's adapter, what the compiled kernel reads (a decode step: one per row)
        self.rows = torch.tensor(self.groups, dtype=torch.int64).repeat_interleave(torch.tensor(self.counts))
        self.keys = frozenset(key for adapter in distinct for key in adapter.weights)

    def add(self, layer: int, target: str, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y` (the base projection of `h`) plus each position's own delta, with torch's products
        over the stacked tables: every position against every adapter, others' columns masked to zero."""
        if (layer, target) not in self.keys:
            return y
        a, bt = self._stacked[(layer, target)]
        z = h.reshape(-1, h.shape[-1]) @ a.T  # (N, U*r)
        if self._mask is not None:
            z = z * self._mask
        return torch.addmm(y.reshape(-1, y.shape[-1]), z, bt).view(y.shape)

    def add_rows(self, layer: int, target: str, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`add` for a decode step's rows (h (B, in), y (B, out), float32 on the CPU), in place, with
        the compiled kernel (kernels.py `lora_add`): each row multiplies its own adapter only."""
        if (layer, target) not in self.keys:
            return y
        a, bt = self._lists[(layer, target)]
        return kernels.ops().lora_add(y, h, a, bt, self.rows)

    @functools.cached_property
    def _lists(self) -> dict[tuple[int, str], tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Per projection, each adapter's own A and (s*B)^T, in place (rank 0 where one does not train it)."""
        lists = {}
        for key in self.keys:
            pairs = [adapter.weights.get(key) or _zeros(self.adapters, key, 0) for adapter in self.adapters]
            lists[key] = ([a for a, _ in pairs], [bt for _, bt in pairs])
        return lists

    @functools.cached_property
    def _stacked(self) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
        """Per projection, the adapters stacked: A_cat (U*r, in), Bt_cat (U*r, out); one adapter's own
        tensors when there is one (no copy: a lone user's prompt, a batch of one user's rows)."""
        stacked = {}
        for key in self.keys:
            parts = [adapter.weights.get(key) or _zeros(self.adapters, key, adapter.rank) for adapter in self.adapters]
            stacked[key] = parts[0] if len(parts) == 1 else (torch.cat([a for a, _ in parts]),
                                                              torch.cat([bt for _, bt in parts]))
        return stacked

    @functools.cached_property
    def _mask(self) -> torch.Tensor | None:
        """(N, R): each position's own adapter's columns 1, the rest 0; None if all positions share one adapter."""
        if self.groups == (0,) * len(self.groups):
            return None
        starts = [0]
        for adapter in self.adapters:
            starts.append(starts[-1] + adapter.rank)
        ref = next(iter(self.adapters[0].weights.values()))[0]
        mask = torch.zeros(sum(self.counts), starts[-1], dtype=ref.dtype, device=ref.device)
        position = 0
        for u, count in zip(self.groups, self.counts):
            if u >= 0:
                mask[position : position + count, starts[u] : starts[u + 1]] = 1
            position += count
        return mask


def lora_pass(adapters: Sequence[PersonalAdapter | None], counts: Sequence[int]) -> LoraPass | None:
    """The pass's low-rank part, or None when no position has an adapter (the base model, untouched)."""
    if all(adapter is None for adapter in adapters):
        return None
    return LoraPass(adapters, counts)


def _zeros(adapters: Sequence[PersonalAdapter], key: tuple[int, str], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A zero block for an adapter that does not train `key` (others in the batch do)."""
    a, bt = next(d.weights[key] for d in adapters if key in d.weights)
    return a.new_zeros(rank, a.shape[1]), bt.new_zeros(rank, bt.shape[1])
