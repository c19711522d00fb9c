"""The agent rollout driver: step rewards and advantages by hand, scripted episodes, a live run.

The scripted tests fake the one seam between an episode and the server (`Policy`), so
they need no model; the smoke test runs the real in-process server on the tiny model
with a judge that votes by episode number, and checks the store end to end.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import pytest

from openclaw_rl.config import ConfigError, JudgeConfig, build
from openclaw_rl.drivers.agent import AGENT_METHOD, AgentConfig, group_advantages, run_agent, step_rewards
from openclaw_rl.envs.base import Action, Outcome, StepResult, Task, tool_schema
from openclaw_rl.drivers.rollout import NO_TOOL_CALL, Reply, TurnVerdict, play_episode
from openclaw_rl.envs.text_actions import text_action_hint
from openclaw_rl.envs.toolcall import ToolCallEnv
from openclaw_rl.judge.worker import JudgeWorker, Reading
from openclaw_rl.store import Store
from openclaw_rl.types import NextState, Sample, TurnRecord

S152 = math.sqrt(152.0)


# -- rewards and advantages, by hand --------------------------------------------------------


def test_step_rewards_add_the_mean_vote_to_the_outcome():
    votes = [[1, 1, -1], [], [-1, -1]]
    assert step_rewards(True, votes, "integrated") == pytest.approx([1 + 1 / 3, 1.0, 0.0])
    assert step_rewards(False, votes, "integrated") == pytest.approx([-1 + 1 / 3, -1.0, -2.0])
    assert step_rewards(False, votes, "outcome") == [-1.0, -1.0, -1.0]


def test_group_advantages_standardize_each_step_across_ragged_trajectories():
    successes = [True, False, False]
    votes = [
        [[1, 1, 1], [1, -1], [-1], [1]],  # r = [2, 1, 0, 2]
        [[-1, -1, 1], [1, 1], [1]],  # r = [-4/3, 0, 0]
        [[1]],  # r = [0]
    ]
    adv = group_advantages(successes, votes, "integrated")
    # step 0: r = [2, -4/3, 0], mean 2/9, deviations [16, -14, -2] / 9,
    #         population variance (256 + 196 + 4) / 81 / 3 = 152 / 81 -> A = [16, -14, -2] / sqrt(152)
    # step 1: r = [1, 0] -> mean 1/2, std 1/2 -> [+1, -1]
    # step 2: r = [0, 0] has zero variance: dropped; step 3: one trajectory: dropped
    assert adv[0] == pytest.approx([16 / S152, 1.0, None, None])
    assert adv[1] == pytest.approx([-14 / S152, -1.0, None])
    assert adv[2] == pytest.approx([-2 / S152])
    assert adv[1][2] is None and adv[0][3] is None

    # outcome only: step 0 r = [1, -1, -1], mean -1/3, std 2 sqrt(2) / 3 -> [sqrt 2, -1/sqrt 2, -1/sqrt 2]
    adv = group_advantages(successes, votes, "outcome")
    s2 = math.sqrt(2.0)
    assert adv[0] == pytest.approx([s2, 1.0, 1.0, None])
    assert adv[1] == pytest.approx([-1 / s2, -1.0, -1.0])
    assert adv[2] == pytest.approx([-1 / s2])


def test_a_group_with_one_outcome_and_no_votes_teaches_nothing():
    assert group_advantages([False, False], [[[], []], [[]]], "outcome") == [[None, None], [None]]
    assert group_advantages([], [], "integrated") == []


# -- scripted policies ----------------------------------------------------------------------


class ScriptedPolicy:
    """The seam: replies come from a script per session, verdicts from a vote table."""

    def __init__(self, scripts: list[list[Reply]], votes: dict[str, list[int]]):
        self.scripts, self.votes = scripts, votes
        self.sessions: dict[str, list[Reply]] = {}
        self.requests: dict[str, list[list[dict]]] = {}
        self.kinds: dict[str, list[str]] = {}  # the vote-table key of each turn
        self.feedback_texts: dict[str, str] = {}
        self.ended: list[str] = []
        self.tools: list[Any] = []

    def chat(self, session_id, messages, tools, *, train):
        if session_id not in self.sessions:
            self.sessions[session_id] = list(self.scripts[len(self.sessions)])
        self.requests.setdefault(session_id, []).append([dict(m) for m in messages])
        self.tools = tools
        reply = self.sessions[session_id].pop(0)
        key = reply.tool_calls[0]["function"]["arguments"] if reply.tool_calls else "text"
        self.kinds.setdefault(session_id, []).append(key)
        return reply

    def feedback(self, session_id, text):
        self.feedback_texts[session_id] = text

    def end(self, session_id):
        self.ended.append(session_id)

    def verdicts(self, session_id):
        return [TurnVerdict(self.votes[key], pending=False) for key in self.kinds.get(session_id, [])]

    def status(self):
        return {"policy_version": 3, "train_steps": 3}


def _call(name: str, **arguments: Any) -> Reply:
    return Reply("", [{"id": f"call_{name}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(arguments)}}], policy_version=3)


class RecordingSink:
    def __init__(self):
        self.written: dict[str, list[float | None] | None] = {}

    def write(self, episode, advantages):
        self.written[episode.session_id] = advantages
        return sum(a is not None for a in advantages or []), sum(a is None for a in advantages or [])


@pytest.mark.parametrize(("mode", "rewards_solver", "rewards_wrong"), [
    ("integrated", [1 - 2 / 3, 2.0], [-1 - 1 / 3]),
    ("outcome", [1.0, 1.0], [-1.0]),
])
def test_a_scripted_solver_succeeds_and_gets_the_expected_rewards(tmp_path, mode, rewards_solver, rewards_wrong):
    answers = {t.id: t.data["answer"] for t in ToolCallEnv().tasks("train")}
    config = AgentConfig(env="toolcall", episodes=2, group_size=2, parallel=1, reward=mode, out=str(tmp_path),
                         verdict_timeout_s=0)
    # Which task the group plays depends on the seed's shuffle: find it from the first request.
    solver = _LateScript(answers, correct=True)
    wrong = _LateScript(answers, correct=False)
    votes = {"text": [-1, -1, 0], "correct": [1, 1, 1], "wrong": [-1, 0, 0]}
    policy = _TaskAwarePolicy([solver, wrong], votes)
    sink = RecordingSink()
    summary = run_agent(config, policy=policy, sink=sink)

    lines = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    by_success = {line["success"]: line for line in lines}
    won, lost = by_success[True], by_success[False]
    assert won["task"] == lost["task"]  # one group: one task, two trajectories
    assert won["actions"][0] == {"text": "Let me think about it."}
    assert won["observations"][0] == NO_TOOL_CALL.format(tools="python, answer") + text_action_hint(ToolCallEnv.tools)
    assert won["actions"][1]["tool"] == "answer"
    assert won["outcome"]["success"] is True and lost["outcome"]["success"] is False
    assert won["rewards"] == pytest.approx(rewards_solver)
    assert lost["rewards"] == pytest.approx(rewards_wrong)
    # step 0: two trajectories whose rewards differ -> +1 / -1; step 1: the solver alone -> dropped
    assert won["advantages"] == [1.0, None] and lost["advantages"] == [-1.0]
    assert sink.written == {won["session_id"]: [1.0, None], lost["session_id"]: [-1.0]}
    assert won["turns"] == [{"index": 0, "policy_version": 3}, {"index": 1, "policy_version": 3}]

    # the observation of each action is the next state of the turn that produced it
    requests = policy.requests[won["session_id"]]
    prompts = {t.id: t.prompt for t in ToolCallEnv().tasks("train")}
    assert requests[0] == [{"role": "user", "content": prompts[won["task"]]}]  # reset returned the prompt itself
    assert requests[1][-2]["role"] == "assistant" and requests[1][-1] == {"role": "user", "content": won["observations"][0]}
    assert policy.tools == ToolCallEnv.tools
    # the last turn's next state is the final observation and the check, sent as feedback
    assert "solved" in policy.feedback_texts[won["session_id"]] and "not solved" in policy.feedback_texts[lost["session_id"]]
    assert sorted(policy.ended) == sorted([won["session_id"], lost["session_id"]])

    summary_file = json.loads((tmp_path / "summary.json").read_text())
    assert summary_file == summary
    assert summary["env"] == "toolcall" and summary["episodes"] == 2 and summary["success_rate"] == 0.5
    assert summary["reward_mode"] == mode and summary["success_by_split"] == {"train": 0.5}
    assert summary["success_by_env"] == {"toolcall": 0.5}
    assert summary["samples_written"] == 2 and summary["samples_rejected"] == 1
    assert summary["policy_versions_seen"] == [3, 3] and summary["updates"] == 0


class _LateScript:
    """A script that reads its task from the first request (the prompt names the question)."""

    def __init__(self, answers: dict[str, float], correct: bool):
        self.answers, self.correct = answers, correct

    def replies(self, prompt: str) -> list[Reply]:
        task = next(t for t in ToolCallEnv().tasks("train") if t.prompt == prompt)
        answer = self.answers[task.id]
        if self.correct:
            return [Reply("Let me think about it.", [], 3), _call("answer", value=f"{answer:g}")]
        return [_call("answer", value=f"{answer + 1:g}")]


class _TaskAwarePolicy(ScriptedPolicy):
    def __init__(self, scripts: list[_LateScript], votes: dict[str, list[int]]):
        super().__init__([], votes)
        self.late = scripts

    def chat(self, session_id, messages, tools, *, train):
        if session_id not in self.sessions:
            self.scripts.append(self.late[len(self.sessions)].replies(messages[0]["content"]))
        reply = super().chat(session_id, messages, tools, train=train)
        if reply.tool_calls:  # name the vote-table key by what the call does
            correct = self.late[list(self.sessions).index(session_id)].correct
            self.kinds[session_id][-1] = "correct" if correct else "wrong"
        return reply


class CounterEnv:
    """Count to the task's target with add(n); reset shows the start state, not the prompt."""

    name = "counter"
    tools = [tool_schema("add", "Add n to the count.", n=("integer", "how much"))]

    def __init__(self, broken: bool = False):
        self.count = self.target = 0
        self.broken = broken

    def tasks(self, split=None):
        return [Task("to-3", "Count to 3.", "train", {"target": 3})]

    def reset(self, task):
        self.count, self.target = 0, task.data["target"]
        return "The count is 0."

    def step(self, action: Action):
        if self.broken:
            raise RuntimeError("the counter broke")
        self.count += int(action.arguments["n"])
        return StepResult(f"The count is {self.count}.", done=self.count >= self.target)

    def evaluate(self):
        return Outcome(self.count == self.target, float(self.count == self.target), f"count {self.count}")

    def close(self):
        pass


