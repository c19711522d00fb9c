"""The integrated-vs-outcome table of docs/experiments.md, from `openclaw-rl agent` output dirs.

    python scripts/agent_report.py RUNS_DIR --envs toolcall,terminal [--figure docs/img/agent-rewards.png]

RUNS_DIR holds, per environment ENV, three output dirs of `openclaw-rl agent`:

    ENV-before       --split eval --no-train: the held-out tasks at policy version 0
    ENV-integrated   --reward integrated --eval-episodes E: train, then the same held-out tasks
    ENV-outcome      --reward outcome    --eval-episodes E: the same, outcome-only rewards

Every run uses the same seed, so the held-out tasks are the same ones in all three. The
table gives, per environment and reward mode: held-out success before and after
training, the updates made, the samples the trainer got, the share of steps that were a
well-formed tool call (the process the PRM votes grade) before and after, and wall time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PAPER = {"toolcall": (0.30, 0.17), "gui": (0.33, 0.31)}  # integrated, outcome-only
MODES = ("integrated", "outcome")


def episodes(run: Path, split: str) -> list[dict]:
    lines = (run / "episodes.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["split"] == split]


def success(found: list[dict]) -> float | None:
    scored = [e for e in found if e["error"] is None]
    return sum(bool(e["success"]) for e in scored) / len(scored) if scored else None


def tool_call_share(found: list[dict]) -> float | None:
    """Share of steps whose reply was a tool call the environment could run."""
    steps = [flag for e in found for flag in e["invalid"]]
    return sum(flag is None for flag in steps) / len(steps) if steps else None


def rows(runs: Path, env: str) -> list[dict]:
    before_dir = runs / f"{env}-before"
    before = episodes(before_dir, "eval")
    out = []
    for mode in MODES:
        run = runs / f"{env}-{mode}"
        if not (run / "summary.json").is_file():
            continue
        summary = json.loads((run / "summary.json").read_text())
        after = episodes(run, "eval")
        train = episodes(run, "train")
        out.append({
            "env": env, "mode": mode, "tasks": len({e["task"] for e in after}),
            "before": success(before), "after": success(after),
            "train_success": success(train),
            "updates": summary["updates"], "samples": summary["samples_written"],
            "tool_calls_before": tool_call_share(before), "tool_calls_after": tool_call_share(after),
            "tool_calls_train": tool_call_share(train),
            "wall_time_s": summary["wall_time_s"],
            "before_wall_time_s": json.loads((before_dir / "summary.json").read_text())["wall_time_s"],
        })
    return out


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(found: list[dict]) -> str:
    head = ("| env | reward | held-out success before | after | updates | samples trained | "
            "tool-call steps before | during training | after | wall time (train + eval) | paper |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in found:
        paper = PAPER.get(r["env"])
        paper_text = f"{paper[MODES.index(r['mode'])]:.2f}" if paper else "-"
        lines.append(
            f"| {r['env']} | {r['mode']} | {fmt(r['before'])} | {fmt(r['after'])} | {r['updates']} | "
            f"{r['samples']} | {fmt(r['tool_calls_before'])} | {fmt(r['tool_calls_train'])} | "
            f"{fmt(r['tool_calls_after'])} | {r['wall_time_s'] / 60:.0f} min | {paper_text} |")
    return "\n".join(lines)


def figure(found: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in found))
    fig, axes = plt.subplots(1, len(envs), figsize=(4.5 * len(envs), 3.6), squeeze=False)
    for ax, env in zip(axes[0], envs):
        mine = [r for r in found if r["env"] == env]
        labels = ["before"] + [r["mode"] for r in mine]
        success_values = [mine[0]["before"] or 0.0] + [r["after"] or 0.0 for r in mine]
        calls = [mine[0]["tool_calls_before"] or 0.0] + [r["tool_calls_after"] or 0.0 for r in mine]
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], success_values, width=0.4, label="held-out success", color="C2")
        ax.bar([x + 0.2 for x in xs], calls, width=0.4, label="tool-call steps", color="C0")
        ax.set_xticks(list(xs), labels)
        ax.set_ylim(0, 1)
        ax.set_title(f"{env} (SmolLM2-135M, CPU)")
    axes[0][0].legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--envs", default="toolcall,terminal")
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    found = [r for env in args.envs.split(",") for r in rows(args.runs, env.strip())]
    if not found:
        raise SystemExit(f"no ENV-before / ENV-integrated / ENV-outcome runs under {args.runs}")
    print(table(found))
    if args.figure:
        figure(found, args.figure)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
