"""The Anthropic Messages API, through Anthropic's own SDK and without openclaw headers.

A scripted engine where the test needs the model to say something exact (a tool call, a
stop sequence), the tiny random model for one real run.
"""

from __future__ import annotations

import anthropic
import httpx
import pytest
from anthropic import Anthropic

from openclaw_rl.engine.base import EngineError, Started
from openclaw_rl.serve.anthropic_messages import MessagesRequest, chat_messages
from openclaw_rl.types import TokenStep

TOOL_REPLY = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOLS = [{"name": "get_weather", "description": "Weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def client(server) -> Anthropic:
    return Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


def sessions(server) -> list[dict]:
    return httpx.get(f"{server.base_url}/v1/sessions").json()["data"]


def turns_of(server, session_id: str) -> list[dict]:
    r = httpx.get(f"{server.base_url}/v1/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return r.json()["turns"]


def test_a_plain_message_is_answered_and_recorded_as_a_chat_turn(scripted_server):
    server = scripted_server(["Hello there."])
    raw = client(server).messages.with_raw_response.create(
        model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert [(b.type, b.text) for b in message.content] == [("text", "Hello there.")]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    (turn,) = turns_of(server, raw.headers["x-session-id"])
    assert turn["prompt_messages"] == [{"role": "user", "content": "hi"}]
    assert turn["response_text"] == "Hello there."
    assert message.usage.output_tokens == turn["response_token_count"] > 0
    assert message.usage.input_tokens == len(server.engine.prompts[0])


def test_the_system_prompt_leads_the_prompt(scripted_server, tiny_model_dir):
    server = scripted_server(["Ahoy."])
    raw = client(server).messages.with_raw_response.create(
        model="m", max_tokens=16, system=[{"type": "text", "text": "Talk like a pirate."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    (turn,) = turns_of(server, raw.headers["x-session-id"])
    assert turn["prompt_messages"] == [{"role": "system", "content": "Talk like a pirate."},
                                       {"role": "user", "content": "hi"}]
    assert "Talk like a pirate." in server.server.tokenizer.decode(server.engine.prompts[0])


def test_a_stream_delivers_the_stored_text_and_a_final_message(scripted_server):
    server = scripted_server(["Hello world, again"])
    with client(server).messages.stream(model="m", max_tokens=32, stop_sequences=["orld"],
                                        messages=[{"role": "user", "content": "hi"}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    (turn,) = turns_of(server, sessions(server)[0]["id"])
    assert streamed == turn["response_text"] == final.content[0].text
    assert "orld" not in streamed
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "orld"
    assert final.usage.output_tokens == turn["response_token_count"]


def test_a_multi_turn_conversation_is_one_session_whose_turns_pair_with_the_next_user_message(scripted_server):
    server = scripted_server(["Paris.", "About 2 million.", "You're welcome."])
    c = client(server)
    messages: list = []
    for question in ["Capital of France?", "How many people live there?", "Thanks!"]:
        messages.append({"role": "user", "content": question})
        reply = c.messages.create(model="m", max_tokens=16, messages=messages)
        messages.append(reply.to_param())
    (session,) = sessions(server)
    turns = turns_of(server, session["id"])
    assert [t["response_text"] for t in turns] == ["Paris.", "About 2 million.", "You're welcome."]
    assert [t["next_state"] for t in turns] == [{"role": "user", "content": "How many people live there?"},
                                                {"role": "user", "content": "Thanks!"}, None]


def test_a_tool_use_reply_then_its_tool_result_pairs_in_the_same_session(scripted_server):
    server = scripted_server([TOOL_REPLY, "It is 18C and sunny in Paris."])
    c = client(server)
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]
    first = c.messages.with_raw_response.create(model="m", max_tokens=64, messages=messages, tools=TOOLS)
    reply = first.parse()
    assert reply.stop_reason == "tool_use"
    (call,) = reply.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    assert call.id.startswith("toolu_")
    messages += [reply.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "18C and sunny"}]}]
    second = c.messages.with_raw_response.create(model="m", max_tokens=64, messages=messages, tools=TOOLS)
    assert second.http_response.status_code == 200
    assert second.parse().content[0].text == "It is 18C and sunny in Paris."
    assert second.headers["x-session-id"] == first.headers["x-session-id"]
    turns = turns_of(server, first.headers["x-session-id"])
    assert len(turns) == 2
    assert turns[0]["next_state"] == {"role": "tool", "content": "18C and sunny"}
    assert turns[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert turns[1]["prompt_messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"}


def test_a_streamed_tool_use_arrives_whole_and_its_result_pairs(scripted_server):
    server = scripted_server(["Let me check. " + TOOL_REPLY, "Sunny."])
    c = client(server)
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]
    with c.messages.stream(model="m", max_tokens=64, messages=messages, tools=TOOLS) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "<tool_call>" not in streamed and streamed.strip() == "Let me check."
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}
    messages += [final.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": final.content[1].id, "content": "sunny", "is_error": False}]}]
    c.messages.create(model="m", max_tokens=16, messages=messages, tools=TOOLS)
    (session,) = sessions(server)
    turns = turns_of(server, session["id"])
    assert turns[0]["next_state"] == {"role": "tool", "content": "sunny"}


def test_a_failure_after_the_stream_started_is_an_error_event_and_nothing_is_recorded(scripted_server):
    server = scripted_server(["unused"])
    hello = server.server.tokenizer.encode("Hello", add_special_tokens=False)

    async def failing(prompt_ids, params):
        yield Started(0, len(prompt_ids))
        for token_id in hello:
            yield TokenStep(token_id, -0.5)
        raise EngineError("the engine lost its device")

    server.engine.stream = failing
    with pytest.raises(anthropic.APIStatusError, match="the engine lost its device") as raised:
        with client(server).messages.stream(model="m", max_tokens=8,
                                            messages=[{"role": "user", "content": "hi"}]) as stream:
            "".join(stream.text_stream)
    assert raised.value.type == "api_error"
    (session,) = sessions(server)
    assert turns_of(server, session["id"]) == []


def test_metadata_user_id_scopes_session_inference(scripted_server):
    server = scripted_server(["Hi."])
    c = client(server)
    history = [{"role": "user", "content": "hello"}]
    reply = c.messages.create(model="m", max_tokens=8, messages=history, metadata={"user_id": "alice"})
    follow_up = [*history, reply.to_param(), {"role": "user", "content": "again"}]
    c.messages.create(model="m", max_tokens=8, messages=follow_up, metadata={"user_id": "bob"})
    assert len(sessions(server)) == 2  # bob's identical history does not continue alice's turn
    c.messages.create(model="m", max_tokens=8, messages=follow_up, metadata={"user_id": "alice"})
    assert len(sessions(server)) == 2


def test_the_session_header_still_names_the_session(scripted_server):
    server = scripted_server(["Hi."])
    raw = client(server).messages.with_raw_response.create(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "hello"}],
        extra_headers={"X-Session-Id": "my-session"})
    assert raw.headers["x-session-id"] == "my-session"
    assert len(turns_of(server, "my-session")) == 1


def test_count_tokens_is_the_prompt_a_message_would_use(scripted_server):
    server = scripted_server(["Hi."])
    c = client(server)
    request = dict(model="m", system="Be brief.", messages=[{"role": "user", "content": "hello"}], tools=TOOLS)
    counted = c.messages.count_tokens(**request)
    message = c.messages.create(max_tokens=8, **request)
    assert counted.input_tokens == message.usage.input_tokens > 0


def _bad_requests() -> list:
    base = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    return [
        pytest.param({k: v for k, v in base.items() if k != "max_tokens"}, "max_tokens", "max_tokens", id="no-max"),
        pytest.param({**base, "messages": [{"role": "user", "content": [image]}]}, "messages.0.content", "'image'",
                     id="image"),
        pytest.param({**base, "messages": [{"role": "user", "content": []}]}, "messages.0.content",
                     "at least one", id="empty-user"),
        pytest.param({**base, "messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "input": {}}]}, {"role": "user", "content": "hi"}]},
                     "messages.0.content.0.tool_use.name", "name", id="tool-use-without-name"),
        pytest.param({**base, "temperature": 1.5}, "temperature", "temperature", id="temperature"),
        pytest.param({**base, "top_k": 5}, "top_k", "top_k", id="top_k"),
        pytest.param({**base, "messages": [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": "The answer is ("}]},
                     "messages", "prefill", id="prefill"),
        pytest.param({**base, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0",
                     "web_search_20250305", id="server-tool"),
        pytest.param({**base, "messages": [{"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "x"}]}, {"role": "user", "content": "hi"}]},
                     "messages.0.content", "'thinking'", id="thinking"),
    ]


@pytest.mark.parametrize("body, param, named", _bad_requests())
def test_a_bad_request_is_a_400_the_sdk_raises_as_bad_request_error(scripted_server, body, param, named):
    server = scripted_server(["unused"])
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(server).post("/v1/messages", body=body, cast_to=anthropic.types.Message)
    error = raised.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    assert named in error.api_message
    assert error.body["type"] == "error"
    assert error.body["error"]["param"] == param and "code" in error.body["error"]  # the OpenAI fields too
    assert server.engine.prompts == []


def test_a_bad_temperature_through_the_sdk_call_is_a_bad_request_error(scripted_server):
    server = scripted_server(["unused"])
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client(server).messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"temperature": 2.0})


def test_translation_folds_assistant_blocks_into_one_message_and_puts_tool_results_first():
    body = MessagesRequest.model_validate({"max_tokens": 8, "system": "sys", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {"x": 1}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                                      "content": [{"type": "text", "text": "boom"}]},
                                     {"type": "text", "text": "and?"}]},
    ]})
    assert chat_messages(body) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "one"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
        {"role": "user", "content": "and?"},
    ]


def test_the_tiny_model_answers_plainly_and_streaming(live):
    c = client(live)
    messages = [{"role": "user", "content": "Say something."}]
    message = c.messages.create(model="m", max_tokens=6, messages=messages)
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens <= 6
    with c.messages.stream(model="m", max_tokens=6, messages=messages) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    stored = [t for s in sessions(live) for t in turns_of(live, s["id"])]
    assert streamed in [t["response_text"] for t in stored]
    assert final.usage.output_tokens <= 6 and final.stop_reason in ("end_turn", "max_tokens")


def test_the_openapi_document_publishes_the_messages_body(live):
    spec = httpx.get(f"{live.base_url}/openapi.json").json()
    body = spec["paths"]["/v1/messages"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/MessagesRequest")
