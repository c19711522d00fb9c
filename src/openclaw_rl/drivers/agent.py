"""`openclaw-rl agent`: play episodes through the policy API and train on step-wise advantages.

    openclaw-rl agent --env toolcall --episodes 32 --parallel 4 --group-size 4

    for each train task, G episodes (K at a time, threads; envs local or leased from a pool)
      -> every step a main turn of the episode's session, every observation its next state
      -> the judge votes on each step (PRM), as it reads any turn
      -> group done: r_t = outcome + mean vote of step t; A standardized per (task, step)
      -> samples (step_advantage = A) into the store -> the trainer (method stepwise) -> v+1

Outputs in `--out`: `episodes.jsonl` (one line per episode: task, actions, observations,
rewards, advantages, outcome, turns), `summary.json` (env, episodes, success_rate,
success_by_env, success_by_split, reward_mode, updates, policy versions, wall_time_s).

Decisions and why:

- **The driver, not the judge, writes the training samples of agent turns.** A step's
  advantage compares it with the same step of the other G trajectories of its task, so it
  exists only once the whole group has ended and been judged; the judge worker, which
  builds a sample the moment one turn is judged, cannot know it. So the in-process judge
  runs with samples off (`StackSpec(write_samples=False)`: verdicts only, which are the
  PRM votes we read), the driver writes one sample per kept step with the advantage as
  its own signal (`Sample.step_advantage`), and the trainer's method is `stepwise`
  (`AGENT_METHOD`), whose advantage is that signal on every token: A_t as computed here.
  No other sample of these turns exists; a trainer of another method sharing the store
  skips them: they carry no reward and no teacher.
- **Rewards** (docs/method.md §3): outcome o = +1 for success and -1 for failure, so a group
  that splits on the outcome splits the advantages symmetrically and a failure is not
  merely "less good". `integrated`: r_t = o + mean of the judge's votes on step t (a step
  without votes, e.g. no verdict, adds 0); `outcome`: r_t = o. Standardizing uses
  `train.losses.stepwise_advantages` (population std; groups with one member or zero
  variance are dropped and their turns' samples rejected with the reason). A step the
  standardization puts at exactly 0 is rejected too: it carries no direction.
- **Ragged trajectories**: the group of step t holds the trajectories that reached step
  t, so a long trajectory's late steps are often alone and dropped. That is the method
  as written (same task, same step index); it also keeps a padding-free meaning of "step".
- **A broken environment is not the agent's failure**: its episode is kept out of its
  group (no samples) and counted under `env_errors`; a failed chat call ends the episode,
  which is then evaluated and trained on as it stands.
- **Evaluation never trains**: `--split eval` episodes (and `--eval-episodes`, played
  after training) are side turns: served and recorded, never paired, judged or trained.
- **With `--base-url`** the driver is only a client of another server: the episodes
  become turns and next states in that server's store and its own judge and trainer
  learn from them per turn (its configured method); step rewards and advantages are
  computed from its verdicts (`GET /v1/sessions/{id}`) and written to the outputs, but
  no step samples are written, since the driver does not hold that server's store.
- Modules: `rollout.py` plays one episode (the `Policy` seam, the HTTP policy, local
  envs or pool leases); `agent_server.py` is the in-process server and the sample sink;
  this file schedules groups, computes rewards and advantages, and writes the outputs.

(Over 400 lines: the decisions above, and the summary's fields, which belong with the
driver that fills them.)
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from openclaw_rl.config import TOKEN_ENV_VAR, AgentConfig, ConfigError
from openclaw_rl.drivers.agent_server import AGENT_METHOD, AgentServer, StoreSink
from openclaw_rl.drivers.rollout import EnvSource, Episode, HTTPPolicy, LocalEnvs, Policy, PoolEnvs, play_episode
from openclaw_rl.envs.base import Task
from openclaw_rl.train.losses import stepwise_advantages

__all__ = ["AGENT_METHOD", "AgentConfig", "group_advantages", "run_agent", "step_rewards"]

log = logging.getLogger(__name__)

OUTCOME_REWARD = {True: 1.0, False: -1.0}
RewardMode = Literal["integrated", "outcome"]
Progress = Callable[[dict[str, Any]], None]


# -- rewards and advantages (pure) ---------------------------------------------------------


def step_rewards(success: bool, votes: Sequence[Sequence[int]], mode: RewardMode) -> list[float]:
    """r_t of every step: outcome (+1 / -1), plus the mean PRM vote of step t when `integrated`."""
    outcome = OUTCOME_REWARD[bool(success)]
    if mode == "outcome":
        return [outcome] * len(votes)
    return [outcome + (sum(v) / len(v) if v else 0.0) for v in votes]


def group_advantages(successes: Sequence[bool], votes: Sequence[Sequence[Sequence[int]]],
                     mode: RewardMode) -> list[list[float | None]]:
    """Advantages of the steps of G trajectories of one task (ragged), None where dropped.

    `votes[i][t]` are the judge's votes on step t of trajectory i. Each step's reward is
    standardized among the trajectories that have a step t (losses.stepwise_advantages).
    """
    if len(successes) != len(votes):
        raise ValueError(f"{len(successes)} outcomes but votes for {len(votes)} trajectories")
    flat = [(i, t) for i, steps in enumerate(votes) for t in range(len(steps))]
    if not flat:
        return [[] for _ in votes]
    outcomes = [OUTCOME_REWARD[bool(successes[i])] for i, _ in flat]
    step_votes = [list(votes[i][t]) if mode == "integrated" else [] for i, t in flat]
    advantages, keep = stepwise_advantages([0] * len(flat), [t for _, t in flat], outcomes, step_votes)
    result: list[list[float | None]] = [[None] * len(steps) for steps in votes]
    for (i, t), value, kept in zip(flat, advantages.tolist(), keep.tolist()):
        result[i][t] = value if kept else None
    return result


# -- the driver -------------------------------------------------------------------------------


class SampleSink(Protocol):
    def write(self, episode: Episode, advantages: list[float | None] | None) -> tuple[int, int]:
        """Samples for the episode's steps (None: the episode gives none); returns (written, rejected)."""
        ...


