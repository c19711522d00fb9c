"""Base success with and without forced tool calls: the table of docs/structured-outputs.md, "Agents".

    python scripts/agent_tool_choice.py auto=OUT_DIR[,OUT_DIR...] required=OUT_DIR[,OUT_DIR...]

Each OUT_DIR is one `openclaw-rl agent --split eval --no-train` run (its episodes.jsonl),
the dirs after a label its seeds. Prints one row per environment and label: episodes over
all seeds, the pooled success rate with a 95 % Wilson interval, each seed's rate, and the
steps whose reply was a well-formed call: a tool call (not a text action) to one of the
env's tools whose arguments are a JSON object valid under that tool's parameter schema.
Episodes that ended on an environment error are left out, as in the run's own summary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema

from openclaw_rl.envs.registry import env_class
from openclaw_rl.judge.hint_check import wilson


def well_formed(action: dict, parameters: dict[str, dict]) -> bool:
    """A tool call the model wrote (not read from text) whose arguments fit its tool's schema."""
    if "tool" not in action or action.get("from_text") or action["tool"] not in parameters:
        return False
    if not isinstance(action["arguments"], dict):  # kept as sent: not a JSON object
        return False
    return jsonschema.Draft202012Validator(parameters[action["tool"]]).is_valid(action["arguments"])


def episodes(dirs: list[Path]) -> dict[str, list[list[dict]]]:
    """Per env, per run: the scored episodes."""
    found: dict[str, list[list[dict]]] = {}
    for run, out in enumerate(dirs):
        path = out / "episodes.jsonl"
        if not path.is_file():
            raise SystemExit(f"{out} holds no episodes.jsonl: pass the --out dir of a finished `openclaw-rl agent` run")
        for line in map(json.loads, path.read_text().splitlines()):
            if line["error"] is None or not line["error"].startswith("env"):
                runs = found.setdefault(line["env"], [[] for _ in dirs])
                runs[run].append(line)
    return found


def row(label: str, env: str, runs: list[list[dict]]) -> str:
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in env_class(env).tools}
    scored = [e for run in runs for e in run]
    n, k = len(scored), sum(bool(e["success"]) for e in scored)
    low, high = wilson(k, n)
    steps = [a for e in scored for a in e["actions"]]
    good = sum(well_formed(a, parameters) for a in steps)
    texts = sum(bool(a.get("from_text")) for a in steps)
    per_run = ", ".join(f"{sum(bool(e['success']) for e in run)}/{len(run)}" for run in runs)
    return (f"| {env} | {label} | {n} | {k / n:.3f} [{low:.3f}, {high:.3f}] | {per_run} | "
            f"{good}/{len(steps)} = {good / max(1, len(steps)):.2f} | {texts} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="LABEL=OUT_DIR[,OUT_DIR...]")
    args = parser.parse_args()
    lines = ["| env | tool_choice | episodes | success, pooled [95 % Wilson] | per seed | well-formed calls "
             "of all steps | text actions |", "|" + "---|" * 7]
    by_label = {}
    for config in args.configs:
        label, _, dirs = config.partition("=")
        if not dirs:
            raise SystemExit(f"{config!r}: expected LABEL=OUT_DIR[,OUT_DIR...]")
        by_label[label] = episodes([Path(d) for d in dirs.split(",") if d])
    for env in dict.fromkeys(env for found in by_label.values() for env in found):
        lines += [row(label, env, found[env]) for label, found in by_label.items() if env in found]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
