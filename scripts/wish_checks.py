"""Does serving keep a user's wish more often once its lesson can be checked? (a study, not a test)

    .venv/bin/python scripts/wish_checks.py [--prompts 10] [--max-tokens 128] [--threads 2] [--out DIR] [--wishes a,b]

One user per wish, each with that one lesson in their experience (saved as the judge's learning
saves it), on one server through the real HTTP API (training and the judge off), under two
settings on copies of the same store: **one sample** (`--lesson-samples 1 --lesson-rewrites 0
--lesson-plain off`, what such a user was served while no check read the lesson: the block
alone) and **the default** (4 samples, 4 rewrites, the answer without the block: checked
sampling and rewriting, experience/checks.py and experience/rewriting.py). Each user asks the
student persona's first `--prompts` held-out homework questions and as many everyday requests,
at temperature 1 with a seed per prompt, so the one sample is the default's first candidate.

Scored per served answer: whether it keeps the wish as its checks read it (`checks.one_check`,
1 or 0, all of the lesson's checks; "plainer" is relative, so for it the answer's share of words of 8 letters or more,
negated: higher is plainer), and on the homework questions whether it still ends with a
number. "Give the answer first" is scored on the homework questions only (an everyday answer
has no result to read). Printed: per wish, the mean under each setting and the paired
difference with a 95 % bootstrap interval over prompts. Writes OUT/wish_checks.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
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
from openclaw_rl.experience.arithmetic import last_number  # noqa: E402
from openclaw_rl.experience.checks import checks, one_check  # noqa: E402
from openclaw_rl.experience.measures import long_words  # noqa: E402
from openclaw_rl.serve.background import ServerThread, free_port  # noqa: E402
from openclaw_rl.store import Store  # noqa: E402
from openclaw_rl.users import Users  # noqa: E402

WISHES = {
    "question": "End with a question to check I understood.",
    "start": "Start with \u201cHi Sam\u201d.",
    "greet": "Greet me first.",
    "end": "Sign off with \u201cCheers\u201d.",
    "example": "Give an example.",
    "answer_first": "Give the answer first, then explain.",
    "plainer": "Use simple words, no jargon.",
    "apology": "Stop apologizing.",
}
EVERYDAY = (
    "How do I keep basil alive on a windowsill?", "What should I pack for a weekend of hiking?",
    "Why does bread go stale?", "Can you suggest a name for a grey kitten?",
    "How do I get a coffee stain out of a white shirt?", "What is a good way to start running?",
    "Why is the sky blue?", "How can I sleep better?", "What is a budget and why should I have one?",
    "How do I write a polite email asking for a day off?", "What is the difference between weather and climate?",
    "How do I make a simple tomato soup?",
)
SETTINGS = {"one sample": (1, 0, "off"), "default": (4, 4, "on")}


def teach(data_dir: Path) -> dict[str, str]:
    """One user per wish, their key, and their one lesson."""
    users, store = Users(data_dir), Store(data_dir)
    keys = {}
    for name, lesson in WISHES.items():
        keys[name] = users.add(f"wish-{name}")
        store.update_experience(f"wish-{name}", lambda experience, lesson=lesson, name=name: learn(
            experience, lesson, f"study-{name}", 1000.0, lambda texts: np.eye(1).repeat(len(texts), 0),
            lambda text: len(text.split())))
    store.close()
    return keys


def serving(data_dir: Path, samples: int, rewrites: int, plain: str) -> ServerThread:
    serve = ServeConfig(data_dir=str(data_dir), port=free_port(), status_interval_s=0.0, train=False,
                        lesson_samples=samples, lesson_rewrites=rewrites, lesson_plain=plain)
    return ServerThread(build_stack(serve, JudgeConfig(judge="off"), TrainConfig()).app(), serve.port)


def interval(diffs: list[float], seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.mean(rng.choices(diffs, k=len(diffs))) for _ in range(4000))
    return means[99], means[3899]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10, help="homework questions, and as many everyday requests")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--wishes", default=",".join(WISHES), help=f"which of {', '.join(WISHES)}")
    args = parser.parse_args()
    wishes = {name: WISHES[name] for name in args.wishes.split(",")}
    torch.set_num_threads(args.threads)
    student = get_persona("student")
    homework = [student.first_message(p) for p in heldout_problems(args.prompts)]
    prompts = homework + list(EVERYDAY[:args.prompts])
    root = Path(tempfile.mkdtemp(prefix="wish-checks-"))
    keys = teach(root / "seed")
    servers = {}
    for n, (name, setting) in enumerate(SETTINGS.items()):
        data_dir = root / f"setting{n}"
        data_dir.mkdir()
        for path in (root / "seed").iterdir():
            if path.is_file():
                (data_dir / path.name).write_bytes(path.read_bytes())
        servers[name] = serving(data_dir, *setting)
    answers: dict[tuple[str, str], list[str]] = {}
    try:
        for wish in wishes:
            for i, prompt in enumerate(prompts):
                for name, thread in servers.items():
                    r = httpx.post(f"{thread.base_url}/v1/chat/completions", timeout=600,
                                   headers={"Authorization": f"Bearer {keys[wish]}"},
                                   json={"messages": [{"role": "user", "content": prompt}], "seed": 1000 + i,
                                         "max_tokens": args.max_tokens, "temperature": 1.0})
                    r.raise_for_status()
                    answers.setdefault((wish, name), []).append(r.json()["choices"][0]["message"]["content"] or "")
            print(f"{wish} done", file=sys.stderr, flush=True)
    finally:
        for thread in servers.values():
            thread.stop()
    rows = []
    print("| wish (the lesson) | prompts | kept: one sample | kept: default | default - one sample [95 % CI] |"
          " homework answers ending in a number: one / default |\n|---|---|---|---|---|---|")
    for wish, lesson in wishes.items():
        found = checks([lesson])
        on = range(args.prompts) if wish == "answer_first" else range(len(prompts))  # a result to put first
        kept = {}
        for name in SETTINGS:
            texts = answers[(wish, name)]
            if wish == "plainer":  # relative: the share of long words, lower is plainer (per mille)
                kept[name] = [-long_words(texts[i]) / 1000 for i in on]
            else:
                kept[name] = [min(one_check(c, [texts[i]], prompts[i])[0] for c in found) for i in on]
        diffs = [b - a for a, b in zip(kept["one sample"], kept["default"])]
        low, high = interval(diffs)
        numbered = {name: sum(last_number(t) is not None for t in answers[(wish, name)][:args.prompts])
                    for name in SETTINGS}
        row = {"wish": wish, "lesson": lesson, "prompts": len(on), "answers": {n: answers[(wish, n)] for n in SETTINGS},
               "kept": {n: statistics.mean(v) for n, v in kept.items()}, "difference": statistics.mean(diffs),
               "interval": [low, high], "homework_numbered": numbered}
        rows.append(row)
        print(f"| {lesson} | {len(on)} | {row['kept']['one sample']:.2f} | {row['kept']['default']:.2f} | "
              f"{row['difference']:+.2f} [{low:+.2f}, {high:+.2f}] | {numbered['one sample']} / {numbered['default']}"
              f" of {args.prompts} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "wish_checks.json").write_text(json.dumps({"max_tokens": args.max_tokens, "rows": rows}, indent=1))
    print(f"written: {args.out / 'wish_checks.json'}")


if __name__ == "__main__":
    main()
