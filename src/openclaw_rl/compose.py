"""The composition root: every engine, store, judge, trainer and publisher is built here.

    build_stack(serve, judge, train, StackSpec)  the serving stack: server, its loops, the publisher
    standalone_judge(...)                        the judge worker of `openclaw-rl judge` and the Ray judges
    build_trainer_loop(...)                      the trainer loop of `openclaw-rl train` and the Ray trainer
    _add_personal(...)                           --personal-adapters on: each user's own adapter instead
    build_personal_trainer(...)                  their trainer in `openclaw-rl train --personal-adapters on`
    build_engine / build_judge / open_store / load_trainer / build_updates   the parts all of them share

`serve`, the drivers (`simulate`, `agent`) and the Ray actors all get their parts from
these functions, so a new kind of part (an engine, a judge backend, a weights transport) is
wired in one place. What differs between those deployments is named in one frozen record,
`StackSpec` (defaults: what `serve` does), not in hooks added to the builder one at a time.
Starting processes, torchrun ranks and signals is processes.py's; how serving and an
in-process trainer share the cores is train/cores.py's; the loops' story is loop.py's.

(Over 400 lines: it is the one composition root. Split, the builders every deployment
calls would be spread over modules again, which is what this module replaced.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from fastapi import FastAPI
from transformers import AutoTokenizer

from openclaw_rl.chat import render_prompt
from openclaw_rl.config import ConfigError, JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.engine.base import Engine
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.precision import dtype_name, needs_importance_correction, resolve_dtype
from openclaw_rl.engine.sglang import SGLangEngine
from openclaw_rl.engine.vllm import VLLMEngine
from openclaw_rl.engine.vllm_personal import MAX_LORAS
from openclaw_rl.engine.vllm_server import VLLMServer
from openclaw_rl.eval.bfcl import bfcl_probe
from openclaw_rl.eval.instructions import instruction_probe
from openclaw_rl.eval.retention import RetentionProbe, arithmetic_probe
from openclaw_rl.experience import ConsolidationPolicy, GateDecision, place
from openclaw_rl.judge.absorption import served_with_block
from openclaw_rl.judge.backends import LocalChatBackend, OpenAIChatBackend, SentenceEncoder
from openclaw_rl.judge.experience_gate import ExperienceGate
from openclaw_rl.judge.hint_check import Comparer, HintAgreementComparer, PairwiseComparer
from openclaw_rl.judge.lessons import LessonLearner, policy_token_counter
from openclaw_rl.judge.worker import EmbeddingJudge, Judge, JudgeWorker, LLMJudge
from openclaw_rl.loop import count_experience_gate, count_verdicts, record_train_steps, show_candidates, status_loop
from openclaw_rl.privacy import parse_kinds
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.server import Background, Server
from openclaw_rl.store import Store, make_store
from openclaw_rl.train import checkpoint
from openclaw_rl.train.cores import idle_core_lender, share_the_interpreter, trainer_core_lender
from openclaw_rl.train.gate import Gate, Scorer, auto_off_reason, read_probe_file, read_probe_messages
from openclaw_rl.train.methods import get_method
from openclaw_rl.train.personal import RANK as PERSONAL_RANK
from openclaw_rl.train.personal import GateFor, PersonalAdapters, personal_config, run_personal
from openclaw_rl.train.personal_history import AdapterHistory, follow_adapters
from openclaw_rl.train.promotion import promoted_base
from openclaw_rl.train.runner import Flush, run_trainer
from openclaw_rl.train.sharded import refuse_gate_when_sharded
from openclaw_rl.train.trainer import TIS_CAP, Trainer
from openclaw_rl.train.versions import VersionArchive, newest_published, resume_from_published
from openclaw_rl.train.weights import EngineChannel, FilesChannel, Publisher, WeightsChannel, follow
from openclaw_rl.types import Verdict
from openclaw_rl.users import Users

log = logging.getLogger(__name__)

# Where a stack's policy is trained: by a trainer in this process; by a sharded trainer in processes
# of its own (processes.py starts them) publishing to the files channel; by someone else publishing
# there (`serve --no-train` beside `openclaw-rl train`); or nowhere (nothing is followed).
Training = Literal["in_process", "sharded", "follow_files", "off"]


@dataclass(frozen=True)
class StackSpec:
    """What varies between the deployments of a serving stack; the defaults are what `serve` does.

    A deployment that needs a new variation adds a field here, read in `build_stack` only."""

    training: Training | None = None  # None: as ServeConfig says (train, train_nproc)
    channels: tuple[WeightsChannel, ...] = ()  # get every version after the engine (the simulator's evaluator)
    judge: Judge | None = None  # replaces the configured judge (the simulator's oracle)
    write_samples: bool = True  # False: the judge writes verdicts only, the caller the samples (the agent driver)
    teacher_targets: bool | None = None  # None: when a method trained here reads them, or nothing trains here
    scorer: Scorer | None = None  # adds a score check to the update gate (the simulator's persona rubric)
    comparer: Comparer | None = None  # replaces the judge's own in the hint check (the simulator's rubric)
    flush: Flush | None = None  # drains the in-process trainer at the end of a finite run (simulate, agent)


@dataclass
class Stack:
    """A serving stack as built: the server, the loops to run beside it, and what its callers
    reach into: the judge it runs, the in-process trainer and its publisher, the [train]
    settings as adjusted for this process (threads, TIS cap)."""

    server: Server
    loops: list[Background]
    training: Training
    train: TrainConfig
    judge: Judge | None = None
    trainer: Trainer | None = None
    publisher: Publisher | None = None
    flush: Flush | None = None

    def app(self, *more: Background) -> FastAPI:
        """The serving app with the stack's loops (and `more`) beside it until shutdown."""
        return create_app(self.server, [*self.loops, *more])


