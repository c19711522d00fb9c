"""Agent runs across seeds: held-out success per configuration, with confidence intervals.

    python scripts/agent_seeds.py LABEL=OUT_DIR[,OUT_DIR...] [LABEL=...] [--split eval]

Each OUT_DIR is one `openclaw-rl agent` run (its episodes.jsonl and summary.json); the dirs
after one LABEL are that configuration's seeds (the untrained base, `--no-train`, is one
more label). Prints a markdown table per label: runs, episodes of `--split` (held-out by
default) over all seeds, the pooled success rate with a 95 % Wilson interval, the mean of
the per-seed success rates with a 95 % bootstrap interval of the mean (10,000 resamples,
fixed seed), each seed's rate, the updates and the samples kept for training per run, and the wall time.
Episodes that ended on an environment error are left out, as in the run's own summary.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from openclaw_rl.judge.hint_check import wilson


def bootstrap_mean_ci(values: list[float], level: float = 0.95, resamples: int = 10_000,
                      seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(resamples))
    return means[int((1 - level) / 2 * resamples)], means[min(resamples - 1, int((1 + level) / 2 * resamples))]


def run_stats(out_dir: Path, split: str) -> dict:
    episodes_path, summary_path = out_dir / "episodes.jsonl", out_dir / "summary.json"
    if not episodes_path.is_file() or not summary_path.is_file():
        raise SystemExit(f"{out_dir} holds no episodes.jsonl and summary.json: pass the --out dir of a finished "
                         "`openclaw-rl agent` run")
    found = [e for e in map(json.loads, episodes_path.read_text().splitlines()) if e["split"] == split]
    scored = [e for e in found if e["error"] is None]
    if not scored:
        raise SystemExit(f"{out_dir} has no {split} episodes without an environment error")
    summary = json.loads(summary_path.read_text())
    return {"episodes": len(scored), "successes": sum(bool(e["success"]) for e in scored),
            "updates": summary.get("updates", 0), "samples": summary.get("samples_written", 0),
            "wall_time_s": summary.get("wall_time_s", 0.0)}


def row(label: str, runs: list[dict]) -> str:
    n = sum(r["episodes"] for r in runs)
    k = sum(r["successes"] for r in runs)
    low, high = wilson(k, n)
    rates = [r["successes"] / r["episodes"] for r in runs]
    mean_low, mean_high = bootstrap_mean_ci(rates) if len(rates) > 1 else (rates[0], rates[0])
    per_seed = ", ".join(f"{x:.2f}" for x in rates)
    walls = ", ".join(f"{r['wall_time_s'] / 60:.0f}" for r in runs)
    return (f"| {label} | {len(runs)} | {n} | {k / n:.3f} [{low:.3f}, {high:.3f}] | "
            f"{statistics.fmean(rates):.3f} [{mean_low:.3f}, {mean_high:.3f}] | {per_seed} | "
            f"{', '.join(str(r['updates']) for r in runs)} | {', '.join(str(r['samples']) for r in runs)} | "
            f"{walls} min |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="LABEL=OUT_DIR[,OUT_DIR...]")
    parser.add_argument("--split", default="eval", choices=("eval", "train"))
    args = parser.parse_args()
    lines = ["| configuration | runs | episodes | success, pooled [95 % Wilson] | mean of the runs [95 % bootstrap] "
             "| per run | updates | samples kept for training | wall |", "|" + "---|" * 9]
    for config in args.configs:
        label, _, dirs = config.partition("=")
        if not dirs:
            raise SystemExit(f"{config!r}: expected LABEL=OUT_DIR[,OUT_DIR...]")
        lines.append(row(label, [run_stats(Path(d), args.split) for d in dirs.split(",") if d]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
