"""`openclaw-rl agent --tool-choice required`: the driver asks for tool calls the way an agent
framework does (`tool_choice: "required"` through the API), and the server's constrained
decoding makes every reply one well-formed call under its tool's schema, even from a model
with random weights. With `auto` the requests are as before: no `tool_choice`, no constraint.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from openclaw_rl.config import ConfigError, build
from openclaw_rl.drivers.agent import AGENT_METHOD, AgentConfig, run_agent
from openclaw_rl.envs.base import Action, Outcome, StepResult, Task
from openclaw_rl.judge.worker import Reading
from openclaw_rl.store import Store
from openclaw_rl.types import Sample

LADDER = f"{__name__}:LadderEnv"  # make_env loads module:Class; pytest puts this folder on the path


class LadderEnv:
    """Climb to rung 2 with move(direction), then say done(). The arguments are an enum, so a
    forced call always closes within a few tokens, whatever the weights."""

    name = "ladder"
    tools = [
        {"type": "function", "function": {"name": "move", "description": "Go one rung up or down.", "parameters": {
            "type": "object", "properties": {"direction": {"type": "string", "enum": ["up", "down"]}},
            "required": ["direction"]}}},
        {"type": "function", "function": {"name": "done", "description": "Say you are on rung 2.",
                                          "parameters": {"type": "object", "properties": {}}}},
    ]

    def __init__(self) -> None:
        self.rung = 0

    def tasks(self, split=None):
        return [Task("rung-2", "Climb to rung 2, then call done.", split or "train", {})]

    def reset(self, task):
        self.rung = 0
        return "You are on rung 0."

    def step(self, action: Action):
        if action.tool == "done":
            return StepResult(f"Done on rung {self.rung}.", done=True)
        self.rung += 1 if action.arguments["direction"] == "up" else -1
        return StepResult(f"You are on rung {self.rung}.", done=False)

    def evaluate(self):
        return Outcome(self.rung == 2, float(self.rung == 2), f"rung {self.rung}")

    def close(self):
        pass


class EpisodeNumberJudge:
    """+1 on every step of even-numbered episodes, -1 on odd ones, so a group's steps differ."""

    name = "by-episode"

    async def read(self, turn):
        number = int(re.search(r"-(\d+)$", turn.session_id).group(1))
        return Reading(votes=[1 if number % 2 == 0 else -1], raw=[], hints=[])


def _run(tiny_model_dir, out, **settings) -> tuple[dict, list[dict], Store]:
    config = build(AgentConfig, {"env": LADDER, "episodes": 2, "parallel": 2, "group_size": 2, "max_steps": 3,
                                 "max_tokens": 48, "model": str(tiny_model_dir), "out": str(out),
                                 "drain_timeout_s": 60.0, "verdict_timeout_s": 60.0, "train": {"batch_size": 2},
                                 **settings})
    summary = run_agent(config, judge=EpisodeNumberJudge())
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return summary, lines, Store(out / "data")


def test_required_makes_every_step_a_well_formed_call_and_trains_under_its_mask(tiny_model_dir, tmp_path):
    summary, lines, store = _run(tiny_model_dir, tmp_path / "required", tool_choice="required")
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in LadderEnv.tools}
    steps = [(line, i) for line in lines for i in range(len(line["actions"]))]
    assert summary["tool_choice"] == "required" and summary["env_errors"] == summary["policy_errors"] == 0
    assert summary["tool_call_steps"] == len(steps) > 0 and summary["text_action_steps"] == 0
    for line, i in steps:
        action = line["actions"][i]
        assert "tool" in action and not action.get("from_text") and line["invalid"][i] is None, action
        jsonschema.validate(action["arguments"], parameters[action["tool"]])  # raises if it breaks the schema
    for line in lines:  # what the server got: tool_choice required, and the call's grammar recorded
        turns = store.turns(line["session_id"])
        assert len(turns) == len(line["actions"])
        for turn in turns:
            assert turn.sampling["tool_choice"] == "required" and turn.sampling["constraint"]
            assert turn.finish_reason == "tool_calls" and len(turn.tool_calls) == 1
    # the driver's step samples carry the constraint, so the trainer replays the same mask
    payloads = store._execute("SELECT payload FROM samples WHERE payload IS NOT NULL").fetchall()
    samples = [Sample.from_dict(json.loads(payload)) for (payload,) in payloads]
    assert samples and all(s.constraint and s.constraint["prefix"] == "<tool_call>" for s in samples)
    assert store.sample_counts(AGENT_METHOD)["used"] == summary["samples_written"] >= 2


def test_auto_sends_no_tool_choice_and_constrains_nothing(tiny_model_dir, tmp_path):
    summary, lines, store = _run(tiny_model_dir, tmp_path / "auto", split="eval", training=False)
    assert summary["tool_choice"] == "auto" and lines
    turns = [turn for line in lines for turn in store.turns(line["session_id"])]
    assert turns and all(t.sampling.get("tool_choice") is None and not t.sampling.get("constraint") for t in turns)
    # the random-weight model left alone writes no call: the constraint above is what made them
    assert summary["tool_call_steps"] == 0


def test_tool_choice_takes_auto_or_required():
    with pytest.raises(ConfigError, match="auto or required"):
        build(AgentConfig, {"env": "toolcall", "tool_choice": "any"})