@dataclass
class TrainerLoop:
    """A trainer, what its new versions pass through (the gate, the archive) and where they go
    (the publisher): the trainer loop of every deployment (`build_trainer_loop`)."""

    store: Store
    trainer: Trainer
    config: TrainConfig
    publisher: Publisher
    gate: Gate | None
    archive: VersionArchive
    on_step: Callable[[dict], None] | None = None
    flush: Flush | None = None
    owners: tuple[str, ...] | None = None  # train only these users' samples (a promotion: processes.promote)

    async def catch_up(self) -> None:
        """Deliver the version the trainer holds (resumed or renumbered) to the channels that lack it."""
        await self.publisher.catch_up(self.trainer.policy_version, parent=self.trainer.parent_version)
        if await asyncio.to_thread(self.store.policy_version) < self.trainer.policy_version:  # a crash came first
            await asyncio.to_thread(self.store.set_policy_version, self.trainer.policy_version, self.trainer.train_step)

    async def run(self, stop: asyncio.Event) -> None:
        """Claim, step, let the gate decide, publish; until `stop` (train/runner.py)."""
        await run_trainer(self.store, self.trainer, self.config, self.publisher, stop, self.on_step, flush=self.flush,
                          gate=self.gate, archive=self.archive, owners=self.owners)


