"""What the served-traffic collapse detectors (serve/collapse.py) read over a run's stream.

    python scripts/served_collapse.py DATA_DIR [DATA_DIR ...]

DATA_DIR holds a run's openclaw.db (`simulate --out OUT`: OUT/METHOD/data; `demo`: the same;
a server's --data-dir), opened read-only. The window slides over the run's main turns in
steps of 4, as the server would have read them after each; for each run one line: the base
window's (the earliest 32) entropy estimate, self-ROUGE-L and length, the range of the
entropy ratio and self-ROUGE-L over the windows, how many windows alarmed, and the first that
did with the newest version it held (to set beside the first version whose held-out score
fell, metrics.jsonl). Read off the known OPD collapse and healthy seeds, these calibrate the
thresholds (docs/safe-updates.md#collapse-detectors).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from openclaw_rl.collapse import CollapseThresholds  # noqa: E402
from openclaw_rl.serve.collapse import WINDOW, served_collapse, window_stats  # noqa: E402

STEP = 4  # main turns between two readings
NAMES = ("id", "created_at", "owner", "policy_version", "response_token_ids", "behaviour_logprobs")


def main_answers(data_dir: Path) -> list[dict]:
    """Every main turn's answer, oldest first, as Store.main_answers gives them (read-only)."""
    db = sqlite3.connect(f"file:{data_dir / 'openclaw.db'}?mode=ro", uri=True)
    rows = db.execute(f"SELECT {', '.join(NAMES)} FROM turns WHERE kind = 'main' ORDER BY id").fetchall()
    db.close()
    return [dict(zip(NAMES, (*row[:4], json.loads(row[4]), json.loads(row[5])))) for row in rows]


def report(data_dir: Path) -> str:
    answers = main_answers(data_dir)
    if len(answers) < WINDOW:
        return f"| {data_dir} | {len(answers)} | fewer than {WINDOW} main turns | | | | |"
    base, thresholds = window_stats(answers[:WINDOW]), CollapseThresholds()
    ratios, rouges, alarmed, first = [], [], 0, "none"
    for end in range(WINDOW, len(answers) + 1, STEP):
        window = answers[end - WINDOW:end]
        found = served_collapse(window_stats(window), base if end >= 2 * WINDOW else None, thresholds)
        rouges.append(found["self_rouge_l"] or 0.0)
        ratios += [found["entropy_ratio"]] if found["entropy_ratio"] is not None else []
        if found["alarms"]:
            alarmed += 1
            if alarmed == 1:
                first = f"turn {end}, v{window[-1]['policy_version']}: {'; '.join(found['alarms'])}"
    ratio = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
    rouge = f"{min(rouges):.2f}-{max(rouges):.2f}"
    return (f"| {data_dir} | {len(answers)} | {base.entropy_nats or 0:.2f} / {base.self_rouge_l or 0:.2f} / "
            f"{base.mean_tokens:.0f} | {ratio} | {rouge} | {alarmed}/{len(rouges)} | {first} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("| data dir | main turns | base: nats/token / self-ROUGE-L / tokens | entropy ratio | self-ROUGE-L "
          "| windows alarmed | first alarm |")
    print("|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        print(report(Path(arg)))