def test_an_episode_shows_the_start_state_runs_one_call_per_step_and_survives_bad_arguments():
    env = CounterEnv()
    two_calls = Reply("", [{"id": "a", "type": "function", "function": {"name": "add", "arguments": '{"n": 2}'}},
                           {"id": "b", "type": "function", "function": {"name": "add", "arguments": '{"n": 5}'}}], 0)
    bad = Reply("", [{"id": "c", "type": "function", "function": {"name": "add", "arguments": "{n: 1"}}], 0)
    policy = ScriptedPolicy([[two_calls, bad, _call("add", n=1)]], {"text": [], '{"n": 2}': [], "{n: 1": [],
                                                                      '{"n": 1}': []})
    episode = play_episode(env, env.tasks()[0], policy, "s1", max_steps=5)
    assert episode.success and episode.error is None and len(episode.steps) == 3
    first = policy.requests["s1"][0]
    assert first == [{"role": "user", "content": "Count to 3.\n\nThe count is 0."}]
    second = policy.requests["s1"][1]
    assert [m.get("tool_call_id") for m in second[-2:]] == ["a", "b"]  # every call answered, only the first run
    assert second[-2]["content"] == "The count is 2." and "Not run" in second[-1]["content"]
    assert episode.steps[1].error and "not valid JSON" in episode.steps[1].observation
    assert "solved" in policy.feedback_texts["s1"] and "The count is 3." in policy.feedback_texts["s1"]


