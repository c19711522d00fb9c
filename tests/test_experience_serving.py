"""Serving with experience (issue 38): each request of a user carries that user's lessons in
the prompt the engine is given, never another user's; the client's own messages stay what
is stored and paired; the turn records the block and the version; the teacher re-renders
what was served.

The scripted engine records the exact ids each request was given (`engine.prompts`), so the
tests compare them with what the chat template renders from known messages.
"""

from __future__ import annotations

import asyncio
import copy
import logging

import httpx
import numpy as np
import pytest

from openclaw_rl.chat import render_prompt
from openclaw_rl.experience import HEADER, Experience, block_of, fitting, learn, merge_system, place, render
from openclaw_rl.serve.experience_block import experience_block
from openclaw_rl.store import Store
from openclaw_rl.types import NextState, SamplingParams, TokenStep, TurnRecord
from openclaw_rl.users import Users

ALICE_LESSONS = ("Show every step of the calculation.", "Answer in plain sentences, no bullet points.")
BOB_LESSONS = ("Give only the final number.",)
QUESTION = [{"role": "user", "content": "What is 12 times 7?"}]
_SEEN: dict[str, int] = {}


def _one_hot(texts: list[str]) -> np.ndarray:
    """A fake encoder under which distinct texts are orthogonal: every lesson is added, none merged."""
    return np.eye(64)[[_SEEN.setdefault(text, len(_SEEN)) for text in texts]]


def teach(store: Store, owner: str, lessons: tuple[str, ...]) -> Experience:
    """Save `lessons` as `owner`'s experience, as the judge's learning saves them."""
    def update(experience: Experience):
        changes = []
        for i, text in enumerate(lessons):
            experience, made = learn(experience, text, f"turn-{owner}-{i}", 1000.0 + i, _one_hot, len)
            changes += made
        return experience, changes

    return store.update_experience(owner, update)[0]


def keyed(server, *names: str) -> dict[str, str]:
    """A key for each of `names` (users of the server's data dir)."""
    users = Users(server.server.store.data_dir)
    return {name: users.add(name) for name in names}


def chat(server, key: str | None, messages: list[dict], **body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{server.base_url}/v1/chat/completions", headers=headers, timeout=60,
                   json={"model": "m", "messages": messages, "max_tokens": 16, **body})
    assert r.status_code == 200, r.text
    return r


def stored_turns(server, response: httpx.Response):
    return server.server.store.turns(response.headers["x-session-id"])


def plain_ids(server, messages: list[dict]) -> list[int]:
    return render_prompt(server.server.tokenizer, messages, None, None)


def served_ids(server, messages: list[dict], experience: Experience) -> list[int]:
    block = render(experience, server.server.config.experience_budget_tokens, _count(server))
    return plain_ids(server, place(messages, block, server.server.config.experience_placement))


def _count(server):
    tokenizer = server.server.tokenizer
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


# -- chat completions: whose block, what the turn records ----------------------------------------


def test_each_user_is_served_their_own_lessons_and_the_turn_records_them(scripted_server):
    server = scripted_server(["84."])
    keys = keyed(server, "alice", "bob", "carol")
    alice = teach(server.server.store, "alice", ALICE_LESSONS)
    teach(server.server.store, "bob", BOB_LESSONS)

    (turn,) = stored_turns(server, chat(server, keys["alice"], QUESTION))
    served = server.server.tokenizer.decode(turn.prompt_token_ids)
    assert HEADER in served and all(lesson in served for lesson in ALICE_LESSONS)
    assert BOB_LESSONS[0] not in served
    # the first decode is served with the block (checked sampling may decode more, the last without it)
    assert turn.prompt_token_ids == server.engine.prompts[0] == served_ids(server, QUESTION, alice)
    assert turn.prompt_messages == QUESTION  # the client's own messages: what is paired and judged
    assert turn.experience_version == alice.version == 2
    assert turn.experience_block == render(alice, 256, _count(server))
    assert turn.experience_block == block_of(fitting(alice, 256, _count(server)))
    assert sorted(fitting(alice, 256, _count(server))) == sorted(ALICE_LESSONS)
    shown = httpx.get(f"{server.base_url}/v1/sessions/{turn.session_id}",
                      headers={"Authorization": f"Bearer {keys['alice']}"}).json()["turns"][0]
    assert shown["experience_version"] == 2 and shown["prompt_messages"] == QUESTION

    (bobs,) = stored_turns(server, chat(server, keys["bob"], QUESTION))
    served = server.server.tokenizer.decode(bobs.prompt_token_ids)
    assert BOB_LESSONS[0] in served and not any(lesson in served for lesson in ALICE_LESSONS)

    (carols,) = stored_turns(server, chat(server, keys["carol"], QUESTION))  # nothing learned yet
    assert carols.prompt_token_ids == plain_ids(server, QUESTION)
    assert (carols.experience_version, carols.experience_block) == (None, "")


