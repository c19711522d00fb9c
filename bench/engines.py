"""The vLLM engine against the local engine on the same model (a benchmark, not a test).

    .venv/bin/python bench/engines.py [--model PATH] [--new-tokens 64]

Needs `.venv-vllm` (make vllm-venv); starts one vLLM server (float32, processed
log-probs, LoRA rank 16, as `serve --engine vllm` does) and stops it at the end.

1. Decode throughput, batch 1 and 8: generated tokens / wall second for greedy
   requests of `--new-tokens` tokens through each engine's `stream` (the vLLM figure
   includes HTTP and the engine's parsing), distinct prompts so no prefix is shared.
2. Weight-update latency: `load_weights` of the full weights and of a LoRA adapter
   (rank 16), three times each; the total (files written, pause, load, resume) and the
   server-side part (pause to resume).
3. Request latency during updates: two clients send 16-token requests back to back,
   first with no update, then while full and LoRA updates alternate every 5 s; p50 and
   p95 latency and failed requests.

The engines run one at a time, so each has both cores: the local engine computes on
two threads; vLLM's CPU backend binds its compute to one core and keeps the other for
its API server (its default, VLLM_CPU_OMP_THREADS_BIND=auto). Writes
bench/results/engines.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.engine.vllm import VLLMEngine  # noqa: E402
from openclaw_rl.engine.vllm_server import VLLMServer  # noqa: E402
from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.types import SamplingParams, TokenStep  # noqa: E402

PROMPTS = [f"Write a long, detailed story about a robot named Unit {i} who learns to paint." for i in range(16)]


async def _tokens(engine, prompt_ids: list[int], params: SamplingParams) -> int:
    return sum([isinstance(e, TokenStep) async for e in engine.stream(prompt_ids, params)])


async def throughput(engine, prompts: list[list[int]], batch: int, new_tokens: int) -> dict:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    await _tokens(engine, prompts[-1], SamplingParams(max_new_tokens=4, temperature=0.0))  # warm up
    started = time.perf_counter()
    counts = await asyncio.gather(*(_tokens(engine, prompts[i], params) for i in range(batch)))
    seconds = time.perf_counter() - started
    return {"batch": batch, "tokens": sum(counts), "seconds": round(seconds, 2),
            "tokens_per_s": round(sum(counts) / seconds, 1)}


async def update_latency(engine: VLLMEngine, full: dict, adapter, version: int) -> tuple[dict, int]:
    result = {}
    for name, weights in (("full", full), ("lora", adapter)):
        totals, server = [], []
        for _ in range(3):
            version += 1
            started = time.perf_counter()
            await engine.load_weights(weights, version)
            totals.append(time.perf_counter() - started)
            server.append(engine.last_update_s)
        result[name] = {"total_s_median": round(statistics.median(totals), 2),
                        "pause_to_resume_s_median": round(statistics.median(server), 2),
                        "total_s": [round(t, 2) for t in totals]}
    return result, version


async def latency_under_updates(engine: VLLMEngine, prompts, full, adapter, version: int,
                                duration_s: float) -> tuple[dict, int]:
    params = SamplingParams(max_new_tokens=16, temperature=0.0)

    async def clients(stop: asyncio.Event) -> tuple[list[float], int]:
        latencies, failures = [], 0

        async def one(i: int) -> None:
            nonlocal failures
            n = 0
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    await _tokens(engine, prompts[(i * 7 + n) % len(prompts)], params)
                    latencies.append(time.perf_counter() - started)
                except Exception:
                    failures += 1
                n += 1

        await asyncio.gather(one(0), one(1))
        return latencies, failures

    def summary(latencies: list[float], failures: int, updates: int) -> dict:
        ordered = sorted(latencies)
        return {"requests": len(latencies), "failed": failures, "updates": updates,
                "p50_s": round(statistics.median(ordered), 2),
                "p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2)}

    stop = asyncio.Event()
    task = asyncio.create_task(clients(stop))
    await asyncio.sleep(duration_s)
    stop.set()
    idle = summary(*(await task), 0)

    stop = asyncio.Event()
    task = asyncio.create_task(clients(stop))
    updates = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        await asyncio.sleep(5.0)
        version += 1
        await engine.load_weights(full if updates % 2 == 0 else adapter, version)
        updates += 1
    stop.set()
    during = summary(*(await task), updates)
    return {"idle": idle, "during_updates": during}, version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model directory (default: the bundled model)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--duration-s", type=float, default=60.0, help="length of each latency phase")
    parser.add_argument("--local-threads", type=int, default=0, help="local engine threads (0 = its default, 2)")
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model or None)
    results: dict = {"model": model_dir.name, "machine": f"{platform.machine()}, {torch.get_num_threads()} threads",
                     "new_tokens": args.new_tokens, "load_average_at_start": os.getloadavg()[0]}

    local = LocalEngine(model_dir, threads=args.local_threads or None, prefix_cache_mb=0)  # prompts repeat: compute each
    prompts = [render_prompt(local.tokenizer, [{"role": "user", "content": p}], None, None) for p in PROMPTS]

    async def local_phase() -> dict:
        return {f"batch_{b}": await throughput(local, prompts, b, args.new_tokens) for b in (1, 8)}

    results["local"] = {"threads": local.threads, **asyncio.run(local_phase())}
    asyncio.run(local.aclose())
    print("local:", json.dumps(results["local"]), flush=True)

    from openclaw_rl.train.trainer import Trainer

    trainer = Trainer(model_dir, TrainConfig(lora=True, lora_rank=16), device="cpu")
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.01)
    adapter, full = trainer.lora_adapter(), trainer.policy_state_dict()
    del trainer

    weights_dir = tempfile.TemporaryDirectory(prefix="openclaw-bench-weights-")
    server = VLLMServer(model_dir, lora_rank=16, log_path=Path(tempfile.gettempdir()) / "openclaw-bench-vllm.log")
    started = time.perf_counter()
    server.start()
    results["vllm_startup_s"] = round(time.perf_counter() - started, 1)
    try:
        engine = VLLMEngine(server.url, model_dir, weights_dir=weights_dir.name)

        async def vllm_phase() -> dict:
            out = {f"batch_{b}": await throughput(engine, prompts, b, args.new_tokens) for b in (1, 8)}
            out["update_latency"], version = await update_latency(engine, full, adapter, 0)
            out["latency_under_updates"], _ = await latency_under_updates(engine, prompts, full, adapter, version,
                                                                          args.duration_s)
            return out

        results["vllm"] = asyncio.run(vllm_phase())
        print("vllm:", json.dumps(results["vllm"]), flush=True)
    finally:
        server.stop()
        weights_dir.cleanup()
    results["load_average_at_end"] = os.getloadavg()[0]  # other jobs on the machine skew every figure
    out = ROOT / "bench" / "results" / "engines.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