def test_a_broken_env_is_recorded_not_raised_and_a_silent_model_runs_out_of_steps():
    policy = ScriptedPolicy([[_call("add", n=1)], [Reply("hello", [], 0)] * 3], {'{"n": 1}': [], "text": []})
    broken = play_episode(CounterEnv(broken=True), CounterEnv().tasks()[0], policy, "s1", max_steps=3)
    assert broken.env_failed and broken.error.startswith("env: step failed") and not broken.success
    silent = play_episode(CounterEnv(), CounterEnv().tasks()[0], policy, "s2", max_steps=3)
    assert len(silent.steps) == 3 and silent.outcome.success is False and silent.error is None
    assert [s.action for s in silent.steps] == [{"text": "hello"}] * 3


def test_evaluation_episodes_are_side_turns_without_feedback(tmp_path):
    seen: list[bool] = []

    class Policy(ScriptedPolicy):
        def chat(self, session_id, messages, tools, *, train):
            seen.append(train)
            return super().chat(session_id, messages, tools, train=train)

    policy = Policy([[Reply("no idea", [], 0)]] * 2, {"text": []})
    config = AgentConfig(env="toolcall", split="eval", episodes=2, parallel=2, max_steps=1, out=str(tmp_path))
    summary = run_agent(config, policy=policy, sink=RecordingSink())
    assert seen == [False, False] and policy.feedback_texts == {} and len(policy.ended) == 2
    assert summary["success_by_split"] == {"eval": 0.0} and summary["samples_written"] == 0


