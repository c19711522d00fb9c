"""Constrained decoding (engine/grammar.py): masks, the engine's decode loop and scoring, and
the trainer measuring a constrained turn under the same mask (first PPO ratio 1).

The tiny model has random weights, so unconstrained it never writes JSON: every valid
document here is the grammar's doing. Schemas bound their strings and numbers so that a
valid document ends well inside max_new_tokens whatever the model prefers.
"""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
import torch

from openclaw_rl.chat import render_prompt
from openclaw_rl.engine.base import EngineError, Finished
from openclaw_rl.engine.grammar import (
    MAX_SCHEMA_CHARS, ConstraintError, Grammars, check, closed_objects, grammar_text, model_eos_ids, unpack,
)
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.types import Constraint, SamplingParams, TokenStep, TurnRecord, Verdict

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0,
                                                                            "maximum": 120}}}


# -- the grammar, without a model --------------------------------------------------------


def test_grammar_text_is_prefix_then_json_under_the_schema_then_suffix():
    text = grammar_text(Constraint({"type": "integer"}, prefix="<tool_call>", suffix="</tool_call>"))
    assert text.startswith('start: "<tool_call>" value "</tool_call>"\nvalue: %json {"type": "integer"')
    assert grammar_text(Constraint({"type": "integer"})).startswith("start: value\n")


@pytest.mark.parametrize("schema, named", [
    ({"not": {"type": "string"}}, "not"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"if": {"type": "string"}, "then": {"minLength": 1}}, "if"),
    ({"type": "strin"}, "strin"),
])
def test_a_schema_feature_that_cannot_be_enforced_is_refused_by_name(schema, named):
    with pytest.raises(ConstraintError, match=named):
        check(Constraint(schema))


def test_a_schema_too_large_or_too_deep_is_refused_before_compiling():
    wide = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(MAX_SCHEMA_CHARS // 20)}}
    with pytest.raises(ConstraintError, match="characters; at most"):
        check(Constraint(wide))
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ConstraintError, match="levels deep"):
        check(Constraint(deep))


def test_unpack_reads_bit_j_of_word_w_as_token_32w_plus_j():
    bitmask = torch.tensor([[-(1 << 31) + 0b101, 1 << 3], [0, 1]], dtype=torch.int32)  # bit 31 is the sign bit
    allowed = unpack(bitmask, 40)
    assert allowed.shape == (2, 40)
    assert allowed[0].nonzero()[:, 0].tolist() == [0, 2, 31, 35]
    assert allowed[1].nonzero()[:, 0].tolist() == [32]


# -- the engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = LocalEngine(tiny_model_dir, threads=1)
    yield engine
    asyncio.run(engine.aclose())


def _prompt(engine) -> list[int]:
    return render_prompt(engine.tokenizer, [{"role": "user", "content": "A person as JSON."}], None, None)


async def _generate(engine, params: SamplingParams) -> tuple[list[TokenStep], str]:
    steps, reason = [], ""
    async for event in engine.stream(_prompt(engine), params):
        if isinstance(event, TokenStep):
            steps.append(event)
        elif isinstance(event, Finished):
            reason = event.reason
    return steps, reason


def _text(engine, steps: list[TokenStep]) -> str:
    return engine.tokenizer.decode([s.token_id for s in steps], skip_special_tokens=True)


@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (1.0, 1.0), (1.0, 0.9)])
def test_constrained_responses_are_schema_valid_and_end_with_the_grammar(engine, temperature, top_p):
    for seed in range(3):
        params = SamplingParams(max_new_tokens=64, temperature=temperature, top_p=top_p, seed=seed,
                                constraint=Constraint(PERSON))
        steps, reason = asyncio.run(_generate(engine, params))
        assert reason == "stop" and steps[-1].token_id in engine.eos_token_ids
        jsonschema.validate(json.loads(_text(engine, steps)), PERSON)


