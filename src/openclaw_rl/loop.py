"""The online loop, on one screen: what runs beside serving until it stops.

    client --chat--> serve --turn--> store --(turn, next state)--> judge --sample--> store
                       ^                                                              |
                       +---- Publisher (channels) <---- trainer <---- claim samples ---+

Serving answers requests (serve/); beside it run, as background tasks of the app, the
judge worker (judge/worker.py: verdicts, hints, teacher targets for every paired turn),
the trainer loop (train/runner.py: claims a batch for its method, steps, lets the update
gate decide, publishes v+1) and the status line below. They talk only through the store
and the trainer's publisher (train/weights.py), so `openclaw-rl judge` and `openclaw-rl
train` run the very same loops as separate processes (weights then travel through the
files channel in the data dir, which those processes follow).

What is built, from which config, for which deployment, is decided in one place,
compose.py (`build_stack`; `standalone_judge` and `build_trainer_loop` for the separate
processes). Here are the status line and the hooks that show the built loops' progress
on the server's metrics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from openclaw_rl.experience import GateDecision
from openclaw_rl.serve.server import Background, Server
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.runner import shown
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import Verdict

log = logging.getLogger(__name__)


def count_verdicts(server: Server) -> Callable[[Verdict], None]:
    """The judge worker's `on_verdict` beside serving: each verdict counted by its status."""
    return lambda verdict: server.metrics.verdicts.labels(verdict.status).inc()


def count_experience_gate(server: Server) -> Callable[[GateDecision], None]:
    """The experience gate's `on_decision` beside serving: each decision counted by its outcome."""
    return lambda decision: server.metrics.experience_gate.labels(decision.outcome).inc()


def record_train_steps(server: Server, trainer: Trainer) -> Callable[[dict], None]:
    """The in-process trainer's `on_step`: the step's numbers on the metrics (dashboard, Prometheus,
    the status line)."""

    def on_step(stats: dict) -> None:
        server.metrics.train_steps.set(trainer.train_step)
        server.metrics.record_train_step(
            {**stats, "mean_reward": stats.get("reward_mean"), "mean_abs_a_opd": stats.get("opd_adv_abs_mean")})

    return on_step


def show_candidates(server: Server, gate: Gate | None) -> None:
    """While the gate decides, its candidate is shown (dashboard, Prometheus gauge); then its
    collapse detectors' values (Prometheus gauges)."""
    if gate is not None:
        gate.watch = server.metrics.show_candidate
        gate.on_decision = server.metrics.record_gate_decision


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
                line += (f", loss {shown(train['loss'], '.4f')}, reward {shown(train['mean_reward'], '+.2f')}, "
                         f"|A_opd| {shown(train['mean_abs_a_opd'], '.3f')}, {train['tokens_per_s']:.0f} tok/s")
            if line != last:
                log.info(line)
                last = line
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass

    return report


