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
said in the table). The acceptance has a 95 % Wilson interval over the pooled sessions.

A second table reads the held-out score curve of the trained runs (summary.json's
`score_by_update`): the base score, the last score (median with a bootstrap CI of the
median), the lowest, how many runs served a version scored more than 0.03 below the base
(what the update gate exists to prevent), the updates and the candidates the gate turned
away. The figure draws, per label, the acceptance of the last 5 sessions against the
session index and, beside it, the held-out score against updates, every seed thin and
their mean thick.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from openclaw_rl.eval.metrics import sessions_to_adaptation
from openclaw_rl.judge.hint_check import wilson

BELOW_BASE = 0.03  # a version scored more than this below the base is a regression (the gate's tolerance)


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


def _scores(run: dict) -> list[tuple[int, float]]:
    """The held-out score curve, (updates, score), in update order."""
    return sorted((int(u), v) for u, v in (run.get("score_by_update") or {}).items())


def _held(points: list[tuple[int, float]], update: int) -> float:
    return [v for u, v in points if u <= update][-1]


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
          "acceptance, all sessions [95 % Wilson] | acceptance, last 10 |")
    print("|---|---|---|---|---|---|")
    for label, runs in groups.items():
        values = [r["sessions_to_adaptation"] if r["sessions_to_adaptation"] is not None else len(r["accepted"]) + 1
                  for r in runs]
        never = sum(r["sessions_to_adaptation"] is None for r in runs)
        low, high = bootstrap_median_ci(values)
        all_flags = [f for r in runs for f in r["accepted"]]
        last = [f for r in runs for f in r["accepted"][-10:]]
        w_low, w_high = wilson(sum(all_flags), len(all_flags))
        print(f"| {label} | {len(runs)} | {statistics.median(values):g} [{low:g}, {high:g}] | {never} of {len(runs)}"
              f"{' (counted as length + 1)' if never else ''} | {sum(all_flags) / max(1, len(all_flags)):.2f} "
              f"({sum(all_flags)}/{len(all_flags)}) [{w_low:.2f}, {w_high:.2f}] | "
              f"{sum(last) / max(1, len(last)):.2f} |")
    scored = {label: runs for label, runs in groups.items() if all(len(_scores(r)) > 1 for r in runs)}
    if scored:
        print()
        print(f"| configuration | runs | base | last held-out score, median [95 % CI] | lowest, median (min) | "
              f"runs below base - {BELOW_BASE} | updates (candidates), median | candidates turned away |")
        print("|---|---|---|---|---|---|---|---|")
        for label, runs in scored.items():
            curves = [_scores(r) for r in runs]
            base = statistics.median(c[0][1] for c in curves)
            lasts = [c[-1][1] for c in curves]
            lowest = [min(v for _, v in c) for c in curves]
            below = sum(any(v < c[0][1] - BELOW_BASE for _, v in c) for c in curves)
            low, high = bootstrap_median_ci(lasts)
            rejected = sum(r.get("rejected_versions", 0) for r in runs)
            print(f"| {label} | {len(runs)} | {base:.3f} | {statistics.median(lasts):.3f} [{low:.3f}, {high:.3f}] | "
                  f"{statistics.median(lowest):.3f} ({min(lowest):.3f}) | {below} of {len(runs)} | "
                  f"{statistics.median(r.get('updates', 0) for r in runs):g} | "
                  f"{rejected if any(r.get('gate') == 'on' for r in runs) else '-'} |")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if scored:  # the held-out panel only where something was trained
            fig, (axis, right) = plt.subplots(1, 2, figsize=(12, 4.2))
        else:
            fig, axis = plt.subplots(figsize=(6.5, 4.2))
        for label, runs in groups.items():
            curves = [_rolling(r["accepted"]) for r in runs]
            color = axis.plot([], [])[0].get_color()
            for curve in curves:
                axis.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.25, linewidth=1)
            length = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(length)]
            axis.plot(range(1, length + 1), mean, color=color, linewidth=2.5, label=f"{label} ({len(runs)} runs)")
            if label in scored:
                series = [_scores(r) for r in runs]
                for points in series:
                    right.plot(*zip(*points), color=color, alpha=0.25, linewidth=1, marker=".", drawstyle="steps-post")
                # the mean over seeds of each one's last score at or before u (a version serves until the
                # next is scored), up to the last update every seed reached
                end = min(points[-1][0] for points in series)
                at = sorted({u for points in series for u, _ in points if u <= end})
                right.plot(at, [statistics.mean(_held(points, u) for points in series) for u in at], color=color,
                           linewidth=2.5, label=label, drawstyle="steps-post")
        axis.set_xlabel("session (start order)")
        axis.set_ylabel("accepted first answers, last 5 sessions")
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        if scored:
            base = statistics.median(_scores(r)[0][1] for runs in scored.values() for r in runs)
            right.axhline(base - BELOW_BASE, color="grey", linestyle="--", linewidth=1,
                          label=f"base - {BELOW_BASE}")
            right.set_xlabel("policy updates")
            right.set_ylabel("held-out score (8 greedy first answers)")
            right.grid(alpha=0.3)
            right.legend(fontsize=8)
        fig.tight_layout()
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=110)
        print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()
