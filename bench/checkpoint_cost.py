"""What a checkpoint of the default model costs, against archiving one version (a benchmark, not a test).

    .venv/bin/python bench/checkpoint_cost.py [--model PATH] [--repeats 3] [--lora]

Writes bench/results/checkpoint_cost.json. The question it answers (issue 36, finding 3):
to keep every accepted version across a crash, checkpoint on every accepted version, or
resume from the version archive the runner already writes? A checkpoint is the weights
plus AdamW's two moments (3x the trainable bytes), fsynced; the archive write is the
weights alone, which the runner pays for every accepted version anyway. Timed: the median
of `--repeats` `checkpoint.save` and `VersionArchive.write` calls of a trainer with an
optimizer state (one AdamW step on ones-gradients), wall clock, on this machine's disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.train import checkpoint
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.versions import VersionArchive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer = Trainer(resolve_model_dir(args.model or None), TrainConfig(lora=args.lora), device="cpu")
    for p in trainer.trainable:
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()  # AdamW moments, as after a real step
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainer.trainable)
    checkpoint_s, archive_s = [], []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as data:  # this disk, not a tmpfs
        archive = VersionArchive(data, keep=2)
        for step in range(1, args.repeats + 1):
            trainer.train_step = trainer.policy_version = step
            started = time.perf_counter()
            checkpoint.save(data, trainer, keep=2)
            checkpoint_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            archive.write(step, trainer, parent=step - 1)
            archive_s.append(time.perf_counter() - started)
    result = {
        "model": str(trainer.model_dir), "lora": args.lora, "trainable_mb": round(trainable_bytes / 1e6, 1),
        "checkpoint_s_median": round(statistics.median(checkpoint_s), 2), "checkpoint_s": [round(s, 2) for s in checkpoint_s],
        "archive_write_s_median": round(statistics.median(archive_s), 2), "archive_write_s": [round(s, 2) for s in archive_s],
    }
    print(json.dumps(result, indent=2))
    out = Path(__file__).parent / "results" / "checkpoint_cost.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
