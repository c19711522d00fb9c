"""How far each saved version has moved from the base, on the base's own greedy answers.

    python scripts/base_drift.py PROBES.jsonl VERSION_DIR... [--tokens 96] [--probes 16] [--out drift.json]

PROBES.jsonl: the gate's probe prompts of a run (`RUN/<method>/gate-probes.jsonl`, one
`{"messages": [...]}` a line). VERSION_DIR: a published version (`DATA_DIR/versions/vNNNNNN`,
its `model.safetensors`: full fine-tuning). The base (the bundled model) answers each probe
greedily once; every version is then scored teacher-forced on exactly those tokens:

    drift_nats    mean per-token log p_base(a_t) - log p_version(a_t): how much less likely the
                  version finds what the base said (the issue's "log-prob drift of the base's
                  answers under the candidate"; the gate measures it against the served version)
    entropy_ratio mean next-token entropy under the version at those positions / the base's

Printed as a table and written as JSON, one row a version. Measured for the collapse
detectors' calibration (docs/safe-updates.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from openclaw_rl.engine.loading import resolve_model_dir


@torch.no_grad()
def _score(model, prompts: list[list[int]], answers: list[list[int]]) -> tuple[list[float], list[float]]:
    """Per answer: the summed log-prob of its tokens and the summed next-token entropy at its positions."""
    logps, entropies = [], []
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([prompt + answer])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(answer)].float()
        logp = torch.log_softmax(logits, dim=-1)
        logps.append(float(logp.gather(1, torch.tensor(answer)[:, None]).sum()))
        entropies.append(float(-(logp.exp() * logp).sum()))
    return logps, entropies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probes", type=Path)
    parser.add_argument("versions", nargs="+", type=Path)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--probes-max", type=int, default=16)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model_dir = resolve_model_dir(None)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    lines = [json.loads(line) for line in args.probes.read_text().splitlines() if line.strip()][:args.probes_max]
    texts = [tokenizer.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=False) for p in lines]
    prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in texts]
    answers = []
    for prompt in prompts:
        out = model.generate(torch.tensor([prompt]), max_new_tokens=args.tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)
        answers.append(out[0, len(prompt):].tolist())
    tokens = sum(len(a) for a in answers)
    base_logp, base_entropy = _score(model, prompts, answers)
    rows = []
    for version in args.versions:
        state = load_file(str(version / "model.safetensors"))
        missing = set(base_state) - set(state)
        model.load_state_dict({**{k: base_state[k] for k in missing}, **state})
        logp, entropy = _score(model, prompts, answers)
        rows.append({"version": str(version), "drift_nats": (sum(base_logp) - sum(logp)) / tokens,
                     "entropy_ratio": sum(entropy) / sum(base_entropy)})
        print(f"{version}: drift {rows[-1]['drift_nats']:.3f} nats/token, entropy ratio {rows[-1]['entropy_ratio']:.2f}",
              flush=True)
    if args.out:
        args.out.write_text(json.dumps({"probes": len(prompts), "tokens": tokens, "rows": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