def test_unconstrained_the_tiny_model_writes_no_json(engine):
    steps, _ = asyncio.run(_generate(engine, SamplingParams(max_new_tokens=32, temperature=1.0, seed=0)))
    with pytest.raises(json.JSONDecodeError):
        json.loads(_text(engine, steps))


def test_behaviour_logprobs_are_of_the_masked_distribution_and_scoring_replays_the_mask(engine):
    constraint = Constraint(PERSON)
    params = SamplingParams(max_new_tokens=64, temperature=1.0, top_p=0.9, seed=4, constraint=constraint)
    steps, _ = asyncio.run(_generate(engine, params))
    ids = [s.token_id for s in steps]
    masked = asyncio.run(engine.score(_prompt(engine), ids, temperature=1.0, top_p=0.9, constraint=constraint))
    plain = asyncio.run(engine.score(_prompt(engine), ids, temperature=1.0, top_p=0.9))
    assert masked.logprobs == pytest.approx([s.logprob for s in steps], abs=1e-5)
    # the mask matters: the plain model spreads its mass over the whole vocabulary
    assert sum(plain.logprobs) < sum(masked.logprobs) - 10


def test_too_few_tokens_ends_with_length_and_output_valid_so_far(engine):
    long_name = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 40}}}
    constraint = Constraint(long_name)
    steps, reason = asyncio.run(_generate(engine, SamplingParams(max_new_tokens=6, temperature=1.0, seed=1,
                                                                 constraint=constraint)))
    assert reason == "length" and len(steps) == 6
    assert _text(engine, steps).startswith('{"name": "')
    grammars = Grammars(engine.tokenizer, engine.model.config.vocab_size, sorted(engine.eos_token_ids))
    allowed = grammars.replay_masks(constraint, [s.token_id for s in steps])
    assert all(allowed[t, s.token_id] for t, s in enumerate(steps))  # every token was one the grammar allowed


def test_a_bad_constraint_in_a_batch_fails_only_its_own_request(engine):
    """A constraint that reached the engine unchecked (the API layer refuses it first) fails at admission."""
    bad = SamplingParams(max_new_tokens=8, constraint=Constraint({"not": {}}), seed=0)
    good = SamplingParams(max_new_tokens=64, temperature=1.0, seed=0, constraint=Constraint(PERSON))

    async def both():
        return await asyncio.gather(_generate(engine, bad), _generate(engine, good), return_exceptions=True)

    failed, (steps, reason) = asyncio.run(both())
    assert isinstance(failed, EngineError) and "not" in str(failed)
    assert reason == "stop"
    jsonschema.validate(json.loads(_text(engine, steps)), PERSON)


def test_the_trainer_rebuilds_the_eos_tokens_the_engine_ends_on(engine):
    assert model_eos_ids(engine.model.generation_config, engine.tokenizer) == sorted(engine.eos_token_ids)


# -- training on a constrained turn -------------------------------------------------------


