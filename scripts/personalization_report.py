"""The table and figure of docs/experiments.md, from `openclaw-rl simulate` output dirs.

    python scripts/personalization_report.py OUT_DIR [OUT_DIR ...] --figure docs/img/personalization.png

Each OUT_DIR holds a summary.json and metrics.jsonl (several methods, one judge). Prints
a markdown table: per judge and method, the score before training, after 8 and 16
updates, the sessions played when the score first reached the threshold, and the wall
time; and draws one panel per judge, score against updates, one line per method, with
the paper's numbers. When the runs held out different numbers of problems, every score
is recomputed on the problems they share (the held-out set is a fixed sequence, so a
smaller one is a prefix of a larger one), from the per-answer scores in metrics.jsonl.

The threshold is half the learnable gap: the base model's answers are rescored as if
every style check passed (arithmetic left as it was), and the threshold is halfway from
the base score to that ceiling. See docs/experiments.md for why.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems

PAPER = {"base": 0.17, "binary": (0.25, 0.23), "opd": (0.25, 0.72), "combined": (0.76, 0.81)}
COLORS = {"binary": "C0", "opd": "C1", "combined": "C2"}
STYLE_CHECKS = {"no_headings", "no_bold", "no_lists", "no_ai_phrases", "plain_prose", "concise"}


def style_ceiling(out_dir: Path, summary: dict, shared: int) -> tuple[float, float]:
    """(base score, base score with every style check passed), from the first run's v0 answers."""
    persona = get_persona(summary["persona"])
    heldout = {persona.first_message(p): p for p in heldout_problems(summary["heldout"])}
    keep = {p.id for p in heldout_problems(shared)}
    first = next(iter(summary["runs"]))
    db = out_dir / first / "eval-data" / "openclaw.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT prompt_messages, response_text FROM turns WHERE policy_version = 0 "
                            "ORDER BY id LIMIT ?", (len(heldout),)).fetchall()
    base, ceiling = [], []
    for messages, response in rows:
        problem = heldout[json.loads(messages)[-1]["content"]]
        if problem.id not in keep:
            continue
        checks = persona.checks(problem, response)
        base.append(sum(c.weight * c.score for c in checks))
        ceiling.append(sum(c.weight * (1.0 if c.name in STYLE_CHECKS else c.score) for c in checks))
    return sum(base) / len(base), sum(ceiling) / len(ceiling)


