"""The composition root: every engine, store, judge, trainer and publisher is built here.

`serve`, `judge`, `train`, the drivers (`simulate`, `agent`) and the Ray actors all get
their parts from these functions, so a new kind of part (an engine, a judge backend, a
weights transport) is wired in one place, and the update gate of the next issue sits in
one place too: between `load_trainer` and the `Publisher` built beside it. The loops
that run beside serving (judge, trainer, status) are in `loop.py`; this module only
decides what is built, from which config, with how many threads.

Thread budget: torch thread pools are per OS thread, and two pools of 2 threads on 2
cores slow each other 5-10x. With training in-process, serving and training get one
thread each unless told otherwise; serving borrows the trainer's between its steps
(`trainer_core_lender`), and the trainer borrows serving's once no engine has had work
for `LEND_AFTER_IDLE_S` (`idle_core_lender`).

The interpreter is shared too: a model thread takes the GIL back after every torch op,
and with Python's default 5 ms switch interval it waits behind any thread that runs
Python (HTTP streams, the judge, simulated users) up to 5 ms each time. Measured here:
one training step of the default model, 2.9 s alone, took 16.3 s beside one busy Python
thread and 4.9 s with a 0.5 ms interval. So every process with a model thread in it
switches every `SWITCH_INTERVAL_S`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import uvicorn
import yaml
from fastapi import FastAPI
from transformers import AutoTokenizer

from openclaw_rl.config import ConfigError, JudgeConfig, JudgeProcessConfig, ServeConfig, TrainConfig
from openclaw_rl.engine.base import Engine
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.precision import dtype_name, resolve_dtype
from openclaw_rl.engine.sglang import SGLangEngine
from openclaw_rl.engine.vllm import VLLMEngine
from openclaw_rl.engine.vllm_server import VLLMServer
from openclaw_rl.judge.backends import LocalChatBackend, OpenAIChatBackend
from openclaw_rl.judge.hint_check import Comparer, HintAgreementComparer, PairwiseComparer
from openclaw_rl.judge.worker import EmbeddingJudge, Judge, JudgeWorker, LLMJudge
from openclaw_rl.loop import judge_loop, status_loop, train_loop
from openclaw_rl.net import is_loopback
from openclaw_rl.privacy import parse_kinds
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.server import Server
from openclaw_rl.store import Store, make_store
from openclaw_rl.train import checkpoint, sharded
from openclaw_rl.train.methods import get_method
from openclaw_rl.train.gate import Gate, Scorer, auto_off_reason, read_probe_file
from openclaw_rl.train.runner import Flush, run_trainer
from openclaw_rl.train.trainer import TIS_CAP, Trainer
from openclaw_rl.train.versions import VersionArchive
from openclaw_rl.train.weights import EngineChannel, FilesChannel, Publisher, WeightsChannel, follow
from openclaw_rl.users import Users

log = logging.getLogger(__name__)

LEND_AFTER_IDLE_S = 5.0  # serving's core goes to training after this long without a request


def build_server(config: ServeConfig, threads: int | None = None, lora_rank: int = 0, name: str = "") -> Server:
    model_dir = resolve_model_dir(config.model or None)
    engine = build_engine(config, model_dir, threads, lora_rank, name)
    store = open_store(config.store, config.data_dir, config.log_text, config.redact)
    return Server(engine=engine, tokenizer=engine.tokenizer, store=store, config=config,
                  model_name=engine.model_name, metrics=Metrics(), users=Users(config.data_dir, config.api_key))


def open_store(url: str, data_dir: str | Path, log_text: str = "redacted", redact: str = "all") -> Store:
    """The store of a process that writes logs, with its `--log-text` and `--redact`."""
    try:
        kinds = parse_kinds(redact)
    except ValueError as error:
        raise ConfigError(f"--redact {redact!r}: {error}") from error
    return make_store(url, data_dir=data_dir, log_text=log_text, redact_kinds=kinds)  # type: ignore[arg-type]


def check_exposure(config: ServeConfig, users: Users) -> None:
    """Refuse to serve other machines without a key; say what is in force either way."""
    if users.keys_configured:
        log.info("API keys required: %s", "users of " + str(users.path) if users.list() else "--api-key")
        return
    if not is_loopback(config.host):
        raise ConfigError(
            f"refusing to serve on {config.host} with no API key: anyone who can reach it could read and steer "
            f"every conversation. Add a user (openclaw-rl users add NAME --data-dir {config.data_dir}) or pass "
            "--api-key KEY, or bind to 127.0.0.1")
    log.warning("no API key configured: serving on loopback (%s) only, every request is the local admin; "
                "add users with `openclaw-rl users add NAME --data-dir %s`", config.host, config.data_dir)


SWITCH_INTERVAL_S = 0.0005


def share_the_interpreter() -> None:
    """Let model threads take the GIL back quickly (see the module docstring)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)


