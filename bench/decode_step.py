"""One decode step of the fused decoder, by batch and context (a benchmark, not a test).

    .venv/bin/python bench/decode_step.py [--threads 1] [--steps 20] [--repeats 3]

Where the serving engine of a running demo spends most of its time: one step of B rows,
each at the same context length, on the engine's own thread budget (1 thread: the demo's
engine shares the 2 cores with the trainer). Rows of 64 and 512 positions (the demo's
multi-turn prompts are 200-700), batches 1, 4, 8 and 12 (4 students, plus the 8 held-out
answers of an evaluation). Prefix cache off; milliseconds per step, the median of
`--repeats` runs of `--steps` steps after a warm-up. Then the compiled matrix-vector
product alone (engine/kernels.py) beside torch's matmul, on the model's head and on sixty
of its MLP matrices (more than the caches hold), by rows of x: the best of 5 runs.
Writes bench/results/decode_step.json.
Run it from another checkout (PYTHONPATH=OTHER/src) for a before/after.
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))  # after PYTHONPATH: another checkout's code can be measured

from openclaw_rl.engine import kernels  # noqa: E402
from openclaw_rl.engine.decoder import FusedDecoder  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402


def step_ms(decoder: FusedDecoder, batch: int, context: int, steps: int, repeats: int) -> float:
    decoder.reset()
    g = torch.Generator().manual_seed(batch * 1000 + context)
    prompts = [torch.randint(100, 40000, (context,), generator=g).tolist() for _ in range(batch)]
    decoder.prefill(prompts)
    positions = [context] * batch
    tokens = [42] * batch
    for _ in range(3):  # warm-up
        decoder.step(tokens, positions)
        positions = [p + 1 for p in positions]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(steps):
            decoder.step(tokens, positions)
            positions = [p + 1 for p in positions]
        times.append((time.perf_counter() - started) / steps * 1000)
    return statistics.median(times)


def best_ms(fn, calls: int = 4, runs: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls * 1000)
    return best


def matvec_rows(decoder: FusedDecoder) -> list[dict]:
    """ms per product by rows of x: the head, and sixty MLP matrices one after another."""
    head = decoder.lm_head
    mlp = [layer.gate.weight for layer in decoder.layers] + [layer.up.weight for layer in decoder.layers]
    ops = kernels.ops() if decoder.kernels else None
    rows = []
    for batch in (1, 2, 4, 8, 12, 16):
        x = torch.randn(batch, head.shape[1])
        row = {"rows_of_x": batch,
               "head_torch_ms": round(best_ms(lambda: x @ head.T), 2),
               "mlp_torch_ms": round(best_ms(lambda: [x @ w.T for w in mlp]), 2)}
        if ops is not None:
            row["head_kernel_ms"] = round(best_ms(lambda: ops.gemv(x, head)), 2)
            row["mlp_kernel_ms"] = round(best_ms(lambda: [ops.gemv(x, w) for w in mlp]), 2)
        print(f"matrix-vector, {batch:2d} rows of x: " + ", ".join(f"{k} {v}" for k, v in row.items()
                                                                    if k != "rows_of_x"), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model directory (default: the bundled model)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "decode_step.json"))
    args = parser.parse_args()

    engine = LocalEngine(resolve_model_dir(args.model or None), threads=args.threads, prefix_cache_mb=0)
    decoder = engine._decoder  # the engine's own, as it serves
    if not isinstance(decoder, FusedDecoder):
        raise SystemExit(f"this model decodes with {type(decoder).__name__}, not the fused decoder")
    torch.set_num_threads(args.threads)
    rows = []
    with torch.inference_mode():
        for context in (64, 512):
            for batch in (1, 4, 8, 12):
                ms = step_ms(decoder, batch, context, args.steps, args.repeats)
                rows.append({"batch": batch, "context": context, "ms_per_step": round(ms, 1),
                             "tokens_per_s": round(batch * 1000 / ms, 1)})
                print(f"batch {batch:2d}, context {context:3d}: {ms:6.1f} ms per step, "
                      f"{batch * 1000 / ms:6.1f} tokens/s", flush=True)
        matvec = matvec_rows(decoder)
    result = {"model": engine.model_name, "machine": f"{platform.machine()}, {torch.get_num_threads()} threads",
              "kernels": decoder.kernels, "code": str(Path(sys.modules["openclaw_rl"].__file__).parent),
              "steps": args.steps, "repeats": args.repeats, "rows": rows, "matvec": matvec}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
