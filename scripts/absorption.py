"""How far does each of a simulated user's lessons still move a model? The absorption gaps of a run.

    python scripts/absorption.py RUN_DIR [RUN_DIR ...] [--model MODEL_DIR] [--turns 8]

Each RUN_DIR is a `simulate`/`demo` run with the experience on. For each lesson the user
(`local`) ended with, up to `--turns` of their latest turns served with it are scored with a
block of that lesson alone and without a block (judge/absorption.py, what
`POST /v1/experience/absorption` measures), on `--model` (default: the bundled base
model; for a trained run, export its weights first: `openclaw-rl export RUN/METHOD/data
OUT`). Printed per lesson and pooled: the mean per-token gap, and how many lessons reach
the first gap the `absorbed` rule needs to tell anything (judge/absorption.py MEASURABLE_GAP).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path

from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.judge.absorption import MEASURABLE_GAP, experience_absorption, served_with_block
from openclaw_rl.store import Store
from openclaw_rl.users import LOCAL


async def measure(engine: LocalEngine, data: Path, turns: int) -> list[tuple[str, float, int]]:
    store = Store(data)
    try:
        lessons = store.experience(LOCAL.name).lessons
        served = served_with_block(store, LOCAL.name, 10**6)
        found = {a.lesson_id: a for a in await experience_absorption(engine, engine.tokenizer, lessons, served, turns)}
        return [(lesson.text, found[lesson.id].gap_per_token, found[lesson.id].turns)
                for lesson in lessons if lesson.id in found]
    finally:
        store.close()


async def run(args: argparse.Namespace) -> list[float]:
    engine = LocalEngine(resolve_model_dir(args.model), threads=2)
    gaps = []
    try:
        for run_dir in args.runs:
            summary = json.loads((run_dir / "summary.json").read_text())
            method = next(iter(summary["runs"])) if "runs" in summary else summary["method"]
            for text, gap, turns in await measure(engine, run_dir / method / "data", args.turns):
                gaps.append(gap)
                print(f"| {run_dir.name} | {text} | {gap:+.4f} | {turns} |", flush=True)
    finally:
        await engine.aclose()
    return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--model", default=None)
    parser.add_argument("--turns", type=int, default=8)
    args = parser.parse_args()
    print("| run | lesson | gap (nats / token) | turns |")
    print("|---|---|---|---|")
    gaps = asyncio.run(run(args))
    if gaps:
        print(f"\n{len(gaps)} lessons: gap median {statistics.median(gaps):+.4f}, min {min(gaps):+.4f}, "
              f"max {max(gaps):+.4f}; at or above the floor the absorbed rule can tell from ({MEASURABLE_GAP}): "
              f"{sum(g >= MEASURABLE_GAP for g in gaps)}")


if __name__ == "__main__":
    main()
