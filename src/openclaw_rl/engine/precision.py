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
- A recorded log-prob (incremental decode) and a full forward's agree only up to the
  kernels: `logprob_tolerance` states how far per token, per device and precision, and the
  tests and `needs_importance_correction` read it (numbers and sources: docs/gpu.md).
  float32 on a CPU: 1e-4 (measured max 1.4e-5, bench/precision_mismatch.py); float32 on
  CUDA: 2e-3 (an H200 measured up to 1.0e-3, issue 42: different kernels for decode and
  the full forward cannot agree bit for bit); below float32 anywhere: 0.5 (the bfloat16
  maximum measured 0.35-0.42).
- Truncated importance sampling (train/losses.py) is on by default exactly where that
  tolerance exceeds `TIS_ABOVE_NATS`, a twentieth of the PPO clip's 0.2: a smaller gap
  moves the first ratio by less than 1 % of the clip, so correcting it buys nothing.
  float32 stays uncorrected on CUDA as on a CPU; bfloat16 and float16 are corrected.
"""

from __future__ import annotations

import torch

from openclaw_rl.config import DTYPE_NAMES

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


FLOAT32_LOGPROB_TOLERANCE = {"cpu": 1e-4, "cuda": 2e-3}  # per device type; others (unmeasured): cuda's
HALF_LOGPROB_TOLERANCE = 0.5  # bfloat16 / float16 on any device
TIS_ABOVE_NATS = 0.01  # importance-sampling correction on by default where the tolerance exceeds this


def logprob_tolerance(device: torch.device | str, dtype: torch.dtype) -> float:
    """How far (nats per token) a log-prob the engine recorded while decoding may be from a
    full forward's on `device` in `dtype`, from kernels alone (module docstring; docs/gpu.md)."""
    if dtype != torch.float32:
        return HALF_LOGPROB_TOLERANCE
    return FLOAT32_LOGPROB_TOLERANCE.get(torch.device(device).type, FLOAT32_LOGPROB_TOLERANCE["cuda"])


def needs_importance_correction(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether a model on `device` in `dtype` gets truncated importance sampling by default:
    its log-prob tolerance exceeds `TIS_ABOVE_NATS` (module docstring)."""
    return logprob_tolerance(device, dtype) > TIS_ABOVE_NATS


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
