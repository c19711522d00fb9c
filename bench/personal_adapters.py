"""Decode speed with personal adapters: one batch, each row under its own user's LoRA (a benchmark, not a test).

    .venv/bin/python bench/personal_adapters.py [--threads 1] [--rank 8] [--steps 20] [--repeats 5]

The fused decoder's step (engine/decoder.py) at batch 1, 4 and 8, rows of 64 positions,
for the shared model (no adapter) and with 1, 4, 8 and 16 adapters loaded, assigned to rows
round-robin (so a batch holds min(adapters, batch) distinct ones). Runs are interleaved
(shared, then each adapter count, `--repeats` times) and each figure is the median, so
the ratios compare the same minutes of a shared machine. Adapters are random, in peft's
format, rank `--rank` on every projection (engine/adapters.TARGETS), and go through
`prepare` as a published one does. Also: the bytes of one adapter, and the time to publish
one user's update into a running engine (`LocalEngine.load_adapter`: read peft's tensors,
scale, swap between two steps). Models: a random Llama built from a config (4 layers,
hidden 256), and the default model (SmolLM2-135M) where it is on disk.

Then the memory model (`memory_model`, no timing; `--memory-only` prints just it): how many
users' adapters fit beside the base weights and a reserved KV cache, on this machine
(float32 on the CPU, the RAM it has) and on a 24 GiB and an 80 GiB GPU (bfloat16, the
engine's `dtype = auto` there), for SmolLM2-135M and a model of Qwen3-4B's shape. Bytes
come from the shapes (models built on the meta device: no weights are read), and the
135M adapter's are checked against the `prepare`d adapter measured above.
Writes bench/results/personal_adapters.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PretrainedConfig, Qwen3Config, Qwen3ForCausalLM

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))

from openclaw_rl.engine import kernels  # noqa: E402
from openclaw_rl.engine.adapters import PersonalAdapter, model_shapes, prepare  # noqa: E402
from openclaw_rl.engine.base import LoraAdapter  # noqa: E402
from openclaw_rl.engine.decoder import FusedDecoder  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.engine.loading import default_model_dir  # noqa: E402
from openclaw_rl.train.personal_state import MAX_RESIDENT, RESIDENT_COPIES  # noqa: E402

BATCHES = (1, 4, 8)
ADAPTERS = (0, 1, 4, 8, 16)  # 0: the shared model
CONTEXT = 64

# The memory model's assumptions (docs/personal-adapters.md, "How many users fit").
GIB, MIB = 2**30, 2**20
KV_ROWS, KV_POSITIONS = 16, 4096  # the KV cache reserved: --max-batch-size's default rows, 4K positions each
PREFIX_CACHE_BYTES = 256 * MIB  # the engine's kept prefixes (engine/local.py PREFIX_CACHE_MB)
RUNTIME_BYTES = {"cpu": 2 * GIB, "cuda": 1.5 * GIB}  # Python, torch, tokenizer, store; CUDA context, activations


def random_adapter(model, rank: int, seed: int) -> LoraAdapter:
    """A peft-format adapter with small random A and B on every projection."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for (layer, target), (out_features, in_features) in model_shapes(model).items():
        part = "mlp" if target in ("gate_proj", "up_proj", "down_proj") else "self_attn"
        prefix = f"base_model.model.model.layers.{layer}.{part}.{target}"
        state[f"{prefix}.lora_A.weight"] = torch.randn(rank, in_features, generator=g) * 0.01
        state[f"{prefix}.lora_B.weight"] = torch.randn(out_features, rank, generator=g) * 0.01
    return LoraAdapter(state, {"r": rank, "lora_alpha": 2 * rank})


