"""Retention after a run: the base against each run's last served weights on the retention probes.

    python scripts/retention_table.py RUN_DIR... [--bfcl 8] [--instructions 48] [--arithmetic 0]
                                      [--tokens 64] [--out retention.json]

Each RUN_DIR is one `demo`/`simulate`/`agent` run (its `--out`); the trained weights are the
latest checkpoint of each data dir under it (`openclaw-rl export`: the version the trainer
held when it stopped, the one served). The probes are the gate's retention probes
(docs/safe-updates.md): BFCL's single-turn AST categories (a fixed sample, `--bfcl` items
per category), the instruction-following probe, and optionally arithmetic; answered
greedily by the gate's own decoding (`Gate._answer`) up to `--tokens` new tokens, checked
item by item. The base is answered once.

Printed per probe: the base's correct items, each run's (lost / gained items against the
base, the one-sided sign test's p as the gate computes it), the mean change over runs with a
95 % bootstrap CI, and the probe's noise band: the half-width of the 95 % Wilson interval
of the base's accuracy at the probe's size (how far a fresh sample of items of the same
kind could move it). A probe "fell" when its mean change's CI lies wholly below minus the
band.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from openclaw_rl.compose import retention_probes
from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.eval.metrics import bootstrap_mean_ci
from openclaw_rl.eval.retention import RetentionProbe
from openclaw_rl.judge.hint_check import wilson
from openclaw_rl.train.checkpoint import export, load_latest
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.retention import sign_test_p
from openclaw_rl.train.trainer import Trainer


def probes(args: argparse.Namespace, tokenizer) -> list[RetentionProbe]:
    """The probes asked for, built as the gate builds them (compose.retention_probes)."""
    found = retention_probes(TrainConfig(gate_retention_problems=args.arithmetic, gate_retention_bfcl=args.bfcl,
                                         gate_retention_instructions=args.instructions), tokenizer)
    if not found:
        raise SystemExit("every probe is 0: ask for at least one of --bfcl, --instructions, --arithmetic")
    return found


def answer(model_dir: Path, asked: list[RetentionProbe], tokens: int) -> dict[str, list[bool]]:
    """Each probe's items right or wrong, answered greedily by the gate's decoding of `model_dir`."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = Trainer(model_dir, TrainConfig(gate="on"), device="cpu")
    gate = Gate(trainer, TrainConfig(gate="on", gate_max_new_tokens=tokens, gate_anchors=0), tokenizer, list)
    found = {}
    for probe in asked:
        start = time.perf_counter()
        found[probe.name] = [bool(ok) for ok in probe.correct(gate._answer(probe.prompts).texts)]
        print(f"  {model_dir.name}: {probe.name} {sum(found[probe.name])}/{len(probe.prompts)} right "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return found


def trained_dirs(run: Path) -> list[Path]:
    """The data dirs under `run` that hold a checkpoint."""
    dirs = sorted({p.parent.parent for p in run.rglob("checkpoints/*") if p.is_dir()})
    found = [d for d in dirs if load_latest(d) is not None]
    if not found:
        raise SystemExit(f"{run} holds no checkpoint (a run with --method off trains nothing)")
    return found


def summarize(base: dict[str, list[bool]], runs: dict[str, dict[str, list[bool]]]) -> dict:
    table = {}
    for name, held in base.items():
        n, right = len(held), sum(held)
        low, high = wilson(right, n)
        band = (high - low) / 2
        rows = {}
        for run, found in runs.items():
            now = found[name]
            lost = sum(b and not c for b, c in zip(held, now))
            gained = sum(c and not b for b, c in zip(held, now))
            rows[run] = {"correct": sum(now), "lost": lost, "gained": gained, "p": round(sign_test_p(lost, gained), 4)}
        changes = [(r["correct"] - right) / n for r in rows.values()]
        ci = bootstrap_mean_ci(changes) if len(changes) > 1 else (changes[0], changes[0])
        table[name] = {"items": n, "base_correct": right, "noise_band": round(band, 3), "runs": rows,
                       "median_correct": statistics.median(r["correct"] for r in rows.values()),
                       "mean_change": round(statistics.mean(changes), 3), "ci": [round(ci[0], 3), round(ci[1], 3)],
                       "fell": ci[1] < -band}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--bfcl", type=int, default=8, help="items per BFCL category (0: skip)")
    parser.add_argument("--instructions", type=int, default=48, help="instruction items (0: skip)")
    parser.add_argument("--arithmetic", type=int, default=0, help="arithmetic problems (0: skip)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per answer (the gate's default)")
    parser.add_argument("--model", default="", help="the base model (default: the bundled one)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("retention.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base_dir = resolve_model_dir(args.model or None)
    asked = probes(args, AutoTokenizer.from_pretrained(base_dir))
    print("base:", flush=True)
    base = answer(base_dir, asked, args.tokens)
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        for run in args.runs:
            for data in trained_dirs(run):
                label = str(data.relative_to(run.parent)) if len(args.runs) > 1 else str(data)
                print(f"{label}:", flush=True)
                runs[label] = answer(export(data, Path(scratch) / f"m{len(runs)}"), asked, args.tokens)
    table = summarize(base, runs)
    for name, row in table.items():
        print(f"\n{name} ({row['items']} items): base {row['base_correct']}, after (median over {len(runs)}) "
              f"{row['median_correct']}; mean change {row['mean_change']:+.3f} [{row['ci'][0]:+.3f}, "
              f"{row['ci'][1]:+.3f}], noise band +-{row['noise_band']:.3f}: {'FELL' if row['fell'] else 'held'}")
        for run, r in row["runs"].items():
            print(f"  {run}: {r['correct']} (lost {r['lost']}, gained {r['gained']}, sign test p {r['p']})")
    args.out.write_text(json.dumps({"command": "python scripts/retention_table.py " + " ".join(sys.argv[1:]),
                                    "tokens": args.tokens, "table": table}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
