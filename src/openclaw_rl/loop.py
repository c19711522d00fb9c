"""The online loop, on one screen: what runs beside serving until it stops.

    client --chat--> serve --turn--> store --(turn, next state)--> judge --sample--> store
                       ^                                                              |
                       +---- Publisher (channels) <---- trainer <---- claim samples ---+

Serving answers requests (serve/); beside it run the loops below, as background tasks of
the app: the judge worker (verdicts, hints, teacher targets for every paired turn), the
trainer (claims a batch for its method, steps, publishes v+1), and a status line. They
talk only through the store and the trainer's publisher (train/weights.py), so
`openclaw-rl judge` and `openclaw-rl train` run the very same loops as separate
processes (weights then travel through the files channel in the data dir, which those
processes follow). What is built, from which config, is decided in compose.py.
"""

from __future__ import annotations

import asyncio
import logging

from openclaw_rl.config import JudgeConfig, TrainConfig
from openclaw_rl.engine.base import Engine
from openclaw_rl.judge.hint_check import Comparer
from openclaw_rl.judge.worker import Judge, JudgeWorker
from openclaw_rl.serve.server import Background, Server
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.runner import Flush, run_trainer
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.versions import VersionArchive
from openclaw_rl.train.weights import Publisher

log = logging.getLogger(__name__)


def judge_loop(server: Server, judge: Judge, config: JudgeConfig, teacher_targets: bool = True,
               teacher: Engine | None = None, comparer: Comparer | None = None) -> Background:
    """Judge every paired turn, beside serving, the serving engine its teacher (so teacher
    log-probs come from the version being served) unless `teacher` is another engine (the
    initial weights: --teacher initial); `teacher_targets` False when no method that will
    train reads them (the judge itself knows no method); `comparer`: the hint check's
    (judge/hint_check.py), with --hint-check on."""
    teacher = teacher or server.engine
    worker = JudgeWorker(server.store, judge, config, teacher_engine=teacher if teacher_targets else None,
                         tokenizer=server.tokenizer, comparer=comparer,
                         on_verdict=lambda v: server.metrics.verdicts.labels(v.status).inc())
    log.info("judge: %s (m = %d votes), teacher targets %s", judge.name, config.votes,
             "on" if teacher_targets and config.teacher_targets else "off")
    return worker.run


def train_loop(server: Server, config: TrainConfig, trainer: Trainer, publisher: Publisher,
               gate: Gate | None = None, archive: VersionArchive | None = None,
               flush: Flush | None = None) -> Background:
    """Claim a batch for the method, step, let the gate decide, hand the new version to the
    publisher; repeat. `flush`: a finite run's drain (train/runner.py)."""

    def on_step(stats: dict) -> None:
        server.metrics.train_steps.set(trainer.train_step)
        server.metrics.record_train_step(
            {**stats, "mean_reward": stats.get("reward_mean"), "mean_abs_a_opd": stats.get("opd_adv_abs_mean")})

    if gate is not None:  # while the gate decides, its candidate is shown (dashboard, Prometheus gauge)
        gate.watch = server.metrics.show_candidate
    return lambda stop: run_trainer(server.store, trainer, config, publisher, stop, on_step, gate=gate,
                                    archive=archive, flush=flush)


def status_loop(server: Server, interval_s: float) -> Background:
    """A concise live status line, whenever something changed."""

    async def report(stop: asyncio.Event) -> None:
        last = None
        while not stop.is_set():
            counts = await asyncio.to_thread(server.store.counts)
            samples = await asyncio.to_thread(server.store.sample_counts)
            policy = await asyncio.to_thread(server.store.policy)
            server.metrics.samples_waiting.set(samples["ready"])
            train = {"loss": float("nan"), "mean_reward": float("nan"), "mean_abs_a_opd": float("nan"),
                     "tokens_per_s": 0.0, **server.metrics.last_train}
            line = (f"policy v{server.engine.policy_version} | sessions {counts['sessions']} | turns {counts['turns']} "
                    f"(paired {counts['paired_turns']}) | samples ready {samples['ready']}, used {samples['used']} "
                    f"| train steps {policy['train_steps']}")
            if policy["train_steps"]:
                line += (f", loss {train['loss']:.4f}, reward {train['mean_reward']:+.2f}, "
                         f"|A_opd| {train['mean_abs_a_opd']:.3f}, {train['tokens_per_s']:.0f} tok/s")
            if line != last:
                log.info(line)
                last = line
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass

    return report


