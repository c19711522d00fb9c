"""One episode through the policy's OpenAI-compatible API: actions are tool calls, observations next states.

    policy = HTTPPolicy("http://127.0.0.1:8000")        # the official openai client
    episode = play_episode(env, task, policy, session_id="agent-0001", max_steps=8)
    episode.outcome.success, [step.action for step in episode.steps]

Each step is one chat completion in the episode's own session (`X-Session-Id`), so the
server records it as a main turn like any other. The observation goes back as the `tool`
message of the next request, and the server's session pairing (serve/sessions.py: what
a request adds after the previous turn's prompt and response) makes it that turn's next
state. The last turn has no next request: its next state, the final observation and the
checked outcome, is posted to `/v1/sessions/{id}/feedback`, then the session is ended
(`/v1/sessions/{id}/end`). The judge then reads every step as it reads a chat turn.

Decisions and why:

- The first user message is the task's prompt, followed by what `reset` returned when
  that differs from the prompt: the terminal and GUI envs return the starting state (the
  files, the page), not the request.
- One action per step: the first tool call is carried out; any further calls in the same
  reply get a tool message saying they were not run. Every call id gets an answer, as
  the OpenAI format requires, and the model learns that one call at a time is what works.
- A reply without a tool call is first read for a text action (a fenced code block, a
  stated answer: text_actions.py), which is then carried out as the call it stands for;
  the history sends it back as that call, so its observation is a `tool` message. A reply
  with neither counts as a step, changes nothing in the environment, and its observation
  (a user message) tells the model to use a tool. A 135M model often does this; it is
  data, not a crash. So are malformed arguments
  (the observation names the JSON error) and a failed chat call (the episode ends there
  and is evaluated as it stands).
- An environment that breaks (`EnvError`, a lost pool lease, any exception from the env)
  is not the agent's doing: the episode records `error` and no outcome, and the driver
  keeps it out of training and counts it separately.
- `Policy` is the one seam between an episode and the server (chat, feedback, end, the
  judge's verdicts), so a test can script a policy without a model or a network.
- `train=False` sends side turns (`X-Turn-Type: side`): served and recorded, never
  paired, judged or trained. Evaluation episodes use it.

(Over 400 lines: the policy client, the episode loop and the two sources of
environments, local and pooled, are the one contract an agent run relies on.)
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import openai

from openclaw_rl.config import ConfigError
from openclaw_rl.envs.base import Action, Env, Outcome, Task
from openclaw_rl.envs.client import PoolClient, PoolExhausted
from openclaw_rl.envs.registry import env_class, make_env
from openclaw_rl.envs.text_actions import text_action, text_action_hint
from openclaw_rl.types import Message

__all__ = ["EnvSource", "Episode", "HTTPPolicy", "LocalEnvs", "Policy", "PolicyError", "PoolEnvs", "Reply", "Step",
           "TurnVerdict", "play_episode"]

log = logging.getLogger(__name__)

NO_TOOL_CALL = "You did not call a tool, so nothing happened. Act by calling one of the tools: {tools}."
EXTRA_CALL = "Not run: call one tool per step. Only the first call of your reply was carried out."
FINAL_DETAIL_CHARS = 500


class PolicyError(RuntimeError):
    """A chat call failed (HTTP error, timeout, a prompt longer than the context): the episode ends."""


@dataclass(frozen=True)
class Reply:
    """One chat completion as the driver needs it."""
    text: str
    tool_calls: list[dict[str, Any]]  # OpenAI format: {"id", "type", "function": {"name", "arguments"}}
    policy_version: int | None  # the version that sampled it (X-Policy-Version), if the server says
    finish_reason: str = "stop"


@dataclass(frozen=True)
class TurnVerdict:
    """The judge's reading of one main turn of a session, as far as it has got."""
    votes: list[int]  # parsed evaluative votes (empty: no verdict, or none parseable)
    pending: bool  # the turn has its next state but no verdict yet


