"""The demo across seeds and learning rates: a table and one figure from `openclaw-rl demo` output dirs.

    python scripts/demo_seeds.py OUT_DIR [OUT_DIR ...] --figure docs/img/demo-seeds.png

Each OUT_DIR is one demo run (one method, one seed). Prints one markdown row per run:
its seed and learning rate, the score at every evaluation, the mean of the scores after
training began, the last score, how many evaluations were above the base and at or above
the threshold, and the wall time. Then one row per learning rate: the mean over its
seeds of those means and of the last scores. The threshold is personalization_report.py's
(half the learnable style gap). The figure draws every run, score against updates,
coloured by learning rate, with
the mean over seeds of each learning rate as a thick line.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from personalization_report import common_curves, save_figure, style_ceiling

from openclaw_rl.eval.problems import heldout_problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dirs", nargs="+", type=Path)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    for out_dir in args.out_dirs:
        if not (out_dir / "summary.json").is_file():
            parser.error(f"{out_dir} holds no summary.json: pass the --out dir of a finished demo run")
    summaries = {d: json.loads((d / "summary.json").read_text()) for d in args.out_dirs}
    shared = min(s["heldout"] for s in summaries.values())
    keep = {p.id for p in heldout_problems(shared)}
    first_dir, first = next(iter(summaries.items()))
    base, ceiling = style_ceiling(first_dir, first, shared)
    threshold = round(base + (ceiling - base) / 2, 3)
    print(f"{shared} held-out problems; base {base:.3f}, threshold {threshold:.3f}\n")

    runs = []
    for out_dir, summary in summaries.items():
        (method, curve), = common_curves(out_dir, keep).items()
        run = summary["runs"][method]  # older summaries state lr only per method
        after = [score for _, updates, score in curve if updates > 0]
        runs.append({"dir": out_dir, "seed": run["seed"], "lr": run["lr"], "method": method,
                     "curve": curve, "mean": sum(after) / len(after), "last": after[-1],
                     "above": sum(s > base for s in after), "reached": sum(s >= threshold for s in after),
                     "evals": len(after), "wall": run["wall_time_s"]})
    runs.sort(key=lambda r: (-r["lr"], r["seed"]))
    print("| lr | seed | score at updates (sessions) | mean after training | last | above base | "
          "at threshold | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        points = ", ".join(f"{score:.3f} @{updates} ({sessions})" for sessions, updates, score in r["curve"])
        print(f"| {r['lr']:g} | {r['seed']} | {points} | {r['mean']:.3f} | {r['last']:.3f} | "
              f"{r['above']}/{r['evals']} | {r['reached']}/{r['evals']} | {r['wall'] / 60:.0f} min |")
    by_lr: dict[float, list[dict]] = defaultdict(list)
    for r in runs:
        by_lr[r["lr"]].append(r)
    print()
    for lr, group in by_lr.items():
        mean = sum(r["mean"] for r in group) / len(group)
        last = sum(r["last"] for r in group) / len(group)
        ended_above = sum(r["last"] > base for r in group)
        print(f"- lr {lr:g}, {len(group)} seeds: mean after training {mean:.3f}, mean last score {last:.3f}, "
              f"last score above the base in {ended_above} of {len(group)}")

    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axis = plt.subplots(figsize=(9, 4.4))
        colors = {lr: f"C{i}" for i, lr in enumerate(by_lr)}
        for r in runs:
            axis.plot([p[1] for p in r["curve"]], [p[2] for p in r["curve"]], marker="o", markersize=3,
                      color=colors[r["lr"]], alpha=0.45, linewidth=1, label=f"lr {r['lr']:g}, seed {r['seed']}")
        for lr, group in by_lr.items():  # the mean over seeds, at the updates every seed reached
            shared_updates = sorted(set.intersection(*({p[1] for p in r["curve"]} for r in group)))
            means = [sum(p[2] for r in group for p in r["curve"] if p[1] == u) / len(group) for u in shared_updates]
            axis.plot(shared_updates, means, color=colors[lr], linewidth=3, label=f"lr {lr:g}, mean of {len(group)}")
        axis.axhline(base, color="black", linestyle=":", linewidth=0.8, label=f"base {base:.3f}")
        axis.axhline(threshold, color="grey", linestyle="--", linewidth=0.8, label=f"threshold {threshold:.3f}")
        judge = "ORACLE judge" if first["judge"] == "oracle" else f"judge: {first['judge']}"
        axis.set_title(f"openclaw-rl demo: {first['method']}, {judge}, {first['persona']} persona, "
                       f"batch {first['batch_size']}", fontsize=10)
        axis.set_xlabel("policy updates")
        axis.set_ylabel(f"personalization score ({shared} held-out first answers)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        save_figure(fig, args.figure)


if __name__ == "__main__":
    main()
