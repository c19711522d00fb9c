"""llama.cpp's side of bench/decode.py, run by the llama.cpp venv's Python (make llamacpp-venv).

    .venv-llamacpp/bin/python bench/decode_llamacpp.py --gguf MODEL.gguf --requests FILE.json

Reads the prompts as token ids (the same ids the local engine is given) and prints one
JSON line: decode tokens/s per batch (median of the repeats after a warm-up) and
prefill tokens/s of the long prompt. Greedy: each sequence's next token is the argmax of
its logits. A batch of B sequences goes through llama.cpp's low-level decode API as one
`llama_batch` per step, one token per sequence, each in its own KV-cache sequence:
how llama.cpp itself serves several sequences at once (llama-server, llama-batched).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import llama_cpp as lc
import numpy as np


class Runner:
    def __init__(self, gguf: str, threads: int, max_batch: int, n_ctx: int):
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(gguf.encode(), model_params)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {gguf}")
        self.n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx * max_batch
        params.n_batch = params.n_ubatch = max(n_ctx, max_batch)
        params.n_seq_max = max_batch
        params.n_threads = params.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise SystemExit("llama.cpp could not create a context")
        self.batch = lc.llama_batch_init(max(n_ctx, max_batch), 0, max_batch)

    def _fill(self, items: list[tuple[int, int, int, bool]]) -> None:
        """(token, position, sequence, wants logits) per batch entry."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits

    def _decode(self) -> None:
        if lc.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")

    def _argmax(self, i: int) -> int:
        row = np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
        return int(row.argmax())

    def clear(self) -> None:
        lc.llama_memory_clear(lc.llama_get_memory(self.ctx), True)

    def generate(self, prompts: list[list[int]], new_tokens: int) -> int:
        """Prefill every prompt (each its own sequence), then decode them together; tokens generated."""
        self.clear()
        nxt = []
        for seq, prompt in enumerate(prompts):
            self._fill([(t, p, seq, p == len(prompt) - 1) for p, t in enumerate(prompt)])
            self._decode()
            nxt.append(self._argmax(len(prompt) - 1))
        positions = [len(p) for p in prompts]
        generated = len(prompts)
        for _ in range(new_tokens - 1):
            self._fill([(nxt[s], positions[s], s, True) for s in range(len(prompts))])
            self._decode()
            nxt = [self._argmax(s) for s in range(len(prompts))]
            positions = [p + 1 for p in positions]
            generated += len(prompts)
        return generated

    def prefill_tokens_per_s(self, prompt: list[int]) -> float:
        self.clear()
        self._fill([(t, p, 0, p == len(prompt) - 1) for p, t in enumerate(prompt)])
        started = time.perf_counter()
        self._decode()
        self._argmax(len(prompt) - 1)
        return len(prompt) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--requests", required=True, help="JSON: prompts, long_prompt, batches, new_tokens, repeats")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    spec = json.loads(Path(args.requests).read_text())
    batches, new_tokens, repeats = spec["batches"], spec["new_tokens"], spec["repeats"]
    longest = max(max(len(p) for p in spec["prompts"]) + new_tokens, len(spec["long_prompt"])) + 8
    runner = Runner(args.gguf, args.threads, max(batches), longest)
    out: dict = {"decode": {}, "runs": {}}
    for batch in batches:
        prompts = spec["prompts"][:batch]
        runner.generate(prompts, 4)  # warm-up
        rates = []
        for _ in range(repeats):
            started = time.perf_counter()
            tokens = runner.generate(prompts, new_tokens)
            rates.append(tokens / (time.perf_counter() - started))
        out["decode"][str(batch)] = round(statistics.median(rates), 1)
        out["runs"][str(batch)] = [round(r, 1) for r in rates]
    runner.prefill_tokens_per_s(spec["long_prompt"][:64])  # warm-up
    out["prefill_tokens_per_s"] = round(statistics.median(
        runner.prefill_tokens_per_s(spec["long_prompt"]) for _ in range(repeats)), 1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
