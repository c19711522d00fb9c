"""The parts of the online loop as Ray actors.

Each actor runs the very code a single process runs (the serving app, the judge worker,
the trainer loop, the environment pool) and talks to the others only through the
shared store and through weight pushes, as loop.py describes. The classes are plain
here; deploy.py wraps them with `ray.remote` and the resources each one gets.

- `Replica`: one engine behind the ordinary serving app, on a port of its own. It is
  built by `compose.build_server`, the one seam that picks the engine (`--engine`), and
  gets new weights by `load_weights`, which the engine applies between requests.
- `JudgeActor`: a judge worker (`compose.standalone_judge`, as `openclaw-rl judge`) on its
  share of the turns (turn id modulo J), with its own copy of the policy for teacher
  scoring, kept current like the replicas' (pushed by the trainer actor, or, when there
  is none, read from the files channel before each batch of turns).
- `TrainerActor`: the trainer loop (`compose.build_trainer_loop`; with `--train-nproc N`, one
  actor per rank of a sharded trainer, placed together by a placement group); its
  publisher (train/weights.py) writes version v to
  the files channel (DATA_DIR/weights, for restarts and `serve --no-train`), then a
  `RayChannel` puts it once into Ray's object store, from which every replica and judge
  loads it: a LoRA trainer's adapter alone to those whose engines hot-load adapters,
  the merged weights to the others. The store learns of v only after all of them
  switched (runner.py), so no turn claims a version that a replica does not serve yet.
- `PersonalTrainerActor` (`--personal-adapters on`, instead of `TrainerActor`): each user's
  adapter trained in turn, written to the data dir and the store; every replica and judge
  loads a user's new version from there within a second of its record (train/personal_history.py).
- `EnvPoolActor`: an environment pool (envs/pool.py) on a port of its own.
- `GatewayActor`: the session-affine router (gateway.py) on the address users call.

Every actor keeps torch to one thread (`OMP_NUM_THREADS` is 1 under Ray's default of
one CPU per actor; `torch.set_num_threads` makes it so whatever the environment says).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed

from openclaw_rl.cluster.gateway import create_gateway
from openclaw_rl.compose import (
    TrainerLoop,
    build_personal_trainer,
    build_server,
    build_trainer_loop,
    follow_personal,
    load_trainer,
    open_store,
    personal_server,
    standalone_judge,
)
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.engine.base import LoraAdapter, Weights
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.envs import pool
from openclaw_rl.envs.registry import make_env
from openclaw_rl.net import free_port
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.background import ServerThread
from openclaw_rl.store import Store
from openclaw_rl.train import sharded
from openclaw_rl.train.personal import run_personal
from openclaw_rl.train.weights import FilesChannel, follow

log = logging.getLogger(__name__)


def _one_torch_thread() -> None:
    torch.set_num_threads(1)


def _node_ip() -> str:
    import ray  # an optional extra: imported where it is used

    return ray.util.get_node_ip_address()


def _store(config: ServeConfig) -> Store:
    """The store every part shares (a `--store` URL, else the SQLite file in the data dir), with
    the `--log-text` and `--redact` of `serve`."""
    return open_store(config.store, config.data_dir, config.log_text, config.redact)


class _Served:
    """An app on a free port of this node, in a background thread."""

    def _start(self, app, host: str) -> None:
        self._thread = ServerThread(app, free_port(), host=host)

    async def url(self) -> str:
        return self._thread.base_url

    async def stop(self) -> None:
        await asyncio.to_thread(self._thread.stop)  # the app's shutdown closes what it owns


class Replica(_Served):
    def __init__(self, config: ServeConfig, watch_weights: bool = False, index: int = 0, lora_rank: int = 0):
        """`watch_weights`: follow the files channel instead (no trainer actor, e.g. beside
        `openclaw-rl train`). `index` names this replica's engine files in the data dir;
        `lora_rank` gives a vLLM server it starts adapter slots of that rank (a LoRA trainer).
        With --personal-adapters on it serves the personal base and each user's adapter version
        as the store names it (`follow_personal`, as `serve --no-train` does): the trainer actor
        writes the versions, and this replica's own rollbacks serve at once."""
        _one_torch_thread()
        config = dataclasses.replace(config, status_interval_s=0.0)
        threads, name = config.threads or 1, f"replica-{index}"
        if config.personal_adapters == "on":
            self.server = personal_server(config, threads, name)
            loops = [follow_personal(self.server, config, load_now=False)]  # url() loads them: Ray's loop runs
        else:
            self.server = build_server(config, threads=threads, lora_rank=lora_rank, name=name)
            loops = [follow(FilesChannel(config.data_dir), self.server.engine)] if watch_weights else []
        self._start(create_app(self.server, loops), _node_ip())
        self._adapters_loaded = self.server.personal is None

    async def url(self) -> str:
        """The replica's address, once the users' adapters the store names are loaded (deploy waits on it)."""
        if not self._adapters_loaded:
            loaded = await self.server.personal.sync()
            log.info("personal adapters: %d users served their own adapter", len(loaded))
            self._adapters_loaded = True
        return await super().url()

    async def adapter_versions(self) -> dict[str, int]:
        """Each user's adapter version this replica serves now (personal adapters; {} otherwise)."""
        served = getattr(self.server.engine, "adapter_versions", None)
        return dict(served()) if served is not None and self.server.personal is not None else {}

    async def load_weights(self, weights: Weights, policy_version: int) -> int:
        await self.server.engine.load_weights(weights, policy_version)
        return policy_version

    async def policy_version(self) -> int:
        return self.server.engine.policy_version

    async def loads_lora_adapters(self) -> bool:
        return self.server.engine.loads_lora_adapters