@dataclass(frozen=True)
class _Job:
    number: int  # episode number in this run: the session id's suffix
    env: str
    task: Task
    train: bool
    group: str | None  # the training group (one task's G trajectories); None for evaluation


@dataclass
class _Tally:
    """Counts behind the progress display and the summary, per (env, split)."""
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)

    def add(self, episode: Episode, split: str, total: int) -> None:
        row = self.rows.setdefault(f"{episode.env}/{split}", {
            "env": episode.env, "split": split, "total": total, "done": 0, "success": 0, "env_errors": 0,
            "policy_errors": 0, "steps": 0, "tool_call_steps": 0, "text_action_steps": 0, "samples_written": 0,
            "samples_rejected": 0})
        row["done"] += 1
        row["success"] += int(episode.success)
        row["env_errors"] += int(episode.env_failed)
        row["policy_errors"] += int(bool(episode.error and episode.error.startswith("policy")))
        row["steps"] += len(episode.steps)
        row["tool_call_steps"] += sum("tool" in s.action and not s.action.get("from_text") for s in episode.steps)
        row["text_action_steps"] += sum(bool(s.action.get("from_text")) for s in episode.steps)
        self.versions += [s.policy_version for s in episode.steps if s.policy_version is not None]


class Driver:
    """Schedules the episodes, finishes each group as it completes, keeps the tally and the outputs."""
    def __init__(self, config: AgentConfig, policy: Policy, envs: EnvSource, sink: SampleSink | None,
                 progress: Progress | None = None, drain: Callable[[], None] | None = None) -> None:
        self.config, self.policy, self.envs, self.sink = config, policy, envs, sink
        self.progress, self.drain = progress, drain
        self.run_id = uuid.uuid4().hex[:8]
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.episodes_path = self.out / "episodes.jsonl"
        self.episodes_path.write_text("")
        self.tally = _Tally()
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()  # progress hears from the players and the group finisher
        self._wait_for_verdicts = config.reward == "integrated"

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        before = self._status()
        train = self.config.split == "train"
        jobs = self._jobs(self.config.split, self.config.episodes, train=train)
        self._play(jobs)
        if train and self.drain is not None:
            self.drain()
        if self.config.eval_episodes:
            self._play(self._jobs("eval", self.config.eval_episodes, train=False, first=len(jobs)))
        return self._summary(before, time.monotonic() - started)

    def _jobs(self, split: str, episodes: int, *, train: bool, first: int = 0) -> list[_Job]:
        """`episodes` per environment; in training, consecutive runs of G share a task and a group."""
        jobs: list[_Job] = []
        size = self.config.group_size if train else 1
        for name in self.config.env_names:
            tasks = self.envs.tasks(name, split)
            if not tasks:
                raise ConfigError(f"environment {name!r} has no {split} tasks")
            random.Random(f"{self.config.seed}/{name}/{split}").shuffle(tasks)
            for k in range(episodes):
                group = f"{name}/{k // size}" if train else None
                jobs.append(_Job(first + len(jobs), name, tasks[(k // size) % len(tasks)], train, group))
        return jobs

    def _play(self, jobs: list[_Job]) -> None:
        """K episodes at a time; a group is finished (on one thread of its own) when its last one ends."""
        members: dict[str, list[Episode]] = {}
        sizes = {job.group: sum(j.group == job.group for j in jobs) for job in jobs if job.group}
        totals = {name: sum(j.env == name for j in jobs) for name in self.config.env_names}
        with ThreadPoolExecutor(self.config.parallel, thread_name_prefix="episode") as players, \
                ThreadPoolExecutor(1, thread_name_prefix="group") as finisher:
            futures = {players.submit(self._episode, job): job for job in jobs}
            finishing: list[Future] = []
            try:
                for future in as_completed(futures):
                    job, episode = futures[future], future.result()
                    with self._lock:
                        self.tally.add(episode, "train" if job.train else "eval", totals[job.env])
                    if job.group is None:
                        self._write([(episode, None, None, None)])
                    else:
                        members.setdefault(job.group, []).append(episode)
                        if len(members[job.group]) == sizes[job.group]:
                            finishing.append(finisher.submit(self._finish_group, members.pop(job.group)))
                    self._report()
                for done in finishing:
                    done.result()
            except BaseException:
                for future in futures:  # a broken run stops here rather than playing on
                    future.cancel()
                raise

    def _episode(self, job: _Job) -> Episode:
        session_id = f"agent-{self.run_id}-{job.number:05d}"
        with self.envs.env(job.env) as env:
            return play_episode(env, job.task, self.policy, session_id, max_steps=self.config.max_steps,
                                train=job.train, text_actions=self.config.text_actions)

    def _finish_group(self, episodes: list[Episode]) -> None:
        """Rewards and advantages of one task's G trajectories, their samples, their lines."""
        mode: RewardMode = self.config.reward  # type: ignore[assignment]
        usable = [e for e in episodes if not e.env_failed]  # a broken env says nothing about the agent
        votes = {e.session_id: self._votes(e) for e in usable}
        advantages = dict(zip(
            (e.session_id for e in usable),
            group_advantages([e.success for e in usable], [votes[e.session_id] for e in usable], mode)))
        records = []
        for episode in episodes:
            step_votes, advantage = votes.get(episode.session_id), advantages.get(episode.session_id)
            rewards = step_rewards(episode.success, step_votes, mode) if step_votes is not None else None
            if self.sink is not None:
                written, rejected = self.sink.write(episode, advantage)
                with self._lock:
                    row = self.tally.rows[f"{episode.env}/train"]
                    row["samples_written"] += written
                    row["samples_rejected"] += rejected
            records.append((episode, step_votes, rewards, advantage))
        self._write(records)
        self._report()

    def _votes(self, episode: Episode) -> list[list[int]]:
        """The judge's votes on each step; in integrated mode, after waiting for the pending ones."""
        deadline = time.monotonic() + self.config.verdict_timeout_s
        verdicts = self.policy.verdicts(episode.session_id)
        while self._wait_for_verdicts and any(v.pending for v in verdicts):
            if time.monotonic() > deadline:
                log.warning("no verdict for %d steps of %s after %.0f s: they count with the outcome alone. Is the "
                            "server's judge off? Later groups will not wait.",
                            sum(v.pending for v in verdicts), episode.session_id, self.config.verdict_timeout_s)
                self._wait_for_verdicts = False
                break
            time.sleep(0.25)
            verdicts = self.policy.verdicts(episode.session_id)
        if len(verdicts) != len(episode.steps):
            log.warning("session %s: %d main turns for %d steps", episode.session_id, len(verdicts), len(episode.steps))
        votes = [v.votes for v in verdicts][: len(episode.steps)]
        return votes + [[] for _ in range(len(episode.steps) - len(votes))]

    def _write(self, records: list[tuple[Episode, Any, Any, Any]]) -> None:
        lines = [json.dumps(_episode_record(*record), ensure_ascii=False) for record in records]
        with self._lock, self.episodes_path.open("a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)

    def _status(self) -> dict[str, Any]:
        try:
            return self.policy.status()
        except Exception as error:  # the summary then lacks the server's counters, nothing else
            log.warning("cannot read the policy server's status: %s", error)
            return {}

    def _report(self) -> None:
        if self.progress is None:
            return
        with self._lock:
            snapshot = {"rows": [dict(row) for row in self.tally.rows.values()],
                        "policy_version": max(self.tally.versions, default=None),
                        "writes_samples": self.sink is not None}
        with self._report_lock:
            self.progress(snapshot)

    def _summary(self, before: dict[str, Any], wall_time_s: float) -> dict[str, Any]:
        after = self._status()
        rows = list(self.tally.rows.values())

        def rate(selected: list[dict[str, Any]]) -> float | None:
            done = sum(r["done"] for r in selected)
            return sum(r["success"] for r in selected) / done if done else None

        main = [r for r in rows if r["split"] == self.config.split]
        versions = self.tally.versions
        start, end = before.get("policy_version"), after.get("policy_version")
        return {
            "env": ",".join(self.config.env_names),
            "split": self.config.split,
            "episodes": sum(r["done"] for r in main),
            "success_rate": rate(main),
            "success_by_env": {r["env"]: rate([r]) for r in main},
            "success_by_split": {split: rate([r for r in rows if r["split"] == split])
                                 for split in dict.fromkeys(r["split"] for r in rows)},
            "reward_mode": self.config.reward,
            "level": self.config.level,
            "temperature": self.config.temperature,
            "group_size": self.config.group_size,
            "parallel": self.config.parallel,
            "mean_steps": sum(r["steps"] for r in main) / max(1, sum(r["done"] for r in main)),
            "text_actions": self.config.text_actions,
            "tool_choice": self.config.tool_choice,
            "tool_call_steps": sum(r["tool_call_steps"] for r in main),
            "text_action_steps": sum(r["text_action_steps"] for r in main),
            "env_errors": sum(r["env_errors"] for r in rows),
            "policy_errors": sum(r["policy_errors"] for r in rows),
            "samples_written": sum(r["samples_written"] for r in rows),
            "samples_rejected": sum(r["samples_rejected"] for r in rows),
            "policy_version_start": start,
            "policy_version_end": end,
            "policy_versions_seen": [min(versions), max(versions)] if versions else None,
            "updates": end - start if isinstance(start, int) and isinstance(end, int) else None,
            "train_steps": after.get("train_steps"),
            "wall_time_s": round(wall_time_s, 1),
            "by_env_and_split": rows,
        }


def _episode_record(episode: Episode, votes: list[list[int]] | None, rewards: list[float] | None,
                    advantages: list[float | None] | None) -> dict[str, Any]:
    """One line of episodes.jsonl; votes, rewards and advantages are null for evaluation episodes."""
    outcome = episode.outcome
    return {
        "env": episode.env,
        "task": episode.task.id,
        "split": episode.task.split,
        "session_id": episode.session_id,
        "trained": episode.train,
        "actions": [s.action for s in episode.steps],
        "observations": [s.observation for s in episode.steps],
        "invalid": [s.error for s in episode.steps],
        "votes": votes,
        "rewards": rewards,
        "advantages": advantages,
        "outcome": asdict(outcome) if outcome else None,
        "success": episode.success,
        "turns": [{"index": s.index, "policy_version": s.policy_version} for s in episode.steps],
        "error": episode.error,
        "wall_time_s": round(episode.wall_time_s, 2),
    }


# -- the entry point ------------------------------------------------------------------------


def run_agent(config: AgentConfig, progress: Progress | None = None, *, policy: Policy | None = None,
              sink: SampleSink | None = None, judge: Any = None) -> dict[str, Any]:
    """Play every episode, train in-process unless told otherwise, write the outputs; the summary.

    `policy` and `sink` replace the HTTP policy and the store (tests script them); `judge`
    replaces the in-process server's judge.
    """
    server: AgentServer | None = None
    owned: HTTPPolicy | None = None
    envs: EnvSource | None = None
    try:
        if policy is None and not config.base_url:
            server = _start_server(config, judge)
        if policy is None:
            url = config.base_url or server.base_url  # type: ignore[union-attr]
            policy = owned = HTTPPolicy(url, model=config.policy_model, api_key=config.api_key,
                                        temperature=config.temperature, max_tokens=config.max_tokens,
                                        tool_choice=config.tool_choice)
        trains_here = server is not None and config.training and config.split == "train"
        if sink is None and trains_here:
            sink = StoreSink(server.store)  # type: ignore[union-attr]
        if config.pool:
            token = config.pool_token or os.environ.get(TOKEN_ENV_VAR, "")
            envs = PoolEnvs(config.pool, token, config.env_names[0])
        else:
            envs = LocalEnvs(config.level)

        def drain() -> None:
            if not server.drain(config.drain_timeout_s):  # type: ignore[union-attr]
                log.warning("the trainer had not trained every sample after --drain-timeout-s %s s; "
                            "the rest stay ready in the store", config.drain_timeout_s)

        summary = Driver(config, policy, envs, sink, progress, drain if trains_here else None).run()
        summary["server"] = config.base_url or ("in-process" if server else "custom")
        summary["model"] = server.model_name if server else getattr(owned, "model", None)
        summary["judge"] = server.judge_name if server else None
        (Path(config.out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary
    finally:
        if owned is not None:
            owned.close()
        if envs is not None:
            envs.close()
        if server is not None:
            server.stop()


def _start_server(config: AgentConfig, judge: Any) -> AgentServer:
    if judge is None and config.judge.judge == "off" and config.reward == "integrated" and config.split == "train":
        raise ConfigError("--reward integrated needs a judge for the step votes: use --judge embedding "
                          "(or local, or a URL), or --reward outcome")
    train = replace(config.train, method=AGENT_METHOD) if config.training else None
    return AgentServer(model=config.model, data_dir=config.data_dir or Path(config.out) / "data",
                       judge=config.judge, train=train, max_tokens=config.max_tokens, judge_override=judge)