def step_ms(decoder: FusedDecoder, rows: list[PersonalAdapter | None], steps: int) -> float:
    """Milliseconds per decode step of len(rows) rows, each under its adapter."""
    decoder.reset()
    g = torch.Generator().manual_seed(len(rows))
    prompts = [torch.randint(100, 4000, (CONTEXT,), generator=g).tolist() for _ in rows]
    decoder.prefill(prompts, adapters=rows)
    positions, tokens = [CONTEXT] * len(rows), [42] * len(rows)
    for _ in range(2):  # warm-up (and the batch's adapters stacked once)
        decoder.step(tokens, positions, rows)
        positions = [p + 1 for p in positions]
    started = time.perf_counter()
    for _ in range(steps):
        decoder.step(tokens, positions, rows)
        positions = [p + 1 for p in positions]
    return (time.perf_counter() - started) / steps * 1000


def measure(model, name: str, rank: int, steps: int, repeats: int) -> dict:
    decoder = FusedDecoder(model)
    shapes = model_shapes(model)
    ready = [prepare(random_adapter(model, rank, seed), f"user{seed}", 1, shapes, dtype=torch.float32, device="cpu")
             for seed in range(max(ADAPTERS))]
    runs: dict[tuple[int, int], list[float]] = {}
    with torch.inference_mode():
        for _ in range(repeats):
            for batch in BATCHES:
                for n in ADAPTERS:
                    rows = [ready[i % n] if n else None for i in range(batch)]
                    runs.setdefault((batch, n), []).append(step_ms(decoder, rows, steps))
    table = []
    for batch in BATCHES:
        shared = statistics.median(runs[(batch, 0)])
        for n in ADAPTERS:
            ms = statistics.median(runs[(batch, n)])
            table.append({"batch": batch, "adapters": n, "distinct_in_batch": min(n, batch), "step_ms": round(ms, 2),
                          "tokens_per_s": round(batch / ms * 1000, 1), "vs_shared": round(shared / ms, 3)})
    return {"model": name, "rank": rank, "adapter_bytes": ready[0].nbytes,
            "publish_s": publish_seconds(model, rank), "rows": table}


def publish_seconds(model, rank: int) -> float | None:
    """Seconds for `load_adapter` of one user's update into a running engine (model on disk only)."""
    model_dir = getattr(model, "bench_dir", None)
    if model_dir is None:
        return None

    async def run() -> float:
        engine = LocalEngine(model_dir, threads=torch.get_num_threads(), max_batch_size=8)
        try:
            adapter = random_adapter(engine.model, rank, 99)
            await engine.load_adapter("warm", adapter, 1)
            started = time.perf_counter()
            await engine.load_adapter("user", adapter, 2)
            return round(time.perf_counter() - started, 4)
        finally:
            await engine.aclose()

    return asyncio.run(run())


def smollm2_135m_config() -> LlamaConfig:
    """SmolLM2-135M-Instruct's shape (its config.json)."""
    return LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True)


def qwen3_4b_config() -> Qwen3Config:
    """Qwen3-4B's shape: hidden 2560, 36 layers, intermediate 9728, 32 query / 8 key-value heads of 128."""
    return Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)


