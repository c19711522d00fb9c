"""What checked sampling and rewriting cost a request (a benchmark, not a test).

    .venv/bin/python bench/lesson_serving_cost.py [--model PATH] [--repeats 2] [--max-tokens 128] [--problems 8]

Two users on one server, each with three lessons the judge learned in the study's runs:
the parent's ask for less ("Answer in one sentence." ...), the student's pull both ways
("Show every step." beside "no bullet points" and a quoted phrase to leave out). Each asks
the 8 held-out first messages of their persona through the real HTTP API (the stack
`openclaw-rl serve` builds, training and the judge off), at temperature 1 (seeded) and
greedily, one request at a time, under four serving settings, each its own server on a
copy of the same store: one sample (`--lesson-samples 1 --lesson-rewrites 0 --lesson-plain
off`: what a user without checkable lessons gets), checked sampling alone (`4, 0, off`), 4
samples and 4 rewrites without the plain answer (`4, 4, off`: the default before
`--lesson-plain`) and the default (`4, 4, on`).
Settings alternate within each repeat, so drift in the machine's load falls on all of them.

Reported per setting, user and temperature: the median and 90th-percentile wall time of a
request, the ratio of the medians to one sample, and the share of answers served as a
rewrite and as the answer decoded without the block (read from the stored turns'
`sampling.selected`).

Writes bench/results/lesson_serving_cost.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.compose import build_stack  # noqa: E402
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig  # noqa: E402
from openclaw_rl.eval.personas import get_persona  # noqa: E402
from openclaw_rl.eval.problems import heldout_problems  # noqa: E402
from openclaw_rl.experience import learn  # noqa: E402
from openclaw_rl.serve.background import ServerThread, free_port  # noqa: E402
from openclaw_rl.store import Store  # noqa: E402
from openclaw_rl.users import Users  # noqa: E402

LESSONS = {
    "parent": ("Answer in one sentence.", "Don't show the working.", "Keep it short."),
    "student": ("Show every step.", "Write it as plain sentences, no bullet points.",
                "Don't say \u201cTo solve this problem\u201d."),
}
SETTINGS = {"one sample": (1, 0, "off"), "checked sampling": (4, 0, "off"), "4 samples, 4 rewrites": (4, 4, "off"),
            "default (4 samples, 4 rewrites, plain)": (4, 4, "on")}


_AXIS = {text: i for i, text in enumerate(t for lessons in LESSONS.values() for t in lessons)}


def _distinct(texts: list[str]) -> np.ndarray:
    """An embedding under which no two lessons merge: each lesson its own axis."""
    return np.stack([np.eye(len(_AXIS))[_AXIS[text]] for text in texts])


def teach(data_dir: Path) -> dict[str, str]:
    """Both users, their keys, and their lessons saved as the judge's learning saves them."""
    users, store = Users(data_dir), Store(data_dir)
    keys = {name: users.add(name) for name in LESSONS}
    for name, lessons in LESSONS.items():
        def update(experience, lessons=lessons, name=name):
            changes = []
            for i, text in enumerate(lessons):
                experience, made = learn(experience, text, f"bench-{name}-{i}", 1000.0 + i, _distinct,
                                         lambda t: len(t.split()))
                changes += made
            return experience, changes
        store.update_experience(name, update)
    store.close()
    return keys


def serving(data_dir: Path, model: str | None, samples: int, rewrites: int, plain: str) -> ServerThread:
    config = {"model": model} if model else {}
    serve = ServeConfig(data_dir=str(data_dir), port=free_port(), status_interval_s=0.0, train=False,
                        lesson_samples=samples, lesson_rewrites=rewrites, lesson_plain=plain, **config)
    stack = build_stack(serve, JudgeConfig(judge="off"), TrainConfig())
    return ServerThread(stack.app(), serve.port)


def served_shares(data_dir: Path, user: str, greedy: bool) -> tuple[float, float]:
    """The shares of `user`'s answers served as a rewrite, and as the answer without the block."""
    store = Store(data_dir)
    try:
        turns = [turn for session in store.list_sessions(10_000, 0, user) for turn in store.turns(session.id)
                 if (turn.sampling.get("temperature", 1.0) == 0.0) == greedy]
        selected = [turn.sampling.get("selected", {}) for turn in turns]
        plain = sum(s.get("plain") is not None and s.get("picked") == s["plain"] for s in selected)
        return sum("rewrite" in s for s in selected) / max(1, len(turns)), plain / max(1, len(turns))
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--problems", type=int, default=8, help="held-out first messages per user")
    args = parser.parse_args()
    torch.set_num_threads(2)
    root = Path(tempfile.mkdtemp(prefix="lesson-cost-"))
    keys = teach(root / "seed")
    servers = {}
    for n, (name, (samples, rewrites, plain)) in enumerate(SETTINGS.items()):
        data_dir = root / f"setting{n}"
        data_dir.mkdir()
        for path in (root / "seed").iterdir():
            if path.is_file():
                (data_dir / path.name).write_bytes(path.read_bytes())
        servers[name] = (serving(data_dir, args.model, samples, rewrites, plain), data_dir)
    times: dict[tuple[str, str, bool], list[float]] = {}
    try:
        for repeat in range(args.repeats):
            for user in LESSONS:
                persona = get_persona(user)
                for i, problem in enumerate(heldout_problems(args.problems)):
                    for greedy in (False, True):
                        for name, (thread, _) in servers.items():
                            body = {"messages": [{"role": "user", "content": persona.first_message(problem)}],
                                    "max_tokens": args.max_tokens, "temperature": 0.0 if greedy else 1.0,
                                    "seed": 100 * repeat + i}
                            began = time.perf_counter()
                            r = httpx.post(f"{thread.base_url}/v1/chat/completions", json=body, timeout=600,
                                           headers={"Authorization": f"Bearer {keys[user]}"})
                            r.raise_for_status()
                            times.setdefault((name, user, greedy), []).append(time.perf_counter() - began)
            print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    finally:
        for thread, _ in servers.values():
            thread.stop()
    rows = []
    print("| setting | user | request | median s | p90 s | / one sample | served a rewrite | served plain |\n"
          "|---|---|---|---|---|---|---|---|")
    for (name, user, greedy), spent in times.items():
        base = statistics.median(times[("one sample", user, greedy)])
        row = {"setting": name, "user": user, "greedy": greedy, "median_s": statistics.median(spent),
               "p90_s": float(np.percentile(spent, 90)), "ratio": statistics.median(spent) / base,
               "requests": len(spent)}
        row["rewritten"], row["plain"] = served_shares(servers[name][1], user, greedy)
        rows.append(row)
        print(f"| {name} | {user} | {'greedy' if greedy else 'temperature 1'} | {row['median_s']:.2f} | "
              f"{row['p90_s']:.2f} | {row['ratio']:.2f} | {row['rewritten']:.0%} | {row['plain']:.0%} |")
    out = ROOT / "bench" / "results" / "lesson_serving_cost.json"
    out.write_text(json.dumps({"machine": platform.platform(), "cpus": torch.get_num_threads(),
                               "max_tokens": args.max_tokens, "repeats": args.repeats, "rows": rows}, indent=2))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
