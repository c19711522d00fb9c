"""The approval level at which the base model is rarely accepted, from training-off controls.

    python scripts/approval_level.py OFF_DIR [OFF_DIR ...] [--target 0.2]

Each OFF_DIR is a `simulate`/`demo --method off` run (the same stream, training off). With
training off, the first answer of a session comes from the base model before any reply,
so the approval level does not change it: the first-answer rubric scores the runs
recorded (metrics.jsonl, `first_score`) give the base acceptance at any level. Prints,
for each level the scores suggest, the share of first answers accepted (95 % Wilson
interval) and the median sessions to adaptation of the controls at that level (what luck
alone gives), and names the lowest level at which base acceptance is at most `--target`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from openclaw_rl.eval.metrics import sessions_to_adaptation
from openclaw_rl.judge.hint_check import wilson


def first_scores(out_dir: Path) -> list[float]:
    """The run's first-answer rubric scores, in session start order."""
    path = out_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{out_dir} holds no metrics.jsonl: pass the --out dir of a finished run")
    sessions = [json.loads(line) for line in path.read_text().splitlines()]
    sessions = sorted((s for s in sessions if s.get("event") == "session"), key=lambda s: s["index"])
    if not sessions:
        raise SystemExit(f"{path} records no session")
    if any(s.get("updates") for s in sessions):
        raise SystemExit(f"{out_dir} trained (a session saw an update): pass --method off runs")
    return [s["first_score"] if s["first_score"] is not None else 0.0 for s in sessions]


def adaptation(flags: list[bool]) -> int:
    """Sessions to adaptation, length + 1 when the stream never adapted (counted as censored)."""
    found = sessions_to_adaptation(flags)
    return found if found is not None else len(flags) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--target", type=float, default=0.2)
    args = parser.parse_args()
    runs = [first_scores(r) for r in args.runs]
    total = sum(len(r) for r in runs)
    every = [s for run in runs for s in run]
    # the lowest level, in steps of 0.005, that accepts at most the target
    chosen = next((level for level in (round(0.005 * i, 3) for i in range(201))
                   if sum(s >= level for s in every) <= args.target * total), None)
    levels = sorted({round(0.6 + 0.025 * i, 3) for i in range(13)} | ({chosen} if chosen else set()))
    print(f"{len(runs)} control runs, {total} first answers; base rubric median "
          f"{statistics.median(s for r in runs for s in r):.3f}\n")
    print("| approval level | base accepted | 95 % CI | controls' sessions to adaptation (median; never) |")
    print("|---|---|---|---|")
    for level in levels:
        flags = [[s >= level for s in run] for run in runs]
        accepted = sum(map(sum, flags))
        low, high = wilson(accepted, total)
        steps = [adaptation(f) for f in flags]
        never = sum(s > len(f) for s, f in zip(steps, flags))
        print(f"| {level:.3f} | {accepted / total:.3f} ({accepted}/{total}) | {low:.3f}-{high:.3f} | "
              f"{statistics.median(steps):g}; {never} of {len(runs)} |")
    print(f"\nlowest level with base acceptance <= {args.target:g}: "
          f"{f'{chosen:.3f}' if chosen is not None else 'none (the base model is accepted more often at every level)'}")


if __name__ == "__main__":
    main()