def test_episodes_lease_their_envs_from_a_pool(tmp_path):
    from openclaw_rl.envs.pool import PoolConfig, create_app
    from openclaw_rl.serve.background import ServerThread, free_port

    class Counting(ScriptedPolicy):
        def chat(self, session_id, messages, tools, *, train):
            target = int(re.search(r"Count to (\d+)", messages[0]["content"]).group(1))
            self.kinds.setdefault(session_id, []).append("add")
            return _call("add", n=target)

    server = ServerThread(create_app(PoolConfig(env="counter", size=1), CounterEnv, "t"), free_port())
    try:
        config = AgentConfig(env="counter", episodes=2, group_size=2, parallel=2, pool=server.base_url,
                             pool_token="t", out=str(tmp_path))
        summary = run_agent(config, policy=Counting([], {"add": [1]}), sink=RecordingSink())
        assert summary["success_rate"] == 1.0 and summary["episodes"] == 2
        assert summary["samples_written"] == 0  # both solved it in one step: a group without variance
        with pytest.raises(ConfigError, match="the pool serves 'counter'"):
            run_agent(AgentConfig(env="toolcall", episodes=2, group_size=2, pool=server.base_url, pool_token="t",
                                  out=str(tmp_path / "wrong")), policy=Counting([], {}), sink=RecordingSink())
    finally:
        server.stop()


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="multiple of --group-size 4"):
        AgentConfig(env="toolcall", episodes=6, group_size=4)
    with pytest.raises(ConfigError, match="--env"):
        AgentConfig()
    with pytest.raises(ConfigError, match="at least 2"):
        AgentConfig(env="toolcall", episodes=3, group_size=1)
    with pytest.raises(ConfigError, match="standard, basic or starter"):
        AgentConfig(env="toolcall", level="hard")
    assert AgentConfig(env="terminal,toolcall", level="starter").level == "starter"
    with pytest.raises(ConfigError, match="envs serve --option level=basic"):
        AgentConfig(env="toolcall", level="basic", pool="http://127.0.0.1:8100")


def test_local_envs_build_the_level_asked_for_and_refuse_it_for_envs_without_levels():
    from openclaw_rl.drivers.rollout import LocalEnvs

    envs = LocalEnvs("basic")
    try:
        assert all(t.id.startswith("toolcall-basic-eval-") for t in envs.tasks("toolcall", "eval"))
        with envs.env("toolcall") as env:
            assert env.level == "basic"
        with pytest.raises(ValueError, match="environment 'swe' has no task levels"):
            envs.tasks("swe", "eval")
    finally:
        envs.close()
    assert all(t.id.startswith("toolcall-eval-") for t in LocalEnvs().tasks("toolcall", "eval"))


def test_the_driver_trains_with_the_method_of_step_advantages():
    from openclaw_rl.train.methods import METHODS

    assert METHODS[AGENT_METHOD].signals == ("step_advantage",)  # named, not imported: the CLI imports the driver


def test_the_judge_worker_can_write_verdicts_only(tmp_path):
    class Judge:
        name = "fixed"

        async def read(self, turn):
            return Reading(votes=[1, 1, -1], raw=[], hints=[])

    store = Store(tmp_path)
    store.ensure_session("s", "header")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1],
        response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="x", tool_calls=[], sampling={},
        finish_reason="stop"))
    store.set_next_state(turn.id, NextState("tool", "ok"))
    worker = JudgeWorker(store, Judge(), JudgeConfig(), write_samples=False)
    verdict = asyncio.run(worker.process(store.get_turn(turn.id)))
    assert verdict.reward == 1 and store.verdicts([turn.id])[turn.id].votes == [1, 1, -1]
    assert sum(store.sample_counts().values()) == 0  # no sample: the driver writes these turns' own


