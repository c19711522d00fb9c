"""The processes of one machine: `openclaw-rl serve`, `judge` and `train`.

    serve          serving_app (build_stack; with --train-nproc N a sharded trainer of its own,
                   `trainer_process`: `openclaw-rl train --nproc N` in a process group) -> uvicorn
    judge          standalone_judge against the store, until stopped (or --once)
    train          build_trainer_loop publishing to DATA_DIR/weights; under torchrun, one rank
                   of a sharded trainer; with --personal-adapters on, each user's adapter
                   (build_personal_trainer), written to DATA_DIR/personal and the store
    promote        the same trainer loop on chosen users' samples only, until none is left; then
                   the checkpoint becomes the base personal adapters sit on (train/promotion.py)

Here is what starts and stops processes: torchrun ranks, subprocess groups, signals.
What each process runs is built in compose.py (the same builders the drivers and the Ray
actors call), so these functions only decide the process around it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed
import uvicorn
import yaml
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from openclaw_rl.compose import (
    Stack,
    StackSpec,
    TrainerLoop,
    build_personal_trainer,
    build_stack,
    build_trainer_loop,
    load_trainer,
    open_store,
    standalone_judge,
)
from openclaw_rl.config import JudgeConfig, JudgeProcessConfig, PromoteConfig, ServeConfig, TrainConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.serve import http_server
from openclaw_rl.serve.server import Background, check_exposure
from openclaw_rl.store import SQLITE_FILE
from openclaw_rl.train import sharded
from openclaw_rl.train.methods import get_method
from openclaw_rl.train.personal import run_personal
from openclaw_rl.train.personal_history import remove_adapter
from openclaw_rl.train.personal_state import MAX_RESIDENT
from openclaw_rl.train.promotion import PromotedBase, PromotionError, check_promotable, export_promoted, promoted_base
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.weights import FilesChannel
from openclaw_rl.users import Users

log = logging.getLogger(__name__)


def serve(config: ServeConfig, judge: JudgeConfig, train: TrainConfig) -> None:
    """`openclaw-rl serve`: `serving_app` on --host/--port, once its exposure is checked, under the
    HTTP limits of serve/http_server.py (with the open-file limit raised first: it holds connections)."""
    check_exposure(config, Users(config.data_dir, config.api_key))
    http_server.raise_open_file_limit()
    _, app = serving_app(config, judge, train)
    server = uvicorn.Server(http_server.uvicorn_config(app, config, timeout_graceful_shutdown=10))
    http_server.run(server)
    if not server.started:  # stopped before it served: uvicorn.run's exit status for that
        raise SystemExit(STARTUP_FAILURE)


def serving_app(config: ServeConfig, judge: JudgeConfig, train: TrainConfig) -> tuple[Stack, FastAPI]:
    """The app `serve` runs: the stack of StackSpec's defaults and, with --train-nproc N > 1, the
    sharded trainer's processes beside it (`trainer_process`), stopped with it."""
    stack = build_stack(config, judge, train, StackSpec())
    more = [trainer_process(config, stack.train, stack.server.engine.model_dir)] if stack.training == "sharded" else []
    return stack, stack.app(*more)


