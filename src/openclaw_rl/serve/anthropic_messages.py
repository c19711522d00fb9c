"""`POST /v1/messages`: the Anthropic Messages API over the shared request path.

Harnesses built on Anthropic's SDK use the policy unchanged. A request is translated
into chat messages, the form every turn is stored, judged and trained in, so session
inference, pairing and recording are the chat path's, untouched (serve/pipeline.py).
The translation is a pure function of the request, so a client that resends the history
it was served gets the same chat messages the turn was recorded with, and its new
messages become that turn's next state.

Decisions, and why:

- Translation. `system` becomes a leading system message (the user's experience block
  is appended to it when the prompt is rendered: docs/experience.md#in-the-prompt). An assistant message's text
  and tool_use blocks become ONE assistant message (text joined as generated, tool calls
  with `arguments = json.dumps(input)`). A user message's tool_result blocks become
  `tool` messages in order (Anthropic puts them first in the message), then its text
  blocks one user message; user and system text blocks are joined by a blank line, as
  separate pieces the harness composed. A tool_result with `is_error` reads
  "Error: ..." so that the model and the judge both see the tool failed.
- Tool use ids are the chat layer's call ids with `toolu_` for `call_` (same hex), so
  the stored turn and the client name one call alike. Assistant tool ids are not part
  of the continuation hash; tool_result ids are, and arrive as the client sent them.
- Refused with a 400 naming the problem rather than honoured approximately: image,
  document and thinking blocks (a text-only model that never thinks in blocks),
  server tools (web search, bash, ...: nothing here runs them), `top_k` (the engine
  samples with temperature and top_p, and the trainer measures behaviour log-probs
  under exactly those), `output_config.format` (no constrained decoding), and a
  conversation ending in an assistant message (prefill: the chat template starts a new
  assistant message, so the reply would not continue the prefix; Anthropic itself
  answers 400 on models without prefill).
- Accepted and ignored, because an answer without them is still a correct answer:
  `thinking` (no thinking blocks come back), `cache_control`, `citations`,
  `disable_parallel_tool_use`, `service_tier` and other extra fields.
- `temperature` is 0..1 as in Anthropic's API; `model` may be left out (one model is
  served); `max_tokens` is required, as there.
- Errors carry both formats in one object: `{"type": "error", "error": {"type",
  "message", "param", "code"}}`: the Anthropic SDK reads `error.type` and
  `error.message`, an OpenAI-format reader finds all four of its fields. A failure after
  the stream started is an `event: error`.

Over 400 lines: the whole protocol lives in this one file (request, translation, endpoints
and errors, response and stream, in that order), as each other API has its own.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, AsyncIterator, Literal

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import Field, ValidationInfo, field_validator, model_validator

from openclaw_rl.chat import render_prompt
from openclaw_rl.engine.base import EngineError
from openclaw_rl.experience import place
from openclaw_rl.serve.completion import Caller, TurnInProgress, TurnSpec
from openclaw_rl.serve.experience_block import experience_block
from openclaw_rl.serve.pipeline import Opened, open_turns
from openclaw_rl.serve.schema import MAX_ID_CHARS, ApiError, Flag, Real, TopP, UserId, Whole, _Lenient, check_stops
from openclaw_rl.serve.server import Server
from openclaw_rl.serve.structured import request_constraint, response_format_constraint, tool_constraint
from openclaw_rl.types import Constraint, Message, SamplingParams
from openclaw_rl.users import User

# -- the request ------------------------------------------------------------------------


class TextBlock(_Lenient):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Lenient):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Lenient):
    type: Literal["tool_result"]
    tool_use_id: str
    content: list[TextBlock] = []
    is_error: Flag = False

    @field_validator("content", mode="before", json_schema_input_type=str | list[TextBlock])
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        return as_blocks(value, ("text",), "a tool_result's content")


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]
BLOCKS_OF_ROLE = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use")}


def as_blocks(value: Any, allowed: tuple[str, ...], where: str) -> Any:
    """Content as a list of blocks: a string is shorthand for one text block (as in
    Anthropic's API), so validation sees one shape and an error names the bad block
    rather than a string it was never meant to be. A block this server cannot honour is
    refused by its type, with the reason and the fix."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a string or a list of content blocks, got {type(value).__name__}")
    for block in value:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind not in allowed:
            raise ValueError(f"{kind!r} blocks are not supported in {where}: {_why_unsupported(kind)}; "
                             f"send only {' and '.join(allowed)} blocks there")
    return value


