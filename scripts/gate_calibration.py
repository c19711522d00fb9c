"""What the update gate's judge-free checks read on the versions of simulator runs.

    python scripts/gate_calibration.py RUN_DIR [RUN_DIR ...]

RUN_DIR is a simulate `--out` dir (or one method's dir inside it). For every evaluated
version, the greedy held-out first answers its evaluator recorded (RUN/METHOD/eval-data)
are read with the gate's own functions (train/gate.py): mean answer tokens and their
ratio to the base version's, the share of repeated 4-grams, the share of non-answers and
of answers that bring in URLs, commands or other people's data. Beside them the rubric
score from metrics.jsonl. A version that collapsed shows which check would have caught it
and by how much, so the thresholds (docs/safe-updates.md) can be read off real runs.
Prints one markdown table per run.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from openclaw_rl.judge.screen import brought_in  # noqa: E402
from openclaw_rl.train.gate import is_non_answer, repetition_rate  # noqa: E402


def method_dirs(run: Path) -> list[Path]:
    if (run / "eval-data").is_dir():
        return [run]
    found = sorted(d for d in run.iterdir() if (d / "eval-data").is_dir()) if run.is_dir() else []
    if not found:
        raise SystemExit(f"{run}: no eval-data dir here or one level down: is it a simulate --out dir?")
    return found


def scores(method_dir: Path) -> dict[int, float]:
    metrics = method_dir.parent / "metrics.jsonl"
    found = {}
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "eval" and event.get("method") == method_dir.name:
                found[event["updates"]] = event["score"]
    return found


def table(method_dir: Path) -> str:
    db = sqlite3.connect(f"file:{method_dir / 'eval-data' / 'openclaw.db'}?mode=ro", uri=True)
    by_version: dict[int, list[tuple[list[int], str, str]]] = defaultdict(list)
    for version, prompt, ids, text in db.execute(
            "SELECT policy_version, prompt_messages, response_token_ids, response_text FROM turns ORDER BY id"):
        question = " ".join(m.get("content") or "" for m in json.loads(prompt) if m.get("role") == "user")
        by_version[version].append((json.loads(ids), text, question))
    db.close()
    score = scores(method_dir)
    base = None
    rows = [f"{method_dir}", "",
            "| version | score | mean tokens | length ratio | repetition | non-answers | brought in |",
            "|---|---|---|---|---|---|---|"]
    for version in sorted(by_version):
        answers = by_version[version]
        tokens = sum(len(ids) for ids, _, _ in answers) / len(answers)
        base = tokens if base is None else base
        repetition = sum(repetition_rate(ids) for ids, _, _ in answers) / len(answers)
        non = sum(is_non_answer(text) for _, text, _ in answers) / len(answers)
        inside = sum(brought_in(text, question) is not None for _, text, question in answers) / len(answers)
        shown = f"{score[version]:.3f}" if version in score else "-"
        rows.append(f"| v{version} | {shown} | {tokens:.0f} | {tokens / max(base, 1):.2f} | {repetition:.2f} "
                    f"| {non:.2f} | {inside:.2f} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for run in argv:
        for method_dir in method_dirs(Path(run)):
            print(table(method_dir))
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