@pytest.mark.parametrize("placement", ["user", "system"])
def test_the_block_goes_where_the_placement_says_after_the_clients_own_text(scripted_server, placement):
    server = scripted_server(["84.", "It is 84."], experience_placement=placement)
    alice = teach(server.server.store, "local", ALICE_LESSONS)  # a keyless server: the local admin
    messages = [{"role": "system", "content": "You are a maths tutor."}, *QUESTION]
    (turn,) = stored_turns(server, chat(server, None, messages))
    served = server.server.tokenizer.decode(turn.prompt_token_ids)
    assert served.index("You are a maths tutor.") < served.index(HEADER) < served.index("What is 12 times 7?")
    assert served.count("<|im_start|>system") == 1  # one system message, the client's
    user_starts = served.index("<|im_start|>user")
    assert (served.index(HEADER) > user_starts) == (placement == "user")
    assert turn.prompt_token_ids == served_ids(server, messages, alice)
    assert turn.prompt_messages == messages and turn.experience_placement == placement
    # the next turn of the conversation extends the same prefix: the block stays where it was, once
    later = [*messages, {"role": "assistant", "content": "84."}, {"role": "user", "content": "Why?"}]
    _, second = stored_turns(server, chat(server, None, later))
    assert second.prompt_token_ids[:len(turn.prompt_token_ids)] == turn.prompt_token_ids
    assert server.server.tokenizer.decode(second.prompt_token_ids).count(HEADER) == 1


def test_experience_off_serves_exactly_the_prompt_without_a_block(scripted_server):
    server = scripted_server(["84."], experience="off")
    keys = keyed(server, "alice", "dave")
    alice = teach(server.server.store, "alice", ALICE_LESSONS)
    teach(server.server.store, "dave", BOB_LESSONS)
    (turn,) = stored_turns(server, chat(server, keys["alice"], QUESTION))
    assert turn.prompt_token_ids == plain_ids(server, QUESTION)
    assert (turn.experience_version, turn.experience_block) == (None, "")

    Users(server.server.store.data_dir).set_experience("alice", True)  # her own setting wins, from her next request
    (turn,) = stored_turns(server, chat(server, keys["alice"], QUESTION))
    assert turn.prompt_token_ids == served_ids(server, QUESTION, alice)
    (daves,) = stored_turns(server, chat(server, keys["dave"], QUESTION))
    assert daves.prompt_token_ids == plain_ids(server, QUESTION)


def test_a_user_who_turned_it_off_gets_no_block_on_a_server_where_it_is_on(scripted_server):
    server = scripted_server(["84."])
    users = Users(server.server.store.data_dir)
    key = users.add("alice", experience=False)
    teach(server.server.store, "alice", ALICE_LESSONS)
    (turn,) = stored_turns(server, chat(server, key, QUESTION))
    assert turn.prompt_token_ids == plain_ids(server, QUESTION)
    assert turn.experience_version is None


def test_the_resent_conversation_continues_the_session_served_with_a_block(scripted_server):
    server = scripted_server(["84.", "Because 12 times 7 is 84."])
    teach(server.server.store, "local", ALICE_LESSONS)
    first = chat(server, None, QUESTION)
    reply = first.json()["choices"][0]["message"]["content"]
    history = [*QUESTION, {"role": "assistant", "content": reply}, {"role": "user", "content": "Show the steps."}]
    second = chat(server, None, history)
    assert second.headers["x-session-id"] == first.headers["x-session-id"]
    opened, continued = stored_turns(server, second)
    assert opened.next_state is not None and opened.next_state.content == "Show the steps."
    assert continued.prompt_messages == history and continued.experience_version == opened.experience_version == 2


def test_a_lesson_learned_mid_session_reaches_the_next_request(scripted_server):
    server = scripted_server(["84."])
    teach(server.server.store, "local", ALICE_LESSONS[:1])
    (first,) = stored_turns(server, chat(server, None, QUESTION))
    teach(server.server.store, "local", ALICE_LESSONS[1:])
    history = [*QUESTION, {"role": "assistant", "content": "84."}, {"role": "user", "content": "And 12 times 8?"}]
    _, second = stored_turns(server, chat(server, None, history))
    assert (first.experience_version, second.experience_version) == (1, 2)
    assert ALICE_LESSONS[1] not in first.experience_block and ALICE_LESSONS[1] in second.experience_block