def common_curves(out_dir: Path, keep: set[str]) -> dict[str, list[tuple[int, int, float]]]:
    """Per method, (sessions, updates, mean score over the held-out problems in `keep`)."""
    curves: dict[str, list[tuple[int, int, float]]] = {}
    for line in (out_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") != "eval":
            continue
        scores = [a["score"] for a in record["answers"] if a["problem"] in keep]
        curves.setdefault(record["method"], []).append((record["sessions"], record["updates"],
                                                        sum(scores) / len(scores)))
    return {m: sorted(c, key=lambda p: p[1]) for m, c in curves.items()}


def sessions_to(curve: list[list[float]], threshold: float) -> int | None:
    for sessions, _, score in sorted(curve, key=lambda p: p[1]):
        if score >= threshold:
            return int(sessions)
    return None


def save_figure(fig, path: Path) -> None:
    """Lay out, write (making the folder) and say where: the last step of every report's figure."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\nwrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dirs", nargs="+", type=Path)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    summaries = {d: json.loads((d / "summary.json").read_text()) for d in args.out_dirs}
    shared = min(s["heldout"] for s in summaries.values())
    keep = {p.id for p in heldout_problems(shared)}
    for out_dir, summary in summaries.items():
        for method, curve in common_curves(out_dir, keep).items():
            if method not in summary["runs"]:  # a run that did not finish
                continue
            run = summary["runs"][method]
            run["curve"] = [list(p) for p in curve]
            run["score_by_update"] = {str(u): score for _, u, score in curve}
            run["score_before"] = curve[0][2]
    first_dir, first = next(iter(summaries.items()))
    base, ceiling = style_ceiling(first_dir, first, shared)
    threshold = round(base + (ceiling - base) / 2, 3)
    print(f"{shared} held-out problems; base {base:.3f}, style ceiling {ceiling:.3f}, threshold {threshold:.3f}\n")
    print("| judge | method | before | after 8 | after 16 | sessions to 16 updates | sessions to "
          f"{threshold:.2f} | wall time | paper 8 / 16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for summary in summaries.values():
        judge = "oracle (reads the rubric)" if summary["judge"] == "oracle" else summary["judge"]
        for method, run in summary["runs"].items():
            by = run["score_by_update"]
            reached = sessions_to(run["curve"], threshold)
            at16 = next((int(s) for s, u, _ in run["curve"] if u == 16), None)
            paper = PAPER.get(method)
            print(f"| {judge} | {method} | {run['score_before']:.3f} | {by.get('8', float('nan')):.3f} | "
                  f"{by.get('16', float('nan')):.3f} | {at16 if at16 is not None else '-'} | "
                  f"{reached if reached is not None else 'not reached'} | {run['wall_time_s'] / 60:.0f} min | "
                  f"{paper[0]:.2f} / {paper[1]:.2f} |" if paper else "|")
    print("\nHeld-out answers failing each check, before -> after the last update:\n")
    for out_dir, summary in summaries.items():
        evals = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
        evals = [e for e in evals if e.get("event") == "eval" and e["method"] in summary["runs"]]
        for method in summary["runs"]:
            mine = sorted((e for e in evals if e["method"] == method), key=lambda e: e["updates"])
            start, last = mine[0], mine[-1]

            def failing(record: dict) -> dict[str, int]:
                counts: dict[str, int] = {}
                for answer in record["answers"]:
                    if answer["problem"] in keep:
                        for name in answer["failed"]:
                            counts[name] = counts.get(name, 0) + 1
                return counts

            before, after = failing(start), failing(last)
            changes = ", ".join(f"{name} {before.get(name, 0)}->{after.get(name, 0)}"
                                for name in sorted(set(before) | set(after)))
            print(f"- {summary['judge']} / {method} (v0 -> v{last['updates']}, {len(keep)} answers): {changes}")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        by_judge: dict[str, dict[str, dict]] = {}  # one panel per judge, one line per method
        for summary in summaries.values():
            by_judge.setdefault(summary["judge"], {}).update(summary["runs"])
        fig, axes = plt.subplots(1, len(by_judge), figsize=(5.5 * len(by_judge), 4.2), sharey=True, squeeze=False)
        for axis, (judge, runs) in zip(axes[0], by_judge.items()):
            for method, run in sorted(runs.items()):
                points = sorted(run["curve"], key=lambda p: p[1])
                color = COLORS.get(method, "C3")
                axis.plot([p[1] for p in points], [p[2] for p in points], marker="o", label=method, color=color)
                if method in PAPER:
                    axis.plot([8, 16], PAPER[method], linestyle=":", marker="x", color=color,
                              label=f"{method} (paper)")
            axis.axhline(threshold, color="grey", linestyle="--", linewidth=0.8, label="threshold")
            axis.axhline(PAPER["base"], color="black", linestyle=":", linewidth=0.8, label="paper base")
            title = "ORACLE judge (reads the rubric)" if judge == "oracle" else f"judge: {judge}"
            axis.set_title(f"{title}, {first['persona']} persona")
            axis.set_xlabel("policy updates (batch 2)")
            axis.set_ylim(0, 1)
            axis.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"personalization score ({shared} held-out first answers)")
        for axis in axes[0]:
            axis.legend(fontsize=7, loc="lower right", ncol=2)
        save_figure(fig, args.figure)


if __name__ == "__main__":
    main()
