"""Peak memory and time of one training step on agent-length samples, with and without
gradient checkpointing (a benchmark, not a test).

    .venv/bin/python bench/train_memory.py [--model PATH] [--prompt-tokens 2000] [--samples 4] [--threads 2]

Writes bench/results/train_memory.json.

The shape is the terminal agent's end-of-run batch of `docs/experiments.md`: 4 samples
whose prompts (system prompt, tool schema, earlier steps and their outputs) are about
2,000 tokens, each with a 192-token response (the agent's --max-tokens). Token ids are
drawn at random from the vocabulary; memory and time depend on the shape only. Behaviour
log-probs come from one no-grad forward pass of the same model, so the PPO ratio starts
at 1, and rewards alternate +1 / -1 (the combined objective, without teachers: what an
agent's PRM-voted sample carries).

Each mode (`gradient_checkpointing` off, on) runs in a process of its own, so that each
peak resident set size (ru_maxrss) is that mode's alone: the model, AdamW's state, and
whatever the step keeps for its backward pass. Seconds are the median of `--steps`
steps after one untimed warm-up step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.train.batch import collate  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402
from openclaw_rl.types import Sample  # noqa: E402

RESPONSE_TOKENS = 192


def agent_samples(trainer: Trainer, samples: int, prompt_tokens: int) -> list[Sample]:
    """Random-id samples of the agent's shape, scored by the trainer's own model."""
    vocab = trainer.model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(samples):
        prompt = torch.randint(0, vocab, (prompt_tokens - 50 * i,), generator=g).tolist()  # padding varies too
        response = torch.randint(0, vocab, (RESPONSE_TOKENS,), generator=g).tolist()
        out.append(Sample(turn_id=i, session_id="bench", policy_version=0, prompt_token_ids=prompt,
                          response_token_ids=response, behaviour_logprobs=[0.0] * RESPONSE_TOKENS,
                          temperature=1.0, reward=1.0 if i % 2 == 0 else -1.0))
    with torch.no_grad():
        scored = [trainer.logprobs(collate([sample]))[0][0].tolist() for sample in out]
    return [dataclasses.replace(sample, behaviour_logprobs=logprobs) for sample, logprobs in zip(out, scored)]


def run_mode(args: argparse.Namespace) -> dict:
    """One mode, in this process: the numbers for one row of the result."""
    torch.set_num_threads(args.threads)
    config = TrainConfig(method="combined", batch_size=args.samples, lr=1e-5,
                         gradient_checkpointing=args.mode, train_threads=args.threads)
    trainer = Trainer(resolve_model_dir(args.model), config, device="cpu")
    samples = agent_samples(trainer, args.samples, args.prompt_tokens)
    seconds, losses = [], []
    for step in range(args.steps + 1):
        started = time.perf_counter()
        stats = trainer.step(samples)
        if step:  # the first step is the warm-up
            seconds.append(time.perf_counter() - started)
        losses.append(stats["loss"])
    return {
        "gradient_checkpointing": args.mode,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # KiB on Linux
        "seconds_per_step": statistics.median(seconds),
        "first_loss": losses[0],
        "tokens_per_step": sum(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--samples", type=int, default=4, help="samples in the batch (the trainer's default micro-batches)")
    parser.add_argument("--prompt-tokens", type=int, default=2000, help="prompt length of the longest sample")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per mode, after one warm-up")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--modes", default="off,on", help="gradient_checkpointing settings to compare")
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # set in the child process that runs one mode
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "train_memory.json")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args)))
        return

    rows = []
    for mode in args.modes.split(","):
        child = [sys.executable, __file__, "--mode", mode, "--samples", str(args.samples),
                 "--prompt-tokens", str(args.prompt_tokens), "--steps", str(args.steps),
                 "--threads", str(args.threads)] + (["--model", args.model] if args.model else [])
        done = subprocess.run(child, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"gradient_checkpointing={mode} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        row = rows[-1]
        print(f"gradient_checkpointing={mode:<4} peak RSS {row['peak_rss_gb']:5.2f} GB  "
              f"{row['seconds_per_step']:6.1f} s/step  first loss {row['first_loss']:.5f}", flush=True)
    result = {"samples": args.samples, "prompt_tokens": args.prompt_tokens, "response_tokens": RESPONSE_TOKENS,
              "threads": args.threads, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