def build_stack(config: ServeConfig, judge: JudgeConfig, train: TrainConfig, spec: StackSpec = StackSpec()) -> Stack:
    """The serving process: engine, store, and the loops that run beside it (judge, trainer or a
    weights follower, status line), as `spec` varies them. With training in-process, serving
    and training get one core-thread each unless told otherwise (train/cores.py). A sharded
    trainer's processes are the caller's to start (processes.serving_app does, with `Stack.train`)."""
    training = spec.training or training_of(config)
    if training == "sharded":  # before anything loads
        refuse_gate_when_sharded(train, config.train_nproc, "--train-nproc")
    if config.personal_adapters == "on" and training not in ("in_process", "follow_files"):
        raise ConfigError(f"--personal-adapters on trains each user's adapter in this process, or in `openclaw-rl "
                          f"train --personal-adapters on` beside --no-train; this stack trains "
                          f"{training.replace('_', ' ')}: use --train with --train-nproc 1")
    trains = training in ("in_process", "sharded")
    threads = 1 if trains and not config.threads else None  # one core each for serving and training
    lend = training == "in_process" and threads == 1 and not train.train_threads and (os.cpu_count() or 1) >= 2
    if trains:
        train = _train_beside_serving(config, train)
    if config.personal_adapters == "on":  # every user's adapter beside the base (a vLLM server's LoRA slots)
        server = personal_server(config, threads)
    else:
        server = build_server(config, threads, lora_rank=train.lora_rank if trains and train.lora else 0)
    stack = Stack(server, [status_loop(server, config.status_interval_s)] if config.status_interval_s else [],
                  training, train, flush=spec.flush)
    # the judge writes signals for any method; a teacher that only this process's trainer would read, and
    # does not, is not scored (get_method also fails fast on a bad name, before the trainer loads)
    teacher_targets = spec.write_samples and (
        spec.teacher_targets if spec.teacher_targets is not None
        else get_method(train.method).reads_teacher or not trains)
    # the experience pass (consolidate's two prefills per turn served with a block) likewise
    experience_targets = spec.write_samples and (get_method(train.method).reads_experience or not trains)
    if teacher_targets != experience_targets:  # the worker's engine scores both; the flag says which
        judge = dataclasses.replace(judge, teacher_targets=judge.teacher_targets and teacher_targets,
                                    experience_targets=judge.experience_targets and experience_targets)
    teacher = _add_judge(stack, config, judge, spec, teacher_targets or experience_targets, threads)
    if training == "in_process" and config.personal_adapters == "on":
        _add_personal(stack, config, train, spec)
    elif config.personal_adapters == "on":  # --no-train: the adapters `openclaw-rl train` writes, the base frozen
        _follow_personal(stack, config)
    elif training == "in_process":
        _add_trainer(stack, config, train, spec, lend, teacher)
    elif training != "off":
        stack.loops.append(follow(FilesChannel(config.data_dir), server.engine))
    log.info("serving %s (policy version %d) on http://%s:%d, data in %s; training %s", server.model_name,
             server.engine.policy_version, config.host, config.port, config.data_dir,
             f"on ({train.method}, batch {train.batch_size})" if trains else "off")
    return stack


def training_of(config: ServeConfig) -> Training:
    """Where `serve` with this config trains: --train (--train-nproc N > 1: sharded), else --no-train."""
    if not config.train:
        return "follow_files"
    return "sharded" if config.train_nproc > 1 else "in_process"


def _train_beside_serving(config: ServeConfig, train: TrainConfig) -> TrainConfig:
    """[train] as a trainer beside this serving engine runs it: one thread unless told, and the
    TIS cap when the engine's log-probs need it (engine/precision.py: below float32)."""
    if not train.train_threads:
        train = dataclasses.replace(train, train_threads=1)
    if train.tis_cap is None and needs_importance_correction(_device(), resolve_dtype(config.dtype, _device())):
        train = dataclasses.replace(train, tis_cap=TIS_CAP)
    return train


def _add_judge(stack: Stack, config: ServeConfig, judge: JudgeConfig, spec: StackSpec, teacher_targets: bool,
               threads: int | None) -> Engine | None:
    """The judge worker beside serving, the serving engine its teacher (so teacher log-probs come
    from the version being served) unless --teacher initial gives it a frozen engine of its own;
    that engine, if any."""
    server = stack.server
    stack.judge = spec.judge or build_judge(judge, server.engine.model_dir, server.engine)
    if stack.judge is None:
        return None
    teacher = (build_engine(config, server.engine.model_dir, threads, name="teacher")
               if judge.teacher == "initial" and teacher_targets and judge.teacher_targets else None)
    comparer = None
    if judge.hint_check == "on" and spec.write_samples:  # hints are checked only where samples are written
        comparer = spec.comparer or hint_comparer(stack.judge, judge)
    worker = _judge_worker(server.store, stack.judge, judge, (teacher or server.engine) if teacher_targets else None,
                           tokenizer=server.tokenizer, comparer=comparer, write_samples=spec.write_samples, on_verdict=count_verdicts(server),
                           max_staleness=stack.train.max_staleness if stack.training in ("in_process", "sharded") else None,
                           experience_gate=build_experience_gate(server.store, judge, config, server.engine,
                                                                 count_experience_gate(server)))
    stack.loops.append(worker.run)
    if teacher is not None:
        stack.loops.append(_closed_at_stop(teacher))
    return teacher


