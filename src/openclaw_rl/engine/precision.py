"""Which floating-point type a model runs in: `--dtype` (the engine) and `--train-dtype` (the trainer).

    auto      float32 on a CPU, bfloat16 on CUDA
    float32   full precision (this project's reference numbers)
    bfloat16  half the memory and bandwidth; 8 bits of mantissa
    float16   the engine only (training in float16 needs loss scaling, which the trainer does not do)

Decisions, and why:

- auto is float32 on a CPU: bfloat16 matmuls there are no faster on most CPUs, and every
  number measured in this project's README was measured in float32. On CUDA bfloat16 is
  what vLLM, verl and slime run, and what a 4B-32B model needs to fit.
- Precision is resolved once, where a model is loaded, from a name and the device; the
  config keeps names only (config.py must not import torch).
- Log-softmax always runs in float32 (engine/sampling.py upcasts the logits): a bfloat16
  log-prob is rounded to about 0.4 % of its value, which would swamp the ratio.
"""

from __future__ import annotations

import torch

from openclaw_rl.config import DTYPE_NAMES

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """The torch dtype `name` stands for on `device` (auto: float32 on CPU, bfloat16 on CUDA)."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPE_NAMES)}")
    if name == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The name `resolve_dtype` takes for `dtype` (float32, bfloat16, float16)."""
    return next(name for name, value in DTYPES.items() if value == dtype)