class Policy(Protocol):
    """The policy server as an episode sees it."""
    def chat(self, session_id: str, messages: list[Message], tools: list[dict[str, Any]], *, train: bool) -> Reply:
        """One completion in `session_id`; raises PolicyError when there is none."""
        ...

    def feedback(self, session_id: str, text: str) -> None:
        """The next state of the session's last turn, when no request follows it."""
        ...

    def end(self, session_id: str) -> None: ...

    def verdicts(self, session_id: str) -> list[TurnVerdict]:
        """The session's main turns in order, each with its verdict so far."""
        ...

    def status(self) -> dict[str, Any]:
        """The server's counters (`/v1/status`): policy_version, train_steps, ..."""
        ...


@dataclass
class Step:
    index: int  # position in the episode; the session's main turn of the same index
    action: dict[str, Any]  # {"tool", "arguments"} for a tool call; {"text"} for a reply without one
    observation: str
    policy_version: int | None
    error: str | None = None  # why the action was invalid, if it was


@dataclass
class Episode:
    env: str
    task: Task
    session_id: str
    train: bool  # main turns (trained) or side turns (evaluation)
    steps: list[Step] = field(default_factory=list)
    outcome: Outcome | None = None  # None when the environment broke
    error: str | None = None  # the environment broke ("env: ...") or the policy failed ("policy: ...")
    wall_time_s: float = 0.0

    @property
    def env_failed(self) -> bool:
        return self.outcome is None

    @property
    def success(self) -> bool:
        return self.outcome is not None and self.outcome.success


def play_episode(env: Env, task: Task, policy: Policy, session_id: str, *, max_steps: int,
                 train: bool = True, text_actions: bool = True) -> Episode:
    """Play `task` on `env` through `policy`, at most `max_steps` chat turns; never raises for the
    agent's mistakes or a broken environment (see the module docstring). `text_actions`: read
    a code block or a stated answer in a reply without a tool call as that call (text_actions.py)."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    started = time.monotonic()
    episode = Episode(env.name, task, session_id, train)
    tool_names = ", ".join(tool["function"]["name"] for tool in env.tools)
    no_call = NO_TOOL_CALL.format(tools=tool_names) + (text_action_hint(env.tools) if text_actions else "")
    try:
        first = env.reset(task)
    except Exception as error:  # the env's fault, whatever it raised
        return _broken(episode, "reset", error, started)
    prompt = task.prompt if first.strip() == task.prompt.strip() else f"{task.prompt}\n\n{first}"
    messages: list[Message] = [{"role": "user", "content": prompt}]
    pending: list[Message] = []  # what the last turn has not been shown yet: its next state
    for index in range(max_steps):
        try:
            reply = policy.chat(session_id, messages + pending, env.tools, train=train)
        except PolicyError as error:
            episode.error = f"policy: {error}"
            log.info("episode %s: the chat call of step %d failed: %s", session_id, index, error)
            break
        calls, from_text = reply.tool_calls, False
        if not calls and text_actions and (parsed := text_action(reply.text, env.tools)):
            calls, from_text = [_tool_call(f"text-{index}", *parsed)], True
        messages += pending
        messages.append(_assistant_message(reply.text, calls))
        if calls:
            call = calls[0]
            name, arguments = call["function"]["name"], call["function"].get("arguments") or ""
            try:
                observation, done, invalid = _act(env, name, arguments)
            except Exception as error:
                return _broken(episode, "step", error, started)
            pending = [{"role": "tool", "tool_call_id": call.get("id", ""), "content": observation}]
            pending += [{"role": "tool", "tool_call_id": extra.get("id", ""), "content": EXTRA_CALL}
                        for extra in calls[1:]]
            action: dict[str, Any] = {"tool": name, "arguments": _decoded(arguments)}
            if from_text:
                action["from_text"] = True
        else:
            observation, done, invalid = no_call, False, "no tool call"
            pending = [{"role": "user", "content": observation}]
            action = {"text": reply.text}
        episode.steps.append(Step(index, action, observation, reply.policy_version, invalid))
        if done:
            break
    try:
        episode.outcome = env.evaluate()
    except Exception as error:
        return _broken(episode, "evaluate", error, started)
    if train and episode.steps:  # the last turn's next state: the final observation and the check
        _quietly(policy.feedback, session_id, _final_state(pending, episode.outcome))
    _quietly(policy.end, session_id)
    episode.wall_time_s = time.monotonic() - started
    return episode


def _act(env: Env, name: str, arguments: str | dict[str, Any]) -> tuple[str, bool, str | None]:
    """(observation, done, why the action was invalid) of one tool call."""
    try:
        action = Action.from_tool_call(name, arguments)
    except ValueError as error:  # malformed JSON: the agent's mistake, shown to it
        return f"Error: {error}. Send the arguments as one JSON object.", False, str(error)
    result = env.step(action)
    return result.observation, result.done, result.info.get("error")


def _assistant_message(text: str, tool_calls: list[dict[str, Any]]) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _decoded(arguments: str | dict[str, Any]) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments  # kept as sent, for the record


def _final_state(pending: list[Message], outcome: Outcome) -> str:
    """The last turn's next state: its observation and the check's verdict, with the start of
    the check's detail (a test log can run to pages; the judge needs the gist)."""
    observation = "\n\n".join(str(m.get("content", "")) for m in pending)
    verdict = "solved" if outcome.success else "not solved"
    detail = outcome.detail if len(outcome.detail) <= FINAL_DETAIL_CHARS else outcome.detail[:FINAL_DETAIL_CHARS] + " ..."
    return f"{observation}\n\n[The episode is over. The task was checked: {verdict}. {detail}]".strip()


