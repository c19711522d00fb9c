"""Judge quality and cost on CPU (a benchmark, not a test).

    .venv/bin/python bench/judge_agreement.py [--backends embedding,local] [--openai-url URL --openai-model M]
                                              [--latency-cases 8]

1. Agreement of each judge backend with the hand-labelled cases in
   tests/data/judge_cases.jsonl: the majority score equals the expected score, and a
   hint is produced exactly when one is expected.
2. Judge latency per turn (p50, p95), verdict plus teacher scoring, with m = 1 and m = 3,
   for each backend, one turn at a time on the default model.
3. How much a running judge slows serving: median latency of a greedy 32-token
   generation on the serving engine, idle vs while the judge works.

Writes bench/results/judge.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import JudgeConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.judge.worker import JudgeWorker  # noqa: E402
from openclaw_rl.compose import build_judge  # noqa: E402
from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.store import Store  # noqa: E402
from openclaw_rl.types import NextState, SamplingParams, TokenStep  # noqa: E402

CASES = [json.loads(line) for line in (ROOT / "tests" / "data" / "judge_cases.jsonl").read_text().splitlines()]


def record_cases(store: Store, tokenizer) -> list:
    turns = []
    for case in CASES:
        messages = [{"role": "user", "content": case["request"]}]
        response = tokenizer.encode(case["response"], add_special_tokens=False)
        session = f"case-{case['id']}"
        store.ensure_session(session, "header")
        turn = store.record_turn(
            session_id=session, kind="main", policy_version=0, prompt_messages=messages,
            prompt_token_ids=render_prompt(tokenizer, messages, None, None), response_token_ids=response,
            behaviour_logprobs=[0.0] * len(response), response_text=case["response"], tool_calls=[],
            sampling={"temperature": 1.0}, finish_reason="stop", continuation_hash=None)
        store.set_next_state(turn.id, NextState(case["next_state_role"], case["next_state"], at=time.time()))
        turns.append(store.get_turn(turn.id))
    return turns


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def agreement(worker: JudgeWorker, turns: list) -> dict:
    verdicts = await asyncio.gather(*(worker.process(t) for t in turns))
    score_ok = hint_ok = failed = 0
    rows = []
    for case, verdict in zip(CASES, verdicts):
        failed += verdict.status != "ok"
        score_ok += verdict.reward == case["expected_score"]
        hint_ok += bool(verdict.hints) == bool(case["expected_hint"])
        rows.append({"id": case["id"], "expected": case["expected_score"], "got": verdict.reward,
                     "hint": verdict.selected_hint or (verdict.hints[0] if verdict.hints else None)})
    n = len(CASES)
    return {"cases": n, "score_agreement": round(score_ok / n, 3), "hint_agreement": round(hint_ok / n, 3),
            "no_verdict": failed, "score_correct": score_ok, "hint_correct": hint_ok, "rows": rows}


async def latency(worker: JudgeWorker, turns: list) -> dict:
    seconds = []
    for turn in turns:
        started = time.perf_counter()
        await worker.process(turn)
        seconds.append(time.perf_counter() - started)
    return {"p50_s": round(statistics.median(seconds), 3), "p95_s": round(percentile(seconds, 0.95), 3),
            "turns": len(seconds)}


async def serving_slowdown(engine: LocalEngine, worker: JudgeWorker, turns: list) -> dict:
    prompt = render_prompt(engine.tokenizer, [{"role": "user", "content": "Write a story about a painter."}], None, None)
    params = SamplingParams(max_new_tokens=32, temperature=0.0)

    async def one() -> float:
        started = time.perf_counter()
        [e async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)]
        return time.perf_counter() - started

    idle = [await one() for _ in range(3)]
    judging = asyncio.gather(*(worker.process(t) for t in turns))
    busy = [await one() for _ in range(3)]
    await judging
    return {"serve_median_idle_s": round(statistics.median(idle), 3),
            "serve_median_judging_s": round(statistics.median(busy), 3),
            "ratio": round(statistics.median(busy) / statistics.median(idle), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="embedding,local")
    parser.add_argument("--openai-url", default="")
    parser.add_argument("--openai-model", default="")
    parser.add_argument("--latency-cases", type=int, default=8)
    parser.add_argument("--judge-max-tokens", type=int, default=96)
    args = parser.parse_args()
    model_dir = resolve_model_dir(None)
    engine = LocalEngine(model_dir)  # the policy: teacher scoring, and `local:current`
    backends = [b for b in args.backends.split(",") if b] + (["openai"] if args.openai_url else [])
    results: dict = {"model": model_dir.name, "judge_max_tokens": args.judge_max_tokens, "backends": {}}
    for backend in backends:
        out = results["backends"][backend] = {}
        for m in (3, 1):
            # The policy here is the untrained model, so `current` weights are the initial ones; using the
            # policy engine gives the judge both cores, as a judge process of its own would have.
            config = JudgeConfig(judge=backend, votes=m, judge_max_tokens=args.judge_max_tokens, concurrency=16,
                                 local_weights="current", call_timeout_s=1800,
                                 openai_base_url=args.openai_url, openai_model=args.openai_model)
            judge = build_judge(config, model_dir, engine)
            with tempfile.TemporaryDirectory() as tmp:
                store = Store(tmp)
                turns = record_cases(store, engine.tokenizer)
                worker = JudgeWorker(store, judge, config, teacher_engine=engine,
                                     tokenizer=engine.tokenizer)
                if m == 3:
                    out["agreement"] = await agreement(worker, turns)
                    print(f"{backend}: score agreement {out['agreement']['score_agreement']:.2f}, "
                          f"hint agreement {out['agreement']['hint_agreement']:.2f}", flush=True)
                store2 = Store(Path(tmp) / "latency")
                all_turns = record_cases(store2, engine.tokenizer)
                step = max(1, len(all_turns) // args.latency_cases)
                turns2 = all_turns[::step][: args.latency_cases]  # a spread: approvals, corrections, tools
                worker2 = JudgeWorker(store2, judge, config, teacher_engine=engine,
                                      tokenizer=engine.tokenizer)
                out[f"latency_m{m}"] = await latency(worker2, turns2)
                print(f"{backend} m={m}: latency {out[f'latency_m{m}']}", flush=True)
                if m == 1:
                    store3 = Store(Path(tmp) / "slowdown")
                    worker3 = JudgeWorker(store3, judge, config, teacher_engine=engine,
                                          tokenizer=engine.tokenizer)
                    out["serving_slowdown"] = await serving_slowdown(
                        engine, worker3, record_cases(store3, engine.tokenizer)[:4])
                    print(f"{backend}: serving slowdown {out['serving_slowdown']}", flush=True)
            if getattr(judge, "backend", None) is not None and hasattr(judge.backend, "engine") \
                    and judge.backend.engine is not engine:
                await judge.backend.engine.aclose()
    await engine.aclose()
    path = ROOT / "bench" / "results" / "judge.json"
    if path.exists():  # keep the backends this run did not measure
        previous = json.loads(path.read_text())
        results["backends"] = {**previous.get("backends", {}), **results["backends"]}
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
