"""Pure pieces of serving: stop strings, tool calls, session inference, next states, config."""

from __future__ import annotations

import json

import pytest

from openclaw_rl.config import ConfigError, ServeConfig, build, load_file
from openclaw_rl.chat import parse_tool_calls, render_prompt
from openclaw_rl.serve.sessions import continuation_hash, history_hash, next_state_of, response_message
from openclaw_rl.serve.textstream import TextAssembler
from openclaw_rl.store import StoreError, make_store
from openclaw_rl.types import NextState, TurnRecord


class CharTokenizer:
    """One character per token id (ord), so expected texts are obvious."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != 0)


def ids(text):
    return [ord(c) for c in text]


def test_stop_string_cuts_text_and_ids_together():
    asm = TextAssembler(CharTokenizer(), stop=("END",))
    shown = "".join(asm.push(i) for i in ids("hello ENDmore"))
    text, kept = asm.finish()
    assert text == "hello " and kept == 6 and shown == "hello "
    assert asm.stopped


def test_partial_stop_is_held_back_then_released():
    asm = TextAssembler(CharTokenizer(), stop=("END",))
    assert [asm.push(i) for i in ids("aE")] == ["a", ""]  # "E" might start "END"
    assert asm.push(ord("x")) == "Ex"


def test_tool_call_text_is_not_streamed():
    asm = TextAssembler(CharTokenizer(), hold_from="<tool_call>")
    shown = "".join(asm.push(i) for i in ids('ok <tool_call>{"name": "f"}</tool_call>'))
    assert shown == "ok "


def test_parse_tool_calls():
    content, calls = parse_tool_calls('Let me check.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    assert content == "Let me check."
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    # A bare JSON call (no tags) is also a call; broken JSON stays content.
    assert parse_tool_calls('{"name": "f", "parameters": {"x": 1}}')[1][0]["function"]["name"] == "f"
    assert parse_tool_calls("<tool_call>{broken</tool_call>") == ("<tool_call>{broken</tool_call>", [])


def test_tools_are_rendered_for_a_template_without_tool_support(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tools = [{"type": "function", "function": {"name": "lookup_price", "parameters": {}}}]
    text = tok.decode(render_prompt(tok, [{"role": "user", "content": "hi"}], tools, "auto"))
    assert "lookup_price" in text and "<tool_call>" in text
    assert "lookup_price" not in tok.decode(render_prompt(tok, [{"role": "user", "content": "hi"}], tools, "none"))


def test_next_state_is_what_follows_the_previous_prompt_and_response(store, store_url, tmp_path):
    store.ensure_session("s", "header")
    prompt = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}]
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=prompt, prompt_token_ids=[1],
        response_token_ids=[2, 3], behaviour_logprobs=[-0.1, -0.2], response_text="ans", tool_calls=[], sampling={},
        finish_reason="stop", continuation_hash=continuation_hash(prompt, response_message("ans", []))))
    follow = prompt + [{"role": "assistant", "content": "ans"}, {"role": "tool", "content": "out1"},
                       {"role": "tool", "content": "out2"}]
    state = next_state_of(turn, follow)
    assert (state.role, state.content) == ("tool", "out1\n\nout2")
    assert next_state_of(turn, prompt + [{"role": "assistant", "content": "ans"}]) is None
    # Continuation lookup finds the session from the history alone.
    found = store.sessions_continued_by([history_hash(prompt + [{"role": "assistant", "content": "ans"}])])
    assert [sid for sid, _ in found] == ["s"]
    store.set_next_state(turn.id, state)
    with pytest.raises(StoreError):
        store.set_next_state(turn.id, NextState("user", "twice"))
    store.close()
    reopened = make_store(store_url, data_dir=tmp_path)
    assert reopened.turns("s")[0].next_state.content == "out1\n\nout2"
    reopened.close()


def test_record_turn_rejects_mismatched_logprobs(store):
    store.ensure_session("s", "new")
    with pytest.raises(ValueError, match="log-probs"):
        store.record_turn(TurnRecord(
            session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[],
            response_token_ids=[1, 2], behaviour_logprobs=[0.0], response_text="", tool_calls=[], sampling={},
            finish_reason="stop"))
    assert store.counts()["turns"] == 0


def test_config_file_then_flags_and_helpful_errors(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('port = 9001\nmax_batch_size = 4\n')
    config = build(ServeConfig, load_file(path))
    assert (config.port, config.max_batch_size, config.host) == (9001, 4, "127.0.0.1")
    with pytest.raises(ConfigError, match="port = 70000 is invalid"):
        build(ServeConfig, {"port": 70000})
    with pytest.raises(ConfigError, match="unknown setting 'prot'"):
        build(ServeConfig, {"prot": 1})
    with pytest.raises(ConfigError, match="expected a int"):
        build(ServeConfig, {"port": "eighty"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_file(tmp_path / "missing.yaml")
