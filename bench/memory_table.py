"""What fits on a GPU: trainer and vLLM engine memory by model size, computed from parameter counts.

    .venv/bin/python bench/memory_table.py [--lora-rank 16] [--kv-tokens 16384]

Parameter counts are exact: each Qwen3 shape is built from its config on the meta device
(no memory, no download) and counted, LoRA's on the seven projections the trainer adapts
(train/trainer.py LORA_TARGETS). Bytes per parameter, before activations:

- full fine-tuning (train/trainer.py, --train-dtype bfloat16): float32 master weights (4),
  float32 gradients (4), AdamW's two float32 moments (8) = 16 bytes, divided by N ranks
  under FSDP2 (train/sharded.py), which also gathers one block at a time in bfloat16;
- LoRA: the frozen base held in bfloat16 (2 bytes, also divided by N under FSDP2) plus
  16 bytes per adapter parameter;
- QLoRA (`lora_4bit`): the decoder's linear weights in 4-bit NF4 with double-quantized
  scales (4.127 bits = 0.516 bytes each), the rest (embeddings, norms) in float32 as peft's
  k-bit preparation casts them (4 bytes), plus 16 bytes per adapter parameter; one GPU;
- the engine (vLLM, --dtype bfloat16): 2 bytes per parameter plus its KV cache,
  2 (K and V) x layers x KV heads x head dim x 2 bytes per token, sized here for
  --kv-tokens tokens in flight.

"Fits" = trainer + engine within 85 % of the GPU's memory (the rest for activations,
which grow with micro-batch length; gradient checkpointing keeps them small). Measured
numbers come from bench/gpu_check.py on a GPU; none were measured for this table.
Writes bench/results/memory_table.json and prints the table of docs/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.train.trainer import LORA_TARGETS  # noqa: E402

QWEN3 = {  # (hidden, intermediate, layers, heads, kv heads, tied embeddings) from each model's config.json
    "Qwen3-0.6B": (1024, 3072, 28, 16, 8, True),
    "Qwen3-1.7B": (2048, 6144, 28, 16, 8, True),
    "Qwen3-4B": (2560, 9728, 36, 32, 8, True),
    "Qwen3-8B": (4096, 12288, 36, 32, 8, False),
    "Qwen3-14B": (5120, 17408, 40, 40, 8, False),
    "Qwen3-32B": (5120, 25600, 64, 64, 8, False),
}
HEAD_DIM, VOCAB = 128, 151936
GPUS_GB = (24, 80, 141)  # a consumer card, an A100/H100, an H200
HEADROOM = 0.85
GB = 1e9


NF4_BYTES = 4.127 / 8  # 4-bit codes + an 8-bit scale per 64 weights + a float32 per 256 scales


def counts(name: str, lora_rank: int) -> tuple[int, int, int, int]:
    """(parameters, of them in the decoder's linear layers, LoRA parameters at `lora_rank`,
    KV-cache bytes per token in bfloat16)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hidden, inter, layers, heads, kv, tied = QWEN3[name]
    config = Qwen3Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=HEAD_DIM, vocab_size=VOCAB,
                         tie_word_embeddings=tied)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    adapter = sum(lora_rank * (m.in_features + m.out_features) for n, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in LORA_TARGETS)
    return params, linear, adapter, 2 * layers * kv * HEAD_DIM * 2


def row(name: str, lora_rank: int, kv_tokens: int) -> dict:
    params, linear, adapter, kv_per_token = counts(name, lora_rank)
    full, lora = 16 * params, 2 * params + 16 * adapter
    qlora = NF4_BYTES * linear + 4 * (params - linear) + 16 * adapter
    engine = 2 * params + kv_per_token * kv_tokens
    fits = {f"{gb}GB": {kind: (size + engine) / GB <= HEADROOM * gb
                        for kind, size in (("full", full), ("lora", lora), ("qlora", qlora))} for gb in GPUS_GB}
    ranks_for_full = {f"{gb}GB": next((n for n in (1, 2, 4, 8, 16, 32, 64)  # None: the engine alone does not fit
                                       if (full / n + engine) / GB <= HEADROOM * gb), None) for gb in GPUS_GB}
    return {"model": name, "parameters": params, "lora_parameters": adapter, "full_trainer_gb": full / GB,
            "lora_trainer_gb": lora / GB, "qlora_trainer_gb": qlora / GB, "engine_gb": engine / GB, "kv_cache_gb_per_1k_tokens": kv_per_token * 1e3 / GB,
            "colocated_fits_one_gpu": fits, "gpus_for_full_colocated": ranks_for_full}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--kv-tokens", type=int, default=16384)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "memory_table.json"))
    args = parser.parse_args()
    rows = [row(name, args.lora_rank, args.kv_tokens) for name in QWEN3]
    print("| model | parameters | full FT trainer | LoRA trainer (bf16 base) | QLoRA trainer (4-bit base) | "
          "vLLM engine (bf16 + KV) | " + " | ".join(f"{gb} GB: full / LoRA / QLoRA" for gb in GPUS_GB) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(GPUS_GB))
    for r in rows:
        cells = []
        for gb in GPUS_GB:
            fit, n = r["colocated_fits_one_gpu"][f"{gb}GB"], r["gpus_for_full_colocated"][f"{gb}GB"]
            full = "yes" if fit["full"] else f"no ({n} with FSDP2)" if n else "no"
            cells.append(f"{full} / {'yes' if fit['lora'] else 'no'} / {'yes' if fit['qlora'] else 'no'}")
        print(f"| {r['model']} | {r['parameters'] / 1e9:.2f} B | {r['full_trainer_gb']:.1f} GB | "
              f"{r['lora_trainer_gb']:.1f} GB | {r['qlora_trainer_gb']:.1f} GB | {r['engine_gb']:.1f} GB | " + " | ".join(cells) + " |")
    Path(args.out).write_text(json.dumps({"lora_rank": args.lora_rank, "kv_tokens": args.kv_tokens,
                                          "headroom": HEADROOM, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
