"""Does a user's experience block make the model answer better? The experience teacher's go/no-go.

    python scripts/experience_teacher.py RUN_DIR [RUN_DIR ...] [--samples 4] [--problems 16] [--where system]

Each RUN_DIR is a `simulate`/`demo` run with the experience on (its `<method>/data` store
holds the lessons the judge learned for the simulated user, `local`). For each run, the
user's experience as the run ended is rendered as serving renders it (budget 256 tokens,
`--where`), and the base model answers the persona's held-out problems with and
without it: greedily once, and `--samples` times at temperature 1 (the users' sampling),
each pair with the same seed. The persona's rubric scores every answer. `--where user`
puts the lessons in front of the user's message, `--where system` in the system message
(serving's two `--experience-placement`s; this measurement chose `user` as the default).

Printed per run and pooled: the mean rubric with and without the block (greedy and
sampled) and the **share of pairs in which the answer with the block scores higher**
(ties left out), with a 95 % Wilson interval. That share is the experience teacher's
counterpart of `openclaw-rl hints`' check of the per-turn hint teacher (docs/experiments.md:
0.47 [0.39, 0.55] on the student): above one half, distilling the block into the weights
(`--method consolidate`) has a direction; at or below it, it has none.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems
from openclaw_rl.experience import PLACEMENTS, place, render
from openclaw_rl.judge.hint_check import wilson
from openclaw_rl.store import Store
from openclaw_rl.users import LOCAL

BUDGET = 256


def run_store(run_dir: Path) -> tuple[Path, dict]:
    summary = json.loads((run_dir / "summary.json").read_text())
    method = next(iter(summary["runs"])) if "runs" in summary else summary["method"]
    return run_dir / method / "data", summary["runs"][method] if "runs" in summary else summary


def answers(model, tokenizer, conversations: list[list[dict]], sample: bool, seed: int, max_tokens: int) -> list[str]:
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_tokens, do_sample=sample, temperature=1.0 if sample else None,
                             top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    return tokenizer.batch_decode(out[:, batch.input_ids.shape[1]:], skip_special_tokens=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--model", default=None)
    parser.add_argument("--level", type=float, default=None,
                        help="the approval level the sampled answers are counted at (default: the persona's own)")
    parser.add_argument("--where", choices=(*PLACEMENTS, "after"), default="user",
                        help="user / system: serving's placements; after: the lessons after the question in the "
                             "user's message (a probe, not a placement serving offers)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model_dir = resolve_model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    pooled = {"greedy": [0, 0], "sampled": [0, 0]}  # [block better, decided]
    approved = {"without": [0, 0], "with": [0, 0]}  # sampled answers at or above the approval level, of all
    print("| run | lessons | greedy without / with | sampled without / with | block better (sampled pairs) |")
    print("|---|---|---|---|---|")
    for run_dir in args.runs:
        data, summary = run_store(run_dir)
        persona = get_persona(summary["persona"])
        store = Store(data)
        try:
            block = render(store.experience(LOCAL.name), BUDGET, count)
        finally:
            store.close()
        problems = heldout_problems(args.problems)
        plain = [[{"role": "user", "content": persona.first_message(p)}] for p in problems]
        scores: dict[str, dict[str, list[float]]] = {}
        for way, seeds in (("greedy", [0]), ("sampled", range(1, args.samples + 1))):
            with_block = ([place(c, block, args.where) for c in plain] if args.where != "after" else
                          [[{"role": "user", "content": f"{c[0]['content']}\n\n{block}" if block else c[0]["content"]}]
                           for c in plain])
            for label, conversations in (("without", plain), ("with", with_block)):
                scores.setdefault(way, {})[label] = [
                    persona.rubric(p, text) for seed in seeds
                    for p, text in zip(problems, answers(model, tokenizer, conversations, way == "sampled", seed,
                                                          args.max_tokens))]
            better = sum(w > o for o, w in zip(scores[way]["without"], scores[way]["with"]))
            decided = sum(w != o for o, w in zip(scores[way]["without"], scores[way]["with"]))
            pooled[way][0] += better
            pooled[way][1] += decided
        g, s = scores["greedy"], scores["sampled"]
        level = args.level if args.level is not None else summary.get("approve_threshold") or persona.approve_threshold
        for label in ("without", "with"):
            approved[label][0] += sum(x >= level for x in s[label])
            approved[label][1] += len(s[label])
        better, decided = (sum(w > o for o, w in zip(s["without"], s["with"])),
                           sum(w != o for o, w in zip(s["without"], s["with"])))
        low, high = wilson(better, decided) if decided else (0.0, 1.0)
        print(f"| {run_dir.name} | {block.count(chr(10))} | {statistics.mean(g['without']):.3f} / "
              f"{statistics.mean(g['with']):.3f} | {statistics.mean(s['without']):.3f} / {statistics.mean(s['with']):.3f}"
              f" | {better}/{decided} = {better / max(1, decided):.2f} [{low:.2f}, {high:.2f}] |")
    for way, (better, decided) in pooled.items():
        low, high = wilson(better, decided) if decided else (0.0, 1.0)
        print(f"pooled {way}: the answer with the block scores higher in {better}/{decided} decided pairs = "
              f"{better / max(1, decided):.2f} [{low:.2f}, {high:.2f}]")
    for label, (hits, total) in approved.items():
        low, high = wilson(hits, total) if total else (0.0, 1.0)
        print(f"sampled answers {label} the block at or above the approval level: {hits}/{total} = "
              f"{hits / max(1, total):.2f} [{low:.2f}, {high:.2f}]")


if __name__ == "__main__":
    main()
