"""Regression tests for the agent path (issue: header-less tool calls, pairing, hostile input).

Each goes through the real HTTP app: a scripted engine where the test needs the model to
say something exact (a tool call, a stop string inside a token), the tiny model otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import select
import socket

import httpx
import pytest
from openai import OpenAI

TOOL_REPLY = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def client(server) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def session_of(server, session_id: str) -> dict:
    r = httpx.get(f"{server.base_url}/v1/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return r.json()


def test_a_recorded_tool_call_then_a_headerless_continuation_pairs_the_tool_result(scripted_server):
    server = scripted_server([TOOL_REPLY, "It is 18C and sunny in Paris."])
    c = client(server)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = c.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS)
    reply = first.parse().choices[0]
    assert reply.finish_reason == "tool_calls" and reply.message.tool_calls[0].function.name == "get_weather"
    call = reply.message.tool_calls[0]
    messages += [
        {"role": "assistant", "content": reply.message.content,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"},
    ]
    second = c.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS)
    assert second.http_response.status_code == 200
    assert second.headers["x-session-id"] == first.headers["x-session-id"]
    turns = session_of(server, first.headers["x-session-id"])["turns"]
    assert len(turns) == 2
    assert turns[0]["next_state"] == {"role": "tool", "content": "18C and sunny"}
    assert turns[0]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_n_choices_are_turns_and_the_continued_one_gets_the_next_state(scripted_server):
    server = scripted_server(["first answer", "second answer"])
    c = client(server)
    messages = [{"role": "user", "content": "Give me two drafts"}]
    raw = c.chat.completions.with_raw_response.create(model="m", messages=messages, n=2)
    choices = raw.parse().choices
    assert [ch.index for ch in choices] == [0, 1]
    sid = raw.headers["x-session-id"]
    assert len(session_of(server, sid)["turns"]) == 2
    kept = choices[1].message.content
    c.chat.completions.create(model="m", messages=[*messages, {"role": "assistant", "content": kept},
                                                   {"role": "user", "content": "the second is better"}])
    turns = session_of(server, sid)["turns"]
    by_text = {t["response_text"]: t for t in turns[:2]}
    assert by_text[kept]["next_state"] == {"role": "user", "content": "the second is better"}
    other = next(t for text, t in by_text.items() if text != kept)
    assert other["next_state"] is None and other["closed"] is True


def test_streamed_text_is_the_stored_text_when_a_stop_string_starts_inside_a_token(scripted_server):
    server = scripted_server(["Hello world, again"])
    stream = client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stop=["orld"], stream=True)
    chunks = list(stream)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    sid = httpx.get(f"{server.base_url}/v1/sessions").json()["data"][0]["id"]
    stored = session_of(server, sid)["turns"][0]["response_text"]
    assert streamed == stored
    assert "orld" not in stored


BAD_PARAMETERS = [
    ("seed", 2**64),
    ("temperature", -1),
    ("top_p", 0),
    ("max_tokens", 10**9),
    ("stop", [f"s{i}" for i in range(100)]),
    ("top_logprobs", 100),
]


def test_each_bad_parameter_gets_a_400_naming_it_and_good_requests_beside_it_succeed(live):
    url = f"{live.base_url}/v1/chat/completions"

    def post(body: dict) -> httpx.Response:
        return httpx.post(url, json=body, timeout=120)

    good = [{"messages": [{"role": "user", "content": f"good {i}"}], "max_tokens": 4, "temperature": 1.0, "seed": i}
            for i in range(8)]
    bad = [{"messages": [{"role": "user", "content": f"bad {name}"}], "max_tokens": 4, "logprobs": True, name: value}
           for name, value in BAD_PARAMETERS]
    with concurrent.futures.ThreadPoolExecutor(len(good) + len(bad)) as pool:
        answers = list(pool.map(post, good + bad))
    assert [r.status_code for r in answers[: len(good)]] == [200] * len(good)
    for (name, _), r in zip(BAD_PARAMETERS, answers[len(good):]):
        assert r.status_code == 400, (name, r.text)
        error = r.json()["error"]
        assert error["param"] == name and name in error["message"], error


def test_an_engine_failure_fails_only_its_own_request(tiny_model_dir):
    from openclaw_rl.engine.base import EngineError
    from openclaw_rl.engine.local import LocalEngine
    from openclaw_rl.types import SamplingParams

    async def run() -> list:
        engine = LocalEngine(tiny_model_dir, threads=1)

        async def one(seed: int) -> object:
            try:
                return [e async for e in engine.stream([1, 2, 3], SamplingParams(max_new_tokens=3, seed=seed))]
            except EngineError as error:
                return error

        try:
            return await asyncio.gather(*(one(s) for s in (1, 2, 2**64, 3, 4)))
        finally:
            await engine.aclose()

    results = asyncio.run(run())
    assert isinstance(results[2], EngineError) and "sampling parameters" in str(results[2])
    assert all(isinstance(r, list) and len(r) == 5 for i, r in enumerate(results) if i != 2)


def test_a_huge_prompt_is_refused_by_its_length_before_it_is_tokenized(live):
    big = "word " * 800_000  # 4 MB: more characters than any 2048-token prompt can have
    r = httpx.post(f"{live.base_url}/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": big}]})
    assert r.status_code in (400, 413), r.text
    if r.status_code == 400:
        assert r.json()["error"]["code"] == "context_length_exceeded" and "characters" in r.json()["error"]["message"]


def test_a_chunked_body_over_the_limit_is_refused_without_reading_it_all(make_server):
    """A raw chunked upload: the 413 must arrive while the client is still sending."""
    server = make_server(max_body_bytes=64 * 1024)
    chunk = b"x" * 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        sent, answer = 0, b""
        while sent < 2000 and not answer:  # 128 MB if it were read whole
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += 1
            except OSError:  # the server answered and closed
                break
            if select.select([sock], [], [], 0)[0]:
                answer = sock.recv(65536)
        while b"body_too_large" not in answer and (more := sock.recv(65536)):
            answer += more
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"body_too_large" in answer
    assert sent < 200, f"the server let the client send {sent} chunks of 64 KB before answering"
    assert httpx.get(f"{server.base_url}/healthz").status_code == 200


@pytest.mark.parametrize("request_args, param", [
    (dict(method="GET", url="/v1/sessions?offset=1.4e20"), "offset"),
    (dict(method="GET", url="/v1/sessions?offset=140000000000000000000"), "offset"),
    (dict(method="GET", url="/v1/sessions?limit=abc"), "limit"),
    (dict(method="POST", url="/v1/chat/completions",
          json={"messages": [{"role": "user", "content": "hi"}], "user": "u" * 1_000_000}), "user"),
    (dict(method="POST", url="/v1/chat/completions", headers={"X-Session-Id": "s" * 5000},
          json={"messages": [{"role": "user", "content": "hi"}]}), "X-Session-Id"),
    (dict(method="POST", url="/v1/chat/completions",
          content=b'{"messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"), "body"),
    (dict(method="POST", url="/v1/chat/completions",
          json={"messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}}),
     "response_format"),
])
def test_fuzzer_findings_are_400s_in_the_openai_error_format(live, request_args, param):
    r = httpx.request(**{**request_args, "url": live.base_url + request_args["url"]}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]
    assert len(r.headers.get("x-session-id", "")) <= 256


def test_the_openapi_document_publishes_the_request_bodies(live):
    spec = httpx.get(f"{live.base_url}/openapi.json").json()
    body = spec["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/ChatCompletionRequest")
    schema = spec["components"]["schemas"]["ChatCompletionRequest"]
    assert {"messages", "temperature", "top_p", "seed", "n", "tools"} <= schema["properties"].keys()
    assert json.dumps(spec)  # the whole document is valid JSON all the way down