def build_engine(config: ServeConfig, model_dir: Path, threads: int | None = None, lora_rank: int = 0,
                 name: str = "") -> Engine:
    """The engine `--engine` names: in this process, or a vLLM / SGLang server over HTTP.
    `--engine vllm` without `--engine-url` starts a vLLM server here (with LoRA slots of
    `lora_rank` when the trainer trains an adapter) that stops with the engine. `name`
    keeps the weights dir and server log of several engines sharing a data dir apart
    (Ray replicas)."""
    if config.engine == "local":
        share_the_interpreter()
        return LocalEngine(model_dir, threads=threads or config.threads or None, max_batch_size=config.max_batch_size,
                           dtype=config.dtype)
    weights_dir = Path(config.data_dir) / "engine-weights"  # the remote server must be able to read it
    if name:
        weights_dir = weights_dir / name
    if config.engine == "sglang":
        return SGLangEngine(config.engine_url, model_dir, weights_dir=weights_dir)
    launched = None
    if not config.engine_url:
        launched = VLLMServer(model_dir, python=config.vllm_python, lora_rank=lora_rank,
                              log_path=Path(config.data_dir) / (f"vllm-{name}.log" if name else "vllm.log"),
                              dtype=dtype_name(resolve_dtype(config.dtype, _device())),
                              gpu_memory_utilization=config.gpu_memory_utilization)
        launched.start()
    try:
        return VLLMEngine(config.engine_url or launched.url, model_dir, weights_dir=weights_dir, server=launched)
    except BaseException:
        if launched is not None:
            launched.stop()
        raise


