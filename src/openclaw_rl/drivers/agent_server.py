"""The in-process policy server of `openclaw-rl agent`, and how agent samples reach its trainer.

    server = AgentServer(model="", data_dir="run/data", judge=JudgeConfig(), train=TrainConfig(method="stepwise"))
    StoreSink(server.store).write(episode, advantages)   # one sample per kept step
    server.stop()

The same stack as `openclaw-rl serve` (compose.build_stack), in a deployment mode of its
own: there the judge writes each turn's sample. Here (`StackSpec` says so)

- the judge worker writes verdicts only (`write_samples=False`, no teacher): the PRM votes
  the driver reads;
- the driver writes each step's sample, with the step's standardized advantage as its
  own signal, `Sample.step_advantage` (drivers/agent.py says why the driver and not the judge);
- the trainer's method is `stepwise` (AGENT_METHOD), which trains on that signal:
  A_t = the step's advantage on every token;
- a run is finite, so when its last group is done (`drain`) the trainer also takes the
  last, short batch: every sample the driver wrote is trained on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from openclaw_rl.compose import StackSpec, build_stack
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.drivers.rollout import Episode
from openclaw_rl.judge.teacher import logprob_temperature, logprob_top_p
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.store import Store
from openclaw_rl.train.runner import Flush
from openclaw_rl.types import Sample

__all__ = ["AGENT_METHOD", "AgentServer", "StoreSink"]

log = logging.getLogger(__name__)

AGENT_METHOD = "stepwise"  # train.methods.STEPWISE, by name: the CLI imports this module to build its flags


class StoreSink:
    """Writes the samples of an episode's steps (their step advantages), or rejects each with its reason."""
    def __init__(self, store: Store) -> None:
        self.store = store

    def write(self, episode: Episode, advantages: list[float | None] | None) -> tuple[int, int]:
        """One sample per step with an advantage (None: the episode gives none); (written, rejected)."""
        turns = [t for t in self.store.turns(episode.session_id) if t.kind == "main"]
        if len(turns) != len(episode.steps):
            log.warning("session %s has %d main turns for %d steps; steps are matched to turns in order",
                        episode.session_id, len(turns), len(episode.steps))
        written = rejected = 0
        for step, turn in zip(episode.steps, turns):
            value = advantages[step.index] if advantages is not None else None
            if advantages is None:
                reason = f"the episode gives no samples: {episode.error or 'not trained'}"
            elif value is None:
                reason = "dropped: its (task, step) group has one trajectory or zero reward variance"
            elif value == 0.0:
                reason = "advantage 0: no direction"
            elif not turn.response_token_ids:
                reason = "empty response"
            else:
                reason = None
            if reason is not None:
                self.store.reject_sample(turn.id, turn.policy_version, reason)
                rejected += 1
                continue
            self.store.add_sample(Sample(
                turn_id=turn.id, session_id=turn.session_id, policy_version=turn.policy_version,
                prompt_token_ids=turn.prompt_token_ids, response_token_ids=turn.response_token_ids,
                behaviour_logprobs=turn.behaviour_logprobs, temperature=logprob_temperature(turn),
                top_p=logprob_top_p(turn), step_advantage=value,
                constraint=turn.sampling.get("constraint"),  # a forced call: the trainer replays its mask
            ))
            written += 1
        return written, rejected


class AgentServer:
    """Policy, judge (verdicts only) and trainer (of step advantages) on a loopback port."""
    def __init__(self, *, model: str, data_dir: str | Path, judge: JudgeConfig | None = None,
                 train: TrainConfig | None = None, max_tokens: int = 256, judge_override: Any = None) -> None:
        """`judge`: the judge of the steps (None: the default, embedding; a driver's `--judge`
        spec becomes one by JudgeConfig.from_spec); `judge_override` replaces it (tests).
        `train` None serves and judges only."""
        port = free_port()
        serve = ServeConfig(model=model, data_dir=str(data_dir), port=port, status_interval_s=0.0,
                            train=train is not None, default_max_tokens=max_tokens)
        self._flush = Flush()
        judge_config = judge or JudgeConfig()
        stack = build_stack(serve, judge_config, train or TrainConfig(method=AGENT_METHOD), StackSpec(
            training="in_process" if train is not None else "off", judge=judge_override, write_samples=False,
            flush=self._flush))
        self.server = server = stack.server
        self.store: Store = server.store
        self.model_name: str = server.model_name
        self.judge_name = stack.judge.name if stack.judge is not None else "off"
        self._thread = ServerThread(stack.app(), port)
        self.base_url = self._thread.base_url

    def drain(self, timeout_s: float) -> bool:
        """Train every step sample still ready, the last batch even if it is short of a full
        one, and wait (at most `timeout_s`) until that is done; whether it was done in time."""
        self._flush.requested.set()
        return self.server.wait_for(self._flush.done, timeout_s)  # a trainer that died: LoopDied now

    def stop(self) -> None:
        self._thread.stop()  # the app's shutdown stops the judge and trainer, then closes engine and store