def _broken(episode: Episode, call: str, error: Exception, started: float) -> Episode:
    log.warning("episode %s: the %s environment failed in %s: %s", episode.session_id, episode.env, call, error)
    episode.error = f"env: {call} failed: {type(error).__name__}: {error}"
    episode.outcome = None
    episode.wall_time_s = time.monotonic() - started
    return episode


def _quietly(call, *args: Any) -> None:
    """A session call whose failure costs only its own effect (a next state, a closed session)."""
    try:
        call(*args)
    except Exception as error:  # e.g. 409: the server already closed the turn
        log.warning("%s%r failed: %s", getattr(call, "__name__", call), args[:1], error)


class HTTPPolicy:
    """A policy server over HTTP: the official openai client for chat, httpx for the session endpoints.

    `base_url` is the server's root or its `/v1` URL. Thread-safe: rollout workers share one.
    `tool_choice` "required": every request with tools asks for a call (`tool_choice:
    "required"`, as an agent framework would), which the server constrains to one call under
    its tool's schema; "auto" sends no `tool_choice` at all.
    """
    def __init__(self, base_url: str, *, model: str = "", api_key: str = "", temperature: float = 1.0,
                 max_tokens: int = 256, timeout_s: float = 600.0, tool_choice: str = "auto") -> None:
        if tool_choice not in ("auto", "required"):
            raise ValueError(f"tool_choice must be 'auto' or 'required', got {tool_choice!r}")
        root = base_url.rstrip("/").removesuffix("/v1")
        self.temperature, self.max_tokens, self.tool_choice = temperature, max_tokens, tool_choice
        self._openai = openai
        self._client = openai.OpenAI(base_url=f"{root}/v1", api_key=api_key or "unused", max_retries=2,
                                     timeout=timeout_s)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=f"{root}/v1", headers=headers, timeout=60.0)
        self.model = model or self._first_model()

    def _first_model(self) -> str:
        try:
            models = self._client.models.list().data
        except self._openai.APIError as error:
            raise PolicyError(f"cannot list the models of the policy server: {error}") from error
        if not models:
            raise PolicyError("the policy server lists no model; pass one with --policy-model")
        return models[0].id

    def chat(self, session_id: str, messages: list[Message], tools: list[dict[str, Any]], *, train: bool) -> Reply:
        headers = {"X-Session-Id": session_id, "X-Turn-Type": "main" if train else "side"}
        forced = {"tool_choice": "required"} if tools and self.tool_choice == "required" else {}
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, tools=tools, temperature=self.temperature,
                max_tokens=self.max_tokens, extra_headers=headers, **forced)
        except self._openai.APIError as error:
            raise PolicyError(f"{type(error).__name__}: {error}") from error
        completion = raw.parse()
        choice = completion.choices[0]
        version = raw.headers.get("x-policy-version")
        return Reply(
            text=choice.message.content or "",
            tool_calls=[call.model_dump(exclude_none=True) for call in choice.message.tool_calls or []],
            policy_version=int(version) if version and version.isdigit() else None,
            finish_reason=choice.finish_reason or "stop",
        )

    def feedback(self, session_id: str, text: str) -> None:
        self._http.post(f"/sessions/{session_id}/feedback", json={"text": text}).raise_for_status()

    def end(self, session_id: str) -> None:
        self._http.post(f"/sessions/{session_id}/end").raise_for_status()

    def verdicts(self, session_id: str) -> list[TurnVerdict]:
        response = self._http.get(f"/sessions/{session_id}")
        response.raise_for_status()
        found = []
        for turn in response.json()["turns"]:
            if turn["kind"] != "main":
                continue
            verdict = turn.get("verdict")
            if verdict is not None:
                found.append(TurnVerdict(list(verdict.get("votes") or []), pending=False))
            else:  # judged later if it has a next state; never if the session closed first
                found.append(TurnVerdict([], pending=turn.get("next_state") is not None))
        return found

    def status(self) -> dict[str, Any]:
        response = self._http.get("/status")
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self._client.close()
        self._http.close()


