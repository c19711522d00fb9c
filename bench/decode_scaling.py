"""The accelerator's decode path, forced onto the CPU: how a step scales with the batch (a benchmark, not a test).

    .venv/bin/python bench/decode_scaling.py [--threads 2] [--steps 12] [--repeats 3] [--contexts 64 512]

On CUDA the fused decoder runs its torch path (engine/decoder.py `FusedDecoder.step`,
not the CPU kernels of engine/kernels.py) and the engine samples with engine/sampling.py.
This runs that same path on the CPU, on the bundled model, so its scaling with the
batch can be seen without a GPU (issue 42). For each precision (float32, bfloat16) and
batch (1, 2, 4, 8) at each context length, it measures:

- `step_ms`: one decode step of the batch (all rows at the same length), the median of
  `--repeats` runs of `--steps` steps;
- `matmul_ms`, `other_ms`: the step split by torch's profiler into the matrix products
  (`aten::mm`/`aten::bmm`/`aten::addmm`, which a CPU computes with its few cores while a
  GPU streams the weights once for every row) and everything else;
- `sample_ms`: sampling the batch's tokens at temperature 1 and top-p 0.95 with one
  transfer of the results, as the engine's `_sample` does;
- `host_ms`: the same decode step on a model of the same depth and heads with tiny widths,
  where the operations compute next to nothing: the Python and dispatch work of a step,
  which on a GPU is the host's launch time per step (the floor of a step without CUDA
  graphs).

Writes bench/results/decode_scaling.json. Run it from another checkout
(PYTHONPATH=OTHER/src) for a before/after.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))  # after PYTHONPATH: another checkout's code can be measured

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from openclaw_rl.engine import sampling  # noqa: E402
from openclaw_rl.engine.decoder import FusedDecoder  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402

BATCHES = (1, 2, 4, 8)
MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")


def load(model_dir: Path, dtype: torch.dtype) -> FusedDecoder:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    decoder = FusedDecoder(model)
    decoder.kernels = False  # the torch path, as on CUDA (the kernels are a CPU float32 path)
    decoder._linear = torch.nn.functional.linear
    for layer in decoder.layers:
        layer.linear = torch.nn.functional.linear
    return decoder


def start(decoder: FusedDecoder, batch: int, context: int) -> tuple[list[int], list[int]]:
    decoder.reset()
    g = torch.Generator().manual_seed(batch * 1000 + context)
    decoder.prefill([torch.randint(100, 40000, (context,), generator=g).tolist() for _ in range(batch)])
    return [42] * batch, [context] * batch


def step_ms(decoder: FusedDecoder, batch: int, context: int, steps: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        tokens, positions = start(decoder, batch, context)
        decoder.step(tokens, positions)  # warm-up
        positions = [p + 1 for p in positions]
        started = time.perf_counter()
        for _ in range(steps):
            decoder.step(tokens, positions)
            positions = [p + 1 for p in positions]
        times.append((time.perf_counter() - started) / steps * 1000)
    return statistics.median(times)


def split_ms(decoder: FusedDecoder, batch: int, context: int, steps: int) -> tuple[float, float]:
    """(matrix products, everything else) in ms per step, by the profiler's self CPU time."""
    tokens, positions = start(decoder, batch, context)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            decoder.step(tokens, positions)
            positions = [p + 1 for p in positions]
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1000 / steps
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS) / 1000 / steps
    return matmul, total - matmul


def sample_ms(vocab: int, batch: int, repeats: int = 20) -> float:
    logits = torch.randn(batch, vocab)
    temperature, top_p = torch.ones(batch), torch.full((batch,), 0.95)
    generators = [torch.Generator().manual_seed(i) for i in range(batch)]

    def once() -> None:
        logprobs = sampling.sampling_logprobs(logits, temperature, top_p)
        tokens = sampling.sample_tokens(logprobs, generators) if _batched_sampling() else \
            sampling.sample_tokens(logprobs, temperature <= 0, generators)
        chosen = logprobs.gather(-1, tokens[:, None])[:, 0]
        torch.cat([tokens.double(), chosen.double()]).tolist()

    once()
    started = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - started) / repeats * 1000


def _batched_sampling() -> bool:
    return "greedy" not in sampling.sample_tokens.__code__.co_varnames[: sampling.sample_tokens.__code__.co_argcount]


def host_ms(model_dir: Path, batch: int, context: int, steps: int) -> float:
    """The decode step of a model with the same layers and heads per key head but tiny widths
    (hidden 2 per head, head dim 2, MLP 8, vocabulary 256): every operation and dispatch of the
    real step, with next to no arithmetic. On a GPU this host work is the launch time per step,
    the floor of a step without CUDA graphs."""
    config = AutoConfig.from_pretrained(model_dir)
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    config.update(dict(hidden_size=2 * heads, head_dim=2, intermediate_size=8, vocab_size=256))
    model = AutoModelForCausalLM.from_config(config).eval()
    decoder = FusedDecoder(model)
    decoder.kernels, decoder._linear = False, torch.nn.functional.linear
    for layer in decoder.layers:
        layer.linear = torch.nn.functional.linear
    assert kv  # the heads per key head are the real model's
    tokens, positions = [7] * batch, [context] * batch
    decoder.reset()
    decoder.prefill([[5] * context for _ in range(batch)])
    decoder.step(tokens, positions)
    started = time.perf_counter()
    for _ in range(steps):
        positions = [p + 1 for p in positions]
        decoder.step(tokens, positions)
    return (time.perf_counter() - started) / steps * 1000


def measure(model_dir: Path, args: argparse.Namespace) -> list[dict]:
    rows = []
    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    with torch.inference_mode():
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            decoder = load(model_dir, dtype)
            for context in args.contexts:
                for batch in BATCHES:
                    ms = step_ms(decoder, batch, context, args.steps, args.repeats)
                    matmul, other = split_ms(decoder, batch, context, max(2, args.steps // 3))
                    row = {"dtype": name, "context": context, "batch": batch, "step_ms": round(ms, 1),
                           "tokens_per_s": round(batch * 1000 / ms, 1), "matmul_ms": round(matmul, 1),
                           "other_ms": round(other, 1)}
                    if name == "float32":
                        row["sample_ms"] = round(sample_ms(vocab, batch), 2)
                        row["host_ms"] = round(host_ms(model_dir, batch, context, args.steps), 2)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model directory (default: the bundled model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--label", default="", help="a name for this run in the results (e.g. before, after)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "decode_scaling.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model or None)
    rows = measure(model_dir, args)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results[args.label or "run"] = {
        "model": model_dir.name, "machine": f"{platform.machine()}, {args.threads} threads",
        "code": str(Path(sys.modules["openclaw_rl"].__file__).parent), "steps": args.steps,
        "repeats": args.repeats, "rows": rows}
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