def build_judge(config: JudgeConfig, model_dir: Path, policy_engine: Engine) -> Judge | None:
    """The judge the config names; `policy_engine` serves `--local-weights current`."""
    if config.judge == "off":
        return None
    if config.judge == "embedding":
        return EmbeddingJudge()
    if config.judge == "openai":
        backend = OpenAIChatBackend(config.openai_base_url, config.openai_model, config.openai_api_key_env,
                                    config.call_timeout_s)
        return LLMJudge(backend, config, count_tokens=lambda text: len(text) // 4)
    engine = policy_engine
    if config.local_weights == "initial":  # a frozen copy, as in the paper, on one thread of its own
        engine = LocalEngine(model_dir, threads=1, max_batch_size=16)
    tokenizer = engine.tokenizer
    return LLMJudge(LocalChatBackend(engine, tokenizer, name=f"local:{config.local_weights}"), config,
                    count_tokens=lambda text: len(tokenizer.encode(text)))


def hint_comparer(judge: Judge, config: JudgeConfig) -> Comparer:
    """The hint check's comparer for a judge (judge/hint_check.py): a chat judge's preference
    between the two answers, or the embedding judge's closeness to the hint."""
    if isinstance(judge, LLMJudge):
        return PairwiseComparer(judge.backend, max_tokens=config.judge_max_tokens,
                                context_token_budget=config.context_token_budget, count_tokens=judge.count_tokens)
    if isinstance(judge, EmbeddingJudge):
        return HintAgreementComparer(judge.classifier.featurizer.encoder)
    raise ValueError(f"the hint check has no comparer for the {judge.name} judge; in simulate use --hint-check "
                     "rubric (the persona's rubric decides), else turn --hint-check off")


def load_trainer(model_dir: Path, data_dir: Path, config: TrainConfig, resume: bool, store: Store | None = None,
                 make: Callable[[Path, TrainConfig], Trainer] = Trainer):
    """A trainer at the latest checkpoint (with --resume), else at the base model (v0).

    Versions only go up, across crashes too: a number once published or served names one
    set of weights forever. When a version above the trainer's was ever published (the
    files channel) or recorded (the store: announced, or on a turn), as after a SIGKILL
    between checkpoints, the trainer's weights are renumbered above all of them and the
    number is reserved in the store before anything serves it. Weights and optimizer
    state are the checkpoint's either way.
    """
    store = store or Store(data_dir)
    latest = checkpoint.load_latest(data_dir) if resume else None
    share_the_interpreter()
    trainer = make(model_dir, config)
    if latest is not None:
        checkpoint.restore(trainer, latest)
        log.info("resumed from %s: step %d, policy v%d", latest.path, trainer.train_step, trainer.policy_version)
    taken = max(store.highest_policy_version(), FilesChannel(data_dir).highest_version() or 0)
    if taken > trainer.policy_version:
        held = trainer.policy_version
        trainer.renumber(taken + 1)
        store.set_policy_version(trainer.policy_version)
        log.warning("versions up to v%d were published after the weights held (v%d); they are now v%d",
                    taken, held, trainer.policy_version)
    return trainer


def build_app(config: ServeConfig, judge: JudgeConfig, train: TrainConfig, judge_override: Judge | None = None,
              channels: Sequence[WeightsChannel] = (), scorer: Scorer | None = None,
              flush: Flush | None = None, comparer: Comparer | None = None) -> tuple[Server, FastAPI]:
    """The serving process: engine, store, app, and the loops that run beside it.

    `judge_override` replaces the configured judge (the simulator's oracle); `channels`
    get every policy version after the engine has it (the simulator's evaluator); `scorer`
    adds a score check to the update gate (the simulator's persona rubric); `comparer`
    replaces the judge's own in the hint check (the simulator's rubric); `flush` drains
    the in-process trainer at the end of a finite run (the simulator's). Without
    training, the engine follows the files channel a separate trainer publishes to."""
    threads = 1 if config.train and not config.threads else None  # one core each for serving and training
    lend = threads == 1 and not train.train_threads and (os.cpu_count() or 1) >= 2  # serving's core, when idle
    if config.train and not train.train_threads:
        train = dataclasses.replace(train, train_threads=1)
    if config.train and train.tis_cap is None and resolve_dtype(config.dtype, _device()) != torch.float32:
        train = dataclasses.replace(train, tis_cap=TIS_CAP)  # the engine samples below the trainer's float32
    server = build_server(config, threads, lora_rank=train.lora_rank if config.train and train.lora else 0)
    loops = [status_loop(server, config.status_interval_s)] if config.status_interval_s else []
    # the judge writes signals for any method; a teacher that only this process's trainer would read, and
    # does not, is not scored (get_method also fails fast on a bad name, before the trainer loads)
    teacher_targets = get_method(train.method).reads_teacher or not config.train
    teacher = None  # a frozen engine of the judge's, when it scores with the initial weights
    if (reader := judge_override or build_judge(judge, server.engine.model_dir, server.engine)) is not None:
        teacher = (build_engine(config, server.engine.model_dir, threads, name="teacher")
                   if judge.teacher == "initial" and teacher_targets else None)
        if judge.hint_check == "on":
            comparer = comparer or hint_comparer(reader, judge)
        loops.append(judge_loop(server, reader, judge, teacher_targets, teacher, comparer))
        if teacher is not None:
            loops.append(_closed_at_stop(teacher))
    if config.train and config.train_nproc > 1:  # a sharded trainer of its own beside serving
        loops += [trainer_process(config, train, server.engine.model_dir), follow(FilesChannel(config.data_dir),
                                                                                server.engine)]
    elif config.train:
        trainer = load_trainer(server.engine.model_dir, Path(config.data_dir), train, config.resume, server.store)
        if lend:
            trainer.threads = idle_core_lender([server.engine, teacher])
            server.engine.threads_now = trainer_core_lender(trainer, server.engine)
        publisher = Publisher.for_trainer(trainer, [EngineChannel(server.engine), *channels])
        asyncio.run(publisher.catch_up(trainer.policy_version, parent=trainer.parent_version))
        gate, archive = build_updates(trainer, train, server.store, server.tokenizer, scorer)
        loops.append(train_loop(server, train, trainer, publisher, gate, archive, flush))
    else:
        loops.append(follow(FilesChannel(config.data_dir), server.engine))
    app = create_app(server, loops)
    log.info("serving %s (policy version %d) on http://%s:%d, data in %s; training %s", server.model_name,
             server.engine.policy_version, config.host, config.port, config.data_dir,
             f"on ({train.method}, batch {train.batch_size})" if config.train else "off")
    return server, app


def idle_core_lender(engines: Sequence[Engine | None], quiet_s: float = LEND_AFTER_IDLE_S) -> Callable[[], int]:
    """The in-process trainer's threads for its next micro-batch: serving's core too once no
    engine of the process has had work for `quiet_s` (one that cannot tell is never idle), so
    the core is lent when traffic stops, not in the gaps between one user's turns. A request
    that arrives meanwhile shares a core with training for at most one micro-batch."""
    engines = [e for e in engines if e is not None]

    def threads() -> int:
        idle = [getattr(e, "idle_s", None) for e in engines]
        return 2 if all(s is not None and s >= quiet_s for s in idle) else 1

    return threads


def trainer_core_lender(trainer: Trainer, engine: Engine) -> Callable[[], int] | None:
    """Serving's threads for its next step: the trainer's core too while it is not in a step
    (its gate checks and writes run at a lower priority, train/runner.py). A step that starts
    meanwhile shares a core with decoding for at most one decode step. None: the engine
    cannot take it (no `threads_now`). Asked only where `build_app` lends cores (2 or more)."""
    if not hasattr(engine, "threads_now"):
        return None
    return lambda: 1 if trainer.stepping else 2


def warn_if_short_of_disk(data_dir: str | Path, needed: int) -> bool:
    """Log a warning (and return True) when DATA_DIR's disk has less free space than the
    trainer will write: said at start, not when a checkpoint fails later."""
    free = shutil.disk_usage(data_dir).free
    if free >= needed:
        return False
    log.warning("%s has %.1f GB free, and training writes about %.1f GB there (3 checkpoints with the optimizer "
                "state, and --keep-versions versions); free some space or lower --keep-versions, or the trainer "
                "stops at its first write that does not fit (GET /healthz then says degraded)",
                data_dir, free / 1e9, needed / 1e9)
    return True


def build_updates(trainer: Trainer, config: TrainConfig, store: Store, tokenizer=None,
                  scorer: Scorer | None = None) -> tuple[Gate | None, VersionArchive]:
    """What a trainer's new versions pass through: the update gate (`--gate on`, or `auto` with a
    trainer that is not sharded; `scorer`, e.g. a persona's rubric, adds a score check) and the
    archive that keeps them for rollback. `tokenizer`: the model's (loaded from the trainer's
    model dir when the gate needs it)."""
    archive = VersionArchive(store.data_dir, config.keep_versions, store.protected_versions)
    warn_if_short_of_disk(store.data_dir, checkpoint.disk_needed(trainer, config.keep_versions))
    if config.gate == "off":
        return None, archive
    if config.gate == "auto" and (why := auto_off_reason(trainer)):
        log.warning("the update gate is off (--gate auto): %s; --gate on or off says which you want", why)
        return None, archive
    if tokenizer is None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(trainer.model_dir)
        except (OSError, ValueError) as e:
            if config.gate == "on":
                raise ConfigError(f"--gate on decodes probes with the model's tokenizer, and {trainer.model_dir} "
                                  f"has none that loads ({str(e).splitlines()[0]}); add the tokenizer files, or use --gate off") from e
            log.warning("the update gate is off (--gate auto): %s has no tokenizer that loads", trainer.model_dir)
            return None, archive
    extra = read_probe_file(config.gate_probe_file, tokenizer) if config.gate_probe_file else []

    def probes() -> list[list[int]]:
        found = store.probe_prompts(config.gate_probe_every, config.gate_max_probes, at_least=8)
        return [*extra, *found][:max(config.gate_max_probes, len(extra))]

    return Gate(trainer, config, tokenizer, probes, scorer, Path(store.data_dir) / "gate-anchors.json"), archive


def trainer_process(config: ServeConfig, train: TrainConfig, model_dir: Path):
    """`serve --train-nproc N`: `openclaw-rl train --nproc N` on this data dir with this [train]
    config, started with serving and stopped with it (SIGTERM to its process group: rank 0
    finishes its step and writes a final checkpoint). Its output goes to DATA_DIR/trainer.log."""
    if train.gate == "on":
        raise ConfigError("--gate on is not supported with --train-nproc > 1 (the gate decodes probes with the "
                          "trainer's model); use --train-nproc 1 with the gate, or --gate off")
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


def _device() -> str:
    """Where an engine started here runs (engine/precision.py resolves `auto` for it)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _closed_at_stop(engine: Engine):
    async def close(stop: asyncio.Event) -> None:
        await stop.wait()
        await engine.aclose()
    return close


def serve(config: ServeConfig, judge: JudgeConfig, train: TrainConfig) -> None:
    check_exposure(config, Users(config.data_dir, config.api_key))
    _, app = build_app(config, judge, train)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_graceful_shutdown=10)


def judge_process(part: JudgeProcessConfig, config: JudgeConfig) -> int:
    """`openclaw-rl judge`: the worker as its own process against an existing store.

    Its teacher (and a `--local-weights current` judge) is a policy engine of its own that
    follows the files channel: before each batch of turns it loads the newest published
    version, so teacher log-probs come from the policy serving has, not the one at start."""
    store = open_store(part.store, part.data_dir, part.log_text, part.redact)
    worker = standalone_judge(store, part.data_dir, resolve_model_dir(part.model or None), config)
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


def standalone_judge(store: Store, data_dir: str | Path, model_dir: Path, config: JudgeConfig,
                     judge: Judge | None = None) -> JudgeWorker:
    """The worker of `openclaw-rl judge`: a policy engine of its own as the teacher, following
    the files channel; `judge` replaces the configured one (tests). It knows no method: its
    samples serve trainers of any methods (--no-teacher-targets skips the teacher)."""
    engine = build_engine(ServeConfig(model=str(model_dir), data_dir=str(data_dir)), model_dir)
    judge = judge or build_judge(config, model_dir, engine)
    if judge is None:
        raise SystemExit("--judge off: nothing to run")
    channel = FilesChannel(data_dir)
    return JudgeWorker(store, judge, config, teacher_engine=engine, tokenizer=engine.tokenizer,
                       refresh=(lambda: channel.refresh(engine)) if config.teacher == "current" else None,
                       comparer=hint_comparer(judge, config) if config.hint_check == "on" else None)


def train_process(data_dir: str, model: str, config: TrainConfig, resume: bool, max_steps: int = 0,
                  store_url: str = "") -> int:
    """`openclaw-rl train`: the trainer as its own process; weights go to DATA_DIR/weights.
    Under torchrun with more than one rank (`train --nproc N` starts it), the policy is sharded
    over the ranks (train/sharded.py) and this is one rank of them."""
    if sharded.world_size() > 1:
        return _sharded_train_process(data_dir, model, config, resume, max_steps, store_url)
    store = make_store(store_url, data_dir=data_dir)
    if not config.train_threads:
        config = dataclasses.replace(config, train_threads=2)
    trainer = load_trainer(resolve_model_dir(model or None), Path(data_dir), config, resume, store)
    return _run_train_process(store, trainer, config, Path(data_dir), max_steps)


def _sharded_train_process(data_dir: str, model: str, config: TrainConfig, resume: bool, max_steps: int,
                           store_url: str) -> int:
    """One rank of a sharded `openclaw-rl train`: rank 0 runs the loop of one process with a
    ShardedTrainer, the others follow it (train/sharded.py); every rank gets an equal share
    of the cores unless --train-threads says otherwise. SIGTERM (torchrun passes it to every
    rank) stops rank 0 after the step in progress, with a final checkpoint the followers
    write their shards of, so they ignore it and end when rank 0 leads them out."""
    if config.gate == "on":
        raise ConfigError("--gate on is not supported with --nproc > 1 (the gate decodes probes with the "
                          "trainer's model); use --nproc 1 with the gate, or --gate off")
    world = sharded.world_size()
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
        store = make_store(store_url, data_dir=data_dir)
        trainer = load_trainer(model_dir, Path(data_dir), config, resume, store, make=sharded.ShardedTrainer)
        try:
            return _run_train_process(store, trainer, config, Path(data_dir), max_steps, stop_on_sigterm=True)
        finally:
            trainer.stop_followers()
    finally:
        torch.distributed.destroy_process_group()


def _run_train_process(store: Store, trainer: Trainer, config: TrainConfig, data_dir: Path, max_steps: int,
                       stop_on_sigterm: bool = False) -> int:
    """The trainer's loop against the store, publishing to DATA_DIR/weights; returns the steps taken.
    `stop_on_sigterm`: SIGTERM ends the loop after the step in progress, with a final checkpoint."""
    publisher = Publisher.for_trainer(trainer, [FilesChannel(data_dir)])

    async def main() -> int:
        stop = asyncio.Event()
        if stop_on_sigterm:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await publisher.catch_up(trainer.policy_version, parent=trainer.parent_version)  # resumed or renumbered

        def on_step(stats: dict) -> None:
            if max_steps and trainer.train_step >= max_steps:
                stop.set()

        started = time.monotonic()
        gate, archive = build_updates(trainer, config, store)
        await run_trainer(store, trainer, config, publisher, stop, on_step, gate=gate, archive=archive)
        log.info("trained %d steps in %.0f s", trainer.train_step, time.monotonic() - started)
        return trainer.train_step

    return asyncio.run(main())