def _add_trainer(stack: Stack, config: ServeConfig, train: TrainConfig, spec: StackSpec, lend: bool,
                 teacher: Engine | None) -> None:
    """The in-process trainer: its versions go to the serving engine, then to `spec.channels`."""
    server = stack.server
    trainer = load_trainer(server.engine.model_dir, Path(config.data_dir), train, config.resume, server.store)
    if lend:
        trainer.threads = idle_core_lender([server.engine, teacher], device=trainer.device)
        server.engine.threads_now = trainer_core_lender(trainer, server.engine)
    loop = build_trainer_loop(server.store, trainer, train, [EngineChannel(server.engine), *spec.channels],
                              tokenizer=server.tokenizer, scorer=spec.scorer,
                              on_step=record_train_steps(server, trainer), flush=spec.flush)
    asyncio.run(loop.catch_up())
    show_candidates(server, loop.gate)
    stack.trainer, stack.publisher = trainer, loop.publisher
    stack.loops.append(loop.run)


def _add_personal(stack: Stack, config: ServeConfig, train: TrainConfig, spec: StackSpec) -> None:
    """Personal adapters instead of the shared trainer (train/personal.py): one LoRA trainer steps
    each user's adapter in turn, each candidate through that user's own update gate, and the
    serving engine serves every user their own; the users' adapters on disk serve from the start."""
    server = stack.server
    share_the_interpreter()
    trainer = Trainer(server.engine.model_dir, personal_config(train))
    personal = PersonalAdapters(trainer, config.data_dir, [server.engine], store=server.store,
                                gate=personal_gates(trainer, train, server.store, server.tokenizer, spec.scorer),
                                max_resident=config.personal_resident)
    loaded = asyncio.run(personal.load_all())
    log.info("personal adapters on: %d users served their own adapter", len(loaded))
    server.personal = personal
    stack.loops.append(lambda stop: run_personal(server.store, personal, train, stop, spec.flush))


def _follow_personal(stack: Stack, config: ServeConfig) -> None:
    """Personal adapters trained by `openclaw-rl train --personal-adapters on` (`build_personal_trainer`)."""
    stack.loops.append(follow_personal(stack.server, config))


def follow_personal(server: Server, config: ServeConfig, load_now: bool = True) -> Background:
    """Serve each user the adapter version the store names, loaded from the data dir within a second
    of its record (train/personal_history.py), trained by another process (`openclaw-rl train
    --personal-adapters on`, a Ray trainer actor); rollback, pin, reset and the switch stay this
    server's (`server.personal`). The loop to run beside `server`. `load_now` False: the caller
    awaits `server.personal.sync()` itself before it takes requests (an event loop runs already)."""
    history = AdapterHistory(config.data_dir, [server.engine], store=server.store)
    if load_now:
        loaded = asyncio.run(history.sync())
        log.info("personal adapters on, trained by another process: %d users served their own adapter", len(loaded))
    server.personal = history
    return follow_adapters(history)


def build_personal_trainer(store: Store, data_dir: str | Path, model: str, train: TrainConfig,
                           max_resident: int) -> PersonalAdapters:
    """The trainer of `openclaw-rl train --personal-adapters on`: each user's adapter trained here and
    written to the data dir and the store, where `serve --personal-adapters on --no-train` picks it up.
    Built on the base that server serves (the data dir's promoted model, else `model`), with each
    user's update gate as in one process."""
    model_dir, _ = _personal_base(data_dir, resolve_model_dir(model or None))
    share_the_interpreter()
    trainer = Trainer(model_dir, personal_config(train))
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if train.gate != "off" else None
    return PersonalAdapters(trainer, data_dir, [], store=store, max_resident=max_resident,
                            gate=personal_gates(trainer, train, store, tokenizer) if tokenizer is not None else None)