class _Sharded:
    """A store whose waiting turns are only those of shard `index` of `count` (by turn id)."""

    def __init__(self, store, index: int, count: int):
        self._store, self._index, self._count = store, index, count

    def turns_awaiting_verdict(self, limit: int = 32) -> list:
        turns = self._store.turns_awaiting_verdict(limit * self._count)
        return [t for t in turns if t.id % self._count == self._index][:limit]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class JudgeActor:
    def __init__(self, config: ServeConfig, judge: JudgeConfig, teacher_targets: bool = True, shard: int = 0,
                 shards: int = 1, watch_weights: bool = False):
        """`teacher_targets` False: no method that trains reads a teacher, so none is scored."""
        _one_torch_thread()
        self.store = _store(config)
        # the current policy, for teacher scoring, on the engine `--engine` names (through the Engine protocol)
        self.worker = standalone_judge(_Sharded(self.store, shard, shards) if shards > 1 else self.store, config,
                                       resolve_model_dir(config.model or None), judge, teacher_targets=teacher_targets,
                                       follow_files=watch_weights, threads=1, name=f"judge-{shard}")
        self.engine = self.worker.teacher_engine
        self._stop: asyncio.Event | None = None

    async def run(self) -> int:
        """Judge until `stop`; the number of turns judged."""
        self._stop = asyncio.Event()
        try:
            await self.worker.run(self._stop)
        finally:
            await self.engine.aclose()
            self.store.close()
        return self.worker.judged

    async def load_weights(self, weights: Weights, policy_version: int) -> int:
        await self.engine.load_weights(weights, policy_version)
        return policy_version

    async def policy_version(self) -> int:
        return self.engine.policy_version

    async def loads_lora_adapters(self) -> bool:
        return self.engine.loads_lora_adapters

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


class RayChannel:
    """Ray's transport: a version is put once into the object store, however many subscribers
    (replicas, judges) load it from there. `for_subscribers` makes one channel for those whose
    engines hot-load adapters and one for the rest, so each gets what its engine takes.

    A subscriber that fails or does not answer within `load_timeout_s` is logged, not raised:
    a dead replica must not stop training; the gateway routes around it."""

    load_timeout_s = 600.0  # one weight load on every subscriber; a full reload of a big model takes a while

    def __init__(self, subscribers: list, takes_lora_adapters: bool, put: Any = None) -> None:
        """`put` stores a value in the object store and returns its reference (default `ray.put`)."""
        self.subscribers, self.takes_lora_adapters = list(subscribers), takes_lora_adapters
        self._put = put or _ray_put

    @classmethod
    async def for_subscribers(cls, subscribers: list, put: Any = None) -> list[RayChannel]:
        takes = await asyncio.gather(*(s.loads_lora_adapters.remote() for s in subscribers))
        groups: dict[bool, list] = {}
        for subscriber, adapters in zip(subscribers, takes):
            groups.setdefault(bool(adapters), []).append(subscriber)
        return [cls(group, adapters, put) for adapters, group in groups.items()]

    async def publish(self, version: int, weights: Weights, *, parent: int | None = None) -> None:
        ref = await asyncio.to_thread(self._put, weights)
        loads = asyncio.gather(*(s.load_weights.remote(ref, version) for s in self.subscribers),
                               return_exceptions=True)
        try:
            results = await asyncio.wait_for(loads, self.load_timeout_s)
        except TimeoutError:
            results = [TimeoutError(f"not loaded within {self.load_timeout_s:.0f} s")] * len(self.subscribers)
        failed = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        what = "adapter" if isinstance(weights, LoraAdapter) else "full weights"
        if failed:
            log.error("policy v%d (%s): %d of %d replicas and judges did not load it: %s", version, what,
                      len(failed), len(self.subscribers), "; ".join(failed))
        else:
            log.info("policy v%d (%s) is served by %d replicas and judges", version, what, len(self.subscribers))

    async def latest(self) -> int | None:
        versions = await asyncio.gather(*(s.policy_version.remote() for s in self.subscribers))
        return min(versions, default=None)


def _ray_put(value: Any) -> Any:
    import ray  # an optional extra: imported where it is used

    return ray.put(value)


