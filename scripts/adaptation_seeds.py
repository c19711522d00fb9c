"""Sessions to adaptation across seeds: median, bootstrap CI, acceptance, and a figure.

    python scripts/adaptation_seeds.py LABEL=OUT_DIR[,OUT_DIR...] [LABEL=...] [--figure PATH]

Each OUT_DIR is one `simulate`/`demo` run (its summary.json, written with the per-session
accept flags); the dirs after one LABEL are that configuration's seeds (a training-off
control is one more label). Prints a markdown table per label: runs, the median
sessions to adaptation with a 95 % bootstrap CI of the median (10,000 resamples, fixed
seed), how many runs never adapted, the acceptance over all sessions and over each run's
last 10. `--control-at LEVEL` rescores the training-off controls (`--method off` runs) at
another approval level, from their recorded first-answer rubric scores: with training off
the level changes nothing before the first reply (scripts/approval_level.py). A run that never adapted counts as stream length + 1 in the median (censored:
said in the table). The figure draws, per label, the acceptance of the last 5 sessions
against the session index, every seed thin and their mean thick.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from openclaw_rl.eval.metrics import sessions_to_adaptation


def bootstrap_median_ci(values: list[float], level: float = 0.95, resamples: int = 10_000,
                        seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the median."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    low = medians[int((1 - level) / 2 * resamples)]
    high = medians[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return low, high


def _run(out_dir: Path, control_at: float | None = None) -> dict:
    summary_path = out_dir / "summary.json"
    if not summary_path.is_file():
        raise SystemExit(f"{out_dir} holds no summary.json: pass the --out dir of a finished run")
    summary = json.loads(summary_path.read_text())
    run = next(iter(summary["runs"].values())) if "runs" in summary else summary
    if "accepted" not in run:
        raise SystemExit(f"{summary_path} has no per-session accept flags: it predates them; run it again")
    if control_at is not None and run.get("method") == "off":
        sessions = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
        sessions = sorted((x for x in sessions if x.get("event") == "session"), key=lambda x: x["index"])
        flags = [(x["first_score"] or 0.0) >= control_at for x in sessions]
        run = {**run, "accepted": flags, "sessions_to_adaptation": sessions_to_adaptation(flags)}
    return run


def _rolling(flags: list[bool], window: int = 5) -> list[float]:
    return [sum(flags[max(0, i - window + 1): i + 1]) / len(flags[max(0, i - window + 1): i + 1])
            for i in range(len(flags))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", help="LABEL=OUT_DIR[,OUT_DIR...]")
    parser.add_argument("--figure", type=Path, default=None)
    parser.add_argument("--control-at", type=float, default=None, metavar="LEVEL",
                        help="rescore --method off runs at this approval level")
    args = parser.parse_args()
    groups: dict[str, list[dict]] = {}
    for group in args.groups:
        label, eq, dirs = group.partition("=")
        if not eq or not dirs:
            parser.error(f"{group!r} is not LABEL=OUT_DIR[,OUT_DIR...]")
        groups[label] = [_run(Path(d), args.control_at) for d in dirs.split(",")]
    print("| configuration | runs | sessions to adaptation, median [95 % CI] | never adapted | "
          "acceptance, all sessions | acceptance, last 10 |")
    print("|---|---|---|---|---|---|")
    for label, runs in groups.items():
        values = [r["sessions_to_adaptation"] if r["sessions_to_adaptation"] is not None else len(r["accepted"]) + 1
                  for r in runs]
        never = sum(r["sessions_to_adaptation"] is None for r in runs)
        low, high = bootstrap_median_ci(values)
        all_flags = [f for r in runs for f in r["accepted"]]
        last = [f for r in runs for f in r["accepted"][-10:]]
        print(f"| {label} | {len(runs)} | {statistics.median(values):g} [{low:g}, {high:g}] | {never} of {len(runs)}"
              f"{' (counted as length + 1)' if never else ''} | {sum(all_flags) / max(1, len(all_flags)):.2f} | "
              f"{sum(last) / max(1, len(last)):.2f} |")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axis = plt.subplots(figsize=(7, 4))
        for label, runs in groups.items():
            curves = [_rolling(r["accepted"]) for r in runs]
            color = axis.plot([], [])[0].get_color()
            for curve in curves:
                axis.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.25, linewidth=1)
            length = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(length)]
            axis.plot(range(1, length + 1), mean, color=color, linewidth=2.5, label=f"{label} ({len(runs)} runs)")
        axis.set_xlabel("session (start order)")
        axis.set_ylabel("accepted first answers, last 5 sessions")
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
        axis.legend()
        fig.tight_layout()
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=110)
        print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()