# -- the real thing, on the tiny model ---------------------------------------------------------


class EpisodeNumberJudge:
    """Votes +1 on every step of even-numbered episodes and -1 on odd ones (so groups differ)."""

    name = "by-episode"

    async def read(self, turn):
        number = int(re.search(r"-(\d+)$", turn.session_id).group(1))
        return Reading(votes=[1 if number % 2 == 0 else -1], raw=[], hints=[])


def test_rollouts_on_the_tiny_model_land_in_the_store_and_train(tiny_model_dir, tmp_path):
    config = build(AgentConfig, {"env": "toolcall", "episodes": 4, "parallel": 2, "group_size": 2, "max_steps": 2,
                                 "max_tokens": 16, "model": str(tiny_model_dir), "out": str(tmp_path / "out"),
                                 "drain_timeout_s": 60.0, "verdict_timeout_s": 60.0, "train": {"batch_size": 3}})
    snapshots: list[dict] = []
    summary = run_agent(config, snapshots.append, judge=EpisodeNumberJudge())

    lines = [json.loads(line) for line in (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and summary["episodes"] == 4 and summary["env_errors"] == 0
    task_of = {int(line["session_id"].rsplit("-", 1)[1]): line["task"] for line in lines}
    assert task_of[0] == task_of[1] and task_of[2] == task_of[3]  # two groups of two, a task each
    assert summary["success_rate"] == 0.0 and summary["reward_mode"] == "integrated"
    assert snapshots and snapshots[-1]["rows"][0]["done"] == 4

    store = Store(tmp_path / "out" / "data")
    steps = 0
    for line in lines:
        turns = store.turns(line["session_id"])
        assert [t.kind for t in turns] == ["main"] * len(line["actions"]) and turns
        assert all(t.next_state is not None for t in turns)  # tool/user messages, then the feedback
        assert turns[-1].next_state.role == "feedback" and "not solved" in turns[-1].next_state.content
        if len(turns) > 1:
            assert turns[0].next_state.content == line["observations"][0]
        verdicts = store.verdicts([t.id for t in turns])
        assert len(verdicts) == len(turns)
        votes = [verdicts[t.id].votes for t in turns]
        assert line["votes"] == votes and line["rewards"] == [-1.0 + v[0] for v in votes]
        steps += len(turns)
    counts = store.sample_counts(AGENT_METHOD)
    assert counts["ready"] + counts["used"] + counts["rejected"] + counts["dropped"] == steps
    assert counts["used"] >= 2 and summary["samples_written"] >= 4  # step 0 of each group: +1 and -1
    # batch 3: the last batch was short of it, and the drain had it trained too
    assert counts["ready"] == 0 and counts["used"] == summary["samples_written"]
    assert store.sample_counts() == counts  # one sample per step, and no other method claimed any
    first = store.turns(lines[0]["session_id"])[0]
    ((payload,),) = store._execute("SELECT payload FROM samples WHERE turn_id = ?", (first.id,)).fetchall()
    sample = Sample.from_dict(json.loads(payload))  # the advantage is a signal of its own, not a reward
    assert sample.step_advantage == lines[0]["advantages"][0] != 0 and sample.reward is None
    assert summary["updates"] >= 1 and summary["policy_version_end"] >= 1


def test_an_agent_run_whose_trainer_died_says_so_instead_of_waiting_out_the_drain(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    """The drain used to wait --drain-timeout-s for a trainer that had died; now the run
    ends at once with the loop's error (the CLI prints it, exit 1), the episodes it played kept."""
    import time

    from openclaw_rl.serve.server import LoopDied
    from openclaw_rl.train.trainer import Trainer

    def full_disk(self, samples):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trainer, "step", full_disk)  # the one fake: the real server, judge and driver run
    config = build(AgentConfig, {"env": "toolcall", "episodes": 4, "parallel": 2, "group_size": 2, "max_steps": 2,
                                 "max_tokens": 16, "model": str(tiny_model_dir), "out": str(tmp_path / "out"),
                                 "drain_timeout_s": 120.0, "verdict_timeout_s": 60.0, "train": {"batch_size": 1}})
    started = time.monotonic()
    with pytest.raises(LoopDied, match="No space left on device"):
        run_agent(config, judge=EpisodeNumberJudge())
    assert time.monotonic() - started < 100  # not the 120 s drain
    assert len((tmp_path / "out" / "episodes.jsonl").read_text().splitlines()) == 4
