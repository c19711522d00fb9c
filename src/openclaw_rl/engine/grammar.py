"""Constrained decoding: a `Constraint` (types.py) as a mask over the vocabulary, with llguidance.

Where the mask acts, and why there: on the logits, before the temperature and top-p
(sampling.py). A constrained token is sampled from the masked distribution and its
behaviour log-prob is the log-prob under that distribution, as temperature and top-p
already are. The constraint travels with the turn's sampling parameters, so the trainer
and the teacher rebuild the same mask from the response's own ids (`replay_masks`) and
measure the same distribution: the first PPO ratio of a constrained turn is 1.
(Excluding constrained positions from the loss instead would drop a whole JSON answer:
every position of it is constrained.)

Why llguidance (measured on this CPU with SmolLM2's 49,152-token vocabulary, one
thread; docs/structured-outputs.md has the commands): mask plus advance 44 us a token
(xgrammar 7 us, outlines-core 419 us), against a decode step of ~25 ms at batch 1, so
under 2 % even at batch 8. It is the one of the three that refuses a schema keyword it
cannot enforce (`not`, `if`/`then`, `uniqueItems`, an external `$ref`) with an error
naming it; xgrammar compiles such a schema and ignores the keyword, so output it
"guarantees" breaks the schema. It also bounds grammar size and lexer work
(`LLParserLimits`), which is how a pathological schema is refused before decoding.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance
import llguidance.hf
import llguidance.torch as llg_torch
import torch

from openclaw_rl.types import Constraint, Sample

MAX_SCHEMA_CHARS = 32_768  # a schema's JSON text; larger is refused before compiling
MAX_SCHEMA_DEPTH = 32  # nesting of objects and arrays in the schema document
_LIMITS = dict(max_grammar_size=200_000, max_items_in_row=2_000, step_lexer_fuel=200_000, initial_lexer_fuel=1_000_000)
# JSON as json.dumps writes it: no free whitespace, which a small model can repeat until max_tokens
_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ValueError):
    """A constraint this server cannot enforce: an unsupported schema feature, or too large."""


def grammar_text(constraint: Constraint) -> str:
    """The constraint as an llguidance Lark grammar: prefix, a JSON value under the schema, suffix."""
    schema = {**closed_objects(constraint.schema), "x-guidance": _LAYOUT}
    pieces = [json.dumps(constraint.prefix)] if constraint.prefix else []
    pieces.append("value")
    if constraint.suffix:
        pieces.append(json.dumps(constraint.suffix))
    return f"start: {' '.join(pieces)}\nvalue: %json {json.dumps(schema)}\n"


_LITERALS = ("const", "enum", "default", "examples")  # values, not schemas: left as they are
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema


def closed_objects(schema: Any) -> Any:
    """`schema` with every object that does not say otherwise closed (`additionalProperties: false`).

    As vLLM and SGLang do (xgrammar's strict mode) and as OpenAI's strict mode requires: an
    open object lets a model add keys that no client reads, and a small model then rambles
    in an extra string until max_tokens (LangChain's function calling sends no
    `additionalProperties`)."""
    if isinstance(schema, list):
        return [closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in _LITERALS else _by_name(value) if key in _MAPS else closed_objects(value)
           for key, value in schema.items()}
    is_object = out.get("type") == "object" or "properties" in out
    if is_object and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def _by_name(value: Any) -> Any:
    return {name: closed_objects(item) for name, item in value.items()} if isinstance(value, dict) else value


def check(constraint: Constraint) -> None:
    """Raise ConstraintError naming what is wrong, before anything is decoded."""
    text = json.dumps(constraint.schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise ConstraintError(f"the JSON schema has {len(text)} characters; at most {MAX_SCHEMA_CHARS} are accepted")
    depth = _depth(constraint.schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ConstraintError(f"the JSON schema nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} are accepted")
    try:
        error = llguidance.LLMatcher.validate_grammar(_grammar(constraint), limits=llguidance.LLParserLimits(**_LIMITS))
    except (ValueError, TypeError, RuntimeError) as raised:  # a schema llguidance cannot even read
        error = str(raised)
    if error:
        raise ConstraintError(f"the JSON schema cannot be enforced: {error}")


def _grammar(constraint: Constraint) -> str:
    return llguidance.LLMatcher.grammar_from_lark(grammar_text(constraint))


def _depth(node: Any, level: int = 0) -> int:
    if level > MAX_SCHEMA_DEPTH:
        return level
    if isinstance(node, dict):
        return max([_depth(v, level + 1) for v in node.values()], default=level)
    if isinstance(node, list):
        return max([_depth(v, level + 1) for v in node], default=level)
    return level


class Grammars:
    """One tokenizer's vocabulary for llguidance: a matcher per constrained request, and masks.

    Building the vocabulary takes ~0.4 s (49k tokens), so it is made once, on first use.
    `eos_ids` are the tokens that end a response: allowed exactly when the grammar is complete.
    """

    def __init__(self, tokenizer, vocab_size: int, eos_ids: list[int]):
        self.vocab_size = vocab_size
        self._tokenizer, self._eos_ids = tokenizer, sorted(eos_ids)
        self._vocab: llguidance.LLTokenizer | None = None

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        if self._vocab is None:
            self._vocab = llguidance.hf.from_tokenizer(self._tokenizer, n_vocab=self.vocab_size,
                                                       eos_token=self._eos_ids)
        return self._vocab

    def matcher(self, constraint: Constraint) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the response; ConstraintError if the grammar is bad."""
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), _grammar(constraint),
                                       limits=llguidance.LLParserLimits(**_LIMITS))
        if matcher.is_error():
            raise ConstraintError(f"the JSON schema cannot be enforced: {matcher.get_error()}")
        return matcher

    def allowed(self, matchers: list[llguidance.LLMatcher]) -> torch.Tensor:
        """(len(matchers), V) bool: the tokens each matcher allows next."""
        bitmask = llg_torch.allocate_token_bitmask(len(matchers), self.vocab_size)
        for i, matcher in enumerate(matchers):
            llg_torch.fill_next_token_bitmask(matcher, bitmask, i)
        allowed = unpack(bitmask, self.vocab_size)
        empty = ~allowed.any(-1)  # a matcher in error allows nothing: let it end rather than sample from -inf
        allowed[empty, self._eos_ids[0]] = True
        return allowed

    def mask_logits(self, logits: torch.Tensor, matchers: list[llguidance.LLMatcher | None]) -> torch.Tensor:
        """`logits` (B, V) with every token a row's grammar forbids at -inf; unconstrained rows as they are."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return logits
        allowed = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
        allowed[rows] = self.allowed([matchers[i] for i in rows]).to(logits.device)
        return logits.masked_fill(~allowed, float("-inf"))

    @staticmethod
    def advance(matchers: list[llguidance.LLMatcher | None], tokens: list[int]) -> None:
        for matcher, token in zip(matchers, tokens):
            if matcher is not None and not matcher.is_stopped():
                matcher.consume_token(token)

    def replay_masks(self, constraint: Constraint, response_ids: list[int]) -> torch.Tensor:
        """(T, V) bool: the tokens the grammar allowed at each position of a response sampled under it."""
        matcher = self.matcher(constraint)
        bitmask = llg_torch.allocate_token_bitmask(len(response_ids), self.vocab_size)
        for t, token in enumerate(response_ids):
            llg_torch.fill_next_token_bitmask(matcher, bitmask, t)
            if not matcher.is_stopped():
                matcher.consume_token(token)
        allowed = unpack(bitmask, self.vocab_size)
        allowed[~allowed.any(-1), self._eos_ids[0]] = True
        return allowed

    def batch_masks(self, samples: list[Sample], tokens: int) -> torch.Tensor:
        """(B, T, V) bool for a collated batch: each constrained sample's replayed masks, all True elsewhere."""
        allowed = torch.ones(len(samples), tokens, self.vocab_size, dtype=torch.bool)
        for b, sample in enumerate(samples):
            constraint = Constraint.from_dict(sample.constraint)
            if constraint is not None:
                t = len(sample.response_token_ids)
                allowed[b, :t] = self.replay_masks(constraint, sample.response_token_ids)
        return allowed


def unpack(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """llguidance's int32 bitmask (B, ceil(V / 32)) as bool (B, V)."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask[:, :, None] >> shifts) & 1  # (B, W, 32), bit j of word w is token 32 w + j
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def model_eos_ids(generation_config, tokenizer) -> list[int]:
    """The tokens that end a response, as the local engine reads them (the model's generation
    config and the tokenizer): the trainer's replayed masks allow exactly the engine's."""
    ids: set[int] = set()
    for source in (generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return sorted(ids)
