"""One training step of the default model under each allocator and pass size (a benchmark).

    .venv/bin/python bench/train_pass.py [--threads 1] [--repeats 1]

The batch has the shape of one step of the demo (seed 0, step 4): 8 samples whose
(prompt, response) lengths mix first turns (~70-token prompts) with third turns (~540),
random token ids, combined objective, full fine-tuning. Each setting runs in a fresh
process, since the allocator settings are process-wide:

- allocator `mmap-1mb`: glibc's mmap threshold fixed at 1 MB (the CLI before
  openclaw_rl/allocator.py); `glibc`: its defaults; `tuned`: allocator.tune_allocator (the CLI now);
- passes of 4 samples in arrival order (the trainer before), 4 sorted by length, 2, and 1
  (the CPU default now).

Prints seconds, minor page faults and system time of the step for each, and the loss
(the same in every row: only the grouping and the allocator change). Writes
bench/results/train_pass.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DEMO_STEP = [(543, 40), (304, 116), (82, 200), (525, 200), (77, 65), (79, 72), (71, 200), (64, 200)]
SETTINGS = [  # (allocator, samples per pass, sorted by length)
    ("mmap-1mb", 4, False), ("glibc", 4, False), ("tuned", 4, False), ("tuned", 4, True), ("tuned", 2, True),
    ("tuned", 1, True),
]


def one(allocator: str, size: int, by_length: bool, threads: int) -> dict:
    """Runs in the child: one step, timed."""
    if allocator == "mmap-1mb":
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    elif allocator == "tuned":
        from openclaw_rl.allocator import tune_allocator
        tune_allocator()
    import resource
    import time

    import torch

    from openclaw_rl.config import TrainConfig
    from openclaw_rl.engine.loading import resolve_model_dir
    from openclaw_rl.train import batch, trainer
    from openclaw_rl.types import Sample

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    samples = []
    for i, (p, t) in enumerate(DEMO_STEP):
        response = torch.randint(0, 49152, (t,), generator=g).tolist()
        samples.append(Sample(turn_id=i, session_id="s", policy_version=0,
                              prompt_token_ids=torch.randint(0, 49152, (p,), generator=g).tolist(),
                              response_token_ids=response, behaviour_logprobs=[-10.8] * t, temperature=1.0,
                              reward=(1.0, -1.0)[i % 2], teacher_logprobs=[-10.5] * t))
    if not by_length:  # the trainer before: consecutive samples, in arrival order
        trainer.split_micro_batches = lambda ss, n: [list(ss[i : i + n]) for i in range(0, len(ss), n)]
    model = trainer.Trainer(resolve_model_dir(None), TrainConfig(method="combined", micro_batch_size=size,
                                                                 train_threads=threads))
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    stats = model.step(samples)
    seconds, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    padded = sum(len(g) * max(len(s.prompt_token_ids) + len(s.response_token_ids) for s in g)
                 for g in (batch.split_micro_batches(samples, size) if by_length else
                           [samples[i : i + size] for i in range(0, len(samples), size)]))
    return {"allocator": allocator, "samples_per_pass": size, "by_length": by_length, "seconds": round(seconds, 2),
            "page_faults": after.ru_minflt - before.ru_minflt,
            "system_s": round(after.ru_stime - before.ru_stime, 2), "loss": round(stats["loss"], 6),
            "padded_positions": padded, "positions": sum(p + t for p, t in DEMO_STEP)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: a trainer beside serving)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "train_pass.json")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        allocator, size, by_length = args.child
        print(json.dumps(one(allocator, int(size), by_length == "1", args.threads)))
        return
    rows = []
    for allocator, size, by_length in SETTINGS:
        out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", allocator,
                              str(size), "1" if by_length else "0"], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{allocator:9s} {size} per pass{' by length' if by_length else '          '}: {row['seconds']:6.1f} s, "
              f"{row['page_faults']:>9,} page faults, {row['system_s']:5.1f} s system, "
              f"{row['padded_positions']} positions run of {row['positions']}, loss {row['loss']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": args.threads, "demo_step_lengths": DEMO_STEP, "rows": rows},
                                   indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
