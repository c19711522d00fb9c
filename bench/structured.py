"""Constrained decoding on the local engine: its cost, and what it buys (a benchmark, not a test).

    .venv/bin/python bench/structured.py [--model PATH] [--new-tokens 64] [--repeats 5] [--threads 1]

- Throughput: B requests (batch 1, 4, 8) of distinct prompts, greedy, `--new-tokens`
  each, generated tokens / wall second through `LocalEngine.stream` (prefill included),
  without a constraint and under a JSON schema whose one string must be longer than
  the run (so both decode exactly as many tokens), in the same run, alternated repeat
  by repeat; the median of `--repeats` after a warm-up of both. The cost is 1 - constrained /
  plain.
- Validity: the default model on 50 prompts asking for JSON under one of ten schemas
  (the schema is in the prompt), greedy, 160 new tokens, with and without the schema as
  a constraint: the share whose whole response parses as JSON, and the share valid
  under the schema; and, for the constrained answers, how far the mask moved each
  token's log-prob (at T = 1): what a trainer that ignored the mask would get wrong,
  and how many positions excluding the constrained ones from the loss would drop.

Writes bench/results/structured.json. docs/structured-outputs.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.types import Constraint, SamplingParams, TokenStep  # noqa: E402

PROMPTS = [f"Write a long, detailed story about a robot named Unit {i} who learns to paint." for i in range(8)]
LONG_STORY = {"type": "object", "required": ["story"], "additionalProperties": False,
              "properties": {"story": {"type": "string", "minLength": 4000}}}

_S, _I, _N = {"type": "string", "maxLength": 40}, {"type": "integer"}, {"type": "number"}
SCHEMAS = {
    "person": {"name": _S, "age": _I},
    "book": {"title": _S, "author": _S, "year": _I},
    "city": {"name": _S, "country": _S, "population": _I},
    "product": {"name": _S, "price": _N, "in_stock": {"type": "boolean"}},
    "movie": {"title": _S, "director": _S, "genres": {"type": "array", "items": _S, "maxItems": 4}},
    "recipe": {"dish": _S, "minutes": _I, "ingredients": {"type": "array", "items": _S, "maxItems": 6}},
    "event": {"name": _S, "date": _S, "attendees": _I},
    "animal": {"species": _S, "legs": _I, "habitat": {"enum": ["land", "sea", "air"]}},
    "planet": {"name": _S, "moons": _I, "has_rings": {"type": "boolean"}},
    "weather": {"city": _S, "celsius": _N, "sky": {"enum": ["clear", "cloudy", "rain"]}},
}
SUBJECTS = ["a famous one", "a made-up one", "one from Japan", "one for children", "a very old one"]


def object_schema(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


async def _count(engine: LocalEngine, prompt: list[int], params: SamplingParams) -> int:
    return sum([isinstance(e, TokenStep) async for e in engine.stream(prompt, params)])


async def _rate(engine: LocalEngine, prompts: list[list[int]], params: SamplingParams) -> float:
    started = time.perf_counter()
    counts = await asyncio.gather(*(_count(engine, p, params) for p in prompts))
    return sum(counts) / (time.perf_counter() - started)


async def throughput(engine: LocalEngine, new_tokens: int, repeats: int) -> dict:
    tok = engine.tokenizer
    prompts = [render_prompt(tok, [{"role": "user", "content": p}], None, None) for p in PROMPTS]
    plain = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    constrained = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, constraint=Constraint(LONG_STORY))
    out: dict = {}
    for batch in (1, 4, 8):
        for warm in (plain, constrained):  # warm-up (the grammar's vocabulary is built on first use, ~0.4 s)
            await _rate(engine, prompts[:batch], replace(warm, max_new_tokens=4))
        rates: dict[str, list[float]] = {"plain": [], "json_schema": []}
        for _ in range(repeats):  # alternated, so drift on a shared machine hits both alike
            rates["plain"].append(await _rate(engine, prompts[:batch], plain))
            rates["json_schema"].append(await _rate(engine, prompts[:batch], constrained))
        row = {k: statistics.median(v) for k, v in rates.items()}
        row["cost"] = 1 - row["json_schema"] / row["plain"]
        out[str(batch)] = row
        print(f"batch {batch}: plain {row['plain']:.1f} tok/s, json_schema {row['json_schema']:.1f} tok/s, "
              f"cost {100 * row['cost']:.1f} %", flush=True)
    return out


async def _answer(engine: LocalEngine, prompt: list[int], params: SamplingParams) -> tuple[str, list[float]]:
    """The text, and per position the log-prob the mask added (masked minus plain; 0 when free)."""
    ids = [e.token_id async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)]
    gain = [0.0] * len(ids)
    if params.constraint is not None and ids:
        masked = await engine.score(prompt, ids, temperature=1.0, constraint=params.constraint)
        plain = await engine.score(prompt, ids, temperature=1.0)
        gain = [m - p for m, p in zip(masked.logprobs, plain.logprobs)]
    return engine.tokenizer.decode(ids, skip_special_tokens=True), gain


def _verdict(text: str, schema: dict) -> tuple[bool, bool]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False, False
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return True, False
    return True, True


async def validity(engine: LocalEngine, new_tokens: int) -> dict:
    cases = [(name, subject) for name in SCHEMAS for subject in SUBJECTS]  # 50
    out: dict = {}
    for mode in ("plain", "json_schema"):
        jobs = []
        for name, subject in cases:
            schema = object_schema(SCHEMAS[name])
            ask = (f"Describe {subject} {name} as a JSON object with exactly these keys: "
                   f"{', '.join(SCHEMAS[name])}. JSON schema: {json.dumps(schema)}. Answer with the JSON only.")
            prompt = render_prompt(engine.tokenizer, [{"role": "user", "content": ask}], None, None)
            params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0,
                                    constraint=Constraint(schema) if mode == "json_schema" else None)
            jobs.append((_answer(engine, prompt, params), schema))
        answers = await asyncio.gather(*(job for job, _ in jobs))
        texts = [text for text, _ in answers]
        verdicts = [_verdict(text, schema) for text, (_, schema) in zip(texts, jobs)]
        out[mode] = {"prompts": len(cases), "valid_json": sum(v[0] for v in verdicts) / len(cases),
                     "schema_valid": sum(v[1] for v in verdicts) / len(cases), "example": texts[0],
                     "invalid": [text for text, v in zip(texts, verdicts) if not v[1]][:3]}
        if mode == "json_schema":  # what a trainer ignoring the mask would get wrong (docs/structured-outputs.md)
            gains = [g for _, gain in answers for g in gain]
            out[mode]["mask_effect"] = {
                "positions": len(gains), "moved_over_0.01_nats": sum(g > 0.01 for g in gains) / len(gains),
                "mean_nats": statistics.mean(gains), "max_nats": max(gains)}
            print(f"  the mask moved {100 * out[mode]['mask_effect']['moved_over_0.01_nats']:.0f} % of "
                  f"{len(gains)} positions by > 0.01 nats (mean {out[mode]['mask_effect']['mean_nats']:.2f}, "
                  f"max {out[mode]['mask_effect']['max_nats']:.1f})", flush=True)
        print(f"{mode}: valid JSON {100 * out[mode]['valid_json']:.0f} %, schema-valid "
              f"{100 * out[mode]['schema_valid']:.0f} % of {len(cases)}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the default model)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine (a shared machine)")
    parser.add_argument("--skip-validity", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model)
    engine = LocalEngine(model_dir, threads=args.threads, prefix_cache_mb=0)

    async def run() -> dict:
        try:
            result = {"throughput": await throughput(engine, args.new_tokens, args.repeats)}
            if not args.skip_validity:
                result["validity"] = await validity(engine, 160)
            return result
        finally:
            await engine.aclose()

    result = asyncio.run(run())
    result.update(model=str(Path(model_dir).name), threads=args.threads, new_tokens=args.new_tokens,
                  repeats=args.repeats, decoder=engine.decoder, machine=platform.processor() or platform.machine(),
                  command=" ".join(["bench/structured.py", *sys.argv[1:]]))
    out = ROOT / "bench" / "results" / "structured.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
