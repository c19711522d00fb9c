"""Publishing weights through the one interface: a Publisher over each transport.

In process (a real local engine), files (a follower in "another process" picks a version
up), the remote engines (a fake vLLM / SGLang HTTP server records what it is told to
load: an adapter or a full reload), Ray (actor-shaped subscribers, `put` standing in for
the object store), and the rules around them: what each channel is handed, each export
computed once, catch-up after a resume, and the `Engine` protocol every engine satisfies.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import torch
from fastapi import FastAPI, Request
from safetensors.torch import load_file

from conftest import ScriptedEngine, WrappedEngine
from openclaw_rl.cluster.actors import RayChannel
from openclaw_rl.engine.base import Engine, LoraAdapter, StoredWeights
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.sglang import SGLangEngine
from openclaw_rl.engine.vllm import ADAPTER_NAME, VLLMEngine
from openclaw_rl.engine.weight_files import FULL_FILE
from openclaw_rl.net import free_port
from openclaw_rl.serve.background import ServerThread
from openclaw_rl.train.weights import CallbackChannel, EngineChannel, FilesChannel, Publisher, follow

ADAPTER = LoraAdapter({"base_model.model.q_proj.lora_A.weight": torch.ones(2, 4)}, {"r": 2, "peft_type": "LORA"})


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    engine = LocalEngine(tiny_model_dir, threads=1, max_batch_size=2)
    yield engine
    asyncio.run(engine.aclose())


def _moved(engine: LocalEngine, by: float) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() + by for name, p in engine.model.named_parameters()}


def _holds(engine: LocalEngine, state: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, state[name]) for name, p in engine.model.named_parameters())


class Exports:
    """The trainer's two exports, counting how often each is computed."""

    def __init__(self, full: dict | None = None):
        self.full_weights = full if full is not None else {"w": torch.ones(2)}
        self.calls = {"full": 0, "adapter": 0}

    def full(self) -> dict:
        self.calls["full"] += 1
        return self.full_weights

    def adapter(self) -> LoraAdapter:
        self.calls["adapter"] += 1
        return ADAPTER


class Received(WrappedEngine):
    """An engine that records what it is handed, and declares whether it takes adapters."""

    def __init__(self, engine, loads_lora_adapters: bool = False):
        super().__init__(engine)
        self.got: list = []
        self._adapters = loads_lora_adapters

    loads_lora_adapters = property(lambda self: self._adapters)

    async def load_weights(self, weights, policy_version):
        self.got.append((policy_version, weights))
        if not isinstance(weights, LoraAdapter):
            await self.engine.load_weights(weights, policy_version)
        else:
            self.engine.policy_version = policy_version


# -- in process ----------------------------------------------------------------------------


def test_in_process_the_engine_serves_the_published_version(local):
    state = _moved(local, 0.01)
    asyncio.run(Publisher([EngineChannel(local)], lambda: state).publish(local.policy_version + 1, parent=0))
    assert local.policy_version == 1 and _holds(local, state)


