"""The update gate's greedy probe answers: the fused decoder against transformers' generate
(a benchmark, not a test).

    .venv/bin/python bench/gate_decision.py [--probes 16] [--tokens 64] [--threads 1] [--repeats 2]

What a gate decision of the demo decodes (train/gate.py): the default model answers the
student persona's first messages to `--probes` problems (the demo's `--gate-probes`),
greedily, up to `--tokens` new tokens each (`gate_max_new_tokens`), with the trainer's
thread budget (1 thread: the demo's trainer shares the 2 cores with serving). Times
`Gate._answer(prompts, keep_top=True)` (the answers and their top-32 log-probs, as a
candidate's are made) both ways, best of `--repeats`, and checks the two give the same
answers. Writes bench/results/gate_decision.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))

from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.eval.personas import get_persona  # noqa: E402
from openclaw_rl.eval.problems import probe_problems  # noqa: E402
from openclaw_rl.train.gate import Gate  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/gate_decision.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model_dir = resolve_model_dir("")
    config = TrainConfig(gate="on", gate_max_new_tokens=args.tokens)
    trainer = Trainer(model_dir, config, device="cpu")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    persona = get_persona("student")
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": persona.first_message(p)}], None, None)
               for p in probe_problems(0, args.probes)]
    gate = Gate(trainer, config, tokenizer, lambda: prompts)
    assert gate.fused_unsupported is None, gate.fused_unsupported

    results, answers = {}, {}
    for way in ("generate", "fused"):
        gate.fused_unsupported = None if way == "fused" else "the benchmark's reference"
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            answers[way] = gate._answer(prompts, keep_top=True)
            best = min(best, time.perf_counter() - start)
        tokens = sum(len(a) for a in answers[way].ids)
        results[way] = {"seconds": round(best, 2), "answer_tokens": tokens, "tokens_per_s": round(tokens / best, 1)}
        print(f"{way:>8}: {best:6.2f} s for {args.probes} probes, {tokens} answer tokens ({tokens / best:.1f} tokens/s)")
    same = sum(a == b for a, b in zip(answers["fused"].ids, answers["generate"].ids))
    print(f"same answers: {same} of {args.probes}; speed-up {results['generate']['seconds'] / results['fused']['seconds']:.2f}x")
    report = {
        "command": "python bench/gate_decision.py " + " ".join(sys.argv[1:]),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__},
        "model": model_dir.name, "probes": args.probes, "max_new_tokens": args.tokens,
        "results": results, "same_answers": same,
        "speedup": round(results["generate"]["seconds"] / results["fused"]["seconds"], 2),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
