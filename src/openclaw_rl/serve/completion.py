"""One chat completion in progress: text assembly, streamed chunks, and the commit.

The turn is committed to the store before the last byte of the response leaves: before
the JSON body, or before the final chunk and `[DONE]` of a stream. A stream the client
abandons is not recorded (the client never saw a complete response to continue from).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator

from fastapi.concurrency import run_in_threadpool

from openclaw_rl.engine.base import EngineError, Finished, Started
from openclaw_rl.serve.chat import TOOL_CALL_OPEN, parse_tool_calls
from openclaw_rl.serve.schema import ChatCompletionRequest
from openclaw_rl.serve.sessions import SessionRef, continuation_hash, response_message
from openclaw_rl.serve.textstream import TextAssembler
from openclaw_rl.types import Generation, SamplingParams, TokenStep

if TYPE_CHECKING:
    from openclaw_rl.serve.app import Server


class TurnInProgress:
    """One response being generated: text assembly, streaming chunks, and the commit."""

    def __init__(self, server: Server, body: ChatCompletionRequest, ref: SessionRef, kind: str, done: bool,
                 messages: list[dict], prompt_ids: list[int], params: SamplingParams, started: Started,
                 tools: list[dict] | None):
        self.server, self.body, self.ref, self.kind, self.done = server, body, ref, kind, done
        self.messages, self.prompt_ids, self.params, self.started = messages, prompt_ids, params, started
        self.tools = tools
        self.tools_on = bool(tools) and body.tool_choice != "none"
        self.text = TextAssembler(server.tokenizer, params.stop, TOOL_CALL_OPEN if self.tools_on else None)
        self.steps: list[TokenStep] = []
        self.finish_reason = "length"
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    async def consume(self, stream: AsyncIterator) -> AsyncIterator[tuple[str, TokenStep | None]]:
        """Yield (text delta, step) until the response is complete."""
        async for event in stream:
            if isinstance(event, Finished):
                self.finish_reason = event.reason
                return
            self.steps.append(event)
            delta = self.text.push(event.token_id)
            yield delta, event
            if self.text.stopped:
                self.finish_reason = "stop"
                return

    async def commit(self) -> Generation:
        text, kept = self.text.finish()
        steps = self.steps[:kept]
        content, tool_calls = parse_tool_calls(text) if self.tools_on else (text, [])
        finish = "tool_calls" if tool_calls else self.finish_reason
        generation = Generation(
            text=text, token_ids=[s.token_id for s in steps], logprobs=[s.logprob for s in steps],
            top_logprobs=[s.top for s in steps], finish_reason=finish,
            policy_version=self.started.policy_version, prompt_token_count=len(self.prompt_ids),
        )
        self.content, self.tool_calls = content, tool_calls
        store = self.server.store
        await run_in_threadpool(
            lambda: store.record_turn(
                session_id=self.ref.id, kind=self.kind, policy_version=generation.policy_version,
                prompt_messages=self.messages, prompt_token_ids=self.prompt_ids,
                response_token_ids=generation.token_ids, behaviour_logprobs=generation.logprobs,
                response_text=text, tool_calls=tool_calls,
                sampling={**self.params.to_dict(), "tools": self.tools, "tool_choice": self.body.tool_choice},
                finish_reason=finish,
                continuation_hash=(continuation_hash(self.messages, response_message(content, tool_calls))
                                   if self.kind == "main" else None),
            )
        )
        if self.done:
            await run_in_threadpool(store.close_session, self.ref.id)
        metrics = self.server.metrics
        metrics.turns_recorded.labels(self.kind).inc()
        metrics.tokens_generated.inc(len(self.steps))
        return generation

    def _logprobs(self, steps: list[TokenStep]) -> dict[str, Any] | None:
        if not self.body.logprobs:
            return None
        decode = self.server.tokenizer.decode

        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            token = decode([token_id])
            return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

        return {"content": [
            {**entry(s.token_id, s.logprob), "top_logprobs": [entry(i, lp) for i, lp in s.top]} for s in steps
        ]}

    def _usage(self, generation: Generation) -> dict[str, int]:
        completion = len(generation.token_ids)
        return {"prompt_tokens": generation.prompt_token_count, "completion_tokens": completion,
                "total_tokens": generation.prompt_token_count + completion}

    def completion(self, generation: Generation) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.server.model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": generation.finish_reason,
                         "logprobs": self._logprobs(self.steps[: len(generation.token_ids)])}],
            "usage": self._usage(generation),
            "policy_version": generation.policy_version,
            "session_id": self.ref.id,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None, **extra: Any) -> str:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                 "model": self.server.model_name,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}], **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    async def sse(self, stream: AsyncIterator) -> AsyncIterator[str]:
        timeout = self.server.config.request_timeout_s
        pending: list[TokenStep] = []  # steps whose text is not shown yet
        try:
            yield self._chunk({"role": "assistant", "content": ""})
            async with asyncio.timeout(timeout):
                async for delta, step in self.consume(stream):
                    pending.append(step)
                    if delta:
                        yield self._chunk({"content": delta}, logprobs=self._logprobs(pending))
                        pending = []
            await stream.aclose()
            generation = await self.commit()
            rest = self.text.remaining(generation.text)
            if rest:
                yield self._chunk({"content": rest})
            if self.tool_calls:
                calls = [{"index": i, **call} for i, call in enumerate(self.tool_calls)]
                yield self._chunk({"tool_calls": calls})
            usage = self._usage(generation) if self.body.stream_options and self.body.stream_options.include_usage else None
            yield self._chunk({}, finish=generation.finish_reason, usage=usage)
            yield "data: [DONE]\n\n"
        except (TimeoutError, EngineError) as error:
            message = f"generation failed: {error or f'longer than request_timeout_s={timeout}'}"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n"
        finally:
            await stream.aclose()