def test_users_add_and_set_choose_a_users_own_experience_setting(tmp_path, capsys):
    from openclaw_rl.cli import main

    assert main(["users", "add", "alice", "--experience", "off", "--data-dir", str(tmp_path)]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    users = Users(tmp_path)
    assert users.authenticate(key).experience is False
    assert main(["users", "set", "alice", "--experience", "on", "--data-dir", str(tmp_path)]) == 0
    assert users.authenticate(key).experience is True  # the same key: re-read from the file
    assert main(["users", "set", "alice", "--experience", "server", "--data-dir", str(tmp_path)]) == 0
    assert users.authenticate(key).experience is None
    assert main(["users", "list", "--data-dir", str(tmp_path)]) == 0 and "server" in capsys.readouterr().out
    assert main(["users", "set", "bob", "--experience", "on", "--data-dir", str(tmp_path)]) == 2
    assert "no active user 'bob'" in capsys.readouterr().err


# -- the context: the block never costs the request ------------------------------------------------


def test_near_the_context_the_block_is_left_out_rather_than_the_request_refused(scripted_server, caplog):
    server = scripted_server(["84."])
    teach(server.server.store, "local", ALICE_LESSONS)
    plain = plain_ids(server, QUESTION)
    server.engine.max_context = len(plain) + 8  # the question fits with 8 tokens to answer; with the block it would not
    with caplog.at_level(logging.INFO, logger="openclaw_rl.serve.pipeline"):
        (turn,) = stored_turns(server, chat(server, None, QUESTION, max_tokens=8))
    assert turn.prompt_token_ids == plain and (turn.experience_version, turn.experience_block) == (None, "")
    assert "experience block of 'local' (v2" in caplog.text and "left out" in caplog.text

    server.engine.max_context = 2048  # room for both: the block is served
    (turn,) = stored_turns(server, chat(server, None, QUESTION, max_tokens=8))
    assert turn.experience_version == 2


def test_a_budget_too_small_for_any_lesson_serves_no_block(scripted_server):
    server = scripted_server(["84."], experience_budget_tokens=5)
    teach(server.server.store, "local", ALICE_LESSONS)
    (turn,) = stored_turns(server, chat(server, None, QUESTION))
    assert turn.prompt_token_ids == plain_ids(server, QUESTION) and turn.experience_version is None


# -- every API ------------------------------------------------------------------------------------


def test_anthropic_messages_get_the_block_after_their_system_field(scripted_server):
    server = scripted_server(["84."])
    alice = teach(server.server.store, "local", ALICE_LESSONS)
    body = {"model": "m", "max_tokens": 16, "system": "You are a maths tutor.", "messages": QUESTION}
    r = httpx.post(f"{server.base_url}/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    (turn,) = stored_turns(server, r)
    client_messages = [{"role": "system", "content": "You are a maths tutor."}, *QUESTION]
    assert turn.prompt_messages == client_messages
    assert turn.prompt_token_ids == served_ids(server, client_messages, alice)
    assert r.json()["usage"]["input_tokens"] == len(turn.prompt_token_ids)
    counted = httpx.post(f"{server.base_url}/v1/messages/count_tokens", json=body, timeout=60)
    assert counted.json() == {"input_tokens": len(turn.prompt_token_ids)}  # as usage counts it: block included


def test_responses_instructions_get_the_block_and_previous_response_id_still_continues(scripted_server):
    server = scripted_server(["84.", "Twelve sevens are 84."])
    alice = teach(server.server.store, "local", ALICE_LESSONS)
    body = {"model": "m", "instructions": "You are a maths tutor.", "input": "What is 12 times 7?",
            "max_output_tokens": 16}
    first = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=60)
    assert first.status_code == 200, first.text
    (turn,) = stored_turns(server, first)
    client_messages = [{"role": "system", "content": "You are a maths tutor."}, *QUESTION]
    assert turn.prompt_messages == client_messages
    assert turn.prompt_token_ids == served_ids(server, client_messages, alice)

    again = {**body, "input": "Explain.", "previous_response_id": first.json()["id"]}
    second = httpx.post(f"{server.base_url}/v1/responses", json=again, timeout=60)
    assert second.status_code == 200, second.text
    opened, continued = stored_turns(server, second)
    assert opened.next_state is not None and opened.next_state.content == "Explain."
    assert continued.prompt_messages == [*client_messages, {"role": "assistant", "content": "84."},
                                         {"role": "user", "content": "Explain."}]
    assert server.server.tokenizer.decode(continued.prompt_token_ids).count(HEADER) == 1


def test_a_raw_completion_is_served_exactly_as_given_without_a_block(scripted_server):
    server = scripted_server(["84."])
    teach(server.server.store, "local", ALICE_LESSONS)
    r = httpx.post(f"{server.base_url}/v1/completions", timeout=60,
                   json={"model": "m", "prompt": "12 times 7 is", "max_tokens": 4})
    assert r.status_code == 200, r.text
    (turn,) = stored_turns(server, r)
    assert turn.prompt_token_ids == server.server.tokenizer.encode("12 times 7 is", add_special_tokens=False)
    assert (turn.experience_version, turn.experience_block) == (None, "")


def test_the_block_is_rendered_once_per_experience_version(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from openclaw_rl.config import ServeConfig
    from openclaw_rl.users import LOCAL

    class Counting:
        def __init__(self, tokenizer):
            self.tokenizer, self.calls = tokenizer, 0

        def encode(self, text, **kwargs):
            self.calls += 1
            return self.tokenizer.encode(text, **kwargs)

    store, tokenizer = Store(tmp_path), Counting(AutoTokenizer.from_pretrained(tiny_model_dir))
    assert experience_block(store, tokenizer, ServeConfig(), LOCAL) == ("", None, ())
    teach(store, "local", ALICE_LESSONS)
    block, version, lessons = experience_block(store, tokenizer, ServeConfig(), LOCAL)
    calls = tokenizer.calls
    assert version == 2 and ALICE_LESSONS[0] in block and calls > 0 and sorted(lessons) == sorted(ALICE_LESSONS)
    assert experience_block(store, tokenizer, ServeConfig(), LOCAL) == (block, 2, lessons) and tokenizer.calls == calls
    teach(store, "local", BOB_LESSONS)
    block, version, lessons = experience_block(store, tokenizer, ServeConfig(), LOCAL)
    assert version == 3 and BOB_LESSONS[0] in block and tokenizer.calls > calls


# -- the teacher scores under the prompt that was served ---------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from openclaw_rl.engine.local import LocalEngine

    eng = LocalEngine(tiny_model_dir, max_batch_size=4)
    yield eng
    asyncio.run(eng.aclose())


def test_a_teacher_told_nothing_new_reproduces_the_behaviour_logprobs_of_a_turn_served_with_a_block(
        tmp_path, engine, monkeypatch):
    from openclaw_rl.judge import teacher

    tokenizer = engine.tokenizer
    block = render(teach(Store(tmp_path / "lessons"), "alice", ALICE_LESSONS), 256,
                   lambda text: len(tokenizer.encode(text, add_special_tokens=False)))
    messages = [{"role": "user", "content": "Name a colour."}]
    served = render_prompt(tokenizer, merge_system(messages, block), None, None)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.8, seed=5)

    async def sample() -> list[TokenStep]:
        return [e async for e in engine.stream(served, params) if isinstance(e, TokenStep)]

    steps = asyncio.run(sample())
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=messages, prompt_token_ids=served,
        response_token_ids=[s.token_id for s in steps], behaviour_logprobs=[s.logprob for s in steps],
        response_text="", tool_calls=[], sampling=params.to_dict(), finish_reason="length",
        experience_version=2, experience_block=block))
    store.set_next_state(turn.id, NextState("user", "No, name a warmer one.", at=1.0))
    turn = store.get_turn(turn.id)
    assert (turn.experience_version, turn.experience_block) == (2, block)

    monkeypatch.setattr(teacher, "hinted_messages", lambda messages, hint: copy.deepcopy(messages))  # a no-op hint
    result = asyncio.run(teacher.score_hints(engine, tokenizer, turn, ["nothing new"], strategy="sequence",
                                             select_k=4, teacher_k=4))
    assert result.logprobs == pytest.approx(turn.behaviour_logprobs, abs=1e-4)
    # and the block matters: without it (the client's messages alone) the same tokens score otherwise
    unserved = asyncio.run(engine.score(render_prompt(tokenizer, messages, None, None), turn.response_token_ids,
                                        temperature=1.0, top_p=0.8))
    assert unserved.logprobs != pytest.approx(turn.behaviour_logprobs, abs=1e-3)
