"""Structured outputs and forced tool calls through every API, with the stock clients and SDKs,
unchanged and header-less, against the tiny model (random weights: every valid document is
the grammar's doing). Schemas bound strings and numbers so a valid answer ends in time.
(docs/structured-outputs.md)"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import jsonschema
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner
from anthropic import Anthropic
from conftest import openai_client, turns_of
from openai import AsyncOpenAI
from pydantic import BaseModel, Field

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
CITY = {"type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"type": "string", "maxLength": 8}}}
UNITS = {"type": "object", "additionalProperties": False, "required": ["unit"],
         "properties": {"unit": {"enum": ["C", "F"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}},
         {"type": "function", "function": {"name": "set_units", "parameters": UNITS}}]
SCHEMAS = {"get_weather": CITY, "set_units": UNITS}
ASK = [{"role": "user", "content": "Tell me about someone."}]


class Person(BaseModel):
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=120)


def person_format(strict: bool) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": strict}}


# -- chat completions -----------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
def test_chat_json_schema_is_schema_valid_and_stored_with_its_constraint(live, strict):
    raw = openai_client(live).chat.completions.with_raw_response.create(
        model="m", messages=ASK, response_format=person_format(strict), max_tokens=64, temperature=1.0, seed=2,
        logprobs=True)
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    (turn,) = live.server.store.turns(raw.headers["x-session-id"])
    assert turn.sampling["constraint"]["schema"] == PERSON  # what the trainer and the teacher replay
    assert turn.behaviour_logprobs == pytest.approx([t.logprob for t in choice.logprobs.content], abs=1e-6)


def test_chat_json_object_is_a_json_object(live):
    done = openai_client(live).chat.completions.create(
        model="m", messages=ASK, response_format={"type": "json_object"}, max_tokens=64, temperature=0.0)
    assert done.choices[0].finish_reason == "stop" and isinstance(json.loads(done.choices[0].message.content), dict)


@pytest.mark.parametrize("tool_choice, names", [
    ("required", {"get_weather", "set_units"}),
    ({"type": "function", "function": {"name": "set_units"}}, {"set_units"}),
])
def test_chat_forced_tool_calls_follow_the_tools_parameter_schema(live, tool_choice, names):
    for seed in range(3):
        done = openai_client(live).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=64, temperature=1.0, seed=seed)
        choice = done.choices[0]
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0].function
        assert call.name in names
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.mark.parametrize("body, param, named", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
     "response_format", "not"),
    ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array", "uniqueItems": True}}}],
      "tool_choice": "required"}, "body", "uniqueItems"),
    ({"tool_choice": "required"}, "body", "needs tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "body", "nope"),
])
def test_a_constraint_the_server_cannot_enforce_is_a_400_naming_it(live, body, param, named):
    r = httpx.post(f"{live.base_url}/v1/chat/completions", json={"messages": ASK, **body}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert named in error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param or param == "body"


def test_too_few_tokens_for_the_schema_ends_with_length_never_a_500(live):
    schema = {"type": "object", "required": ["essay"], "properties": {"essay": {"type": "string", "minLength": 60}}}
    done = openai_client(live).chat.completions.create(
        model="m", messages=ASK, max_tokens=5, temperature=1.0, seed=0,
        response_format={"type": "json_schema", "json_schema": {"name": "essay", "schema": schema}})
    assert done.choices[0].finish_reason == "length"
    assert done.choices[0].message.content.startswith('{"essay": "')  # valid so far


def test_a_bad_schema_fails_only_its_own_request_beside_a_good_one(live):
    results: dict[str, httpx.Response] = {}
    go = threading.Barrier(2)

    def send(name: str, fmt: dict) -> None:
        go.wait()
        results[name] = httpx.post(f"{live.base_url}/v1/chat/completions", timeout=120, json={
            "messages": ASK, "response_format": fmt, "max_tokens": 64, "temperature": 1.0, "seed": 1})

    bad = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "object", "not": {}}}}
    threads = [threading.Thread(target=send, args=a) for a in (("bad", bad), ("good", person_format(True)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["bad"].status_code == 400 and results["good"].status_code == 200
    jsonschema.validate(json.loads(results["good"].json()["choices"][0]["message"]["content"]), PERSON)


def test_completions_take_a_response_format_as_vllm_does(live):
    r = httpx.post(f"{live.base_url}/v1/completions", timeout=60, json={
        "prompt": "A person:", "max_tokens": 64, "temperature": 0.0, "response_format": person_format(True)})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), PERSON)


# -- Responses and Anthropic Messages -------------------------------------------------------


def test_responses_text_format_and_forced_function_call(live):
    c = openai_client(live)
    done = c.responses.create(model="m", input="Someone, please.", max_output_tokens=64, temperature=1.0,
                              text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                                               "strict": True}})
    jsonschema.validate(json.loads(done.output_text), PERSON)
    assert done.text.format.type == "json_schema"
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in TOOLS]
    called = c.responses.create(model="m", input="Weather?", tools=tools, max_output_tokens=64,
                                tool_choice={"type": "function", "name": "get_weather"})
    call = next(item for item in called.output if item.type == "function_call")
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), CITY)


@pytest.mark.parametrize("tool_choice, names", [({"type": "any"}, {"get_weather", "set_units"}),
                                                ({"type": "tool", "name": "get_weather"}, {"get_weather"})])
def test_anthropic_tool_forcing_returns_a_tool_use_under_the_input_schema(live, tool_choice, names):
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    message = Anthropic(base_url=live.base_url, api_key="unused", max_retries=0).messages.create(
        model="m", max_tokens=64, messages=ASK, tools=tools, tool_choice=tool_choice)
    assert message.stop_reason == "tool_use"
    use = next(block for block in message.content if block.type == "tool_use")
    assert use.name in names
    jsonschema.validate(use.input, SCHEMAS[use.name])


def test_anthropic_output_format_json_schema(live):
    r = httpx.post(f"{live.base_url}/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 64, "messages": ASK,
        "output_config": {"format": {"type": "json_schema", "schema": PERSON}}})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["content"][0]["text"]), PERSON)


# -- the SDKs' structured agents, unchanged ---------------------------------------------------


@pytest.mark.parametrize("model_class", [OpenAIChatCompletionsModel, OpenAIResponsesModel])
def test_an_agents_sdk_agent_with_an_output_type_runs_headerless(live, model_class):
    sdk_client = AsyncOpenAI(base_url=live.base_url + "/v1", api_key="unused", max_retries=0)
    agent = Agent(name="people", instructions="Describe a person.", output_type=Person,
                  model=model_class(model="m", openai_client=sdk_client), model_settings=ModelSettings(max_tokens=64))
    result = asyncio.run(Runner.run(agent, "Someone from history."))
    assert isinstance(result.final_output, Person)


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_langchain_with_structured_output_runs_headerless(live, method):
    from langchain_openai import ChatOpenAI

    # greedy: json_mode is an open object, in which random weights at T = 1 ramble past max_tokens
    model = ChatOpenAI(base_url=live.base_url + "/v1", api_key="unused", model="m", max_retries=0, max_tokens=64,
                       temperature=0.0)
    structured = model.with_structured_output(Person if method != "json_mode" else PERSON, method=method)
    answer = structured.invoke("Someone from history, as JSON.")
    if method == "json_mode":  # json_object: any object, not the schema
        assert isinstance(answer, dict)
    else:
        assert isinstance(answer, Person)


def test_the_openai_client_errors_on_an_unsupported_schema_as_a_bad_request(live):
    with pytest.raises(openai.BadRequestError, match="not"):
        openai_client(live).chat.completions.create(
            model="m", messages=ASK, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}})
