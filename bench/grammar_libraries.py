"""The three grammar libraries on PyPI with CPU wheels, side by side: what chose llguidance.

    .venv/bin/pip install xgrammar==0.2.8 outlines-core==0.2.14   # only for this comparison
    .venv/bin/python bench/grammar_libraries.py

With the default model's tokenizer (SmolLM2, 49,152 tokens), one thread:
- compile: a JSON schema (nested object, array, enum, pattern) to a matcher, ms;
- per token: fill the next-token mask and advance by the document's next token, over a
  63-token valid document ending in end-of-sequence, us (median of 5 passes, after one);
- coverage: which of 16 JSON-schema features each compiles, and whether a feature it
  cannot enforce is refused (an error naming it) or silently ignored (compiles anyway).

Writes bench/results/grammar_libraries.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.engine.loading import default_model_dir  # noqa: E402

V = 49152
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags", "kind", "address"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string"}}, "kind": {"enum": ["a", "b"]},
                         "address": {"type": "object", "additionalProperties": False, "required": ["city", "zip"],
                                     "properties": {"city": {"type": "string"},
                                                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}
DOC = {"name": "Ada Lovelace writes programs", "age": 36, "tags": ["math", "engines", "poetry of science"],
       "kind": "a", "address": {"city": "London town", "zip": "12345"}}
FEATURES = {
    "$ref/$defs": {"$defs": {"p": {"type": "integer"}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}}},
    "recursive $ref": {"$defs": {"n": {"type": "object", "properties": {"c": {"type": "array",
                                                                              "items": {"$ref": "#/$defs/n"}}}}},
                       "$ref": "#/$defs/n"},
    "anyOf": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "oneOf": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "allOf": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"required": ["a"]}]},
    "pattern": {"type": "string", "pattern": "^[a-z]+@[a-z]+$"},
    "minLength/maxLength": {"type": "string", "minLength": 2, "maxLength": 5},
    "minItems/maxItems": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    "minimum/maximum": {"type": "integer", "minimum": 1, "maximum": 9},
    "format date-time": {"type": "string", "format": "date-time"},
    "const": {"const": "x"},
    "patternProperties": {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
    "not": {"not": {"type": "string"}},
    "if/then": {"if": {"type": "string"}, "then": {"minLength": 1}},
    "uniqueItems": {"type": "array", "uniqueItems": True},
    "external $ref": {"$ref": "http://example.com/s.json"},
}
UNENFORCEABLE = {"not", "if/then", "uniqueItems", "external $ref"}  # no token mask can express these exactly


def _per_token(step, ids: list[int], make) -> float:
    runs = []
    for _ in range(6):
        matcher = make()
        started = time.perf_counter()
        for token in ids:
            step(matcher, token)
        runs.append((time.perf_counter() - started) / len(ids))
    return statistics.median(runs[1:]) * 1e6


def xgrammar_row(tok, ids: list[int]) -> dict:
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok, vocab_size=V), max_threads=1)
    started = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA))
    compile_ms = (time.perf_counter() - started) * 1e3
    bitmask = xgr.allocate_token_bitmask(1, V)

    def step(matcher, token):
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token)

    def compiles(schema) -> str:
        try:
            compiler.compile_json_schema(json.dumps(schema))
            return "compiles"
        except Exception as error:  # noqa: BLE001 (any refusal counts)
            return f"refused: {str(error)[:80]}"

    return {"compile_ms": compile_ms, "us_per_token": _per_token(step, ids, lambda: xgr.GrammarMatcher(compiled)),
            "features": {name: compiles(schema) for name, schema in FEATURES.items()}}


def llguidance_row(tok, ids: list[int]) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.torch as llg_torch

    vocab = llguidance.hf.from_tokenizer(tok, n_vocab=V)
    started = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA))
    llguidance.LLMatcher(vocab, grammar)
    compile_ms = (time.perf_counter() - started) * 1e3
    bitmask = llg_torch.allocate_token_bitmask(1, V)

    def step(matcher, token):
        llg_torch.fill_next_token_bitmask(matcher, bitmask, 0)
        assert matcher.consume_token(token)

    def compiles(schema) -> str:
        error = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema)))
        return f"refused: {error[:80]}" if error else "compiles"

    return {"compile_ms": compile_ms,
            "us_per_token": _per_token(step, ids, lambda: llguidance.LLMatcher(vocab, grammar)),
            "features": {name: compiles(schema) for name, schema in FEATURES.items()}}


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: a token's characters -> its bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def outlines_row(tok, ids: list[int]) -> dict:
    import outlines_core
    from outlines_core import json_schema

    decode = _byte_decoder()
    vocab: dict[str, list[int]] = {}
    for text, token in tok.get_vocab().items():
        if token == tok.eos_token_id:
            continue
        try:
            vocab.setdefault(bytes(decode[c] for c in text).decode("utf-8"), []).append(token)
        except (KeyError, UnicodeDecodeError):
            continue
    vocabulary = outlines_core.Vocabulary(tok.eos_token_id, vocab)
    started = time.perf_counter()
    index = outlines_core.Index(json_schema.build_regex_from_schema(json.dumps(SCHEMA)), vocabulary)
    compile_ms = (time.perf_counter() - started) * 1e3

    def step(guide, token):
        guide.get_tokens()
        if token != tok.eos_token_id:
            guide.advance(token)

    def compiles(schema) -> str:
        try:
            json_schema.build_regex_from_schema(json.dumps(schema))
            return "compiles"
        except Exception as error:  # noqa: BLE001
            return f"refused: {str(error)[:80]}"

    return {"compile_ms": compile_ms, "us_per_token": _per_token(step, ids, lambda: outlines_core.Guide(index)),
            "features": {name: compiles(schema) for name, schema in FEATURES.items()}}


def main() -> None:
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(default_model_dir())
    ids = tok.encode(json.dumps(DOC)) + [tok.eos_token_id]
    result = {}
    for name, row in (("xgrammar", xgrammar_row), ("llguidance", llguidance_row), ("outlines-core", outlines_row)):
        result[name] = row(tok, ids)
        features = result[name]["features"]
        silent = sorted(f for f in UNENFORCEABLE if features[f] == "compiles")
        result[name]["unenforceable_compiled_silently"] = silent
        print(f"{name}: compile {result[name]['compile_ms']:.1f} ms, {result[name]['us_per_token']:.0f} us/token, "
              f"refuses {sum(v != 'compiles' for v in features.values())}/{len(features)} features, "
              f"silently ignores {silent}", flush=True)
    result["tokens"] = len(ids)
    out = ROOT / "bench" / "results" / "grammar_libraries.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