def personal_server(config: ServeConfig, threads: int | None, name: str = "") -> Server:
    """The server of --personal-adapters on, with a slot for each user's adapter (a vLLM server's LoRA
    slots of the personal rank), on the personal base (`_personal_base`). The personal trainer
    builds on the engine's model dir, so on the same base."""
    model_dir = resolve_model_dir(config.model or None)
    base, version = _personal_base(config.data_dir, model_dir)
    if base != model_dir:
        config = dataclasses.replace(config, model=str(base))
    return build_server(config, threads, lora_rank=PERSONAL_RANK, name=name, max_loras=MAX_LORAS,
                        policy_version=version)


def _personal_base(data_dir: str | Path, model_dir: Path) -> tuple[Path, int]:
    """What every personal adapter sits on, and is served to users without one: the shared model of
    the data dir's last promotion (train/promotion.py), else `model_dir`; with its policy version."""
    base = promoted_base(data_dir, model_dir)
    if base is None:
        log.info("personal adapters: the base is %s (no promotion in %s)", model_dir, data_dir)
        return model_dir, 0
    log.info("personal adapters: the base is the promoted shared model, policy v%d (%s)", base.policy_version,
             base.path)
    return base.path, base.policy_version


def build_server(config: ServeConfig, threads: int | None = None, lora_rank: int = 0, name: str = "",
                 max_loras: int = 1, policy_version: int = 0) -> Server:
    """The engine (serving `policy_version` from the start), store and users of a serving process."""
    model_dir = resolve_model_dir(config.model or None)
    engine = build_engine(config, model_dir, threads, lora_rank, name, max_loras, policy_version)
    store = open_store(config.store, config.data_dir, config.log_text, config.redact)
    return Server(engine=engine, tokenizer=engine.tokenizer, store=store, config=config,
                  model_name=engine.model_name, metrics=Metrics(), users=Users(config.data_dir, config.api_key))


def open_store(url: str, data_dir: str | Path, log_text: str = "redacted", redact: str = "all") -> Store:
    """The one way to open a store: a `--store` URL, else the SQLite file in `data_dir`, with the
    process's `--log-text` and `--redact` (what its JSONL logs keep)."""
    try:
        kinds = parse_kinds(redact)
    except ValueError as error:
        raise ConfigError(f"--redact {redact!r}: {error}") from error
    return make_store(url, data_dir=data_dir, log_text=log_text, redact_kinds=kinds)  # type: ignore[arg-type]


def build_engine(config: ServeConfig, model_dir: Path, threads: int | None = None, lora_rank: int = 0,
                 name: str = "", max_loras: int = 1, policy_version: int = 0) -> Engine:
    """The engine `--engine` names: in this process, or a vLLM / SGLang server over HTTP.
    `--engine vllm` without `--engine-url` starts a vLLM server here (with `max_loras` LoRA
    slots of `lora_rank` when the trainer trains an adapter, or users get their own) that
    stops with the engine. `name`
    keeps the weights dir and server log of several engines sharing a data dir apart
    (Ray replicas). `policy_version`: the version `model_dir` holds (a promoted base's)."""
    if config.engine == "local":
        share_the_interpreter()
        return LocalEngine(model_dir, threads=threads or config.threads or None, max_batch_size=config.max_batch_size,
                           dtype=config.dtype, policy_version=policy_version)
    weights_dir = Path(config.data_dir) / "engine-weights"  # the remote server must be able to read it
    if name:
        weights_dir = weights_dir / name
    if config.engine == "sglang":
        return SGLangEngine(config.engine_url, model_dir, weights_dir=weights_dir, policy_version=policy_version)
    launched = None
    if not config.engine_url:
        launched = VLLMServer(model_dir, python=config.vllm_python, lora_rank=lora_rank, max_loras=max_loras,
                              log_path=Path(config.data_dir) / (f"vllm-{name}.log" if name else "vllm.log"),
                              dtype=dtype_name(resolve_dtype(config.dtype, _device())),
                              gpu_memory_utilization=config.gpu_memory_utilization)
        launched.start()
    try:
        return VLLMEngine(config.engine_url or launched.url, model_dir, weights_dir=weights_dir, server=launched,
                          policy_version=policy_version)
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


