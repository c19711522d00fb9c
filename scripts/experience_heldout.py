"""The held-out score served with a user's experience, against the weights alone, over a run.

    python scripts/experience_heldout.py LABEL=OUT_DIR[,OUT_DIR...] [LABEL=...]

Each OUT_DIR is one `simulate`/`demo` run with the experience on; its metrics.jsonl has an
`eval` record at every scored point: `score` (greedy held-out first answers as served,
the user's experience block in context), `weights_score` (the same weights without the
block; null when no block was served yet) and `sessions`. With training off the runs are
scored every `--eval-every-sessions` sessions, so the points line up across seeds.

Printed per label and session mark: the mean served score, the mean score of the weights
alone, and the mean paired difference (served minus the base score of the same run, i.e.
its first evaluation) with a 95 % bootstrap CI over the seeds.

A second table compares the users' own sampled first answers (the rubric of each
session's first answer, `first_score`): each label's mean, and its mean difference from the
first label's (the control: list its runs in the same seed order), paired by run and
session index (the same problem and the same reply seed), with a 95 % bootstrap CI over
the pairs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from openclaw_rl.eval.metrics import bootstrap_mean_ci


def evaluations(out_dir: Path) -> dict[int, dict]:
    """The run's evaluations by sessions played (the last one at each mark)."""
    path = out_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{out_dir} holds no metrics.jsonl: pass the --out dir of a finished run")
    found = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "eval":
            found[record["sessions"]] = record
    if 0 not in found:
        raise SystemExit(f"{path} has no evaluation before play (sessions 0)")
    return found


def first_scores(out_dir: Path) -> dict[int, float]:
    """The rubric of each session's first answer, by session index (a failed session counts 0)."""
    records = (json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines())
    return {r["index"]: r["first_score"] or 0.0 for r in records if r.get("event") == "session"}


def compare_first_answers(arms: list[tuple[str, list[Path]]]) -> None:
    print("\n| arm | runs | sessions | mean first-answer rubric | minus the first arm, paired [95 % CI] |")
    print("|---|---|---|---|---|")
    reference = [first_scores(d) for d in arms[0][1]]
    for label, dirs in arms:
        runs = [first_scores(d) for d in dirs]
        every = [score for run in runs for score in run.values()]
        pairs = [run[i] - ref[i] for run, ref in zip(runs, reference) for i in run if i in ref]
        if label == arms[0][0] or not pairs:
            shown = "(reference)" if label == arms[0][0] else "no pairs"
        else:
            low, high = bootstrap_mean_ci(pairs)
            shown = f"{statistics.mean(pairs):+.3f} [{low:+.3f}, {high:+.3f}] ({len(pairs)} pairs)"
        print(f"| {label} | {len(runs)} | {len(every)} | {statistics.mean(every):.3f} | {shown} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="+", help="LABEL=OUT_DIR[,OUT_DIR...]")
    args = parser.parse_args()
    arms = []
    for arm in args.arms:
        label, _, dirs = arm.partition("=")
        if not dirs:
            raise SystemExit(f"{arm!r}: write LABEL=OUT_DIR[,OUT_DIR...]")
        arms.append((label, [Path(d) for d in dirs.split(",")]))
    print("| arm | sessions | runs | served held-out | weights alone | served - base [95 % CI] |")
    print("|---|---|---|---|---|---|")
    for label, dirs in arms:
        runs = [evaluations(d) for d in dirs]
        marks = sorted(set.intersection(*(set(r) for r in runs)))
        for mark in marks:
            served = [r[mark]["score"] for r in runs]
            weights = [r[mark]["weights_score"] if r[mark].get("weights_score") is not None else r[mark]["score"]
                       for r in runs]
            diffs = [r[mark]["score"] - r[0]["score"] for r in runs]
            low, high = bootstrap_mean_ci(diffs) if len(diffs) > 1 else (diffs[0], diffs[0])
            print(f"| {label} | {mark} | {len(runs)} | {statistics.mean(served):.3f} | {statistics.mean(weights):.3f} "
                  f"| {statistics.mean(diffs):+.3f} [{low:+.3f}, {high:+.3f}] |")
    if len(arms) > 1:
        compare_first_answers(arms)


if __name__ == "__main__":
    main()
