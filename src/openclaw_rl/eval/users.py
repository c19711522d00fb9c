"""A simulated user who talks to the running server through the official OpenAI client.

A session is one problem: the user asks, the agent answers, the user replies, until the
user is satisfied or out of turns. Every reply but the last travels the way a real
client's would, as the next user message of the next chat request (so the server pairs
it with the previous turn as that turn's next state); the last reply, which no further
request carries, is posted as feedback to the session, and then the session is ended.

The user is "just another agent" and is never trained on. By default its replies come
from the persona's templates; with `user_model_url` an OpenAI-compatible LLM plays it,
prompted with the persona's hidden preference, and a failed or unreadable LLM reply falls
back to the templates (recorded in the log, never silently).

A failed request is data, not a crash: the session stops and its log says why.
"""

from __future__ import annotations

import logging
import os
import random
import re
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import openai

from openclaw_rl.eval.personas import Persona, Reply
from openclaw_rl.eval.problems import Problem

__all__ = ["SessionLog", "SimulatedUser", "TurnLog", "USER_MODEL_API_KEY_ENV"]

log = logging.getLogger(__name__)

USER_MODEL_API_KEY_ENV = "OPENCLAW_USER_MODEL_API_KEY"  # for a --user-model that wants a key


@dataclass(frozen=True)
class TurnLog:
    index: int
    response: str
    score: float  # the persona's rubric on this response
    failed_checks: tuple[str, ...]
    reply: str
    reply_kind: str  # approve | correct | reask
    reply_source: str  # template | user-model | template (user model failed: ...)
    policy_version: int | None  # from the X-Policy-Version header


@dataclass
class SessionLog:
    session_id: str
    persona: str
    problem_id: str
    turns: list[TurnLog] = field(default_factory=list)
    satisfied: bool = False
    error: str | None = None  # why the session stopped early, if it did

    @property
    def first_score(self) -> float | None:
        return self.turns[0].score if self.turns else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_KIND_LINE = re.compile(r"^\W*(APPROVE|CORRECT|REASK)\W*(.*)$", re.IGNORECASE | re.DOTALL)


class SimulatedUser:
    """Plays sessions of one persona against the server behind `client`."""

    def __init__(self, persona: Persona, client: openai.OpenAI, model_name: str, max_turns: int = 3,
                 rng: random.Random | None = None, *, temperature: float | None = None, max_tokens: int = 256,
                 user_model_url: str | None = None, user_model_name: str = "default",
                 user_model_timeout_s: float = 60.0):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.persona, self.client, self.model_name, self.max_turns = persona, client, model_name, max_turns
        self.rng = rng or random.Random(0)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.user_model: openai.OpenAI | None = None
        self.user_model_name = user_model_name
        if user_model_url:
            self.user_model = openai.OpenAI(base_url=user_model_url, api_key=os.environ.get(USER_MODEL_API_KEY_ENV,
                                            "unused"), timeout=user_model_timeout_s, max_retries=1)

    def play_session(self, problem: Problem) -> SessionLog:
        session_id = f"sim-{self.persona.name}-{problem.id}-{uuid.UUID(int=self.rng.getrandbits(128)).hex[:12]}"
        record = SessionLog(session_id, self.persona.name, problem.id)
        messages: list[dict[str, str]] = [{"role": "user", "content": self.persona.first_message(problem)}]
        for index in range(self.max_turns):
            try:
                response, version = self._ask(session_id, messages)
            except (openai.OpenAIError, httpx.HTTPError) as error:
                record.error = f"turn {index}: {type(error).__name__}: {error}"
                log.warning("session %s stopped: %s", session_id, record.error)
                break
            reply, source = self._reply(problem, response, index)
            failed = tuple(c.name for c in self.persona.failed_checks(problem, response))
            record.turns.append(TurnLog(index, response, self.persona.rubric(problem, response), failed,
                                        reply.text, reply.kind, source, version))
            if reply.satisfied or index == self.max_turns - 1:
                record.satisfied = reply.satisfied
                self._post(session_id, "feedback", {"text": reply.text}, record)
                break
            messages += [{"role": "assistant", "content": response}, {"role": "user", "content": reply.text}]
        self._post(session_id, "end", None, record)
        return record

    def _ask(self, session_id: str, messages: list[dict[str, str]]) -> tuple[str, int | None]:
        # None: no temperature sent, as a stock client sends none; the server's default applies
        sampling = {} if self.temperature is None else {"temperature": self.temperature}
        raw = self.client.chat.completions.with_raw_response.create(
            model=self.model_name, messages=messages, max_tokens=self.max_tokens,
            extra_headers={"X-Session-Id": session_id}, **sampling)
        completion = raw.parse()
        version = raw.headers.get("x-policy-version")
        return completion.choices[0].message.content or "", int(version) if version is not None else None

    def _post(self, session_id: str, action: str, body: dict | None, record: SessionLog) -> None:
        try:
            self.client.post(f"/sessions/{session_id}/{action}", body=body or {}, cast_to=httpx.Response)
        except (openai.OpenAIError, httpx.HTTPError) as error:
            note = f"{action}: {type(error).__name__}: {error}"
            record.error = f"{record.error}; {note}" if record.error else note

    def _reply(self, problem: Problem, response: str, index: int) -> tuple[Reply, str]:
        if self.user_model is None:
            return self.persona.reply(problem, response, index, self.rng), "template"
        try:
            return self._llm_reply(problem, response), "user-model"
        except Exception as error:  # any failure of the user model falls back to the templates, recorded
            reason = f"{type(error).__name__}: {error}"[:200]
            log.warning("user model failed (%s); using the persona's templates", reason)
            return self.persona.reply(problem, response, index, self.rng), f"template (user model failed: {reason})"

    def _llm_reply(self, problem: Problem, response: str) -> Reply:
        p = self.persona
        system = (f"You are role-playing {p.role}. Stay in character; never mention that you are simulated.\n"
                  f"Your hidden preference (never state it as a list of rules): {p.preference}\n"
                  f"For reference, the correct final answer to the problem is {problem.answer}.\n"
                  "Read the assistant's answer and reply in one to three short sentences, as this person would. "
                  "Start your message with exactly one label: APPROVE if the answer meets your preference (then "
                  "just thank them and move on), CORRECT if it does not (then say concretely what to change), or "
                  "REASK if you are unhappy and just want it again without saying why.")
        user = f"Your message was:\n{p.first_message(problem)}\n\nThe assistant answered:\n{response}"
        completion = self.user_model.chat.completions.create(  # type: ignore[union-attr]
            model=self.user_model_name, temperature=0.7, max_tokens=160,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        text = (completion.choices[0].message.content or "").strip()
        match = _KIND_LINE.match(text)
        if not match or not match.group(2).strip():
            raise ValueError(f"reply does not start with APPROVE, CORRECT or REASK: {text[:80]!r}")
        kind = match.group(1).lower()
        reply_kind = {"approve": "approve", "correct": "correct", "reask": "reask"}[kind]
        return Reply(match.group(2).strip(), reply_kind, satisfied=reply_kind == "approve")