# -- where the environments come from ---------------------------------------------------------


class EnvSource(Protocol):
    """Environments for episodes, by name: local instances or pool leases."""
    def tasks(self, name: str, split: str) -> list[Task]: ...

    def env(self, name: str) -> contextlib.AbstractContextManager[Env]:
        """An environment for one episode, given back when the block ends."""
        ...

    def close(self) -> None: ...


class LocalEnvs:
    """One environment per worker thread and name, made on first use and kept for its episodes.
    `level`: the task level of the envs that have levels (a `level` constructor option);
    naming one other than "standard" for an env without levels is an error."""
    def __init__(self, level: str = "standard") -> None:
        self.level = level
        self._local = threading.local()
        self._made: list[Env] = []
        self._lock = threading.Lock()

    def _make(self, name: str) -> Env:
        if "level" in inspect.signature(env_class(name)).parameters:
            return make_env(name, level=self.level)
        if self.level != "standard":
            raise ValueError(f"environment {name!r} has no task levels; --level {self.level} is for terminal and "
                             "toolcall (and envs whose constructor takes level=)")
        return make_env(name)

    def tasks(self, name: str, split: str) -> list[Task]:
        env = self._make(name)
        try:
            return env.tasks(split)  # type: ignore[arg-type]
        finally:
            env.close()

    @contextlib.contextmanager
    def env(self, name: str) -> Iterator[Env]:
        envs = self._local.__dict__.setdefault("envs", {})
        if name not in envs:
            envs[name] = self._make(name)
            with self._lock:
                self._made.append(envs[name])
        yield envs[name]

    def close(self) -> None:
        for env in self._made:
            with contextlib.suppress(Exception):
                env.close()


class PoolEnvs:
    """A lease per episode from an env pool; waits while every env is leased."""
    def __init__(self, url: str, token: str, name: str, wait_s: float = 600.0) -> None:
        self.client = PoolClient(url, token)
        self.name, self.wait_s = name, wait_s

    def tasks(self, name: str, split: str) -> list[Task]:
        return self.client.tasks(split)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def env(self, name: str) -> Iterator[Env]:
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                lease = self.client.lease()
                break
            except PoolExhausted:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        if lease.name != name:
            lease.close()
            raise ConfigError(f"the pool serves {lease.name!r} environments, not {name!r}; use --env {lease.name}")
        with lease:
            yield lease  # type: ignore[misc]

    def close(self) -> None:
        self.client.close()
