"""`POST /v1/completions`: token-in / token-out for RL clients that render their own prompts.

The prompt is a string (tokenized as is, no chat template) or a list of token ids (used
as is). The turn stores the prompt ids exactly as given and the decoded prompt as its
one user message, which is what the judge reads. A header-less completion cannot be
told apart from a new conversation (there is no message structure to resend), so it
starts a new session; clients that run episodes name theirs with `X-Session-Id`, and the
ids a request adds after the previous turn's prompt and response are that turn's next
state (pipeline._next_state_of_ids). A raw prompt is served exactly as given, so it gets
no experience block (serve/experience_block.py): the client owns its template, and its
next request must extend these exact ids to pair.

`echo` prepends the prompt; with `logprobs` the prompt's own tokens are scored too (the
first has none, as in OpenAI's API).
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, AsyncIterator

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import Field, field_validator

from openclaw_rl.engine.base import EngineError
from openclaw_rl.serve.completion import Caller, TurnSpec
from openclaw_rl.serve.pipeline import Opened, open_turns
from openclaw_rl.serve.schema import (
    MAX_CHOICES,
    MAX_ID_CHARS,
    ApiError,
    Flag,
    Real,
    Seed,
    StreamOptions,
    Temperature,
    TopP,
    UserId,
    Whole,
    _Lenient,
    check_response_format,
    check_stops,
    stop_tuple,
)
from openclaw_rl.serve.server import Server
from openclaw_rl.serve.structured import response_format_constraint
from openclaw_rl.types import SamplingParams, TokenStep

MAX_LOGPROBS = 5  # the legacy API's bound on `logprobs`


class CompletionRequest(_Lenient):
    model: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    # one prompt: text, token ids, or either wrapped in a one-element list (as clients batch)
    prompt: (Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
             | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=1)]
             | Annotated[list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]],
                         Field(min_length=1, max_length=1)])
    max_tokens: Whole = Field(default=16, ge=1)
    temperature: Real | None = Temperature
    top_p: Real | None = TopP
    n: Whole = Field(default=1, ge=1, le=MAX_CHOICES)
    stream: Flag = False
    stream_options: StreamOptions | None = None
    logprobs: Whole | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: Flag = False
    stop: str | list[str] | None = None
    seed: Whole | None = Seed
    user: str | None = UserId
    suffix: str | None = None
    # not in OpenAI's completions API; vLLM and SGLang accept it there too (serve/structured.py)
    response_format: dict[str, Any] | None = None

    _stops = field_validator("stop")(classmethod(lambda cls, v: check_stops(v)))
    _format = field_validator("response_format")(classmethod(lambda cls, v: check_response_format(v)))

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> str | list[int]:
        if isinstance(value, list) and isinstance(value[0], (str, list)):
            return value[0]  # a batch of one (a larger batch fails the schema: one prompt per request)
        return value

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> None:
        if value:
            raise ValueError("suffix (fill-in-the-middle) is not supported; send the prompt alone")
        return None


async def completion(server: Server, body: CompletionRequest, caller: Caller) -> Response:
    prompt_ids = await run_in_threadpool(_prompt_ids, server, body.prompt)
    text = body.prompt if isinstance(body.prompt, str) else server.tokenizer.decode(prompt_ids)
    temperature, top_p = server.sampling(body.temperature, body.top_p)
    params = SamplingParams(max_new_tokens=body.max_tokens, temperature=temperature, top_p=top_p,
                            stop=stop_tuple(body.stop), seed=body.seed, top_logprobs=body.logprobs or 0,
                            constraint=response_format_constraint(body.response_format))
    spec = TurnSpec(api="completions", messages=[{"role": "user", "content": text}], params=params, n=body.n,
                    kind=caller.kind, done=caller.done, session_header=caller.session_header, end_user=body.user,
                    caller=caller.user, prompt_ids=prompt_ids)
    opened = await open_turns(server, spec)
    view = _CompletionView(server, body, opened, text)
    if body.stream:
        return StreamingResponse(view.sse(), media_type="text/event-stream", headers=opened.headers)
    await opened.run()
    return JSONResponse(await view.completion(), headers=opened.headers)


def _prompt_ids(server: Server, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        return server.tokenizer.encode(prompt, add_special_tokens=False)
    vocab = len(server.tokenizer)
    if max(prompt) >= vocab:
        raise ApiError(400, f"prompt: token id {max(prompt)} is outside the vocabulary (0..{vocab - 1})",
                       param="prompt")
    return list(prompt)


class _CompletionView:
    def __init__(self, server: Server, body: CompletionRequest, opened: Opened, prompt_text: str):
        self.server, self.body, self.opened, self.prompt_text = server, body, opened, prompt_text
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = opened.turns[0].created

    def _logprobs(self, steps: list[TokenStep], offset: int) -> dict[str, Any] | None:
        if self.body.logprobs is None:
            return None
        decode = self.server.tokenizer.decode
        tokens = [decode([s.token_id]) for s in steps]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return {"tokens": tokens, "token_logprobs": [s.logprob for s in steps],
                "top_logprobs": [{decode([i]): lp for i, lp in s.top} for s in steps], "text_offset": offsets}

    async def _echoed_logprobs(self) -> dict[str, Any] | None:
        """The prompt's own tokens under the policy (the first token has none)."""
        ids = self.opened.turns[0].prompt_ids
        decode = self.server.tokenizer.decode
        tokens = [decode([i]) for i in ids]
        scored: list[float | None] = [None]
        tops: list[dict[str, float] | None] = [None]
        if len(ids) > 1:
            score = await self.server.engine.score(ids[:1], ids[1:], top_k=self.body.logprobs or 0)
            scored += score.logprobs
            tops += [{decode([i]): lp for i, lp in zip(k_ids, k_lps)}
                     for k_ids, k_lps in zip(score.top_ids, score.top_logprobs)]
        offsets = [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
        return {"tokens": tokens, "token_logprobs": scored, "top_logprobs": tops, "text_offset": offsets}

    async def completion(self) -> dict[str, Any]:
        echo = self.prompt_text if self.body.echo else ""
        prompt_logprobs = await self._echoed_logprobs() if self.body.echo and self.body.logprobs is not None else None
        choices = []
        for i, turn in enumerate(self.opened.turns):
            generation = turn.generation
            logprobs = self._logprobs(turn.steps[: len(generation.token_ids)], len(echo))
            if prompt_logprobs and logprobs:
                logprobs = {key: prompt_logprobs[key] + logprobs[key] for key in logprobs}
            choices.append({"index": i, "text": echo + generation.text, "finish_reason": generation.finish_reason,
                            "logprobs": logprobs})
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.server.model_name,
                "choices": choices, "policy_version": self.opened.served_version,
                "session_id": self.opened.ref.shown_id,
                "usage": self.opened.usage()}

    def _chunk(self, i: int, text: str, finish: str | None = None, logprobs: Any = None) -> str:
        chunk = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.server.model_name,
                 "choices": [{"index": i, "text": text, "finish_reason": finish, "logprobs": logprobs}]}
        return f"data: {json.dumps(chunk)}\n\n"

    async def sse(self) -> AsyncIterator[str]:
        turns = self.opened.turns
        shown = [0] * len(turns)
        try:
            if self.body.echo:
                for i in range(len(turns)):
                    yield self._chunk(i, self.prompt_text)
            async for i, delta, steps in self.opened.events():
                if delta is not None:
                    yield self._chunk(i, delta, logprobs=self._logprobs(steps, shown[i]))
                    shown[i] += len(delta)
                    continue
                turn = turns[i]
                if rest := turn.remaining():
                    yield self._chunk(i, rest)
                yield self._chunk(i, "", finish=turn.generation.finish_reason)
            if self.body.stream_options and self.body.stream_options.include_usage:
                yield self._usage_chunk()
            yield "data: [DONE]\n\n"
        except (TimeoutError, EngineError) as error:
            message = f"generation failed: {str(error) or 'timed out'}"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n"

    def _usage_chunk(self) -> str:
        chunk = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.server.model_name,
                 "choices": [], "usage": self.opened.usage()}
        return f"data: {json.dumps(chunk)}\n\n"
