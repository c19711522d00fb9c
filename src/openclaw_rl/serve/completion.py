"""One response in progress, whatever API asked for it: text assembly and the commit.

Each API (chat completions, Responses, Anthropic Messages, completions) formats the same
events: text deltas while the response is decoded, then the committed turn. The turn is
committed to the store before the last byte of the response leaves: before the JSON
body, or before the final event of a stream. A stream the client abandons is not
recorded (the client never saw a complete response to continue from).

Streamed text is always a prefix of the stored text (see serve/textstream.py), so what
a client received is what is stored and trained.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi.concurrency import run_in_threadpool

from openclaw_rl.chat import TOOL_CALL_OPEN, parse_tool_calls
from openclaw_rl.engine.base import Finished, Started
from openclaw_rl.serve.server import Server
from openclaw_rl.serve.sessions import SessionRef, continuation_hash, response_message
from openclaw_rl.serve.textstream import TextAssembler
from openclaw_rl.types import Generation, Message, SamplingParams, TokenStep, Turn, TurnKind, TurnRecord
from openclaw_rl.users import LOCAL, User


@dataclass(frozen=True)
class Caller:
    """Who sent a request (users.py) and what its optional openclaw headers ask."""

    user: User = LOCAL
    kind: TurnKind = "main"
    done: bool = False  # X-Session-Done: close the session after this turn
    session_header: str | None = None  # X-Session-Id


@dataclass(frozen=True)
class ServedPrompt:
    """The exact ids a request is served with, and the user's experience block among them."""

    ids: list[int]
    experience_block: str = ""  # placed in the ids' messages (experience.place), never in the spec's messages
    experience_version: int | None = None  # None: no block
    experience_placement: str = "system"
    experience_lessons: tuple[str, ...] = ()  # the lessons the block holds, in its order


@dataclass(frozen=True)
class TurnSpec:
    """One request for `n` responses, translated from whichever API it came through."""

    api: str  # chat | responses | messages | completions
    messages: list[Message]  # the prompt as chat messages: what is stored, paired and judged (no experience block)
    params: SamplingParams
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    n: int = 1
    kind: TurnKind = "main"
    done: bool = False  # close the session after this turn
    session_header: str | None = None
    end_user: str | None = None  # what the client calls its end user (OpenAI `user`): scopes session inference
    caller: User = LOCAL  # the user the request authenticated as: owns the session, sees only their own
    prompt_ids: list[int] | None = None  # token-in clients; else rendered from `messages`
    previous: SessionRef | None = None  # a session named by the request body (previous_response_id)

    @property
    def tools_on(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


class TurnInProgress:
    """One response (one choice) being generated."""

    def __init__(self, server: Server, spec: TurnSpec, ref: SessionRef, prompt: ServedPrompt,
                 params: SamplingParams, started: Started, stream: AsyncIterator, group: str, choice: int):
        self.server, self.spec, self.ref, self.prompt, self.prompt_ids = server, spec, ref, prompt, prompt.ids
        self.params, self.started, self.stream = params, started, stream
        self.group, self.choice = group, choice
        self.text = TextAssembler(server.tokenizer, params.stop, TOOL_CALL_OPEN if spec.tools_on else None)
        self.steps: list[TokenStep] = []
        self.finish_reason = "length"
        self.content: str | None = None
        self.tool_calls: list[dict[str, Any]] = []
        self.generation: Generation | None = None
        self.turn: Turn | None = None
        self.created = int(time.time())
        self.selection: dict[str, Any] | None = None  # how it was picked among sampled answers (pipeline.py)

    async def deltas(self) -> AsyncIterator[tuple[str, list[TokenStep]]]:
        """Yield (text that may be shown now, the steps it covers) until the response is complete."""
        pending: list[TokenStep] = []
        async for event in self.stream:
            if isinstance(event, Finished):
                self.finish_reason = event.reason
                break
            self.steps.append(event)
            pending.append(event)
            delta = self.text.push(event.token_id)
            if delta:
                yield delta, pending
                pending = []
            if self.text.stopped:
                self.finish_reason = "stop"
                break
        await self.stream.aclose()

    async def decode(self) -> None:
        """Decode to the end without streaming; nothing is committed."""
        async for _ in self.deltas():
            pass

    async def run(self) -> Generation:
        """Decode to the end without streaming, and commit."""
        await self.decode()
        return await self.commit()

    async def commit(self) -> Generation:
        text, kept = self.text.finish()
        steps = self.steps[:kept]
        content, tool_calls = parse_tool_calls(text) if self.spec.tools_on else (text, [])
        finish = "tool_calls" if tool_calls else self.finish_reason
        generation = Generation(
            text=text, token_ids=[s.token_id for s in steps], logprobs=[s.logprob for s in steps],
            top_logprobs=[s.top for s in steps], finish_reason=finish,
            policy_version=self.started.policy_version, prompt_token_count=len(self.prompt_ids),
        )
        self.content, self.tool_calls, self.generation = content, tool_calls, generation
        spec, store = self.spec, self.server.store
        sampling = {**self.params.to_dict(), "tools": spec.tools, "tool_choice": spec.tool_choice, "api": spec.api,
                    "n": spec.n, "group": self.group, "choice": self.choice, "user": spec.end_user}
        if self.selection is not None:  # picked among several sampled answers by the user's lessons
            sampling["selected"] = self.selection
        if self.started.adapter_version is not None:  # the owner's personal adapter answered (absent: no adapter)
            sampling["adapter_version"] = self.started.adapter_version
        hashed = (continuation_hash(spec.messages, response_message(content, tool_calls), spec.end_user or "")
                  if spec.kind == "main" else None)
        record = TurnRecord(
            session_id=self.ref.id, kind=spec.kind, policy_version=generation.policy_version,
            prompt_messages=spec.messages, prompt_token_ids=self.prompt_ids,
            response_token_ids=generation.token_ids, behaviour_logprobs=generation.logprobs,
            response_text=text, tool_calls=tool_calls, sampling=sampling, finish_reason=finish,
            continuation_hash=hashed, owner=spec.caller.name, source=self.ref.source,
            experience_version=self.prompt.experience_version, experience_block=self.prompt.experience_block,
            experience_placement=self.prompt.experience_placement,
        )
        self.turn = await run_in_threadpool(store.record_turn, record)
        metrics = self.server.metrics
        metrics.turns_recorded.labels(spec.kind).inc()
        metrics.tokens_generated.inc(len(self.steps))
        return generation

    def remaining(self) -> str:
        """What a stream still owes the client once the response is committed."""
        assert self.generation is not None
        return self.text.remaining(self.generation.text)

    def usage(self) -> dict[str, int]:
        assert self.generation is not None
        completion = len(self.generation.token_ids)
        return {"prompt_tokens": self.generation.prompt_token_count, "completion_tokens": completion,
                "total_tokens": self.generation.prompt_token_count + completion}