def test_a_constrained_turn_has_ratio_one_at_the_first_step(engine, tiny_model_dir, tmp_path):
    """Sampled under a JSON schema at T = 1, top-p 0.9: the trainer replays the grammar's mask, so
    its log-probs are the behaviour log-probs and the first PPO ratio is 1."""
    from openclaw_rl.config import TrainConfig
    from openclaw_rl.judge.samples import turn_sample
    from openclaw_rl.judge.teacher import grammar_mask
    from openclaw_rl.store import Store
    from openclaw_rl.train.batch import collate
    from openclaw_rl.train.methods import METHODS
    from openclaw_rl.train.trainer import Trainer

    params = SamplingParams(max_new_tokens=64, temperature=1.0, top_p=0.9, seed=7, constraint=Constraint(PERSON))
    steps, _ = asyncio.run(_generate(engine, params))
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=[{"role": "user", "content": "A person."}],
        prompt_token_ids=_prompt(engine), response_token_ids=[s.token_id for s in steps],
        behaviour_logprobs=[s.logprob for s in steps], response_text=_text(engine, steps), tool_calls=[],
        sampling=params.to_dict(), finish_reason="stop"))
    verdict = Verdict(turn_id=turn.id, status="ok", reward=1, votes=[1], raw=[], hints=[], selected_hint=None,
                      overlap_scores=[], judge="test", latency_s=0.0)
    sample = METHODS["combined"].assemble(turn_sample(turn, verdict, None))
    assert sample.constraint == Constraint(PERSON).to_dict()
    assert grammar_mask(turn) == {"constraint": Constraint(PERSON)}  # what the teacher scores under

    trainer = Trainer(tiny_model_dir, TrainConfig(method="combined", lr=1e-3, kl_beta=0.02), device="cpu")
    with torch.no_grad():
        logprobs, _ = trainer.logprobs(trainer._collate([sample]))
        unmasked, _ = trainer.logprobs(collate([sample]))
    assert logprobs[0].tolist() == pytest.approx(sample.behaviour_logprobs, abs=1e-4)
    assert float((unmasked[0] - logprobs[0]).sum()) < -10  # without the mask the ratio would be far from 1
    stats = trainer.step([sample])  # the backward pass runs through the mask
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["ref_kl"] == pytest.approx(0.0, abs=1e-6)


def test_objects_are_closed_unless_the_schema_says_otherwise():
    schema = {"type": "object", "properties": {"properties": {"type": "object"}, "type": {"const": {"a": 1}}},
              "$defs": {"open": {"type": "object", "additionalProperties": True}}}
    assert closed_objects(schema) == {
        "type": "object", "additionalProperties": False,
        "properties": {"properties": {"type": "object", "additionalProperties": False}, "type": {"const": {"a": 1}}},
        "$defs": {"open": {"type": "object", "additionalProperties": True}}}


# -- passed through to vLLM and SGLang (the request built; their servers are tested under -m vllm) --


def test_remote_engines_get_the_constraint_in_their_own_structured_output_options():
    from openclaw_rl.engine.sglang import structured_fields
    from openclaw_rl.engine.vllm import structured_outputs

    person = Constraint(PERSON)
    assert structured_outputs(person) == {"json": PERSON}  # already closed: unchanged
    assert json.loads(structured_fields(person)["json_schema"]) == PERSON
    assert structured_outputs(Constraint({"type": "object"})) == {"json": {"type": "object",
                                                                           "additionalProperties": False}}
    call = Constraint(CITY := {"type": "object", "properties": {"city": {"type": "string"}}},
                      prefix="<tool_call>", suffix="</tool_call>")
    assert structured_outputs(call) == {"grammar": grammar_text(call)} and structured_fields(call) == {
        "ebnf": grammar_text(call)}
    check(call)  # the grammar sent is one llguidance compiles
    assert CITY["properties"]["city"] == {"type": "string"}


def test_a_remote_engine_refuses_to_score_under_a_mask_it_cannot_apply():
    from openclaw_rl.engine.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # no server: the refusal comes before any request
    with pytest.raises(EngineError, match="cannot score under a grammar's mask"):
        asyncio.run(engine.score([1], [2], constraint=Constraint(PERSON)))


def test_json_object_accepts_any_object_while_a_schema_object_is_closed(engine):
    from openclaw_rl.serve.structured import ANY_OBJECT

    grammars = Grammars(engine.tokenizer, engine.model.config.vocab_size, sorted(engine.eos_token_ids))
    ids = engine.tokenizer.encode('{"a": [1, {"b": null}], "c": "d"}') + [min(engine.eos_token_ids)]

    def allowed(schema: dict) -> bool:
        masks = grammars.replay_masks(Constraint(schema), ids)
        return all(bool(masks[t, token]) for t, token in enumerate(ids))

    assert allowed(ANY_OBJECT)
    assert not allowed({"type": "object", "properties": {"a": {"type": "array"}}})  # "c" is not a property
