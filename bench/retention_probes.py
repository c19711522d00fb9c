"""The retention probes on a model: base accuracy and the time one probe run takes (a benchmark, not a test).

    .venv/bin/python bench/retention_probes.py [--bfcl 8] [--instructions 24] [--arithmetic 0]
                                               [--tokens 64 160] [--threads 1] [--model DIR]

What the update gate spends on each retention probe (train/gate.py `_with_retention`): the
probe's prompts answered greedily by `Gate._answer`, the gate's own decoding path, with the
trainer's thread budget (1 thread: beside serving on 2 cores), up to each `--tokens`
budget (`--gate-max-new-tokens`); then every answer checked. A gate decision answers each
probe once with the candidate (the served version's answers are cached, so the first
decision pays twice). Prints accuracy per probe (and per BFCL category, per instruction
kind) and seconds, and writes bench/results/retention_probes.json with every answer.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))

from transformers import AutoTokenizer  # noqa: E402

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.eval.bfcl import bfcl_items, bfcl_probe  # noqa: E402
from openclaw_rl.eval.instructions import instruction_items, instruction_probe  # noqa: E402
from openclaw_rl.eval.retention import RetentionProbe, arithmetic_probe  # noqa: E402
from openclaw_rl.train.gate import Gate  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402


def probes(args: argparse.Namespace, tokenizer) -> list[tuple[RetentionProbe, list[str]]]:
    """Each probe asked for, with a label per prompt (its BFCL category, instruction kind)."""
    found = []
    if args.bfcl:
        found.append((bfcl_probe(tokenizer, args.bfcl), [i.category for i in bfcl_items(args.bfcl)]))
    if args.instructions:
        found.append((instruction_probe(tokenizer, args.instructions),
                      [i.kind for i in instruction_items(args.instructions)]))
    if args.arithmetic:
        found.append((arithmetic_probe(tokenizer, args.arithmetic), ["arithmetic"] * args.arithmetic))
    return found


def run(gate: Gate, probe: RetentionProbe, labels: list[str]) -> dict:
    start = time.perf_counter()
    answers = gate._answer(probe.prompts)
    seconds = time.perf_counter() - start
    right = probe.correct(answers.texts)
    by_label: dict[str, list[bool]] = defaultdict(list)
    for label, ok in zip(labels, right):
        by_label[label].append(ok)
    return {"prompts": len(right), "correct": sum(right), "accuracy": round(sum(right) / len(right), 3),
            "seconds": round(seconds, 1), "prompt_tokens": sum(map(len, probe.prompts)),
            "answer_tokens": sum(map(len, answers.ids)),
            "by_label": {k: f"{sum(v)}/{len(v)}" for k, v in by_label.items()},
            "answers": [{"label": label, "correct": ok, "text": text}
                        for label, ok, text in zip(labels, right, answers.texts)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bfcl", type=int, default=8, help="items per BFCL category (0: skip)")
    parser.add_argument("--instructions", type=int, default=24, help="instruction items (0: skip)")
    parser.add_argument("--arithmetic", type=int, default=0, help="arithmetic problems (0: skip)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 160])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/retention_probes.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model_dir = resolve_model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = Trainer(model_dir, TrainConfig(gate="on"), device="cpu")
    asked = probes(args, tokenizer)
    results: dict[str, dict] = {}
    for tokens in args.tokens:
        gate = Gate(trainer, TrainConfig(gate="on", gate_max_new_tokens=tokens, gate_anchors=0), tokenizer, list)
        for probe, labels in asked:
            result = run(gate, probe, labels)
            results[f"{probe.name}@{tokens}"] = result
            print(f"{probe.name:>12} @ {tokens:>3} tokens: {result['correct']:>2}/{result['prompts']} right "
                  f"({result['accuracy']:.2f}) in {result['seconds']:6.1f} s  {result['by_label']}", flush=True)
    report = {
        "command": "python bench/retention_probes.py " + " ".join(sys.argv[1:]),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__},
        "model": model_dir.name, "decoder": "fused" if gate.fused_unsupported is None else "generate",
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
