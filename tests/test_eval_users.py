"""The simulated user: sessions through the official OpenAI client, a fake and a live server."""

from __future__ import annotations

import dataclasses
import json
import random

import httpx
import openai

from openclaw_rl.eval.metrics import personalization_score
from openclaw_rl.eval.student import STUDENT
from openclaw_rl.eval.problems import heldout_problems, train_problems
from openclaw_rl.eval.users import SimulatedUser

PROBLEM = heldout_problems(1)[0]  # Tomas: 8 × 8 = 64 crayons, 64 - 9 = 55 left
GOOD = ("Tomas buys 8 packs with 8 crayons in each, so he has 8 times 8, which is 64 crayons. Then he gives 9 "
        "of them to Greta. That leaves 64 minus 9, which is 55. So Tomas has 55 crayons left.")
BAD = "## Answer\n\n- **55** crayons"
NO_REASKS = dataclasses.replace(STUDENT, reask_rate=0.0)


def completion(text: str) -> dict:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class FakeServer:
    """Answers chat requests from a script and records every request."""

    def __init__(self, answers: list[str | int]):
        self.answers, self.requests = list(answers), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.url.path, dict(request.headers), body))
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(200, json={"ok": True})
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            return httpx.Response(answer, json={"error": {"message": "engine on fire", "type": "server_error"}})
        return httpx.Response(200, json=completion(answer), headers={"X-Policy-Version": "3"})

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url="http://fake/v1", api_key="x", max_retries=0,
                             http_client=httpx.Client(transport=httpx.MockTransport(self)))


def test_user_corrects_then_approves_and_the_last_reply_is_posted_as_feedback():
    fake = FakeServer([BAD, GOOD])
    log = SimulatedUser(NO_REASKS, fake.client(), "m", max_turns=3, rng=random.Random(0)).play_session(PROBLEM)
    assert [t.reply_kind for t in log.turns] == ["correct", "approve"] and log.satisfied and log.error is None
    assert [t.score for t in log.turns] == [STUDENT.rubric(PROBLEM, BAD), STUDENT.rubric(PROBLEM, GOOD)]
    assert log.turns[0].failed_checks and log.turns[1].policy_version == 3
    paths = [path for path, _, _ in fake.requests]
    sid = log.session_id
    assert paths == ["/v1/chat/completions", "/v1/chat/completions", f"/v1/sessions/{sid}/feedback",
                     f"/v1/sessions/{sid}/end"]
    (_, first_headers, first), (_, second_headers, second) = fake.requests[:2]
    assert first_headers["x-session-id"] == second_headers["x-session-id"] == sid
    assert first["messages"] == [{"role": "user", "content": STUDENT.first_message(PROBLEM)}]
    assert second["messages"][1:] == [{"role": "assistant", "content": BAD},
                                      {"role": "user", "content": log.turns[0].reply}]
    assert fake.requests[2][2] == {"text": log.turns[1].reply}


def test_user_out_of_turns_posts_its_last_correction_and_ends_unsatisfied():
    fake = FakeServer([BAD, BAD])
    log = SimulatedUser(NO_REASKS, fake.client(), "m", max_turns=2, rng=random.Random(1)).play_session(PROBLEM)
    assert len(log.turns) == 2 and not log.satisfied
    assert fake.requests[2][2] == {"text": log.turns[1].reply} and log.turns[1].reply_kind == "correct"
    assert fake.requests[3][0].endswith("/end")


def test_a_failed_request_stops_the_session_without_crashing():
    fake = FakeServer([BAD, 500])
    log = SimulatedUser(NO_REASKS, fake.client(), "m", max_turns=3, rng=random.Random(0)).play_session(PROBLEM)
    assert len(log.turns) == 1 and "turn 1" in log.error and "500" in log.error
    assert fake.requests[-1][0].endswith("/end")


def test_sessions_are_reproducible_from_the_seed():
    logs = [SimulatedUser(STUDENT, FakeServer([BAD] * 3).client(), "m", rng=random.Random(5)).play_session(PROBLEM)
            for _ in range(2)]
    assert logs[0] == logs[1]
    other = SimulatedUser(STUDENT, FakeServer([BAD] * 3).client(), "m", rng=random.Random(6)).play_session(PROBLEM)
    assert other.session_id != logs[0].session_id


def test_an_llm_can_play_the_user_and_its_failures_fall_back_to_templates():
    agent = FakeServer([BAD, BAD, BAD])
    user_model = FakeServer(["CORRECT: Please drop the bold text and the heading.", "Sure, looks fine to me."])
    user = SimulatedUser(NO_REASKS, agent.client(), "m", max_turns=2, rng=random.Random(0),
                         user_model_url="http://unused/v1")
    user.user_model = user_model.client()
    log = user.play_session(PROBLEM)
    assert log.turns[0].reply == "Please drop the bold text and the heading."
    assert (log.turns[0].reply_kind, log.turns[0].reply_source) == ("correct", "user-model")
    assert log.turns[1].reply_source.startswith("template (user model failed: ValueError")
    assert log.turns[1].reply_kind == "correct"  # the persona's own reply to a bad answer
    prompt = user_model.requests[0][2]["messages"]
    assert STUDENT.preference in prompt[0]["content"] and BAD in prompt[1]["content"]
    sent_to_agent = json.dumps([body for _, _, body in agent.requests])
    assert STUDENT.preference not in sent_to_agent  # the hidden preference never reaches the agent


def test_smoke_sessions_and_evaluation_against_a_live_server(make_server):
    """A tiny model behind the real server: the session's turns are paired with the user's
    replies, the last reply arrives as feedback, and evaluation adds no main turns."""
    server = make_server()
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    user = SimulatedUser(NO_REASKS, client, server.server.model_name, max_turns=2, rng=random.Random(0),
                         max_tokens=8)
    log = user.play_session(train_problems(0, 1)[0])
    assert log.error is None and len(log.turns) == 2  # a random tiny model never satisfies the student

    session = httpx.get(f"{server.base_url}/v1/sessions/{log.session_id}").json()
    assert session["closed_at"] is not None
    turns = session["turns"]
    assert [t["kind"] for t in turns] == ["main", "main"]
    assert [t["response_text"] for t in turns] == [t.response for t in log.turns]
    assert turns[0]["next_state"] == {"role": "user", "content": log.turns[0].reply}
    assert turns[1]["next_state"] == {"role": "feedback", "content": log.turns[1].reply}

    before = httpx.get(f"{server.base_url}/v1/status").json()
    score = personalization_score(client, server.server.model_name, STUDENT, heldout_problems(2), max_tokens=8)
    after = httpx.get(f"{server.base_url}/v1/status").json()
    assert 0.0 <= score <= 1.0
    assert after["main_turns"] == before["main_turns"] and after["turns"] == before["turns"] + 2


def test_the_user_sends_no_temperature_unless_given_one_as_a_stock_client_does():
    default, chosen = FakeServer([GOOD]), FakeServer([GOOD])
    SimulatedUser(NO_REASKS, default.client(), "m", max_turns=1).play_session(PROBLEM)
    SimulatedUser(NO_REASKS, chosen.client(), "m", max_turns=1, temperature=1.0).play_session(PROBLEM)
    (asked,) = [body for path, _, body in default.requests if path.endswith("/chat/completions")]
    (asked_at,) = [body for path, _, body in chosen.requests if path.endswith("/chat/completions")]
    assert "temperature" not in asked and "top_p" not in asked  # the server's defaults apply
    assert asked_at["temperature"] == 1.0
