"""The HTTP API through the official openai client and plain HTTP, against a live server."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import httpx
import pytest
from openai import OpenAI


def client(live, **kw) -> OpenAI:
    return OpenAI(base_url=live.base_url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def session_of(live, session_id: str) -> dict:
    r = httpx.get(f"{live.base_url}/v1/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return r.json()


def test_non_streaming_chat_with_openai_client(live):
    raw = client(live).chat.completions.with_raw_response.create(
        model="anything", messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0
    )
    completion = raw.parse()
    assert raw.headers["x-policy-version"] == "0"
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert isinstance(completion.choices[0].message.content, str)
    assert completion.usage.completion_tokens <= 8
    turn = session_of(live, raw.headers["x-session-id"])["turns"][0]
    assert turn["response_text"] == completion.choices[0].message.content
    assert turn["kind"] == "main" and turn["policy_version"] == 0 and turn["next_state"] is None
    assert turn["verdict"] is None


def test_streaming_sends_tokens_one_by_one_and_records_the_same_text(live):
    raw = client(live).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "Stream please"}], max_tokens=12,
        temperature=1.0, seed=3, stream=True, logprobs=True, top_logprobs=2,
        stream_options={"include_usage": True},
    )
    assert raw.headers["x-policy-version"] == "0"
    chunks = list(raw.parse())
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(deltas) > 1, "the response arrived in one piece, not streamed"
    assert finishes and finishes[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    logprob_chunks = [c for c in chunks if c.choices and c.choices[0].logprobs]
    assert all(len(e.top_logprobs) == 2 for c in logprob_chunks for e in c.choices[0].logprobs.content)
    turn = session_of(live, raw.headers["x-session-id"])["turns"][0]
    assert turn["response_text"] == "".join(deltas)


@pytest.mark.parametrize(("path", "body"), [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                                            ("/v1/completions", {"prompt": "hi"})])
def test_a_client_that_leaves_a_stream_of_two_choices_logs_no_error(scripted_server, caplog, path, body):
    """Issue 36, finding 5: closing the streams while their pumps still read them raised
    "aclose(): asynchronous generator is already running" on every cancelled n > 1 stream."""
    from conftest import ScriptedEngine

    class SlowEngine(ScriptedEngine):
        async def stream(self, prompt_ids, params):
            async for event in super().stream(prompt_ids, params):
                await asyncio.sleep(0.01)
                yield event

    server = scripted_server(["word " * 400])
    server.engine.__class__ = SlowEngine
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with httpx.stream("POST", server.base_url + path,
                              json={**body, "n": 2, "stream": True, "max_tokens": 300}) as response:
                lines = response.iter_lines()
                received = [next(lines) for _ in range(6)]  # both choices under way, then gone
            assert any('"index": 1' in line for line in received), received
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not caplog.records:
            time.sleep(0.1)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert httpx.post(server.base_url + path, json={**body, "n": 2, "max_tokens": 3}).status_code == 200


_STRICT_ROUTES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
}
_LAX_VALUES = [("stream", "yes"), ("stream", 1), ("seed", False), ("n", 1.0), ("n", "2"), ("max_tokens", 2.0),
               ("max_output_tokens", True), ("temperature", True), ("temperature", "0.5"), ("logprobs", "true"),
               ("echo", 1)]


def test_scalars_of_every_api_are_strict_and_a_400_names_the_field(scripted_server):
    """Issue 36, finding 6: lax coercion ran "stream": "yes" as a stream, "seed": false as 0 and
    "n": 1.0 as 1. Each field a route has, with a value of the wrong JSON type, is refused."""
    server = scripted_server(["ok"])
    tried = 0
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for path, good in _STRICT_ROUTES.items():
            fields = good.keys() | {"stream", "temperature"} | {
                "/v1/chat/completions": {"seed", "n", "logprobs"}, "/v1/completions": {"seed", "n", "echo"},
                "/v1/responses": set(), "/v1/messages": set()}[path]
            for field, value in _LAX_VALUES:
                if field not in fields:
                    continue
                tried += 1
                r = http.post(path, json={**good, field: value})
                assert r.status_code == 400, (path, field, value, r.text)
                error = r.json()["error"]
                assert error["param"] == field and field in error["message"], (path, error)
            # what stock clients send still works: a whole-number temperature, JSON booleans and integers
            r = http.post(path, json={**good, "temperature": 1, "stream": False})
            assert r.status_code == 200, (path, r.text)
    assert tried >= 20


def test_tools_are_accepted_and_rendered(live):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    completion = client(live).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools, tool_choice="auto",
        max_tokens=6, temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    # A conversation with a tool call and its result renders and continues.
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
    ]
    follow = client(live).chat.completions.create(model="m", messages=history, tools=tools, max_tokens=4, temperature=0)
    assert follow.choices[0].message is not None


def test_header_session_pairs_next_state_and_side_turns_stay_out(live):
    c = client(live)
    h = {"X-Session-Id": "sess-header-1"}
    first = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Q1"}], max_tokens=4,
                                      temperature=0, extra_headers=h)
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "side question"}], max_tokens=3,
                              extra_headers={**h, "X-Turn-Type": "side"})
    c.chat.completions.create(
        model="m", max_tokens=4, temperature=0, extra_headers=h,
        messages=[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "Not quite, try again."}],
    )
    turns = session_of(live, "sess-header-1")["turns"]
    assert [t["kind"] for t in turns] == ["main", "side", "main"]
    assert turns[0]["next_state"] == {"role": "user", "content": "Not quite, try again."}
    assert turns[1]["next_state"] is None  # side turns never get (or are) next states
    assert turns[2]["next_state"] is None


def test_user_field_scopes_sessions_but_never_names_one(live):
    """Two conversations of one user are two sessions, each paired with its own replies."""
    c = client(live)
    opened = {}
    for question in ("Translate 'cat' to French", "What is 7*6?"):
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": question}], max_tokens=3, temperature=0, user="alice-42")
        opened[question] = (raw.headers["x-session-id"], raw.parse().choices[0].message.content)
    assert opened["Translate 'cat' to French"][0] != opened["What is 7*6?"][0]
    assert httpx.get(f"{live.base_url}/v1/sessions/alice-42").status_code == 404
    for question, (sid, answer) in opened.items():
        follow = [{"role": "user", "content": question}, {"role": "assistant", "content": answer},
                  {"role": "user", "content": f"thanks for {question}"}]
        raw = c.chat.completions.with_raw_response.create(model="m", messages=follow, max_tokens=2, user="alice-42")
        assert raw.headers["x-session-id"] == sid
    for question, (sid, _) in opened.items():
        assert session_of(live, sid)["turns"][0]["next_state"]["content"] == f"thanks for {question}"
    # Another user resending the same history is not continued into alice's session.
    (sid, answer), question = opened["What is 7*6?"], "What is 7*6?"
    follow = [{"role": "user", "content": question}, {"role": "assistant", "content": answer},
              {"role": "user", "content": "bob here"}]
    raw = c.chat.completions.with_raw_response.create(model="m", messages=follow, max_tokens=2, user="bob")
    assert raw.headers["x-session-id"] != sid


def _two_turn_conversation(live, opener: str, reply: str, out: dict) -> None:
    c = client(live)
    messages = [{"role": "user", "content": opener}]
    first = c.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=6, temperature=1.0)
    text = first.parse().choices[0].message.content
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": reply}]
    second = c.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=6, temperature=1.0)
    out[opener] = (first.headers["x-session-id"], second.headers["x-session-id"])


def test_headerless_clients_form_sessions_and_two_users_never_share_one(live):
    out: dict = {}
    threads = [threading.Thread(target=_two_turn_conversation, args=(live, f"Same opener", f"reply from {who}", out_i))
               for who, out_i in (("ann", out.setdefault("a", {})), ("bob", out.setdefault("b", {})))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    (a1, a2), = out["a"].values()
    (b1, b2), = out["b"].values()
    assert a1 == a2 and b1 == b2, "a header-less conversation did not continue its session"
    assert a1 != b1, "two header-less users were put in one session"
    for sid, who in ((a1, "ann"), (b1, "bob")):
        turns = session_of(live, sid)["turns"]
        assert len(turns) == 2
        assert turns[0]["next_state"] == {"role": "user", "content": f"reply from {who}"}


def test_feedback_end_and_session_done(live):
    c = client(live)
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2,
                              extra_headers={"X-Session-Id": "sess-fb"})
    r = httpx.post(f"{live.base_url}/v1/sessions/sess-fb/feedback", json={"text": "Too long, use one sentence."})
    assert r.status_code == 200, r.text
    turn = session_of(live, "sess-fb")["turns"][0]
    assert turn["next_state"] == {"role": "feedback", "content": "Too long, use one sentence."}
    again = httpx.post(f"{live.base_url}/v1/sessions/sess-fb/feedback", json={"text": "more"})
    assert again.status_code == 409 and "no main turn" in again.json()["error"]["message"]

    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "bye"}], max_tokens=2,
                              extra_headers={"X-Session-Id": "sess-done", "X-Session-Done": "true"})
    done = session_of(live, "sess-done")
    assert done["closed_at"] is not None and done["turns"][0]["closed"] is True

    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}], max_tokens=2,
                              extra_headers={"X-Session-Id": "sess-end"})
    assert httpx.post(f"{live.base_url}/v1/sessions/sess-end/end").status_code == 200
    assert session_of(live, "sess-end")["closed_at"] is not None
    assert httpx.post(f"{live.base_url}/v1/sessions/nope/end").status_code == 404


def test_listing_status_models_health_and_metrics(live):
    client(live).chat.completions.create(model="m", messages=[{"role": "user", "content": "count me"}], max_tokens=2)
    assert httpx.get(f"{live.base_url}/healthz").json()["status"] == "ok"
    models = client(live).models.list()
    assert models.data[0].id
    status = httpx.get(f"{live.base_url}/v1/status").json()
    assert {"policy_version", "sessions", "turns"} <= status.keys() and status["turns"] >= 1
    listed = httpx.get(f"{live.base_url}/v1/sessions").json()["data"]
    assert len(listed) == status["sessions"]
    metrics = httpx.get(f"{live.base_url}/metrics").text
    for name in ("openclaw_requests_total", "openclaw_request_latency_seconds_bucket",
                 "openclaw_tokens_generated_total", "openclaw_turns_recorded_total"):
        assert name in metrics
    assert httpx.get(f"{live.base_url}/healthz").headers["x-policy-version"] == "0"


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"model": "m"}).encode(), 400, "messages"),
        (json.dumps({"messages": []}).encode(), 400, "messages"),
        (json.dumps({"messages": [{"role": "robot", "content": "hi"}]}).encode(), 400, "role"),
        (json.dumps({"messages": [{"role": "user"}]}).encode(), 400, "messages.0.content"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}).encode(), 400, "temperature"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": 9}).encode(), 400, "n"),
        (json.dumps({"messages": [{"role": "user", "content": "word " * 3000}]}).encode(), 400, "context"),
    ],
)
def test_bad_input_gets_a_clear_4xx_and_loses_nothing(live, body, status, words):
    before = httpx.get(f"{live.base_url}/v1/status").json()["turns"]
    r = httpx.post(f"{live.base_url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words.lower() in error["message"].lower() and error["type"] == "invalid_request_error"
    assert httpx.get(f"{live.base_url}/v1/status").json()["turns"] == before
    assert httpx.get(f"{live.base_url}/healthz").status_code == 200


def test_bad_turn_type_and_oversized_body(make_server):
    server = make_server(max_body_bytes=2048)
    url = f"{server.base_url}/v1/chat/completions"
    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(url, json=ok, headers={"X-Turn-Type": "sideways"})
    assert r.status_code == 400 and "X-Turn-Type" in r.json()["error"]["message"]
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    r = httpx.post(url, json=big)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
    assert httpx.post(url, json=ok).status_code == 200


def test_api_key_guards_everything_but_health(make_server):
    server = make_server(api_key="s3cret")
    r = httpx.get(f"{server.base_url}/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{server.base_url}/metrics").status_code == 401
    assert httpx.get(f"{server.base_url}/healthz").status_code == 200
    good = client(server, api_key="s3cret").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert good.choices[0].message.content is not None
    import openai
    with pytest.raises(openai.AuthenticationError):
        client(server, api_key="wrong").chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_a_background_loop_that_dies_is_said_at_once_and_on_healthz(tiny_model_dir, tmp_path, caplog):
    """A trainer loop that stopped on an error (here the disk filling up) is logged when it
    happens and makes /healthz say `degraded` with the error; serving goes on."""
    import asyncio
    import time

    from fastapi.testclient import TestClient
    from transformers import AutoTokenizer

    from conftest import ScriptedEngine
    from openclaw_rl.config import ServeConfig
    from openclaw_rl.serve.app import create_app
    from openclaw_rl.serve.metrics import Metrics
    from openclaw_rl.serve.server import Server
    from openclaw_rl.store import make_store

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = ServeConfig(data_dir=str(tmp_path), train=False, status_interval_s=0.0)
    server = Server(engine=ScriptedEngine(tokenizer, ["still here"]), tokenizer=tokenizer,
                    store=make_store("", data_dir=tmp_path), config=config, model_name="scripted", metrics=Metrics())

    async def trainer_loop(stop: asyncio.Event) -> None:
        raise OSError(28, "No space left on device")

    async def judge_loop(stop: asyncio.Event) -> None:
        await stop.wait()

    with TestClient(create_app(server, [trainer_loop, judge_loop])) as client:
        deadline = time.monotonic() + 10
        while client.get("/healthz").json()["status"] == "ok" and time.monotonic() < deadline:
            time.sleep(0.05)
        health = client.get("/healthz").json()
        assert health["status"] == "degraded", health
        (name, error), = health["failed_loops"].items()
        assert "trainer_loop" in name and "No space left on device" in error
        assert any("stopped" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)
        reply = client.post("/v1/chat/completions", json={"model": "scripted",
                                                          "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "still here"
