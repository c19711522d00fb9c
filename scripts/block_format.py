"""Does the experience block's own form change the answers? The lessons as a list against one paragraph.

    python scripts/block_format.py RUN/data --persona parent --approve 0.75 [--samples 0] [--user NAME]

RUN/data is the data dir of a finished `demo`/`simulate` run (a keyless one: its lessons are
the local admin's; `--user` for a multi-user run). Its lessons are rendered three ways in
front of each of the 16 held-out first messages (`--problems`), as serving places them: no block, the
lessons as a "- " list under the header (serving's form before round 3's session 13), and
one paragraph (`experience.render`, serving's form now). The base model answers greedily
(`--samples 0`) or N times at temperature 1 (seeds 0..N-1), 200 new tokens, on the local
engine in this process; each answer is scored by the persona's rubric.

Printed per form: the answers, how many the persona accepts (rubric >= --approve), the mean
rubric, and how often each criterion failed. docs/experiments.md "The block as one
paragraph" has what it found.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections import Counter
from pathlib import Path

import torch

from openclaw_rl.chat import render_prompt
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems
from openclaw_rl.experience import HEADER, fitting, place, render
from openclaw_rl.store import Store
from openclaw_rl.types import SamplingParams, TokenStep
from openclaw_rl.users import LOCAL

BUDGET = 256  # ServeConfig.experience_budget_tokens' default
MAX_TOKENS = 200  # the demo's eval_max_tokens


def as_list(lessons: tuple[str, ...]) -> str:
    """The block as serving rendered it before: the header, then one "- " line per lesson."""
    return "\n".join([HEADER, *(f"- {text}" for text in lessons)]) if lessons else ""


async def answer(engine: LocalEngine, ids: list[int], seed: int | None) -> str:
    params = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0 if seed is None else 1.0, seed=seed)
    tokens = [event.token_id async for event in engine.stream(ids, params) if isinstance(event, TokenStep)]
    return engine.tokenizer.decode(tokens, skip_special_tokens=True)


async def compare(args: argparse.Namespace) -> None:
    engine = LocalEngine(resolve_model_dir(None), threads=2)
    count = lambda text: len(engine.tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    store = Store(args.data_dir)
    try:
        experience = store.experience(args.user or LOCAL.name)
    finally:
        store.close()
    lessons = fitting(experience, BUDGET, count)
    forms = {"none": "", "list": as_list(lessons), "paragraph": render(experience, BUDGET, count)}
    persona = get_persona(args.persona)
    print(f"{len(lessons)} lessons: {forms['paragraph']}\n")
    print("| form | answers | accepted | mean rubric | failed criteria |\n|---|---|---|---|---|")
    seeds = [None] if not args.samples else list(range(args.samples))
    for name, block in forms.items():
        scores, failed = [], Counter()
        for problem in heldout_problems(args.problems):
            messages = [{"role": "user", "content": persona.first_message(problem)}]
            ids = render_prompt(engine.tokenizer, place(messages, block, "user") if block else messages, None, None)
            for seed in seeds:
                text = await answer(engine, ids, seed)
                scores.append(persona.rubric(problem, text))
                failed.update(check.name for check in persona.failed_checks(problem, text))
        print(f"| {name} | {len(scores)} | {sum(s >= args.approve for s in scores)} | {statistics.mean(scores):.3f} | "
              f"{dict(sorted(failed.items()))} |", flush=True)
    await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--persona", required=True)
    parser.add_argument("--approve", type=float, required=True, help="the run's approval level")
    parser.add_argument("--samples", type=int, default=0, help="0: greedy; N: N answers at temperature 1")
    parser.add_argument("--problems", type=int, default=16, help="held-out problems (the first N)")
    parser.add_argument("--user", help="the user of a multi-user run (default: the keyless server's local admin)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    asyncio.run(compare(args))


if __name__ == "__main__":
    main()
