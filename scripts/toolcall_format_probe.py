"""Does the policy emit well-formed tool calls at all? The probe behind docs/experiments.md.

    python scripts/toolcall_format_probe.py [--model DIR] [--tasks 4] [--example]

Renders the first `--tasks` held-out tool-call tasks exactly as serving does (tools in a
system message for a template without tool support), samples each one greedily and at
temperatures 0.7 and 1.0 (two seeds each), and counts replies that `parse_tool_calls`
reads as a tool call. `--example` appends a worked call of the first tool to the system
message, to see whether the format alone is what the model misses.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from openclaw_rl.engine.base import Finished, Started
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.envs.registry import make_env
from openclaw_rl.chat import _with_tool_instructions, parse_tool_calls, render_prompt
from openclaw_rl.types import SamplingParams


def messages_for(prompt: str, tools: list[dict], example: bool) -> list[dict]:
    messages = _with_tool_instructions([{"role": "user", "content": prompt}], tools, "auto")
    if example:
        function = tools[0].get("function", tools[0])
        first_argument = next(iter(function.get("parameters", {}).get("properties", {})), None)
        call = {"name": function["name"], "arguments": {first_argument: "print(2 + 3)"} if first_argument else {}}
        messages[0] = {"role": "system",
                       "content": f"{messages[0]['content']}\nFor example:\n<tool_call>{json.dumps(call)}</tool_call>"}
    return messages


async def sample(engine: LocalEngine, prompt_ids: list[int], temperature: float, seed: int) -> str:
    tokens = []
    async for event in engine.stream(prompt_ids, SamplingParams(max_new_tokens=96, temperature=temperature, seed=seed)):
        if not isinstance(event, Started | Finished):
            tokens.append(event.token_id)
    return engine.tokenizer.decode(tokens)


async def probe(args: argparse.Namespace) -> None:
    env = make_env("toolcall")
    tasks = env.tasks("eval")[: args.tasks]
    engine = LocalEngine(resolve_model_dir(args.model or None), threads=1, max_batch_size=16)
    try:
        for temperature, seeds in ((0.0, [0]), (0.7, [0, 1]), (1.0, [0, 1])):
            prompts = [render_prompt(engine.tokenizer, messages_for(t.prompt, env.tools, args.example), None, None)
                       for t in tasks]
            replies = await asyncio.gather(*[sample(engine, ids, temperature, s) for ids in prompts for s in seeds])
            calls = sum(bool(parse_tool_calls(reply)[1]) for reply in replies)
            print(f"T={temperature}: {calls} of {len(replies)} replies hold a tool call; first: {replies[0][:100]!r}")
    finally:
        await engine.aclose()
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="model directory (default: the bundled model)")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--example", action="store_true", help="add a worked tool call to the system message")
    asyncio.run(probe(parser.parse_args()))


if __name__ == "__main__":
    main()
