"""The OpenAI Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`) through the
official `openai` client and the openai-agents SDK, header-less: every turn is stored once,
and every continuation (a `previous_response_id` chain, a resent history, a tool's output)
is paired as the next state of exactly the turn it continues."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import ModelBehaviorError
from openai import AsyncOpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from openclaw_rl.serve.openai_responses import FunctionCallItem, MessageItem, items_to_messages
from conftest import TOOL_REPLY, openai_client, turns_of

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]

set_tracing_disabled(True)
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def only_session(server) -> str:
    sessions = httpx.get(f"{server.base_url}/v1/sessions").json()["data"]
    assert len(sessions) == 1, sessions
    return sessions[0]["id"]


def post(server, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/responses", json=body, headers=headers, timeout=120)


# -- the translation, as a pure function ------------------------------------------------


def test_one_response_output_becomes_one_assistant_message_and_a_new_message_starts_another():
    items = [MessageItem(role="user", content="hi"),
             MessageItem(role="assistant", content=[{"type": "output_text", "text": "Let me look."}]),
             FunctionCallItem(type="function_call", call_id="c1", name="f", arguments="{}"),
             FunctionCallItem(type="function_call", call_id="c2", name="g", arguments='{"a": 1}'),
             MessageItem(role="assistant", content="Done.")]
    assert items_to_messages(items) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"a": 1}'}}]},
        {"role": "assistant", "content": "Done."},
    ]


# -- the openai client ------------------------------------------------------------------


def test_string_input_answers_a_response_the_client_validates_and_stores_the_turn(live):
    raw = openai_client(live).responses.with_raw_response.create(model="m", input="Name a colour.", max_output_tokens=5)
    response = Response.model_validate(json.loads(raw.http_response.text))  # strict: every required field
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.output[0].type == "message"
    assert response.usage.output_tokens <= 5 and response.usage.total_tokens == (
        response.usage.input_tokens + response.usage.output_tokens)
    (turn,) = turns_of(live, raw.headers["x-session-id"])
    assert turn["prompt_messages"] == [{"role": "user", "content": "Name a colour."}]
    assert turn["response_text"] == response.output_text
    assert raw.headers["x-policy-version"] == str(turn["policy_version"])


def test_item_input_and_instructions_become_the_chat_prompt(scripted_server):
    server = scripted_server(["Blue."])
    response = openai_client(server).responses.create(model="m", instructions="Be brief.", input=[
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Sky "},
                                                        {"type": "input_text", "text": "colour?"}]},
    ])
    assert response.output_text == "Blue." and response.instructions == "Be brief."
    (turn,) = turns_of(server, only_session(server))
    assert turn["prompt_messages"] == [{"role": "system", "content": "Be brief."},
                                       {"role": "developer", "content": "Answer in one word."},
                                       {"role": "user", "content": "Sky colour?"}]
    (stored,) = server.server.store.turns(only_session(server))
    assert stored.sampling["api"] == "responses" and stored.response_text == "Blue."
    assert stored.response_token_ids == server.server.tokenizer.encode("Blue.", add_special_tokens=False)


def test_a_stream_sends_the_events_in_order_and_its_deltas_join_to_the_stored_text(scripted_server):
    server = scripted_server(["Hello there, my friend."])
    events = list(openai_client(server).responses.create(model="m", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    (turn,) = turns_of(server, only_session(server))
    assert streamed == turn["response_text"] == final.output_text == "Hello there, my friend."
    assert httpx.get(f"{server.base_url}/v1/responses/{final.id}").json()["output"][0]["content"][0]["text"] == streamed


def test_a_streamed_tool_call_arrives_as_a_function_call_item_and_the_stream_helper_accepts_it(scripted_server):
    server = scripted_server([TOOL_REPLY])
    with openai_client(server).responses.stream(model="m", input="Weather in Paris?", tools=TOOLS) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.output_text.delta" not in kinds and "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"
    (call,) = final.output
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments) == {
        "city": "Paris"}


def test_every_streamed_event_is_valid_for_the_clients_types_with_text_before_a_tool_call(scripted_server):
    server = scripted_server(["Let me check.\n" + TOOL_REPLY])
    events = []
    with httpx.stream("POST", f"{server.base_url}/v1/responses", timeout=60,
                      json={"input": "Weather in Paris?", "tools": TOOLS, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                payload = json.loads(line.removeprefix("data: "))
                assert payload["type"] == kind
                events.append(STREAM_EVENT.validate_python(payload))  # strict, unlike the client's parsing
    names = [type(e).__name__ for e in events]
    assert [n for k, n in enumerate(names) if n != "ResponseTextDeltaEvent" or names[k - 1] != n] == [
        "ResponseCreatedEvent", "ResponseInProgressEvent", "ResponseOutputItemAddedEvent",
        "ResponseContentPartAddedEvent", "ResponseTextDeltaEvent", "ResponseTextDoneEvent",
        "ResponseContentPartDoneEvent", "ResponseOutputItemDoneEvent", "ResponseOutputItemAddedEvent",
        "ResponseFunctionCallArgumentsDeltaEvent", "ResponseFunctionCallArgumentsDoneEvent",
        "ResponseOutputItemDoneEvent", "ResponseCompletedEvent"]
    final = events[-1].response
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output[0].content[0].text == "Let me check." and final.output[1].name == "get_weather"
    Response.model_validate(final.model_dump())
    (turn,) = turns_of(server, only_session(server))
    assert turn["tool_calls"][0]["id"] == final.output[1].call_id


def test_max_output_tokens_makes_an_incomplete_response_streamed_or_not(scripted_server):
    server = scripted_server(["one two three four five six seven eight"])
    c = openai_client(server)
    response = c.responses.create(model="m", input="count", max_output_tokens=2)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"
    events = list(c.responses.create(model="m", input="count again", max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.usage.output_tokens == 2


def test_a_previous_response_id_chain_pairs_each_input_with_the_turn_before_it(scripted_server):
    server = scripted_server(["Red.", "Green.", "Blue."])
    c = openai_client(server)
    inputs = ["Name a colour.", "Another one?", "And one more?"]
    previous = None
    for text in inputs:
        previous = c.responses.create(model="m", input=text, previous_response_id=previous and previous.id,
                                      instructions="Be brief.")
    turns = turns_of(server, only_session(server))
    assert [t["next_state"] and t["next_state"]["content"] for t in turns] == ["Another one?", "And one more?", None]
    assert turns[2]["prompt_messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "Green."}, {"role": "user", "content": "And one more?"}]
    assert previous.previous_response_id is not None


def test_a_function_call_output_after_previous_response_id_is_the_tool_turns_next_state(scripted_server):
    server = scripted_server([TOOL_REPLY, "It is 18C and sunny in Paris."])
    c = openai_client(server)
    first = c.responses.create(model="m", input="Weather in Paris?", tools=TOOLS)
    (call,) = first.output
    second = c.responses.with_raw_response.create(
        model="m", previous_response_id=first.id, tools=TOOLS,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"}])
    assert second.http_response.status_code == 200 and second.parse().output_text == "It is 18C and sunny in Paris."
    turns = turns_of(server, second.headers["x-session-id"])
    assert len(turns) == 2 and turns[0]["next_state"] == {"role": "tool", "content": "18C and sunny"}
    assert turns[0]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_function_call_output_in_a_resent_history_is_the_tool_turns_next_state(scripted_server):
    server = scripted_server([TOOL_REPLY, "It is 18C and sunny in Paris."])
    c = openai_client(server)
    history = [{"role": "user", "content": "Weather in Paris?"}]
    first = c.responses.create(model="m", input=history, tools=TOOLS)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": first.output[0].call_id, "output": "18C and sunny"})
    second = c.responses.with_raw_response.create(model="m", input=history, tools=TOOLS)
    assert second.http_response.status_code == 200
    turns = turns_of(server, only_session(server))
    assert len(turns) == 2 and turns[0]["next_state"] == {"role": "tool", "content": "18C and sunny"}


def test_a_stored_response_is_fetched_by_id_and_an_unstored_one_is_not(scripted_server):
    server = scripted_server(["kept", "not kept"])
    c = openai_client(server)
    kept = c.responses.create(model="m", input="one")
    assert c.responses.retrieve(kept.id).model_dump() == kept.model_dump()
    unkept = c.responses.create(model="m", input="two", store=False)
    with pytest.raises(openai.NotFoundError) as error:
        c.responses.retrieve(unkept.id)
    assert error.value.body["param"] == "response_id"
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="m", input="three", previous_response_id=unkept.id)
    sessions = httpx.get(f"{server.base_url}/v1/sessions").json()["data"]
    assert sum(s["turns"] for s in sessions) == 2  # store=false still records the turn


def test_an_unknown_previous_response_id_is_a_404_naming_it(scripted_server):
    server = scripted_server(["never said"])
    with pytest.raises(openai.NotFoundError) as error:
        openai_client(server).responses.create(model="m", input="hi", previous_response_id="resp_unknown")
    assert error.value.body["param"] == "previous_response_id"
    assert error.value.body["type"] == "invalid_request_error" and "resp_unknown" in error.value.body["message"]
    assert server.engine.prompts == []


@pytest.mark.parametrize("body, param, words", [
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools", "web_search"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input", "input[0].content[0].type 'input_image'"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "item_reference"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input", "input[0].call_id"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"uniqueItems": True}}}},
     "text.format", "uniqueItems"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format", "yaml"),
    ({"input": "hi", "temperature": 3}, "temperature", "temperature"),
    ({"input": "hi", "tool_choice": {"type": "file_search"}}, "tool_choice", "file_search"),
    ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning", "reasoning"),
    ({"input": "hi", "max_output_tokens": 10**9}, "max_output_tokens", "max_output_tokens"),
    ({"instructions": "no input"}, "input", "input"),
])
def test_bad_fields_are_400s_naming_the_field(scripted_server, body, param, words):
    server = scripted_server(["never said"])
    r = post(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"] and error["type"] == "invalid_request_error"
    assert server.engine.prompts == []


def test_a_session_header_that_contradicts_previous_response_id_is_a_400(scripted_server):
    server = scripted_server(["first"])
    first = openai_client(server).responses.create(model="m", input="hi")
    r = post(server, {"input": "more", "previous_response_id": first.id}, **{"X-Session-Id": "another"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id", r.text


def test_the_openapi_document_publishes_the_responses_body(scripted_server):
    spec = httpx.get(f"{scripted_server(['x']).base_url}/openapi.json").json()
    body = spec["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/ResponsesRequest")
    assert {"input", "instructions", "previous_response_id", "tools", "store"} <= set(
        spec["components"]["schemas"]["ResponsesRequest"]["properties"])


# -- the openai-agents SDK ----------------------------------------------------------------


def weather_agent(server, model_class, calls: list[str]) -> Agent:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"18C and sunny in {city}"

    sdk_client = AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    return Agent(name="weather", instructions="Answer weather questions.", tools=[get_weather],
                 model=model_class(model="m", openai_client=sdk_client),
                 model_settings=ModelSettings(max_tokens=64))


@pytest.mark.parametrize("model_class", [OpenAIResponsesModel, OpenAIChatCompletionsModel])
def test_an_agent_runs_its_tool_and_every_turn_is_paired_across_two_runs(scripted_server, model_class):
    server = scripted_server([TOOL_REPLY, "It is sunny in Paris."])
    calls: list[str] = []
    agent = weather_agent(server, model_class, calls)

    async def two_runs():  # one event loop: the SDK's client keeps its connections
        first = await Runner.run(agent, "Weather in Paris?")
        assert first.final_output == "It is sunny in Paris." and calls == ["Paris"]
        if model_class is OpenAIResponsesModel:  # chained by id: only the new input is sent
            return await Runner.run(agent, "And tomorrow?", previous_response_id=first.last_response_id)
        return await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}])

    second = asyncio.run(two_runs())
    assert second.final_output == "It is sunny in Paris." and calls == ["Paris", "Paris"]
    turns = turns_of(server, only_session(server))
    assert len(turns) == len(server.engine.prompts) == 4  # each model call stored once, in one session
    assert [t["next_state"] for t in turns] == [
        {"role": "tool", "content": "18C and sunny in Paris"}, {"role": "user", "content": "And tomorrow?"},
        {"role": "tool", "content": "18C and sunny in Paris"}, None]
    assert {t["tool_calls"][0]["function"]["name"] for t in turns[::2]} == {"get_weather"}
    for before, after in zip(turns, turns[1:]):  # each prompt is the whole conversation so far, instructions once
        assert after["prompt_messages"][: len(before["prompt_messages"])] == before["prompt_messages"]
    assert [m["role"] for m in turns[-1]["prompt_messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool"]


def test_an_agent_on_responses_resending_its_history_pairs_every_turn(scripted_server):
    server = scripted_server([TOOL_REPLY, "It is sunny in Paris."])
    agent = weather_agent(server, OpenAIResponsesModel, [])

    async def two_runs() -> None:
        first = await Runner.run(agent, "Weather in Paris?")
        await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}])

    asyncio.run(two_runs())
    turns = turns_of(server, only_session(server))
    assert [t["next_state"] and t["next_state"]["role"] for t in turns] == ["tool", "user", "tool", None]


@pytest.mark.parametrize("model_class", [OpenAIResponsesModel, OpenAIChatCompletionsModel])
def test_an_agent_on_the_tiny_model_completes_and_its_turns_are_stored(live, model_class):
    before = {s["id"] for s in httpx.get(f"{live.base_url}/v1/sessions").json()["data"]}
    agent = weather_agent(live, model_class, [])
    agent.model_settings = ModelSettings(max_tokens=8)
    try:
        result = asyncio.run(Runner.run(agent, "Weather in Paris?", max_turns=3))
        calls = len(result.raw_responses)
    except ModelBehaviorError as error:
        # Random weights rarely stop within 8 tokens: the Responses API then reports the response
        # `incomplete` (as OpenAI does), which this SDK raises; the chat model just finishes at `length`.
        assert model_class is OpenAIResponsesModel and "max_output_tokens" in str(error)
        calls = 1
    new = [s for s in httpx.get(f"{live.base_url}/v1/sessions").json()["data"] if s["id"] not in before]
    assert len(new) == 1 and new[0]["turns"] == calls
    turns = turns_of(live, new[0]["id"])
    assert all(t["prompt_messages"][0] == {"role": "system", "content": "Answer weather questions."} for t in turns)
    assert all(t["response_token_count"] <= 8 for t in turns)


def test_tools_that_are_not_a_list_get_a_400_naming_them(live):
    r = httpx.post(f"{live.base_url}/v1/responses", json={"input": "hi", "tools": 1.5}, timeout=30)
    assert r.status_code == 400 and "tools must be a list" in r.text, r.text
