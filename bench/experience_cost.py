"""What the experience block costs a request (a benchmark, not a test).

    .venv/bin/python bench/experience_cost.py [--model PATH] [--repeats 8] [--lessons 3,6,12]

The same held-out first messages of the student persona, rendered as serving renders them
(`experience.render` within the default budget of 256 tokens, `merge_system`, the chat
template), answered greedily on the local engine in this process, one request at a time:
without a block, and with blocks of n lessons (the lessons the judge learned on the
student and parent personas, then padded with further plausible rules). Reported per n:
the prompt tokens the block adds, the median time to the first token (the prefill the
block lengthens) and the median time of a whole 64-token answer. Configurations alternate
within each repeat, so drift in the machine's load falls on all of them.

Writes bench/results/experience_cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.eval.personas import get_persona  # noqa: E402
from openclaw_rl.eval.problems import heldout_problems  # noqa: E402
from openclaw_rl.experience import Experience, Lesson, merge_system, render  # noqa: E402
from openclaw_rl.types import SamplingParams, TokenStep  # noqa: E402

MAX_TOKENS = 64
BUDGET = 256  # ServeConfig.experience_budget_tokens' default
RULES = [  # learned on the study's runs first, then rules of the same kind
    "Show every step.", "Write a real answer in full sentences, with the numbers.",
    "Write it as plain sentences, no bullet points, explain each step.", "Don't use bold text.",
    "Give me the answer in one sentence.", "Don't show the working.",
    "Keep it short.", "No intro and no formatting, just the answer.", "Don't say \u201cCertainly\u201d.",
    "Answer in plain text without headings.", "Use the numbers from the question.", "Skip the chatty intro.",
]


def experience(n: int) -> Experience:
    return Experience("bench", tuple(Lesson(id=i + 1, owner="bench", text=text, support=n - i, created_at=float(i),
                                            updated_at=float(i), sources=(str(i),))
                                     for i, text in enumerate(RULES[:n])), version=n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--lessons", default="3,6,12")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engine = LocalEngine(resolve_model_dir(args.model), threads=args.threads)
    tokens = lambda text: len(engine.tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    persona, problems = get_persona("student"), heldout_problems(args.repeats)
    blocks = {0: ""} | {n: render(experience(n), BUDGET, tokens) for n in map(int, args.lessons.split(","))}
    params = SamplingParams(max_new_tokens=MAX_TOKENS, temperature=0.0)

    async def once(ids: list[int]) -> tuple[float, float]:
        start, first = time.perf_counter(), None
        async for event in engine.stream(ids, params):
            if isinstance(event, TokenStep) and first is None:
                first = time.perf_counter() - start
        return first or 0.0, time.perf_counter() - start

    async def run() -> dict:
        prompts = {n: [render_prompt(engine.tokenizer, merge_system(
            [{"role": "user", "content": persona.first_message(p)}], block), None, None) for p in problems]
                   for n, block in blocks.items()}
        await once(prompts[0][0])  # warm-up
        times: dict[int, list[tuple[float, float]]] = {n: [] for n in blocks}
        for i in range(args.repeats):
            for n in blocks:
                times[n].append(await once(prompts[n][i]))
        await engine.aclose()
        base = statistics.median(len(p) for p in prompts[0])
        return {str(n): {"lessons": n, "block_tokens": tokens(blocks[n]) if blocks[n] else 0,
                         "prompt_tokens_added": statistics.median(len(p) for p in prompts[n]) - base,
                         "first_token_s": round(statistics.median(t[0] for t in times[n]), 4),
                         "answer_s": round(statistics.median(t[1] for t in times[n]), 4)} for n in blocks}

    results = asyncio.run(run())
    for row in results.values():
        print(f"{row['lessons']:>2} lessons: +{row['prompt_tokens_added']:.0f} prompt tokens, first token "
              f"{row['first_token_s'] * 1000:.0f} ms, {MAX_TOKENS}-token answer {row['answer_s']:.2f} s")
    out = ROOT / "bench" / "results" / "experience_cost.json"
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "threads": args.threads,
                               "max_tokens": MAX_TOKENS, "budget_tokens": BUDGET, "repeats": args.repeats,
                               "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
