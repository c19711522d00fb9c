"""A GPU check: decode speed, one training step of each method, peak memory (a benchmark, not a test).

    .venv/bin/python bench/gpu_check.py [--shape qwen3-4b|tiny] [--ranks N] [--out PATH]

Builds a randomly initialised model of Qwen3-4B's shape from a config (no download; the
tokenizer is the bundled model's, whose ids are all below Qwen3's vocabulary), then:

1. engine decode tokens/s at batch 1, 8 and 32 (engine/local.py, `--dtype auto`: bfloat16
   on CUDA), sampled at temperature 1 for `--new-tokens` tokens per request;
2. one training step of every built-in method, full fine-tuning and LoRA, in the
   trainer's precision (`--train-dtype auto`: bfloat16 compute, float32 master weights),
   on synthetic samples that carry every signal (reward, teacher log-probs and top-k, step
   advantage); with `--ranks N` > 1 (default: every GPU) the steps run sharded with FSDP2
   on N ranks under torchrun (train/sharded.py), and rank 0 reports;
3. peak memory of each: torch.cuda.max_memory_allocated on CUDA, the process's peak RSS
   on a CPU (which only grows, so later rows include earlier ones).

Writes bench/results/gpu_check.json (or --out). On a CPU it runs end to end with
`--shape tiny` (tests/test_gpu_check.py); the default shape is Qwen3-4B on CUDA and tiny
on a CPU. main() and train_steps() pass 60 lines: they are the result record, written out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.train import sharded  # noqa: E402
from openclaw_rl.train.methods import METHODS  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402
from openclaw_rl.types import Sample, SamplingParams, TokenStep  # noqa: E402

SHAPES = {  # Qwen3-4B's config.json, and a shape small enough for a test on a CPU
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                     rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=49152, max_position_embeddings=2048,
                 tie_word_embeddings=True),
}
BATCHES = (1, 8, 32)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")


def build_model(shape: str, target: Path, tokenizer_dir: Path) -> int:
    """A random model of `shape` saved at `target` in bfloat16, with the bundled tokenizer; its parameters."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(**SHAPES[shape], bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    del model
    return params


def peak_memory_gb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


async def decode(model_dir: Path, new_tokens: int) -> list[dict]:
    engine = LocalEngine(model_dir, max_batch_size=max(BATCHES), prefix_cache_mb=0)  # one prompt repeats: compute it
    rows = []
    try:
        prompt = list(range(100, 132))
        async def one(seed: int) -> int:
            params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=seed)
            return sum([1 async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)])
        await one(0)  # warm up: kernels, allocator
        for batch in BATCHES:
            started = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one(i) for i in range(batch))))
            seconds = time.perf_counter() - started
            rows.append({"batch": batch, "tokens": tokens, "seconds": round(seconds, 3),
                         "tokens_per_s": round(tokens / seconds, 1)})
            print(f"decode batch {batch:>2}: {tokens / seconds:8.1f} tokens/s", flush=True)
        rows.append({"engine_dtype": str(engine.dtype).removeprefix("torch.")})
    finally:
        await engine.aclose()
    return rows