def _why_unsupported(kind: str) -> str:
    if kind in ("image", "document", "search_result"):
        return "this server serves a text-only model"
    if kind in ("thinking", "redacted_thinking"):
        return "this server never produces thinking blocks, so none can be sent back"
    if kind in ("tool_use", "tool_result"):
        return "tool_use blocks belong in assistant messages, tool_result blocks in user messages"
    return "this server knows text, tool_use and tool_result blocks only"


class MessageParam(_Lenient):
    role: Literal["user", "assistant"]
    content: list[Block]

    @field_validator("content", mode="before", json_schema_input_type=str | list[Block])
    @classmethod
    def _blocks_of_role(cls, value: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")  # absent when the role itself was invalid: that error is reported
        if role == "user" and value == []:  # an assistant's may be empty: a response can be
            raise ValueError("a user message needs at least one text or tool_result block")
        return as_blocks(value, BLOCKS_OF_ROLE[role], f"{role} messages") if role else value


class ToolDefinition(_Lenient):
    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _client_tool(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(f"server tool {kind!r} is not supported: nothing here runs server tools; define it as "
                             "a client tool ({name, description, input_schema}) and run it yourself")
        return value

    def chat(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.input_schema}}


class ToolChoice(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs the name of the tool to call")
        return self

    def chat(self) -> str | dict[str, Any]:
        if self.type == "tool":
            return {"type": "function", "function": {"name": self.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[self.type]


class Metadata(_Lenient):
    user_id: str | None = UserId


class CountTokensRequest(_Lenient):
    """A conversation: what `/v1/messages/count_tokens` reads, and the core of a message request."""

    model: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    messages: list[MessageParam] = Field(min_length=1)
    system: list[TextBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None  # accepted, ignored: no thinking blocks come back

    @field_validator("system", mode="before", json_schema_input_type=str | list[TextBlock] | None)
    @classmethod
    def _system_text(cls, value: Any) -> Any:
        return None if value is None else as_blocks(value, ("text",), "system")

    @field_validator("messages")
    @classmethod
    def _no_prefill(cls, value: list[MessageParam]) -> list[MessageParam]:
        if value and value[-1].role == "assistant":
            raise ValueError("the conversation ends with an assistant message (prefill), which this server cannot "
                             "continue; end it with a user message")
        return value

    @model_validator(mode="after")
    def _known_tool(self) -> CountTokensRequest:
        choice, names = self.tool_choice, [t.name for t in self.tools or ()]
        if choice is not None and choice.type == "tool" and choice.name not in names:
            raise ValueError(f"tool_choice names the tool {choice.name!r}, which is not in tools {names}")
        tool_constraint(*chat_tools(self))  # a forced call the server cannot enforce is a 400 here
        return self


class MessagesRequest(CountTokensRequest):
    max_tokens: Whole = Field(ge=1)
    temperature: Real | None = Field(default=None, ge=0.0, le=1.0)  # None: the server's --default-temperature
    top_p: Real | None = TopP
    top_k: Whole | None = None
    stop_sequences: list[str] | None = None
    stream: Flag = False
    metadata: Metadata | None = None
    output_config: dict[str, Any] | None = None

    _stops = field_validator("stop_sequences")(classmethod(lambda cls, v: check_stops(v)))

    @field_validator("top_k")
    @classmethod
    def _no_top_k(cls, value: int | None) -> int | None:
        if value is not None:
            raise ValueError("top_k is not supported: this server samples with temperature and top_p only (the "
                             "trainer measures behaviour log-probs under exactly those); leave top_k unset")
        return value

    @field_validator("output_config")
    @classmethod
    def _output_format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        response_format_constraint((value or {}).get("format"), "output_config.format")  # json_schema: {schema}
        return value

    @property
    def constraint(self) -> Constraint | None:
        """A forced tool call (tool_choice any or tool), else output_config.format (serve/structured.py)."""
        return request_constraint((self.output_config or {}).get("format"), *chat_tools(self))


# -- translation to the chat form every turn is stored in -------------------------------


def chat_messages(body: CountTokensRequest) -> list[Message]:
    """The conversation as chat messages: what is rendered, hashed, stored and judged."""
    messages: list[Message] = []
    if body.system:
        messages.append({"role": "system", "content": _joined(body.system)})
    for message in body.messages:
        messages.extend(_assistant_message(message) if message.role == "assistant" else _user_messages(message))
    return messages


def _joined(blocks: list[TextBlock], separator: str = "\n\n") -> str:
    return separator.join(block.text for block in blocks)


def _assistant_message(message: MessageParam) -> list[Message]:
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    calls = [{"id": b.id, "type": "function",
              "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)}}
             for b in message.content if isinstance(b, ToolUseBlock)]
    chat: Message = {"role": "assistant", "content": _joined(texts, "")}  # blocks of one generation
    if calls:
        chat["tool_calls"] = calls
    return [chat]


def _user_messages(message: MessageParam) -> list[Message]:
    results: list[Message] = [{"role": "tool", "tool_call_id": b.tool_use_id, "content": _result_text(b)}
                              for b in message.content if isinstance(b, ToolResultBlock)]
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    return [*results, {"role": "user", "content": _joined(texts)}] if texts else results


def _result_text(block: ToolResultBlock) -> str:
    text = _joined(block.content)
    return f"Error: {text}" if block.is_error else text


def chat_tools(body: CountTokensRequest) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
    tools = [tool.chat() for tool in body.tools] if body.tools else None
    return tools, body.tool_choice.chat() if body.tool_choice else None


def messages_spec(server: Server, body: MessagesRequest, caller: Caller) -> TurnSpec:
    temperature, top_p = server.sampling(body.temperature, body.top_p)
    params = SamplingParams(max_new_tokens=body.max_tokens, temperature=temperature, top_p=top_p,
                            stop=tuple(body.stop_sequences or ()), constraint=body.constraint)
    tools, tool_choice = chat_tools(body)
    return TurnSpec(api="messages", messages=chat_messages(body), params=params, tools=tools, tool_choice=tool_choice,
                    kind=caller.kind, done=caller.done, session_header=caller.session_header,
                    end_user=body.metadata.user_id if body.metadata else None, caller=caller.user)


# -- the endpoints ----------------------------------------------------------------------


async def create_message(server: Server, body: MessagesRequest, caller: Caller) -> Response:
    opened = await open_turns(server, messages_spec(server, body, caller))
    view = _MessageView(server, opened)
    if body.stream:
        return StreamingResponse(view.sse(), media_type="text/event-stream", headers=opened.headers)
    await opened.run()
    return JSONResponse(view.message(), headers=opened.headers)


async def count_tokens(server: Server, body: CountTokensRequest, user: User) -> dict[str, int]:
    """The prompt's length in tokens as it would be rendered for `user`, their experience
    block included (as `usage.input_tokens` counts it); no limit on it (knowing that a prompt
    is too long is the point), the body size limit bounds the work."""
    tools, tool_choice = chat_tools(body)
    block, _, _ = await run_in_threadpool(experience_block, server.store, server.tokenizer, server.config, user)
    try:
        messages = place(chat_messages(body), block, server.config.experience_placement)
        ids = await run_in_threadpool(render_prompt, server.tokenizer, messages, tools, tool_choice)
    except Exception as error:  # a template that rejects this conversation
        raise ApiError(400, f"messages cannot be rendered with the model's chat template: {error}",
                       param="messages") from error
    return {"input_tokens": len(ids)}


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
                429: "rate_limit_error", 504: "timeout_error"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The Anthropic error shape, with the OpenAI error fields in the same object."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message, "param": param, "code": code}}


def anthropic_error(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error.status, error.message, error.param, error.code), status_code=error.status)


# -- the response -----------------------------------------------------------------------


def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's input object. Arguments that are not a JSON object (rare: the model
    wrote a bare value) are wrapped, since Anthropic's `input` is always an object."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        value = arguments
    return value if isinstance(value, dict) else {"arguments": value}


def tool_use_blocks(turn: TurnInProgress) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": tool_use_id(call["id"]), "name": call["function"]["name"],
             "input": tool_input(call["function"]["arguments"])} for call in turn.tool_calls]


def stop_reason(turn: TurnInProgress) -> tuple[str, str | None]:
    """(stop_reason, the stop sequence that ended the response, if one did)."""
    finish = turn.generation.finish_reason
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    text = turn.text  # the assembler knows where a stop string cut the response
    if text.stop_at is not None:
        matched = next((s for s in turn.params.stop if s and text.text.startswith(s, text.stop_at)), None)
        return "stop_sequence", matched
    return "end_turn", None


class _MessageView:
    """One message (Anthropic has no `n`), as a JSON body or as server-sent events."""

    def __init__(self, server: Server, opened: Opened):
        self.server, self.opened, self.turn = server, opened, opened.turns[0]
        self.id = f"msg_{uuid.uuid4().hex}"

    def _usage(self, output_tokens: int) -> dict[str, int]:
        return {"input_tokens": len(self.turn.prompt_ids), "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def _shell(self, content: list[dict[str, Any]], stop: tuple[str | None, str | None],
               output_tokens: int) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.server.model_name,
                "content": content, "stop_reason": stop[0], "stop_sequence": stop[1],
                "usage": self._usage(output_tokens),
                "policy_version": self.opened.served_version, "session_id": self.opened.ref.shown_id}

    def message(self) -> dict[str, Any]:
        turn = self.turn
        text = [{"type": "text", "text": turn.content}] if turn.content else []
        return self._shell([*text, *tool_use_blocks(turn)], stop_reason(turn), len(turn.generation.token_ids))

    async def sse(self) -> AsyncIterator[str]:
        """message_start, the text block as it decodes, the tool_use blocks once the turn is
        committed, then message_delta and message_stop (after the session bookkeeping)."""
        try:
            yield _event("message_start", {"type": "message_start", "message": self._shell([], (None, None), 0)})
            blocks = 0  # content blocks opened so far
            async for _, delta, _ in self.opened.events():
                text = delta if delta is not None else self.turn.remaining()
                if text and blocks == 0:
                    yield _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                         "content_block": {"type": "text", "text": ""}})
                    blocks = 1
                if text:
                    yield _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                         "delta": {"type": "text_delta", "text": text}})
                if delta is None:  # committed: close the text, send the tool calls
                    for event in self._closing_blocks(blocks):
                        yield event
            reason, sequence = stop_reason(self.turn)
            yield _event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                           "usage": {"output_tokens": len(self.turn.generation.token_ids)}})
            yield _event("message_stop", {"type": "message_stop"})
        except (TimeoutError, EngineError) as error:
            timeout = self.server.config.request_timeout_s
            message = f"generation failed: {str(error) or f'longer than request_timeout_s={timeout}'}"
            yield _event("error", error_body(504 if isinstance(error, TimeoutError) else 500, message))

    def _closing_blocks(self, opened_blocks: int) -> list[str]:
        events = [_event("content_block_stop", {"type": "content_block_stop", "index": 0})] if opened_blocks else []
        for index, block in enumerate(tool_use_blocks(self.turn), start=opened_blocks):
            events += [
                _event("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {**block, "input": {}}}),
                _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json": json.dumps(block["input"])}}),
                _event("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        return events


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"
