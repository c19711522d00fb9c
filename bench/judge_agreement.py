"""Judge quality and cost on CPU (a benchmark, not a test).

    .venv/bin/python bench/judge_agreement.py [--backends embedding,local] [--local-cases 30]
        [--openai-url URL --openai-model M] [--teacher] [--label NAME] [--splits tuning,measured,...]

1. Agreement of each judge backend with the hand-labelled cases of the splits,
   tests/data/judge_tuning.jsonl (what the default judge was tuned on) and
   tests/data/judge_measured.jsonl (written apart from it, never tuned on), and
   tests/data/judge_agent_states.jsonl (agent next states the judge used to miss, per
   `category`: action_target, gui_state, neutral_noise, short_doubt), and, only when
   named in `--splits`, tests/data/judge_heldout.jsonl (written apart from the judge and
   its rules, measured once, then tuned on; docs/judge.md) and tests/data/judge_heldout2.jsonl
   (`heldout2`: written blind, by an author who never read the judge's code nor ran it; measured
   once, then tuned on; docs/judge.md) and tests/data/judge_heldout3.jsonl (`heldout3`: 160 cases,
   written blind as heldout2 was; never tuned on, measured once; docs/judge.md): the majority score equals
   the expected score; a hint is produced exactly when one is expected. Overall, per kind
   of next state (chat, feedback, tool-call, terminal, SWE, GUI), agent states (tool-call,
   terminal, SWE, GUI) against what people wrote (chat, feedback), and per PRM category
   (approval, progression, correction, ambiguity), each with a 95% Wilson interval; the
   confusion matrix of scores; hint precision and recall.
2. Judge latency per turn (p50, p95), one turn at a time over every measured case: the
   verdict alone, and with `--teacher` also the teacher scoring of its hints by the
   default policy model (one prefill per hint plus one for the student).

The `local` LLM judge (the served model, SmolLM2-135M-Instruct by default, m = 3) takes
seconds per vote on 2 cores, so it is measured on `--local-cases` cases of each split,
spread evenly over the file. `OPENCLAW_SRC=DIR` imports openclaw_rl from DIR instead of
this checkout, with `--label`, to measure an older judge on the same cases (docs/judge.md).

Writes bench/results/judge_agreement.json (results of other labels, and of the splits
not measured this time, are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("OPENCLAW_SRC") or str(ROOT / "src"))

from openclaw_rl.compose import build_judge  # noqa: E402
from openclaw_rl.config import JudgeConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.judge.worker import JudgeWorker  # noqa: E402
from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.store import Store  # noqa: E402
from openclaw_rl.types import NextState, TurnRecord  # noqa: E402

SPLITS = {name: ROOT / "tests" / "data" / f"judge_{name}.jsonl"
          for name in ("tuning", "measured", "agent_states", "heldout", "heldout2", "heldout3")}
AGENT_DOMAINS = ("toolcall", "terminal", "swe", "gui")  # machine next states; chat and feedback are people's
SCORES = (1, 0, -1)
RESULTS = ROOT / "bench" / "results" / "judge_agreement.json"


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def record_cases(store: Store, cases: list[dict], tokenizer) -> list:
    """One session per case: the request, the response (with its tool calls), the next state."""
    turns = []
    for case in cases:
        messages = [{"role": "user", "content": case["request"]}]
        prompt = render_prompt(tokenizer, messages, None, None) if tokenizer else [0]
        response = tokenizer.encode(case["response"] or " ", add_special_tokens=False) if tokenizer else [0]
        session = f"case-{case['id']}"
        store.ensure_session(session, "header")
        turn = store.record_turn(TurnRecord(
            session_id=session, kind="main", policy_version=0, prompt_messages=messages, prompt_token_ids=prompt,
            response_token_ids=response, behaviour_logprobs=[0.0] * len(response), response_text=case["response"],
            tool_calls=case.get("tool_calls") or [], sampling={"temperature": 1.0}, finish_reason="stop"))
        store.set_next_state(turn.id, NextState(case["next_state_role"], case["next_state"], at=time.time()))
        turns.append(store.get_turn(turn.id))
    return turns


def wilson(correct: int, n: int, z: float = 1.96) -> list[float]:
    """The 95% Wilson score interval of a proportion."""
    if n == 0:
        return [0.0, 1.0]
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def rate(correct: int, n: int) -> dict:
    return {"n": n, "correct": correct, "agreement": round(correct / n, 3) if n else None, "ci95": wilson(correct, n)}


def summarise(cases: list[dict], verdicts: list) -> dict:
    rows = []
    for case, verdict in zip(cases, verdicts):
        hinted = bool(verdict.hints)
        rows.append({"id": case["id"], "domain": case["domain"], "kind": case["kind"],
                     "expected": case["expected_score"], "got": verdict.reward, "status": verdict.status,
                     "hint_expected": case["expected_hint"] is not None, "hinted": hinted,
                     "hint": verdict.hints[0] if hinted else None,
                     "category": case.get("category"), "next_state": case["next_state"][:160]})

    def agreement(selected: list[dict]) -> dict:
        return {"score": rate(sum(r["got"] == r["expected"] for r in selected), len(selected)),
                "hint": rate(sum(r["hinted"] == r["hint_expected"] for r in selected), len(selected))}

    confusion = {str(e): {str(g): sum(r["expected"] == e and r["got"] == g for r in rows) for g in SCORES}
                 | {"no_verdict": sum(r["expected"] == e and r["status"] != "ok" for r in rows)} for e in SCORES}
    hinted = [r for r in rows if r["hinted"]]
    expected = [r for r in rows if r["hint_expected"]]
    return {
        "cases": len(rows), **agreement(rows),
        "no_verdict": sum(r["status"] != "ok" for r in rows),
        "by_domain": {d: agreement([r for r in rows if r["domain"] == d]) for d in sorted({r["domain"] for r in rows})},
        "by_state": {"agent": agreement([r for r in rows if r["domain"] in AGENT_DOMAINS]),
                     "people": agreement([r for r in rows if r["domain"] not in AGENT_DOMAINS])},
        "by_kind": {k: agreement([r for r in rows if r["kind"] == k]) for k in sorted({r["kind"] for r in rows})},
        "by_category": {c: agreement([r for r in rows if r["category"] == c])
                        for c in sorted({r["category"] for r in rows} - {None})},
        "confusion_expected_by_got": confusion,
        "hint_precision": rate(sum(r["hint_expected"] for r in hinted), len(hinted)),
        "hint_recall": rate(sum(r["hinted"] for r in expected), len(expected)),
        "misses": [r for r in rows if r["got"] != r["expected"] or r["hinted"] != r["hint_expected"]],
    }


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def timed(worker: JudgeWorker, turns: list) -> tuple[list, dict]:
    """Verdicts one turn at a time, and their latency."""
    verdicts, seconds = [], []
    for turn in turns:
        started = time.perf_counter()
        verdicts.append(await worker.process(turn))
        seconds.append(time.perf_counter() - started)
    return verdicts, {"p50_s": round(statistics.median(seconds), 4), "p95_s": round(percentile(seconds, 0.95), 4),
                      "max_s": round(max(seconds), 4), "turns": len(seconds)}


def spread(cases: list[dict], n: int) -> list[dict]:
    if n >= len(cases):
        return cases
    step = len(cases) / n
    return [cases[int(i * step)] for i in range(n)]


def print_split(label: str, split: str, out: dict) -> None:
    s, h, precision, recall = out["score"], out["hint"], out["hint_precision"], out["hint_recall"]
    print(f"{label} / {split}: score {s['agreement']:.3f} {s['ci95']} ({s['correct']}/{s['n']}), "
          f"hint {h['agreement']:.3f} {h['ci95']}, hint precision {precision['agreement']} {precision['ci95']} "
          f"({precision['correct']}/{precision['n']}), recall {recall['agreement']} {recall['ci95']} "
          f"({recall['correct']}/{recall['n']})", flush=True)
    for group in ("by_domain", "by_state", "by_kind", "by_category"):
        for name, a in out[group].items():
            if not a["score"]["n"]:
                continue
            print(f"    {name:12s} n={a['score']['n']:3d} score {a['score']['agreement']:.2f} {a['score']['ci95']}"
                  f"  hint {a['hint']['agreement']:.2f} {a['hint']['ci95']}")
    print("    confusion (rows expected +1/0/-1, columns got +1/0/-1/none):",
          [[row[str(g)] for g in SCORES] + [row["no_verdict"]] for row in out["confusion_expected_by_got"].values()])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="embedding")
    parser.add_argument("--label", default="", help="name the results by this instead of the backend")
    parser.add_argument("--local-cases", type=int, default=30)
    parser.add_argument("--openai-url", default="")
    parser.add_argument("--openai-model", default="")
    parser.add_argument("--judge-max-tokens", type=int, default=96)
    parser.add_argument("--teacher", action="store_true", help="time teacher scoring of the hints too")
    parser.add_argument("--splits", default="tuning,measured,agent_states",
                        help="comma-separated, of " + ",".join(SPLITS) + "; the held-out splits only when named")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b] + (["openai"] if args.openai_url else [])
    model_dir = resolve_model_dir(None)
    needs_engine = args.teacher or "local" in backends
    engine = LocalEngine(model_dir) if needs_engine else None  # the policy: teacher scoring and `local:current`
    tokenizer = engine.tokenizer if engine else None
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("backends", {})
    results["command"] = "bench/judge_agreement.py " + " ".join(sys.argv[1:])
    for backend in backends:
        label = args.label or backend
        config = JudgeConfig(judge=backend, votes=3, judge_max_tokens=args.judge_max_tokens, concurrency=16,
                             local_weights="current", call_timeout_s=1800,
                             openai_base_url=args.openai_url, openai_model=args.openai_model)
        judge = build_judge(config, model_dir, engine)
        out = results["backends"].setdefault(label, {})  # the splits not measured now keep their results
        out["m"] = 1 if backend == "embedding" else config.votes
        for split, path in SPLITS.items():
            if split not in args.splits.split(","):
                continue
            cases = load(path)
            if backend != "embedding":
                cases = spread(cases, args.local_cases)
                out[f"{split}_subset"] = f"{len(cases)} cases spread evenly over the split"
            with tempfile.TemporaryDirectory() as tmp:
                store = Store(tmp)
                turns = record_cases(store, cases, tokenizer)
                worker = JudgeWorker(store, judge, config, teacher_engine=engine if args.teacher else None,
                                     tokenizer=tokenizer)
                if backend == "embedding":
                    await timed(worker, turns[:5])  # warm-up: first calls pay for lazy initialisation
                    verdicts, latency = await timed(worker, turns)
                    out[f"{split}_latency"] = latency
                else:
                    verdicts = await asyncio.gather(*(worker.process(t) for t in turns))
            out[split] = summarise(cases, verdicts)
            print_split(label, split, out[split])
            if f"{split}_latency" in out:
                print(f"    latency per turn{' with teacher scoring' if args.teacher else ''}: "
                      f"{out[f'{split}_latency']}", flush=True)
        out["counts"] = {split: dict(Counter(c["domain"] for c in load(p))) for split, p in SPLITS.items()}
    if engine is not None:
        await engine.aclose()
    RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())
