"""The in-process policy server of `openclaw-rl agent`, and how agent samples reach its trainer.

    server = AgentServer(model="", data_dir="run/data", judge="embedding", train=TrainConfig(method="stepwise"))
    StoreSink(server.store).write(episode, advantages)   # one sample per kept step
    server.stop()

The same parts as `openclaw-rl serve` (compose.build_server, build_judge, load_trainer), wired
differently, which is why this is not compose.build_app: there the judge writes each turn's
sample. Here

- the judge worker writes verdicts only (`JudgeWorker(write_samples=False)`, no teacher):
  the PRM votes the driver reads;
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

from openclaw_rl.compose import build_judge, build_server, build_updates, load_trainer
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.drivers.rollout import Episode
from openclaw_rl.judge.teacher import logprob_temperature, logprob_top_p
from openclaw_rl.judge.worker import JudgeWorker
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.store import Store
from openclaw_rl.train.runner import Flush, run_trainer
from openclaw_rl.train.weights import EngineChannel, Publisher
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
            ))
            written += 1
        return written, rejected


class AgentServer:
    """Policy, judge (verdicts only) and trainer (of step advantages) on a loopback port."""
    def __init__(self, *, model: str, data_dir: str | Path, judge: str = "embedding", judge_model: str = "default",
                 train: TrainConfig | None = None, max_tokens: int = 256, judge_override: Any = None) -> None:
        """`judge`: embedding | local | off | an OpenAI-compatible URL (then `judge_model` names
        the model there); `judge_override` replaces it (tests). `train` None serves and judges only."""
        port = free_port()
        serve = ServeConfig(model=model, data_dir=str(data_dir), port=port, status_interval_s=0.0,
                            train=train is not None, default_max_tokens=max_tokens)
        server = build_server(serve, threads=1 if train is not None else None)  # one core each: see loop.py
        loops = []
        self._flush = Flush()
        if judge.startswith(("http://", "https://")):
            judge_config = JudgeConfig(judge="openai", openai_base_url=judge, openai_model=judge_model)
        else:
            judge_config = JudgeConfig(judge=judge)
        reader = judge_override or build_judge(judge_config, server.engine.model_dir, server.engine)
        if reader is not None:
            loops.append(JudgeWorker(server.store, reader, judge_config, write_samples=False).run)
        if train is not None:
            trainer = load_trainer(server.engine.model_dir, Path(data_dir), train, resume=False)
            publisher = Publisher.for_trainer(trainer, [EngineChannel(server.engine)])
            gate, archive = build_updates(trainer, train, server.store, server.tokenizer)
            loops.append(lambda stop: run_trainer(server.store, trainer, train, publisher, stop, flush=self._flush,
                                                  gate=gate, archive=archive))
        self.server = server
        self.store: Store = server.store
        self.model_name: str = server.model_name
        self.judge_name = reader.name if reader is not None else "off"
        self._thread = ServerThread(create_app(server, loops), port)
        self.base_url = self._thread.base_url

    def drain(self, timeout_s: float) -> bool:
        """Train every step sample still ready, the last batch even if it is short of a full
        one, and wait (at most `timeout_s`) until that is done; whether it was done in time."""
        self._flush.requested.set()
        return self.server.wait_for(self._flush.done, timeout_s)  # a trainer that died: LoopDied now

    def stop(self) -> None:
        self._thread.stop()  # the app's shutdown stops the judge and trainer, then closes engine and store