def standalone_judge(store: Store, serve: ServeConfig, model_dir: Path, config: JudgeConfig,
                     judge: Judge | None = None, *, teacher_targets: bool = True, follow_files: bool | None = None,
                     threads: int | None = None, name: str = "") -> JudgeWorker:
    """A judge worker with a policy engine of its own (the `serve` settings pick it) as its teacher:
    `openclaw-rl judge`, and each Ray judge (on its shard of the store). `follow_files` (default:
    with --teacher current) loads the newest published version before each batch of turns;
    `teacher_targets` False scores none; `judge` replaces the configured one (tests). It knows no
    method: its samples serve trainers of any methods. The engine is `worker.teacher_engine`.

    With `serve.personal_adapters` on, the engine holds the personal base (the data dir's
    promotion, else the model) and, before each batch of turns, every user's adapter version the
    store names (`AdapterHistory.sync`, as a --no-train server follows them), so a user's turn is
    scored under the adapter that served it (judge/teacher.py `personal_adapter`); the base is
    frozen then, so nothing follows the files channel."""
    if judge is None and config.judge == "off":  # before an engine (perhaps a vLLM server) starts
        raise ConfigError("--judge off: there is no judge to run")
    refresh: Callable[[], Awaitable[object]] | None = None
    if serve.personal_adapters == "on":
        base, version = _personal_base(serve.data_dir, model_dir)
        engine = build_engine(serve, base, threads, PERSONAL_RANK, name, MAX_LORAS, version)
        history = AdapterHistory(serve.data_dir, [engine], store=store)
        refresh = history.sync
    else:
        engine = build_engine(serve, model_dir, threads, name=name)
        channel = FilesChannel(serve.data_dir)
        if config.teacher == "current" if follow_files is None else follow_files:
            refresh = lambda: channel.refresh(engine)  # noqa: E731 - the one refresh of the shared model
    judge = judge or build_judge(config, model_dir, engine)
    assert judge is not None  # only --judge off builds none
    if not teacher_targets:
        config = dataclasses.replace(config, teacher_targets=False)
    return _judge_worker(store, judge, config, engine, tokenizer=engine.tokenizer,
                         comparer=hint_comparer(judge, config) if config.hint_check == "on" else None,
                         refresh=refresh, experience_gate=build_experience_gate(store, config, serve, engine))


def _judge_worker(store: Store, judge: Judge, config: JudgeConfig, teacher: Engine | None, *, tokenizer,
                  comparer: Comparer | None = None, refresh: Callable[[], Awaitable[object]] | None = None,
                  write_samples: bool = True, on_verdict: Callable[[Verdict], None] | None = None,
                  max_staleness: int | None = None, experience_gate: ExperienceGate | None = None) -> JudgeWorker:
    """Every judge worker of every deployment; `teacher` None: no teacher targets. `tokenizer`
    (the policy's) counts the tokens of the lessons it learns (--lessons on). `max_staleness`:
    the trainer's, where it trains in this stack (older turns are passed over unjudged)."""
    log.info("judge: %s (m = %d votes), %s, teacher targets %s, lessons %s", judge.name, config.votes,
             "samples and verdicts" if write_samples else "verdicts only",
             "on" if teacher is not None and config.teacher_targets and write_samples else "off", config.lessons)
    return JudgeWorker(store, judge, config, teacher_engine=teacher, tokenizer=teacher.tokenizer if teacher else None,
                       on_verdict=on_verdict, refresh=refresh, write_samples=write_samples, comparer=comparer,
                       lessons=lesson_learner(store, judge, config, tokenizer), max_staleness=max_staleness,
                       experience_gate=experience_gate)


def build_experience_gate(store: Store, config: JudgeConfig, serve: ServeConfig, engine: Engine,
                    on_decision: Callable[[GateDecision], None] | None = None) -> ExperienceGate | None:
    """The experience gate (judge/experience_gate.py) on the policy `engine` serves, with serving's
    block budget and placement; None with --experience-gate off or --lessons off (nothing to gate)."""
    if config.experience_gate == "off" or config.lessons == "off":
        return None
    return ExperienceGate(store, engine, engine.tokenizer, budget_tokens=serve.experience_budget_tokens,
                          placement=serve.experience_placement, timeout_s=config.call_timeout_s,
                          on_decision=on_decision)