def test_each_channel_gets_what_its_receiver_takes_and_each_export_is_made_once(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    adapters, full = (Received(ScriptedEngine(tokenizer, ["x"]), loads_lora_adapters=flag) for flag in (True, False))
    seen: list = []
    exports = Exports()
    channels = [EngineChannel(adapters), EngineChannel(full), CallbackChannel(lambda v, w: seen.append((v, w)))]
    asyncio.run(Publisher(channels, exports.full, exports.adapter).publish(3, parent=2))
    assert adapters.got == [(3, ADAPTER)]
    assert full.got == [(3, exports.full_weights)] and seen == [(3, exports.full_weights)]
    assert exports.calls == {"full": 1, "adapter": 1}
    asyncio.run(Publisher(channels, exports.full).publish(4, parent=3))  # full fine-tuning: no adapter to give
    assert adapters.got[-1] == (4, exports.full_weights) and exports.calls == {"full": 2, "adapter": 1}


def test_catch_up_delivers_a_resumed_version_only_where_it_is_missing(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    engine = Received(ScriptedEngine(AutoTokenizer.from_pretrained(tiny_model_dir), ["x"]))
    files = FilesChannel(tmp_path)
    files.write(5, {"w": torch.zeros(2)})  # published before the crash; the checkpoint holds the same v5
    exports = Exports()
    publisher = Publisher([files, EngineChannel(engine)], exports.full)
    asyncio.run(publisher.catch_up(0, parent=None))  # the base model: every receiver starts there
    assert engine.got == [] and exports.calls["full"] == 0
    asyncio.run(publisher.catch_up(5, parent=4))
    assert [v for v, _ in engine.got] == [5] and files.latest_version() == 5  # not refused: not sent at all
    assert torch.equal(files.read(5)["w"], torch.zeros(2))
    with pytest.raises(ValueError, match="names one set of weights forever"):
        asyncio.run(publisher.publish(5, parent=4))  # a new version must be new to every channel


# -- files: split processes ----------------------------------------------------------------


def test_a_version_published_through_the_files_channel_is_picked_up_by_a_following_engine(local, tmp_path):
    state = _moved(local, 0.02)
    version = local.policy_version + 1
    channel = FilesChannel(tmp_path)
    following = Received(local)

    async def scenario() -> None:
        stop = asyncio.Event()
        watcher = asyncio.create_task(follow(FilesChannel(tmp_path), following, interval_s=0.05)(stop))
        await asyncio.sleep(0.1)
        assert following.got == []  # nothing published yet
        await Publisher([channel], lambda: state).publish(version, parent=version - 1)
        for _ in range(200):
            if local.policy_version == version:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await watcher

    asyncio.run(scenario())
    assert local.policy_version == version and _holds(local, state)
    ((loaded, handed),) = following.got
    assert loaded == version  # handed the stored version itself: a remote engine's server reads it in place
    assert handed == StoredWeights(tmp_path / "weights" / f"v{version:06d}", version, is_adapter=False)
    assert channel.parent_version(version) == version - 1


# -- the remote engines, against a fake HTTP server ------------------------------------------


class FakeServer:
    """The weight endpoints of vLLM and SGLang, recording each call (path, JSON body)."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict:
            return {"data": [{"id": "tiny", "max_model_len": 2048}]}

        @app.get("/get_server_info")
        def info() -> dict:
            return {"context_length": 2048}

        @app.post("/{path:path}")
        async def record(path: str, request: Request) -> dict:
            body = await request.body()
            self.calls.append((f"/{path}", await request.json() if body else {}))
            return {"success": True}

        self.port = free_port()
        self._thread = ServerThread(app, self.port)
        self.url = self._thread.base_url

    def stop(self) -> None:
        self._thread.stop()


@pytest.fixture
def fake_server():
    server = FakeServer()
    yield server
    server.stop()


def _loads(calls: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(path, body) for path, body in calls if path not in ("/pause", "/resume", "/pause_generation",
                                                                 "/continue_generation", "/update_weight_version")]


def test_vllm_gets_a_lora_trainers_adapter_and_a_full_trainers_weights(fake_server, tiny_model_dir, tmp_path):
    engine = VLLMEngine(fake_server.url, tiny_model_dir, weights_dir=tmp_path / "engine", check_logprobs_mode=False)
    exports = Exports({"model.embed_tokens.weight": torch.ones(4, 2)})

    async def scenario() -> list:
        try:
            await Publisher([EngineChannel(engine)], exports.full, exports.adapter).publish(1, parent=0)
            first = (engine.policy_version, engine.adapter)
            await Publisher([EngineChannel(engine)], exports.full).publish(2, parent=1)
            return [first, (engine.policy_version, engine.adapter)]
        finally:
            await engine.aclose()

    assert asyncio.run(scenario()) == [(1, ADAPTER_NAME), (2, None)]
    adapter_dir, full_dir = tmp_path / "engine" / "lora" / "v000001", tmp_path / "engine" / "full" / "v000002"
    assert _loads(fake_server.calls) == [
        ("/v1/load_lora_adapter", {"lora_name": ADAPTER_NAME, "lora_path": str(adapter_dir), "load_inplace": True}),
        ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(full_dir)}}),
    ]
    assert [b["new_version"] for p, b in fake_server.calls if p == "/update_weight_version"] == ["1", "2"]
    assert set(load_file(str(full_dir / FULL_FILE))) == {"model.embed_tokens.weight", "lm_head.weight"}  # untied


def test_vllm_reloads_a_files_channel_version_where_it_lies(fake_server, tiny_model_dir, tmp_path):
    """The tiny model ties its output layer: a stored version with one is reloaded in place,
    one without it gets it added in the engine's own directory."""
    channel = FilesChannel(tmp_path / "data")
    embedding = torch.ones(4, 2)
    channel.write(1, {"model.embed_tokens.weight": embedding, "lm_head.weight": embedding})
    channel.write(2, {"model.embed_tokens.weight": embedding})
    engine = VLLMEngine(fake_server.url, tiny_model_dir, weights_dir=tmp_path / "engine", check_logprobs_mode=False)

    async def scenario() -> int | None:
        try:
            loaded = await channel.refresh(engine)
            await engine.load_weights(channel.stored(1), 3)  # (an older file, to see it used in place)
            return loaded
        finally:
            await engine.aclose()

    assert asyncio.run(scenario()) == 2
    reloaded = [b["kwargs"]["weights_path"] for p, b in fake_server.calls if p == "/collective_rpc"]
    assert reloaded == [str(tmp_path / "engine" / "full" / "v000002"), str(channel.stored(1).path)]


def test_sglang_gets_an_adapter_or_a_full_reload(fake_server, tiny_model_dir, tmp_path):
    engine = SGLangEngine(fake_server.url, tiny_model_dir, weights_dir=tmp_path / "engine")
    exports = Exports()

    async def scenario() -> None:
        try:
            for version, adapter in ((1, exports.adapter), (2, exports.adapter), (3, None)):
                await Publisher([EngineChannel(engine)], exports.full, adapter).publish(version, parent=version - 1)
        finally:
            await engine.aclose()

    asyncio.run(scenario())
    lora = tmp_path / "engine" / "lora"
    assert _loads(fake_server.calls) == [
        ("/load_lora_adapter", {"lora_name": "openclaw-policy", "lora_path": str(lora / "v000001")}),
        ("/unload_lora_adapter", {"lora_name": "openclaw-policy"}),
        ("/load_lora_adapter", {"lora_name": "openclaw-policy", "lora_path": str(lora / "v000002")}),
        ("/update_weights_from_disk", {"model_path": str(tmp_path / "engine" / "full" / "v000003"),
                                       "weight_version": "3"}),
    ]
    assert engine.policy_version == 3 and engine.adapter is None


# -- Ray ------------------------------------------------------------------------------------


class _Method:
    def __init__(self, fn):
        self.remote = fn  # a Ray actor method: `.remote(...)` gives something to await


class Subscriber:
    """A replica or judge actor's shape around an engine that records what it is handed."""

    def __init__(self, engine: Received, fails: bool = False):
        self.engine = engine

        async def load_weights(weights, version):
            if fails:
                raise RuntimeError("the replica died")
            await engine.load_weights(weights, version)
            return version

        async def policy_version():
            return engine.policy_version

        async def loads_lora_adapters():
            return engine.loads_lora_adapters

        self.load_weights, self.policy_version = _Method(load_weights), _Method(policy_version)
        self.loads_lora_adapters = _Method(loads_lora_adapters)


def test_ray_puts_each_form_once_and_each_subscriber_gets_what_its_engine_takes(tiny_model_dir, tmp_path, caplog):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    vllm_like, local_like, dead = (Received(ScriptedEngine(tokenizer, ["x"]), loads_lora_adapters=flag)
                                   for flag in (True, False, False))
    subscribers = [Subscriber(vllm_like), Subscriber(local_like), Subscriber(dead, fails=True)]
    put: list = []
    exports = Exports()

    async def scenario() -> int | None:
        channels = await RayChannel.for_subscribers(subscribers, put=lambda value: put.append(value) or value)
        assert [(c.takes_lora_adapters, len(c.subscribers)) for c in channels] == [(True, 1), (False, 2)]
        publisher = Publisher([FilesChannel(tmp_path), *channels], exports.full, exports.adapter)
        await publisher.publish(1, parent=0)
        return await channels[1].latest()

    with caplog.at_level(logging.ERROR, logger="openclaw_rl.cluster.actors"):
        latest = asyncio.run(scenario())
    assert vllm_like.got == [(1, ADAPTER)] and local_like.got == [(1, exports.full_weights)] and dead.got == []
    assert put == [ADAPTER, exports.full_weights]  # once per form, however many subscribers read it
    assert exports.calls == {"full": 1, "adapter": 1}  # the files channel and the full-weights group share one
    assert FilesChannel(tmp_path).latest_version() == 1
    assert latest == 0  # the dead subscriber still serves v0: the group's newest common version
    assert "1 of 2 replicas and judges did not load it: RuntimeError: the replica died" in caplog.text


# -- the Engine protocol ------------------------------------------------------------------------


def test_every_engine_declares_what_callers_use(local, fake_server, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    scripted = ScriptedEngine(AutoTokenizer.from_pretrained(tiny_model_dir), ["x"])
    vllm = VLLMEngine(fake_server.url, tiny_model_dir, weights_dir=tmp_path / "v", check_logprobs_mode=False)
    sglang = SGLangEngine(fake_server.url, tiny_model_dir, weights_dir=tmp_path / "s")
    for engine in (local, scripted, WrappedEngine(local), vllm, sglang):
        assert isinstance(engine, Engine), type(engine).__name__
        assert isinstance(engine.model_dir, Path) and engine.model_name and engine.max_context > 0
    assert [e.loads_lora_adapters for e in (local, scripted, vllm, sglang)] == [False, False, True, True]
    assert not isinstance(object(), Engine)


def test_the_local_engine_refuses_an_adapter_and_says_what_to_publish(local):
    from openclaw_rl.engine.base import EngineError

    with pytest.raises(EngineError, match="policy_state_dict"):
        asyncio.run(local.load_weights(ADAPTER, local.policy_version + 1))