def synthetic_samples(count: int, prompt_tokens: int, response_tokens: int, top_k: int) -> list[Sample]:
    """Samples that carry every signal, so each method finds what it trains on."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(count):
        prompt = torch.randint(100, 40000, (prompt_tokens,), generator=g).tolist()
        response = torch.randint(100, 40000, (response_tokens,), generator=g).tolist()
        behaviour = (-torch.rand(response_tokens, generator=g) * 3).tolist()
        samples.append(Sample(
            turn_id=i, session_id=str(i), policy_version=0, prompt_token_ids=prompt, response_token_ids=response,
            behaviour_logprobs=behaviour, temperature=1.0, reward=1.0 if i % 2 else -1.0,
            teacher_logprobs=[b + 0.3 for b in behaviour],
            teacher_top_ids=[[response[t], *range(200, 200 + top_k - 1)] for t in range(response_tokens)],
            teacher_top_logprobs=[[-0.5] + [-4.0] * (top_k - 1) for _ in range(response_tokens)],
            hint="be brief", step_advantage=0.5 if i % 2 else -0.5))
    return samples


def train_steps(model_dir: Path, args: argparse.Namespace, device: str) -> list[dict]:
    """One step of each method, full and LoRA; sharded when this is a rank of a process group."""
    distributed = sharded.world_size() > 1
    rank = sharded.init_from_env() if distributed else 0
    rows = []
    for lora in (False, True):
        for name, method in METHODS.items():
            config = TrainConfig(method=name, lora=lora, batch_size=args.batch, micro_batch_size=args.micro_batch,
                                 train_dtype=args.train_dtype, topk_k=args.top_k, gradient_checkpointing="auto")
            reset_peak(device)
            trainer = sharded.ShardedTrainer(model_dir, config) if distributed else Trainer(model_dir, config)
            if rank != 0:
                trainer.follow()
                del trainer
                continue
            samples = synthetic_samples(args.batch, args.prompt_tokens, args.response_tokens, args.top_k)
            try:
                trainer.step(samples)  # warm-up: the optimizer state is allocated here
                if device == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                stats = trainer.step(samples)
                if device == "cuda":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - started
            finally:
                if distributed:
                    trainer.stop_followers()
            row = {"method": name, "lora": lora, "ranks": sharded.world_size(),
                   "train_dtype": str(trainer.compute_dtype).removeprefix("torch."), "seconds": round(seconds, 3),
                   "tokens_per_s": round(stats["tokens"] / seconds, 1), "loss": stats["loss"],
                   "peak_memory_gb": round(peak_memory_gb(device), 2)}
            rows.append(row)
            print(f"train {name:>8} {'lora' if lora else 'full'}: {seconds:7.2f} s/step, peak "
                  f"{row['peak_memory_gb']:.2f} GB", flush=True)
            del trainer
    if distributed:
        torch.distributed.destroy_process_group()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b" if cuda else "tiny")
    parser.add_argument("--ranks", type=int, default=max(1, torch.cuda.device_count()))
    parser.add_argument("--new-tokens", type=int, default=64 if cuda else 8)
    parser.add_argument("--batch", type=int, default=8 if cuda else 4)
    parser.add_argument("--micro-batch", type=int, default=4 if cuda else 2)
    parser.add_argument("--prompt-tokens", type=int, default=256 if cuda else 16)
    parser.add_argument("--response-tokens", type=int, default=256 if cuda else 8)
    parser.add_argument("--top-k", type=int, default=16 if cuda else 4)
    parser.add_argument("--train-dtype", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads on a CPU (0: torch's default)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_check.json"))
    parser.add_argument("--model-dir", default="", help="internal: the ranks of --ranks train on this model")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if cuda else "cpu"
    if args.model_dir:  # a rank under torchrun: train, rank 0 writes its rows
        rows = train_steps(Path(args.model_dir), args, device)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.out).write_text(json.dumps(rows))
        return
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        model_dir = work / args.shape
        params = build_model(args.shape, model_dir, resolve_model_dir(None))
        print(f"{args.shape}: {params / 1e9:.3f} B parameters, random, in {model_dir}", flush=True)
        reset_peak(device)
        decode_rows = asyncio.run(decode(model_dir, args.new_tokens))
        decode_peak = round(peak_memory_gb(device), 2)
        if args.ranks > 1:
            rows_file = work / "train.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
                       __file__, *sys.argv[1:], "--model-dir", str(model_dir), "--out", str(rows_file)]
            subprocess.run(command, check=True)
            train_rows = json.loads(rows_file.read_text())
        else:
            train_rows = train_steps(model_dir, args, device)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "shape": args.shape, "parameters": params, "device": torch.cuda.get_device_name() if cuda else "cpu",
        "gpus": torch.cuda.device_count(), "ranks": args.ranks, "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(),
        "decode": decode_rows, "decode_peak_memory_gb": decode_peak, "train": train_rows,
        "batch": args.batch, "prompt_tokens": args.prompt_tokens, "response_tokens": args.response_tokens,
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