def memory_model(rank: int, measured_135m_bytes: int | None) -> list[dict]:
    """Users whose adapters fit, per model and place: (memory - base - KV - the rest reserved) / adapter."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    places = [("this machine (CPU RAM)", "cpu", ram, torch.float32),
              ("24 GiB GPU", "cuda", 24 * GIB, torch.bfloat16), ("80 GiB GPU", "cuda", 80 * GIB, torch.bfloat16)]
    rows = []
    for name, config in (("SmolLM2-135M", smollm2_135m_config()), ("Qwen3-4B shape", qwen3_4b_config())):
        params, lora_params = _counts(config, rank)
        if name == "SmolLM2-135M" and measured_135m_bytes is not None:
            assert lora_params * 4 == measured_135m_bytes, (lora_params * 4, measured_135m_bytes)
        for place, device, memory, dtype in places:
            size = torch.finfo(dtype).bits // 8
            adapter = lora_params * size
            per_position = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * size
            kv = per_position * KV_ROWS * KV_POSITIONS  # keys and values of every layer
            # on the CPU the personal trainer holds a second copy of the base (float32) in the same process;
            # on a GPU a step's torch path stacks the batch's distinct adapters (engine/adapters.py `add`)
            base = params * size * (2 if device == "cpu" else 1)
            other = RUNTIME_BYTES[device] + (PREFIX_CACHE_BYTES if device == "cpu" else KV_ROWS * adapter)
            free = memory - base - kv - other
            rows.append({"model": name, "place": place, "dtype": str(dtype).removeprefix("torch."),
                         "memory_gib": round(memory / GIB, 1), "base_gib": round(base / GIB, 2),
                         "kv_gib": round(kv / GIB, 2), "other_gib": round(other / GIB, 2),
                         "adapter_mib": round(adapter / MIB, 2), "served": max(int(free // adapter), 0),
                         # the trainer here: the state of MAX_RESIDENT users in memory (train/personal_state.py)
                         "trained_here": max(int((free - MAX_RESIDENT * RESIDENT_COPIES * adapter) // adapter), 0)
                         if device == "cpu" else None})
    return rows


def _counts(config: PretrainedConfig, rank: int) -> tuple[int, int]:
    """(the model's parameters, one adapter's at `rank` on every projection), from a model on the meta device."""
    cls = Qwen3ForCausalLM if isinstance(config, Qwen3Config) else LlamaForCausalLM
    with torch.device("meta"):
        model = cls(config)
    params = sum(p.numel() for p in model.parameters())  # tied embeddings once
    return params, rank * sum(out + inp for out, inp in model_shapes(model).values())


def print_memory(rows: list[dict], rank: int) -> None:
    print(f"\nmemory model: rank {rank} on every projection, KV reserved for {KV_ROWS} rows x {KV_POSITIONS} positions")
    print(f"{'model':<15} {'place':<23} {'dtype':<9} {'memory':>7} {'base':>6} {'KV':>6} {'other':>6} "
          f"{'adapter':>8} {'served':>7} {'trained':>8}")
    for r in rows:
        trained = "" if r["trained_here"] is None else r["trained_here"]
        print(f"{r['model']:<15} {r['place']:<23} {r['dtype']:<9} {r['memory_gib']:>6}G {r['base_gib']:>5}G "
              f"{r['kv_gib']:>5}G {r['other_gib']:>5}G {r['adapter_mib']:>6}Mi {r['served']:>7} {trained:>8}")


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
    return LlamaForCausalLM(config).eval().requires_grad_(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-default-model", action="store_true")
    parser.add_argument("--memory-only", action="store_true", help="print the memory model only, time nothing")
    args = parser.parse_args()
    if args.memory_only:
        print_memory(memory_model(args.rank, None), args.rank)
        return
    torch.set_num_threads(args.threads)
    results = {"threads": args.threads, "kernels": kernels.available(), "models": []}
    models = [("tiny-llama (4 layers, hidden 256, random)", tiny_model())]
    model_dir = default_model_dir()
    if not args.no_default_model and model_dir is not None and Path(model_dir).exists():
        model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)
        model.bench_dir = model_dir
        models.append((Path(model_dir).name, model))
    for name, model in models:
        result = measure(model, name, args.rank, args.steps, args.repeats)
        results["models"].append(result)
        print(f"\n{name}: rank {args.rank}, {result['adapter_bytes'] / 2**20:.2f} MiB per adapter, publish "
              f"{result['publish_s']} s")
        print(f"{'batch':>5} {'adapters':>8} {'distinct':>8} {'ms/step':>8} {'tok/s':>8} {'vs shared':>9}")
        for row in result["rows"]:
            print(f"{row['batch']:>5} {row['adapters']:>8} {row['distinct_in_batch']:>8} {row['step_ms']:>8} "
                  f"{row['tokens_per_s']:>8} {row['vs_shared']:>9}")
    measured = next((m["adapter_bytes"] for m in results["models"] if m["model"] == "SmolLM2-135M-Instruct"), None)
    results["memory_model"] = memory_model(args.rank, measured)
    print_memory(results["memory_model"], args.rank)
    out = ROOT / "bench" / "results" / "personal_adapters.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