class TrainerActor:
    """The trainer loop on Ray. With `serve --train-nproc N` there are N of these, one per rank
    of a sharded trainer (train/sharded.py): each `join`s the process group at rank 0's
    `address`, rank 0 runs the loop as a one-rank trainer does (`catch_up`, `run`), and the
    others `follow` it until it leads them out. One rank loads the policy in __init__."""

    def __init__(self, config: ServeConfig, train: TrainConfig, rank: int = 0, world: int = 1):
        _one_torch_thread()
        self.serve, self.data_dir, self.rank, self.world = config, config.data_dir, rank, world
        self.config = dataclasses.replace(train, train_threads=train.train_threads or 1)
        self.store = None
        self.trainer = None
        self._stop: asyncio.Event | None = None
        self._trainer_loop: TrainerLoop | None = None
        if world == 1:
            self._load(None)

    def address(self) -> tuple[str, int]:
        """Rank 0: where the other ranks meet it (this node, a free port)."""
        return _node_ip(), free_port("0.0.0.0")

    async def join(self, address: tuple[str, int]) -> None:
        """Join the process group at rank 0's `address` and load this rank's shards of the policy
        (every rank at once: sharding the model is collective)."""
        await asyncio.to_thread(self._load, address)

    def _load(self, address: tuple[str, int] | None) -> None:
        make: Any = None
        if address is not None:
            os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0",  # Ray: one GPU each
                              MASTER_ADDR=address[0], MASTER_PORT=str(address[1]))
            sharded.init_from_env()
            if self.rank == 0:
                resolve_model_dir(self.serve.model or None)  # converts the bundled model once, before the others look
            torch.distributed.barrier()
            if self.rank != 0:
                self.trainer = sharded.ShardedTrainer(resolve_model_dir(self.serve.model or None), self.config)
                return
            make = sharded.ShardedTrainer
        self.store = _store(self.serve)
        self.trainer = load_trainer(resolve_model_dir(self.serve.model or None), Path(self.data_dir), self.config,
                                    self.serve.resume, self.store, **({"make": make} if make else {}))

    async def follow(self) -> int:
        """Ranks > 0: run what rank 0 leads until it stops them; the steps taken."""
        try:
            await asyncio.to_thread(self.trainer.follow)
        finally:
            torch.distributed.destroy_process_group()
        return self.trainer.train_step

    async def catch_up(self, subscribers: list) -> int:
        """Bring the files channel and every subscriber to the version the trainer holds (a resumed
        one: before the gateway opens); that version."""
        await (await self._loop(subscribers)).catch_up()
        return self.trainer.policy_version

    async def run(self, subscribers: list) -> int:
        """Train until `stop`, pushing each version to `subscribers` (replicas, judges); the steps taken."""
        loop = await self._loop(subscribers)
        self._stop = asyncio.Event()
        try:
            await loop.run(self._stop)
        finally:
            self.store.close()
            if self.world > 1:
                await asyncio.to_thread(self.trainer.stop_followers)
                torch.distributed.destroy_process_group()
        return self.trainer.train_step

    async def _loop(self, subscribers: list) -> TrainerLoop:
        """The trainer loop publishing to the files channel, then to `subscribers` (built once: its
        gate holds the last accepted weights)."""
        if self._trainer_loop is None:
            channels = [FilesChannel(self.data_dir), *await RayChannel.for_subscribers(subscribers)]
            self._trainer_loop = build_trainer_loop(self.store, self.trainer, self.config, channels)
        return self._trainer_loop

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


class PersonalTrainerActor:
    """The personal adapters' trainer on Ray (`serve --ray --personal-adapters on`): each user's
    adapter stepped in turn and written to the data dir and the store, as `openclaw-rl train
    --personal-adapters on` does (`build_personal_trainer`, `run_personal`); the replicas and
    judges load each version from there once the store records it. Nothing is pushed through
    Ray's object store: an adapter is a few MiB and every part already follows the store."""

    def __init__(self, config: ServeConfig, train: TrainConfig):
        _one_torch_thread()
        train = dataclasses.replace(train, train_threads=train.train_threads or 1)
        self.store, self.config = _store(config), train
        self.personal = build_personal_trainer(self.store, config.data_dir, config.model, train,
                                               config.personal_resident)
        self.steps = 0
        self._stop: asyncio.Event | None = None

    async def run(self) -> int:
        """Train until `stop`; the users' steps taken (a rejected candidate's too)."""
        self._stop = asyncio.Event()

        def on_step(user: str, version: int | None) -> None:
            self.steps += 1

        try:
            await run_personal(self.store, self.personal, self.config, self._stop, on_step=on_step)
        finally:
            self.store.close()
        return self.steps

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


class EnvPoolActor(_Served):
    def __init__(self, pool_config, token: str, options: dict[str, Any] | None = None):
        make = functools.partial(make_env, pool_config.env, **(options or {}))
        self._start(pool.create_app(pool_config, make, token), _node_ip())


class GatewayActor(_Served):
    def __init__(self, replica_urls: list[str], host: str, port: int, request_timeout_s: float):
        self._thread = ServerThread(create_gateway(replica_urls, request_timeout_s), port, host=host)