def trainer_process(config: ServeConfig, train: TrainConfig, model_dir: Path) -> Background:
    """`serve --train-nproc N`: `openclaw-rl train --nproc N` on this data dir with this [train]
    config, started with serving and stopped with it (SIGTERM to its process group: rank 0
    finishes its step and writes a final checkpoint). Its output goes to DATA_DIR/trainer.log."""
    sharded.refuse_gate_when_sharded(train, config.train_nproc, "--train-nproc")
    data_dir = Path(config.data_dir)
    settings = data_dir / "trainer-config.yaml"
    settings.write_text(yaml.safe_dump({"train": {k: v for k, v in dataclasses.asdict(train).items()
                                                  if v is not None}}))
    command = [sys.executable, "-m", "openclaw_rl.cli", "train", "--data-dir", str(data_dir), "--model",
               str(model_dir), "--nproc", str(config.train_nproc), "--config", str(settings)]
    command += (["--resume"] if config.resume else []) + (["--store", config.store] if config.store else [])

    async def run(stop: asyncio.Event) -> None:
        with open(data_dir / "trainer.log", "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        log.info("trainer: %d ranks (pid %d), log in %s", config.train_nproc, process.pid, data_dir / "trainer.log")
        try:
            while not stop.is_set() and process.poll() is None:
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except TimeoutError:
                    pass
            if process.poll() is not None and not stop.is_set():
                log.error("the trainer exited with status %d; serving goes on without training (see %s)",
                          process.returncode, data_dir / "trainer.log")
        finally:
            await asyncio.to_thread(_stop_group, process)
    return run


def _stop_group(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to the process group `process` leads (torchrun and its ranks are in it), then wait
    until every member is gone; SIGKILL what is left after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        os.killpg(process.pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            process.poll()  # reap the leader, or the group never empties
            os.killpg(process.pid, 0)  # raises once no member is left
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def judge_process(part: JudgeProcessConfig, config: JudgeConfig) -> int:
    """`openclaw-rl judge`: the worker as its own process against an existing store.

    Its teacher (and a `--local-weights current` judge) is a policy engine of its own that
    follows the files channel: before each batch of turns it loads the newest published
    version, so teacher log-probs come from the policy serving has, not the one at start; with
    --personal-adapters on, each user's adapter version the store names instead (the base frozen)."""
    store = open_store(part.store, part.data_dir, part.log_text, part.redact)
    model_dir = resolve_model_dir(part.model or None)
    serve = ServeConfig(model=str(model_dir), data_dir=str(part.data_dir), personal_adapters=part.personal_adapters)
    worker = standalone_judge(store, serve, model_dir, config)
    engine = worker.teacher_engine

    async def main() -> int:
        try:
            if part.once:
                return await worker.drain()
            await worker.run(asyncio.Event())
            return worker.judged
        finally:
            await engine.aclose()

    return asyncio.run(main())


def train_process(data_dir: str, model: str, config: TrainConfig, resume: bool, max_steps: int = 0,
                  store_url: str = "", personal_adapters: str = "off", personal_resident: int = MAX_RESIDENT) -> int:
    """`openclaw-rl train`: the trainer as its own process; weights go to DATA_DIR/weights.
    Under torchrun with more than one rank (`train --nproc N` starts it), the policy is sharded
    over the ranks (train/sharded.py) and this is one rank of them. With `personal_adapters`
    "on", each user's adapter instead (`personal_train_process`)."""
    if personal_adapters == "on":
        return personal_train_process(data_dir, model, config, max_steps, store_url, personal_resident)
    if sharded.world_size() > 1:
        return _sharded_train_process(data_dir, model, config, resume, max_steps, store_url)
    store = open_store(store_url, data_dir)
    if not config.train_threads:
        config = dataclasses.replace(config, train_threads=2)
    trainer = load_trainer(resolve_model_dir(model or None), Path(data_dir), config, resume, store)
    return _run(build_trainer_loop(store, trainer, config, [FilesChannel(data_dir)]), max_steps)


def _sharded_train_process(data_dir: str, model: str, config: TrainConfig, resume: bool, max_steps: int,
                           store_url: str) -> int:
    """One rank of a sharded `openclaw-rl train`: rank 0 runs the loop of one process with a
    ShardedTrainer, the others follow it (train/sharded.py); every rank gets an equal share
    of the cores unless --train-threads says otherwise. SIGTERM (torchrun passes it to every
    rank) stops rank 0 after the step in progress, with a final checkpoint the followers
    write their shards of, so they ignore it and end when rank 0 leads them out."""
    world = sharded.world_size()
    sharded.refuse_gate_when_sharded(config, world)  # before it joins the group
    if not config.train_threads:
        config = dataclasses.replace(config, train_threads=max(1, (os.cpu_count() or 1) // world))
    torch.set_num_threads(config.train_threads)
    rank = sharded.init_from_env()
    try:
        if rank == 0:
            resolve_model_dir(model or None)  # converts the bundled model once, before the others look
        torch.distributed.barrier()
        model_dir = resolve_model_dir(model or None)
        if rank != 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            sharded.ShardedTrainer(model_dir, config).follow()
            return 0
        store = open_store(store_url, data_dir)
        trainer = load_trainer(model_dir, Path(data_dir), config, resume, store, make=sharded.ShardedTrainer)
        try:
            return _run(build_trainer_loop(store, trainer, config, [FilesChannel(data_dir)]), max_steps,
                        stop_on_sigterm=True)
        finally:
            trainer.stop_followers()
    finally:
        torch.distributed.destroy_process_group()


def personal_train_process(data_dir: str, model: str, config: TrainConfig, max_steps: int = 0, store_url: str = "",
                           resident: int = MAX_RESIDENT) -> int:
    """`openclaw-rl train --personal-adapters on`: each user's adapter trained here (run_personal),
    beside `serve --personal-adapters on --no-train` on the same data dir and store, which serves
    each version once the store records it; the steps taken (one per user's step, a rejected
    candidate's too), until `max_steps` (0: until stopped). SIGTERM ends it after the step in
    progress. Each user's adapter, moments and history are on disk: there is nothing to resume."""
    store = open_store(store_url, data_dir)
    if not config.train_threads:
        config = dataclasses.replace(config, train_threads=2)
    personal = build_personal_trainer(store, data_dir, model, config, resident)
    steps = 0

    async def main() -> None:
        stop = asyncio.Event()
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

        def on_step(user: str, version: int | None) -> None:
            nonlocal steps
            steps += 1
            if max_steps and steps >= max_steps:
                stop.set()

        await run_personal(store, personal, config, stop, on_step=on_step)

    started = time.monotonic()
    asyncio.run(main())
    log.info("trained %d personal adapter steps in %.0f s", steps, time.monotonic() - started)
    return steps


@dataclass(frozen=True)
class Promotion:
    """What `promote` did: per user, their samples it claimed (used, dropped as stale, rejected by
    the method), the steps taken, the versions the gate accepted and rejected, the shared model's
    version now and the promoted model directory personal adapters now sit on (None: none yet)."""

    claims: dict[str, dict[str, int]]
    steps: int
    accepted: list[int]
    rejected: list[int]
    policy_version: int
    base: PromotedBase | None
    adapters_reset: list[str]


def promote(part: PromoteConfig, config: TrainConfig) -> Promotion:
    """`openclaw-rl promote`: train the shared model on the named users' ready samples only, with
    the standard trainer (`openclaw-rl train`'s loop, resumed from the latest checkpoint so that
    promotions stack), claimed under the shared method's name, so a sample is promoted once;
    every step ready is taken, partial batches too (Flush), until none of theirs is left or
    --max-steps. Then the checkpoint is written as the promoted model that `serve
    --personal-adapters on` builds on (train/promotion.py). For a stopped server's data dir."""
    data_dir = Path(part.data_dir)
    if not part.store and not (data_dir / SQLITE_FILE).is_file():
        raise PromotionError(f"{data_dir} holds no store ({SQLITE_FILE}): give the data dir a server wrote "
                             "(serve --data-dir), or --store URL for a PostgreSQL store")
    store = open_store(part.store, data_dir)
    users = part.user_names
    method = get_method(config.method).name
    check_promotable(store, data_dir, users, method)
    if not config.train_threads:
        config = dataclasses.replace(config, train_threads=2)
    trainer = load_trainer(resolve_model_dir(part.model or None), data_dir, config, True, store)
    start_step, started_at = trainer.train_step, time.time()
    loop = build_trainer_loop(store, trainer, config, [FilesChannel(data_dir)], flush=Flush(), owners=users)
    steps = _run(loop, start_step + part.max_steps if part.max_steps else 0) - start_step
    base = export_promoted(data_dir) if steps else promoted_base(data_dir, trainer.model_dir)
    claims = store.claims_by_owner(method, started_at, users)
    versions = [v for v in store.versions(limit=2 * steps + 10) if (v["train_step"] or 0) > start_step]
    accepted = sorted(v["version"] for v in versions if v["gate"] in ("accepted", "ungated"))
    # an adapter goes only where its user's data went into the shared model: trained, and a version accepted
    reset = [user for user in users if part.reset_adapters and accepted and claims[user]["used"]
             and remove_adapter(data_dir, user, store)]
    return Promotion(claims, steps, accepted, sorted(v["version"] for v in versions if v["gate"] == "rejected"),
                     store.policy_version(), base, reset)


def _run(loop: TrainerLoop, max_steps: int, stop_on_sigterm: bool = False) -> int:
    """Run a trainer loop until `max_steps` (0: until stopped); the steps taken. `stop_on_sigterm`:
    SIGTERM ends the loop after the step in progress, with a final checkpoint. With the loop's
    `flush`, it asks for every ready step from the start and ends once none is left."""
    trainer = loop.trainer

    async def until_drained(stop: asyncio.Event) -> None:
        assert loop.flush is not None
        loop.flush.requested.set()
        while not loop.flush.done.is_set() and not stop.is_set():
            await asyncio.sleep(0.05)
        stop.set()

    async def main() -> int:
        stop = asyncio.Event()
        if stop_on_sigterm:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await loop.catch_up()  # resumed or renumbered
        drained = asyncio.ensure_future(until_drained(stop)) if loop.flush is not None else None

        def on_step(stats: dict) -> None:
            if max_steps and trainer.train_step >= max_steps:
                stop.set()

        started = time.monotonic()
        try:
            await dataclasses.replace(loop, on_step=on_step).run(stop)
        finally:
            if drained is not None:
                drained.cancel()
        log.info("trained %d steps in %.0f s", trainer.train_step, time.monotonic() - started)
        return trainer.train_step

    return asyncio.run(main())
