"""`POST /v1/chat/completions`: the OpenAI chat API over the shared request path."""

from __future__ import annotations

import json
import uuid
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from openclaw_rl.engine.base import EngineError
from openclaw_rl.serve.completion import Caller, TurnInProgress, TurnSpec
from openclaw_rl.serve.pipeline import Opened, open_turns
from openclaw_rl.serve.schema import ChatCompletionRequest
from openclaw_rl.serve.server import Server
from openclaw_rl.types import SamplingParams, TokenStep


def chat_spec(server: Server, body: ChatCompletionRequest, caller: Caller) -> TurnSpec:
    temperature, top_p = server.sampling(body.temperature, body.top_p)
    params = SamplingParams(
        max_new_tokens=body.max_completion_tokens or body.max_tokens or server.config.default_max_tokens,
        temperature=temperature, top_p=top_p, stop=body.stop_sequences, seed=body.seed,
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0, constraint=body.constraint,
    )
    return TurnSpec(
        api="chat", messages=[m.model_dump(exclude_none=True) for m in body.messages], params=params,
        tools=[t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None,
        tool_choice=body.tool_choice.model_dump() if isinstance(body.tool_choice, BaseModel) else body.tool_choice,
        n=body.n, kind=caller.kind, done=caller.done, session_header=caller.session_header, end_user=body.user,
        caller=caller.user,
    )


async def chat_completion(server: Server, body: ChatCompletionRequest, spec: TurnSpec) -> Response:
    opened = await open_turns(server, spec)
    view = _ChatView(server, body, opened)
    if body.stream:
        return StreamingResponse(view.sse(), media_type="text/event-stream", headers=opened.headers)
    await opened.run()
    return JSONResponse(view.completion(), headers=opened.headers)


class _ChatView:
    def __init__(self, server: Server, body: ChatCompletionRequest, opened: Opened):
        self.server, self.body, self.opened = server, body, opened
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = opened.turns[0].created

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

    def _choice(self, i: int, turn: TurnInProgress) -> dict[str, Any]:
        generation = turn.generation
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            message["tool_calls"] = turn.tool_calls
        return {"index": i, "message": message, "finish_reason": generation.finish_reason,
                "logprobs": self._logprobs(turn.steps[: len(generation.token_ids)])}

    def completion(self) -> dict[str, Any]:
        turns = self.opened.turns
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.server.model_name,
            "choices": [self._choice(i, turn) for i, turn in enumerate(turns)],
            "usage": self.opened.usage(),
            "policy_version": self.opened.served_version,
            "session_id": self.opened.ref.shown_id,
        }

    def _chunk(self, i: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None,
               **extra: Any) -> str:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                 "model": self.server.model_name,
                 "choices": [{"index": i, "delta": delta, "finish_reason": finish, "logprobs": logprobs}], **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    async def sse(self) -> AsyncIterator[str]:
        turns = self.opened.turns
        try:
            for i in range(len(turns)):
                yield self._chunk(i, {"role": "assistant", "content": ""})
            async for i, delta, steps in self.opened.events():
                if delta is not None:
                    yield self._chunk(i, {"content": delta}, logprobs=self._logprobs(steps))
                    continue
                turn = turns[i]
                if rest := turn.remaining():
                    yield self._chunk(i, {"content": rest})
                if turn.tool_calls:
                    yield self._chunk(i, {"tool_calls": [{"index": k, **c} for k, c in enumerate(turn.tool_calls)]})
                yield self._chunk(i, {}, finish=turn.generation.finish_reason)
            if self.body.stream_options and self.body.stream_options.include_usage:
                chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                         "model": self.server.model_name, "choices": [], "usage": self.opened.usage()}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        except (TimeoutError, EngineError) as error:
            timeout = self.server.config.request_timeout_s
            message = f"generation failed: {str(error) or f'longer than request_timeout_s={timeout}'}"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n"
