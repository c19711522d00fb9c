"""Text actions: a code block or a stated answer in a reply without a tool call, read as that call."""

from __future__ import annotations

import pytest

from openclaw_rl.envs.gui import TOOLS as GUI_TOOLS
from openclaw_rl.drivers.rollout import NO_TOOL_CALL, Reply, TurnVerdict, play_episode
from openclaw_rl.envs.swe import SWEEnv
from openclaw_rl.envs.terminal import TerminalEnv
from openclaw_rl.envs.text_actions import text_action, text_action_hint
from openclaw_rl.envs.toolcall import ToolCallEnv

PY = ToolCallEnv.tools
SH = TerminalEnv.tools


@pytest.mark.parametrize(("text", "tools", "expected"), [
    ("Let me compute:\n```python\nprint(8 * 11)\n```\nDone.", PY, ("python", {"code": "print(8 * 11)\n"})),
    ("```\nprint(1)\n```", PY, ("python", {"code": "print(1)\n"})),  # untagged: the env's code tool
    ("```py\nx = 2\nprint(x)", PY, ("python", {"code": "x = 2\nprint(x)"})),  # cut off by max_tokens
    ("```bash\nls -l\n```", SH, ("run", {"command": "ls -l\n"})),
    ("Run this:\n```\ngrep -c ERROR app.log > errors.txt\n```", SH, ("run", {"command": "grep -c ERROR app.log > errors.txt\n"})),
    ("So the answer is 1,200.", PY, ("answer", {"value": "1200"})),
    ("Step 1 ... Final answer: $42", PY, ("answer", {"value": "42"})),
    ("#### -7", PY, ("answer", {"value": "-7"})),
    ("The answer is **3/4**", PY, ("answer", {"value": "3/4"})),
    # code comes first, even with an answer in the same reply
    ("The answer is 5.\n```python\nprint(2 + 3)\n```", PY, ("python", {"code": "print(2 + 3)\n"})),
])
def test_a_reply_without_a_tool_call_is_read_as_the_call_it_stands_for(text, tools, expected):
    assert text_action(text, tools) == expected


@pytest.mark.parametrize(("text", "tools"), [
    ("Kofi has 98 erasers in total.", PY),  # a number, but no stated answer
    ("```python\n\n```", PY),  # an empty block
    ("```python\nprint(1)\n```", SH),  # Python is not a shell command
    ("The answer is 42.", SH),  # the terminal env has no answer tool
    ("```bash\nls\n```", SWEEnv.tools),  # SWE and GUI take tool calls only
    ("The answer is 42.", GUI_TOOLS),
    ("", PY),
])
def test_text_that_stands_for_no_call_of_the_envs_tools_is_no_action(text, tools):
    assert text_action(text, tools) is None


def test_the_hint_names_only_what_the_env_accepts():
    assert text_action_hint(PY) == ' You can also write a ```python block or "The answer is N.".'
    assert text_action_hint(SH) == " You can also write a ```bash block."
    assert text_action_hint(SWEEnv.tools) == ""


class _Script:
    """The policy seam: fixed replies; no verdicts."""

    def __init__(self, replies: list[Reply]):
        self.replies, self.requests, self.feedback_texts = list(replies), [], []

    def chat(self, session_id, messages, tools, *, train):
        self.requests.append([dict(m) for m in messages])
        return self.replies.pop(0)

    def feedback(self, session_id, text):
        self.feedback_texts.append(text)

    def end(self, session_id):
        pass

    def verdicts(self, session_id):
        return [TurnVerdict([], pending=False)]

    def status(self):
        return {}


def test_a_code_block_runs_in_the_sandbox_and_a_stated_answer_ends_the_episode():
    env = ToolCallEnv(n_train=2, n_eval=1)
    try:
        task = env.tasks("train")[0]
        answer = f"{task.data['answer']:g}"
        code = f"```python\nprint({answer})\n```"
        policy = _Script([Reply(f"Let me check.\n{code}", [], 0), Reply(f"So the answer is {answer}.", [], 0)])
        episode = play_episode(env, task, policy, "s1", max_steps=4)
    finally:
        env.close()
    assert episode.success and [s.index for s in episode.steps] == [0, 1]
    first, second = episode.steps
    assert first.action == {"tool": "python", "arguments": {"code": f"print({answer})\n"}, "from_text": True}
    assert first.observation.strip().startswith(answer) and first.error is None
    assert second.action == {"tool": "answer", "arguments": {"value": answer}, "from_text": True}
    # the history sends the text back as the call it stood for, and the output as its tool message
    assistant, tool = policy.requests[1][-2:]
    assert assistant["content"] == f"Let me check.\n{code}"
    assert assistant["tool_calls"][0]["id"] == "text-0" and assistant["tool_calls"][0]["function"]["name"] == "python"
    assert tool == {"role": "tool", "tool_call_id": "text-0", "content": first.observation}
    assert "solved" in policy.feedback_texts[0]


def test_with_text_actions_off_a_code_block_is_only_text():
    env = ToolCallEnv(n_train=1, n_eval=1)
    try:
        task = env.tasks("train")[0]
        policy = _Script([Reply("```python\nprint(1)\n```", [], 0)])
        episode = play_episode(env, task, policy, "s1", max_steps=1, text_actions=False)
    finally:
        env.close()
    assert episode.steps[0].action == {"text": "```python\nprint(1)\n```"}
    assert episode.steps[0].observation == NO_TOOL_CALL.format(tools="python, answer")
    assert not episode.success