def lesson_learner(store: Store, judge: Judge, config: JudgeConfig, tokenizer) -> LessonLearner | None:
    """What turns the judge's screened hints and corrections into lessons (judge/lessons.py), with
    the embedding judge's encoder when it is the judge (else one of its own, loaded here: a model
    loaded later in a worker thread can race another load, transformers' loading is not
    thread-safe) and the policy's tokenizer; None with --lessons off."""
    if config.lessons == "off":
        return None
    embed = (judge.classifier.featurizer.encoder if isinstance(judge, EmbeddingJudge) else SentenceEncoder()).encode
    policy = ConsolidationPolicy(max_lessons=config.lessons_max, max_tokens=config.lessons_max_tokens)
    return LessonLearner(store, embed, policy_token_counter(tokenizer), policy)


def load_trainer(model_dir: Path, data_dir: Path, config: TrainConfig, resume: bool, store: Store | None = None,
                 make: Callable[[Path, TrainConfig], Trainer] = Trainer):
    """A trainer at what was last accepted (with --resume), else at the base model (v0).

    Resume keeps what was accepted: the newest published version whose weights are on disk
    (the version archive, or the files channel), under its own number, when it is newer than
    the latest checkpoint; else the checkpoint (train/versions.py says why not a checkpoint
    per version). The samples of steps after the weights held, lost in the crash, are made
    claimable again.

    Versions only go up, across crashes too: a number once published or served names one
    set of weights forever. When a version above the weights held may have been served (its
    weights are lost: announced, on a turn, in the files channel), the trainer's weights are
    renumbered above every number taken, reserved in the store before anything serves them;
    numbers only the gate's rejected versions took are skipped by the next step instead.
    """
    store = store or open_store("", data_dir)
    latest = checkpoint.load_latest(data_dir) if resume else None
    share_the_interpreter()
    trainer = make(model_dir, config)
    held = latest.policy_version if latest is not None else 0
    published = newest_published(data_dir, trainer, above=held) if resume and not trainer.sharded else None
    if published is not None:
        resume_from_published(trainer, store, published, latest.train_step if latest is not None else 0)
    elif latest is not None:
        checkpoint.restore(trainer, latest)
    if resume and (released := store.release_lost_claims(trainer.method.name, trainer.train_step)):
        log.warning("%d samples used by training steps after step %d (lost in a crash) are claimable again",
                    released, trainer.train_step)
    files = FilesChannel(data_dir).highest_version() or 0
    served, taken = max(store.highest_served_version(), files), max(store.highest_policy_version(), files)
    if served > trainer.policy_version:
        held = trainer.policy_version
        trainer.renumber(taken + 1)
        store.set_policy_version(trainer.policy_version)
        log.warning("versions up to v%d were published after the weights held (v%d), and their weights are lost; "
                    "the weights held are now v%d", served, held, trainer.policy_version)
    else:
        trainer.reserve_numbers(taken)
    return trainer


def build_trainer_loop(store: Store, trainer: Trainer, config: TrainConfig, channels: Sequence[WeightsChannel], *,
                       tokenizer=None, scorer: Scorer | None = None, on_step: Callable[[dict], None] | None = None,
                       flush: Flush | None = None, owners: Sequence[str] | None = None) -> TrainerLoop:
    """The trainer loop of every deployment: its versions pass the update gate and go to
    `channels`, in order (the serving engine, the files channel, Ray's object store...);
    `owners`: only their samples train (a promotion)."""
    gate, archive = build_updates(trainer, config, store, tokenizer, scorer)
    return TrainerLoop(store, trainer, config, Publisher.for_trainer(trainer, channels), gate, archive, on_step, flush,
                       tuple(owners) if owners is not None else None)


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
    gate = Gate(trainer, config, tokenizer, _probes(config, store, tokenizer), scorer,
                Path(store.data_dir) / "gate-anchors.json")
    gate.with_lessons = lesson_prompts(probe_conversations(config, tokenizer), store, tokenizer, None)
    gate.retention = retention_probes(config, tokenizer)
    gate.retention_alpha = config.gate_retention_alpha
    return gate, archive


