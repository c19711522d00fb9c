"""A request that sets no temperature or top-p is sampled at the server's defaults, on every API.

Stock clients (the OpenAI and Anthropic SDKs, most agent frameworks) send neither unless
told to; the server then samples at --default-temperature / --default-top-p, the turn
records what was used (the trainer scores the tokens under it), and a value the request
sets always wins.
"""

from __future__ import annotations

import pytest
from anthropic import Anthropic
from conftest import openai_client

from openclaw_rl.config import ConfigError, ServeConfig


def stored_sampling(server) -> list[tuple[float, float]]:
    store = server.server.store
    return [(t.sampling["temperature"], t.sampling["top_p"])
            for s in store.list_sessions() for t in store.turns(s.id)]


def test_each_api_samples_at_the_server_defaults_when_the_request_sets_none(scripted_server):
    server = scripted_server(["One."] * 4, default_temperature=0.6, default_top_p=0.85)
    openai = openai_client(server)
    openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "chat"}], max_tokens=4)
    response = openai.responses.create(model="m", input="responses")
    openai.completions.create(model="m", prompt="completions", max_tokens=4)
    Anthropic(base_url=server.base_url, api_key="unused", max_retries=0).messages.create(
        model="m", max_tokens=4, messages=[{"role": "user", "content": "messages"}])
    assert stored_sampling(server) == [(0.6, 0.85)] * 4
    assert (response.temperature, response.top_p) == (0.6, 0.85)  # the Responses object says what was used


def test_a_value_the_request_sets_wins(scripted_server):
    server = scripted_server(["One.", "Two."], default_temperature=0.6, default_top_p=0.85)
    openai = openai_client(server)
    openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}], max_tokens=4,
                                   temperature=1.0, top_p=1.0)
    openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}], max_tokens=4,
                                   temperature=0)
    assert sorted(stored_sampling(server)) == [(0.0, 0.85), (1.0, 1.0)]


@pytest.mark.parametrize("setting, value", [("default_temperature", -0.1), ("default_temperature", 2.5),
                                            ("default_top_p", 0.0), ("default_top_p", 1.5)])
def test_a_default_out_of_range_is_refused_by_name(setting, value):
    with pytest.raises(ConfigError, match=setting):
        ServeConfig(**{setting: value})
