"""How far the trainer's log-probs are from the engine's, by precision (a benchmark, not a test).

    .venv/bin/python bench/precision_mismatch.py [--model PATH] [--prompts 16] [--tokens 64]

The engine (engine/local.py, `--dtype E`) samples responses to chat prompts at
temperature 1; the trainer (train/trainer.py, `--train-dtype T`) then measures the same
tokens the way a training step does (`Trainer.logprobs`). The mismatch is the mean over
response tokens of |log pi_trainer - log pi_engine|, which is what the ratio of the first
PPO step reads as policy movement unless truncated importance sampling corrects it
(train/losses.py). Also reported: the mean TIS weight min(pi_trainer / pi_engine, 2)
and the share of tokens where the cap binds.

Writes bench/results/precision_mismatch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.train.batch import collate  # noqa: E402
from openclaw_rl.train.trainer import TIS_CAP, Trainer  # noqa: E402
from openclaw_rl.types import Sample, SamplingParams, TokenStep  # noqa: E402

PAIRS = [("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("float32", "bfloat16")]
QUESTIONS = [
    "What is the capital of France?", "Explain photosynthesis to a child.", "Write a haiku about rain.",
    "How do I reverse a list in Python?", "Give me three tips for a job interview.",
    "A train leaves at 3 pm and travels 120 km at 60 km/h. When does it arrive?",
    "What is the difference between weather and climate?", "Summarise the plot of Romeo and Juliet.",
    "Why is the sky blue?", "Suggest a name for a bakery.", "How many legs does a spider have?",
    "What does HTTP stand for?", "Translate 'good morning' into Spanish.", "What is 17 times 23?",
    "Describe a cat in two sentences.", "What should I pack for a weekend hike?",
]


async def sample(model_dir: Path, dtype: str, prompts: list[list[int]], tokens: int) -> list[Sample]:
    engine = LocalEngine(model_dir, dtype=dtype, device="cpu", max_batch_size=len(prompts))
    try:
        async def one(i: int, prompt: list[int]) -> Sample:
            steps = [e async for e in engine.stream(prompt, SamplingParams(max_new_tokens=tokens, temperature=1.0,
                                                                           seed=i))
                     if isinstance(e, TokenStep)]
            return Sample(turn_id=i, session_id=str(i), policy_version=0, prompt_token_ids=prompt,
                          response_token_ids=[s.token_id for s in steps],
                          behaviour_logprobs=[s.logprob for s in steps], temperature=1.0, reward=1.0)
        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
    finally:
        await engine.aclose()


def measure(trainer: Trainer, samples: list[Sample]) -> dict[str, float]:
    gaps: list[torch.Tensor] = []
    with torch.no_grad():
        for i in range(0, len(samples), 4):
            batch = {k: v.to(trainer.device) for k, v in collate(samples[i : i + 4]).items()}
            logprobs, _ = trainer.logprobs(batch)  # (B, T)
            mask = batch["loss_mask"].bool()
            gaps.append((logprobs.float() - batch["behaviour_logprobs"].float())[mask])
    gap = torch.cat(gaps).double()  # log pi_trainer - log pi_engine, per token
    return {
        "tokens": int(gap.numel()),
        "mean_abs_logprob_diff": float(gap.abs().mean()),
        "p99_abs_logprob_diff": float(gap.abs().quantile(0.99)),
        "max_abs_logprob_diff": float(gap.abs().max()),
        "tis_weight_mean": float(gap.clamp(max=math.log(TIS_CAP)).exp().mean()),
        "tis_capped_fraction": float((gap > math.log(TIS_CAP)).double().mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "precision_mismatch.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model or None)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [list(tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
               for q in QUESTIONS[: args.prompts]]
    started = time.perf_counter()
    by_engine = {dtype: asyncio.run(sample(model_dir, dtype, prompts, args.tokens))
                 for dtype in dict.fromkeys(engine for engine, _ in PAIRS)}
    rows = []
    for train_dtype in dict.fromkeys(train for _, train in PAIRS):
        trainer = Trainer(model_dir, TrainConfig(method="binary", train_dtype=train_dtype), device="cpu")
        for engine_dtype, wanted in PAIRS:
            if wanted == train_dtype:
                row = {"engine": engine_dtype, "trainer": train_dtype, **measure(trainer, by_engine[engine_dtype])}
                rows.append(row)
                print(f"engine {engine_dtype:>8} / trainer {train_dtype:>8}: mean |dlogp| "
                      f"{row['mean_abs_logprob_diff']:.5f} (p99 {row['p99_abs_logprob_diff']:.4f}, max "
                      f"{row['max_abs_logprob_diff']:.3f}) over {row['tokens']} tokens; TIS weight mean "
                      f"{row['tis_weight_mean']:.4f}, capped {row['tis_capped_fraction']:.4f}", flush=True)
        del trainer
    result = {
        "model": model_dir.name, "prompts": len(prompts), "max_new_tokens": args.tokens, "temperature": 1.0,
        "device": "cpu", "threads": args.threads, "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__, "seconds": round(time.perf_counter() - started, 1), "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