def retention_probes(config: TrainConfig, tokenizer) -> list[RetentionProbe]:
    """The capability probes the settings ask the gate for, apart from any preference (train/retention.py)."""
    probes = []
    if config.gate_retention_problems:
        probes.append(arithmetic_probe(tokenizer, config.gate_retention_problems))
    if config.gate_retention_bfcl:
        probes.append(bfcl_probe(tokenizer, config.gate_retention_bfcl))
    if config.gate_retention_instructions:
        probes.append(instruction_probe(tokenizer, config.gate_retention_instructions))
    return probes


def personal_gates(trainer: Trainer, config: TrainConfig, store: Store, tokenizer,
                   scorer: Scorer | None = None) -> GateFor | None:
    """Each user's update gate over the personal-adapter trainer (train/personal.py), on the
    shared gate's probes and settings; None where `--gate` leaves the shared gate off."""
    if config.gate == "off":
        return None
    if config.gate == "auto" and (why := auto_off_reason(trainer)):
        log.warning("the personal adapters' update gates are off (--gate auto): %s", why)
        return None
    probes = _probes(config, store, tokenizer)
    conversations = probe_conversations(config, tokenizer)  # read once, for every user's gate

    def gate(anchors: Path, user: str) -> Gate:
        built = Gate(trainer, config, tokenizer, probes, scorer, anchors)
        built.with_lessons = lesson_prompts(conversations, store, tokenizer, user)
        return built
    return gate


def probe_conversations(config: TrainConfig, tokenizer) -> dict[tuple[int, ...], list]:
    """The --gate-probe-file's conversations by their prompt ids (empty without a file)."""
    if not config.gate_probe_file:
        return {}
    return {tuple(render_prompt(tokenizer, messages, None, None)): messages
            for messages in read_probe_messages(config.gate_probe_file)}


def lesson_prompts(conversations: dict[tuple[int, ...], list], store: Store, tokenizer, owner: str | None
                   ) -> Callable[[list[list[int]]], dict[tuple[int, ...], list[int]]] | None:
    """For the update gate's anchors: each probe-file prompt (`conversations`, probe_conversations)
    among those given, with the lessons of the user the candidate learns for put in it as serving
    puts them now (the block and placement of that user's newest turn served with one). `owner`: a
    personal adapter's user; None (the shared model): the one user with an experience, and nobody
    when several have one (their lessons may ask for opposite lengths, and the shared model answers
    them all). Anchors from served turns already hold the block they were served with. None
    without a probe file."""
    if not conversations:
        return None

    def placed(prompts: list[list[int]]) -> dict[tuple[int, ...], list[int]]:
        user = owner
        if user is None:
            owners = [name for name in store.experience_owners() if store.experience(name).lessons]
            user = owners[0] if len(owners) == 1 else None
        served = served_with_block(store, user, sessions=4) if user is not None else []
        if not served:
            return {}
        newest = served[0]
        return {tuple(p): render_prompt(tokenizer, place(conversations[tuple(p)], newest.experience_block,
                                                         newest.experience_placement), None, None)
                for p in prompts if tuple(p) in conversations}
    return placed


def _probes(config: TrainConfig, store: Store, tokenizer) -> Callable[[], list[list[int]]]:
    """The gate's probe prompts: the --gate-probe-file's, then the store's reserved turns."""
    extra = read_probe_file(config.gate_probe_file, tokenizer) if config.gate_probe_file else []

    def probes() -> list[list[int]]:
        found = store.probe_prompts(config.gate_probe_every, config.gate_max_probes, at_least=8)
        return [*extra, *found][:max(config.gate_max_probes, len(extra))]
    return probes


def _device() -> str:
    """Where an engine started here runs (engine/precision.py resolves `auto` for it)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _closed_at_stop(engine: Engine) -> Background:
    async def close(stop: asyncio.Event) -> None:
        await stop.wait()
        await engine.aclose()
    return close
