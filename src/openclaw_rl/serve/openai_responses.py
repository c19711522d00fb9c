"""`POST /v1/responses` and `GET /v1/responses/{id}`: the OpenAI Responses API over the
shared request path.

A Responses request is translated into chat messages once, here, and from then on is a
turn like any other (`api="responses"`), sampled, recorded and paired by the pipeline.

Decisions:

- Items to messages. A message item starts a chat message; a `function_call` joins the
  assistant message right before it (or starts one), because one response's output is a
  message followed by its calls and the client resends them as separate items, while the
  turn was recorded (and hashed) as one assistant message with content and `tool_calls`.
  A `function_call_output` is a `tool` message; `instructions` a leading system message,
  to which the pipeline appends the user's experience block when it renders the prompt
  (stored messages never hold the block, so `previous_response_id` still strips exactly
  the old instructions).
- Sessions. `previous_response_id` names the exact turn continued: the prompt is that
  turn's prompt, its response as the client saw it (the stored output items, through the
  same translation) and the new input. The previous turn's `instructions` are not carried
  over (as in OpenAI's API): the new request's own instructions lead the prompt. Without
  it the client resends the whole history and sessions.py infers the session as for chat.
- `store=false` keeps the turn (it is training data like any other) but not the response
  object, so it cannot be fetched or continued by id.
- Streaming. The final object (`response.completed`, what is stored and fetched) is built
  from the committed turn exactly as the non-streaming body is. Text deltas are what the
  text assembler could show early; whitespace alone is held until text follows it, so no
  message item opens for the blank before a tool call. Tool calls are known only once the
  turn is committed, so their items follow the text. Where the committed text does not
  extend what was streamed (blank space trimmed before a call, a call written as bare
  JSON), the `.done` events carry the committed text, which is what a resent history hashes.
- Accepted and not enforced: `parallel_tool_calls` (the response is what the model
  sampled; dropping calls would make the stored turn differ from what the client saw),
  `metadata` (echoed). Options that would change the answer and that this server cannot
  honour (built-in tools, images and files, JSON output, reasoning effort, truncation,
  other `include` values, `conversation`, `background`, `prompt`) are 400s naming them.

One API, one file (Over 400 lines): its request shapes, their translation and its two
output forms (a body and an event stream) change together.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, AsyncIterator, Callable, Literal, Union

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import (
    Discriminator, Field, Tag, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator,
)

from openclaw_rl.engine.base import EngineError
from openclaw_rl.serve.completion import Caller, TurnInProgress, TurnSpec
from openclaw_rl.serve.pipeline import Opened, open_turns
from openclaw_rl.serve.schema import MAX_ID_CHARS, ApiError, Flag, Real, Temperature, TopP, UserId, Whole, _Lenient
from openclaw_rl.serve.server import Server
from openclaw_rl.serve.sessions import SessionRef, shown_session_id
from openclaw_rl.serve.structured import request_constraint, response_format_constraint
from openclaw_rl.types import Constraint, Message, SamplingParams
from openclaw_rl.users import User

TEXT_PARTS = ("input_text", "output_text")
ITEM_TYPES = ("message", "function_call", "function_call_output")
IGNORABLE_INCLUDES = ("reasoning.encrypted_content",)  # vacuous here: no reasoning items are produced
MAX_METADATA_PAIRS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512

# Request fields that would change the answer in ways this server cannot honour: (accepts, the fix).
_UNSERVED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "reasoning": (lambda v: all(x in (None, "none") for x in (v or {}).values()),
                  "the served model has no reasoning mode; leave reasoning unset"),
    "truncation": (lambda v: v in (None, "disabled"),
                   "a prompt longer than the context is refused, never cut; leave truncation unset or 'disabled'"),
    "include": (lambda v: all(x in IGNORABLE_INCLUDES for x in v or []),
                "responses carry text and function calls only; leave include empty"),
    "conversation": (lambda v: v is None, "send the conversation as input items, or continue one with "
                                          "previous_response_id"),
    "background": (lambda v: not v, "wait for the response (stream it to see it as it is written)"),
    "prompt": (lambda v: v is None, "send the prompt's text as instructions and input"),
}


# -- the request ------------------------------------------------------------------------


class TextPart(_Lenient):
    type: Literal["input_text", "output_text"]
    text: str


class MessageItem(_Lenient):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart]


class FunctionCallItem(_Lenient):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(_Lenient):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    output: str | list[TextPart]


def _item_type(item: Any) -> str | None:
    return item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", None)


InputItem = Annotated[
    Union[Annotated[MessageItem, Tag("message")], Annotated[FunctionCallItem, Tag("function_call")],
          Annotated[FunctionCallOutputItem, Tag("function_call_output")]],
    Discriminator(_item_type),
]
_ITEM = TypeAdapter(InputItem)
_ITEMS = TypeAdapter(list[InputItem])


class FunctionTool(_Lenient):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: Flag | None = None

    def chat_tool(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description or "",
                    "parameters": self.parameters or {"type": "object", "properties": {}}}
        return {"type": "function", "function": function}


class TextConfig(_Lenient):
    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # a hint about length: accepted, not acted on

    @field_validator("format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        response_format_constraint(value, "text.format")  # text, json_object or json_schema (serve/structured.py)
        return value


class ResponsesRequest(_Lenient):
    model: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    input: str | list[InputItem]
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: Flag = True
    max_output_tokens: Whole | None = Field(default=None, ge=1)
    temperature: Real | None = Temperature
    top_p: Real | None = TopP
    user: str | None = UserId
    stream: Flag = False
    store: Flag = True
    metadata: dict[str, str] | None = None
    text: TextConfig | None = None
    reasoning: dict[str, Any] | None = None
    truncation: str | None = None
    include: list[str] | None = None
    conversation: str | dict[str, Any] | None = None
    background: Flag | None = None
    prompt: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, value: Any) -> Any:
        if not isinstance(value, (str, list)):
            raise ValueError(f"input must be a string or a list of items, got {type(value).__name__}")
        if isinstance(value, list):
            if not value:
                raise ValueError("input is an empty list; send at least one item")
            return [_checked_item(i, item) for i, item in enumerate(value)]
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, list):
            raise ValueError(f"tools must be a list of function tools, got {type(value).__name__}")
        for i, tool in enumerate(value or []):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise ValueError(f"tools[{i}]: tool type {kind!r} is not supported: this server has no built-in "
                                 "tools; declare a function tool and run it in the client")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a function, got {value!r}")
        if isinstance(value, dict) and (value.get("type") != "function" or not isinstance(value.get("name"), str)):
            raise ValueError(f"tool_choice {value.get('type')!r} is not supported: name a function tool as "
                             '{"type": "function", "name": "..."} or use "auto", "required" or "none"')
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_METADATA_PAIRS:
            raise ValueError(f"metadata has {len(value)} pairs; at most {MAX_METADATA_PAIRS} are allowed")
        for key, text in value.items():
            if len(key) > MAX_METADATA_KEY_CHARS or len(text) > MAX_METADATA_VALUE_CHARS:
                raise ValueError(f"metadata keys may have {MAX_METADATA_KEY_CHARS} characters and values "
                                 f"{MAX_METADATA_VALUE_CHARS}; {key[:40]!r} has more")
        return value

    @field_validator(*_UNSERVED)
    @classmethod
    def _served(cls, value: Any, info: ValidationInfo) -> Any:
        accepts, fix = _UNSERVED[info.field_name]
        if not accepts(value):
            raise ValueError(f"{info.field_name}={value!r:.80} is not supported: {fix}")
        return value

    @property
    def chat_tool_choice(self) -> Any:
        if isinstance(self.tool_choice, dict):
            return {"type": "function", "function": {"name": self.tool_choice["name"]}}
        return self.tool_choice

    @property
    def constraint(self) -> Constraint | None:
        """A forced function call, else `text.format` (serve/structured.py)."""
        tools = [t.chat_tool() for t in self.tools] if self.tools else None
        return request_constraint(self.text.format if self.text else None, tools, self.chat_tool_choice)

    @model_validator(mode="after")
    def _enforceable(self) -> ResponsesRequest:
        self.constraint  # a forced call the server cannot enforce is a 400 here, not a failed decode
        return self


def _checked_item(i: int, item: Any) -> MessageItem | FunctionCallItem | FunctionCallOutputItem:
    """One input item, validated here rather than by the `str | list` union, whose errors
    would name the string branch; what the model cannot read is refused with the fix."""
    if not isinstance(item, dict):
        raise ValueError(f"input[{i}] must be an object (a message, function_call or function_call_output item)")
    kind = _item_type(item)
    if kind not in ITEM_TYPES:
        raise ValueError(f"input[{i}].type {kind!r} is not supported: send message, function_call and "
                         "function_call_output items (resend earlier output items in full rather than by reference)")
    field = {"message": "content", "function_call_output": "output"}.get(kind)
    parts = item.get(field) if field else None
    for j, part in enumerate(parts if isinstance(parts, list) else []):
        part_type = part.get("type") if isinstance(part, dict) else None
        if part_type not in TEXT_PARTS:
            raise ValueError(f"input[{i}].{field}[{j}].type {part_type!r} is not supported: the served model reads "
                             "text only (no images, files or audio); send input_text parts")
    try:
        return _ITEM.validate_python(item)
    except ValidationError as error:
        deepest = max(error.errors(), key=lambda e: len(e["loc"]))  # the branch of a union that got furthest
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in deepest["loc"][1:]  # [0] is the kind
                        if isinstance(p, int) or not (p == "str" or "[" in p))  # union branch labels
        raise ValueError(f"input[{i}]{where}: {deepest['msg']}") from None


# -- request -> prompt ------------------------------------------------------------------


def _text(content: str | list[TextPart]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def items_to_messages(items: list[MessageItem | FunctionCallItem | FunctionCallOutputItem]) -> list[Message]:
    """Chat messages for Responses items (see the module docstring for the merge rule)."""
    messages: list[Message] = []
    for item in items:
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _text(item.content)})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)})
    return messages


def _input_messages(body: ResponsesRequest) -> list[Message]:
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}]
    return items_to_messages(body.input)


async def _continued(server: Server, body: ResponsesRequest, caller: Caller) -> tuple[SessionRef | None, list[Message]]:
    """(the session and turn `previous_response_id` names, the history it stands for)."""
    response_id = body.previous_response_id
    if response_id is None:
        return None, []
    found = await run_in_threadpool(server.store.get_response, response_id)
    turn = await run_in_threadpool(server.store.get_turn, found[1]) if found and found[1] is not None else None
    if found is None or turn is None or not caller.user.may_see(turn.owner):
        raise ApiError(404, f"previous_response_id {response_id!r} names no stored response; send the id of a "
                       "response created with store=true, or resend the whole conversation as input",
                       param="previous_response_id", code="previous_response_not_found")
    session_id, _, previous = found
    named = shown_session_id(session_id, turn.owner)  # the id its owner chose (sessions.py)
    if caller.session_header and caller.session_header != named:
        raise ApiError(400, f"X-Session-Id is {caller.session_header!r} but previous_response_id belongs to session "
                       f"{named!r}; send one of them", param="previous_response_id")
    prompt = turn.prompt_messages
    instructions = previous.get("instructions")
    if instructions and prompt and prompt[0] == {"role": "system", "content": instructions}:
        prompt = prompt[1:]
    output = items_to_messages(_ITEMS.validate_python(previous["output"]))
    return SessionRef(session_id, "response", turn, named=named), [*prompt, *output]


async def responses_spec(server: Server, body: ResponsesRequest, caller: Caller) -> TurnSpec:
    context = server.engine.max_context
    if body.max_output_tokens is not None and body.max_output_tokens > context:
        raise ApiError(400, f"max_output_tokens is {body.max_output_tokens} but the model's context is {context} "
                       "tokens; ask for at most that many", param="max_output_tokens")
    previous, history = await _continued(server, body, caller)
    lead = [{"role": "system", "content": body.instructions}] if body.instructions else []
    temperature, top_p = server.sampling(body.temperature, body.top_p)
    params = SamplingParams(max_new_tokens=body.max_output_tokens or server.config.default_max_tokens,
                            temperature=temperature, top_p=top_p, constraint=body.constraint)
    return TurnSpec(
        api="responses", messages=[*lead, *history, *_input_messages(body)], params=params,
        tools=[t.chat_tool() for t in body.tools] if body.tools else None, tool_choice=body.chat_tool_choice,
        kind=caller.kind, done=caller.done, session_header=caller.session_header, end_user=body.user,
        caller=caller.user, previous=previous,
    )


# -- the endpoints -----------------------------------------------------------------------


async def create_response(server: Server, body: ResponsesRequest, caller: Caller) -> Response:
    spec = await responses_spec(server, body, caller)
    try:
        opened = await open_turns(server, spec)
    except ApiError as error:  # the pipeline names chat's field; this API calls the prompt `input`
        if error.param == "messages":
            error.param = "input"
        raise
    view = _ResponseView(server, body, opened)
    if body.stream:
        return StreamingResponse(view.sse(), media_type="text/event-stream", headers=opened.headers)
    await opened.run()
    return JSONResponse(await view.finish(message_opened=False), headers=opened.headers)


async def stored_response(server: Server, response_id: str, user: User) -> dict[str, Any]:
    found = await run_in_threadpool(server.store.get_response, response_id)
    session = await run_in_threadpool(server.store.get_session, found[0]) if found else None
    if found is None or session is None or not user.may_see(session.owner):
        raise ApiError(404, f"no stored response {response_id!r} (responses created with store=false are not kept)",
                       param="response_id", code="response_not_found")
    return found[2]


# -- the response -------------------------------------------------------------------------


def _usage(turn: TurnInProgress) -> dict[str, Any]:
    counts = turn.usage()
    return {"input_tokens": counts["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": counts["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": counts["total_tokens"]}


class _ResponseView:
    """One response object: its envelope, its output items and its event stream."""

    def __init__(self, server: Server, body: ResponsesRequest, opened: Opened):
        self.server, self.body, self.opened = server, body, opened
        self.turn = opened.turns[0]  # the Responses API has no `n`
        self.id = f"resp_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.created_at = self.turn.created
        self.sequence = 0

    def _envelope(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        body, params = self.body, self.opened.spec.params
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": None, "incomplete_details": None, "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens, "model": self.server.model_name, "output": output,
            "parallel_tool_calls": body.parallel_tool_calls, "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": None, "summary": None}, "store": body.store, "temperature": params.temperature,
            "text": {"format": (body.text and body.text.format) or {"type": "text"}},
            "tool_choice": body.tool_choice or "auto",
            "tools": [t.model_dump() for t in body.tools or []], "top_p": params.top_p, "truncation": "disabled",
            "usage": None, "user": body.user, "metadata": body.metadata or {},
            "session_id": self.opened.ref.shown_id, "policy_version": self.opened.served_version, **extra,
        }

    @property
    def _incomplete(self) -> bool:
        return self.turn.generation.finish_reason == "length"

    def _message(self, text: str, status: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant",
                "content": [part] if status != "in_progress" else []}

    def _calls(self, status: str = "completed") -> list[dict[str, Any]]:
        return [{"type": "function_call", "id": f"fc_{call['id'].removeprefix('call_')}", "call_id": call["id"],
                 "name": call["function"]["name"],
                 "arguments": call["function"]["arguments"] if status == "completed" else "", "status": status}
                for call in self.turn.tool_calls]

    def _output(self, message_opened: bool) -> list[dict[str, Any]]:
        """The message (unless the response is only tool calls) and then the calls."""
        text = self.turn.content or ""
        has_message = message_opened or bool(text.strip()) or not self.turn.tool_calls
        status = "incomplete" if self._incomplete else "completed"
        return [*([self._message(text, status)] if has_message else []), *self._calls()]

    async def finish(self, message_opened: bool) -> dict[str, Any]:
        """The final object, stored (when `store`) before the client receives it."""
        status, extra = "completed", {"completed_at": time.time(), "usage": _usage(self.turn)}
        if self._incomplete:
            status, extra["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
        final = self._envelope(status, self._output(message_opened), **extra)
        if self.body.store:
            turn_id = self.turn.turn.id if self.turn.turn else None
            await run_in_threadpool(self.server.store.record_response, self.id, self.opened.ref.id, turn_id, final)
        return final

    # -- streaming ------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    def _open_message(self) -> list[str]:
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [self._event("response.output_item.added", output_index=0, item=self._message("", "in_progress")),
                self._event("response.content_part.added", item_id=self.message_id, output_index=0,
                            content_index=0, part=empty)]

    def _text_delta(self, delta: str) -> str:
        return self._event("response.output_text.delta", item_id=self.message_id, output_index=0, content_index=0,
                           delta=delta, logprobs=[])

    def _close_message(self, item: dict[str, Any]) -> list[str]:
        part = item["content"][0]
        where = {"item_id": self.message_id, "output_index": 0, "content_index": 0}
        return [self._event("response.output_text.done", **where, text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **where, part=part),
                self._event("response.output_item.done", output_index=0, item=item)]

    def _call_events(self, first_index: int) -> list[str]:
        events: list[str] = []
        for k, (added, done) in enumerate(zip(self._calls("in_progress"), self._calls())):
            where = {"item_id": done["id"], "output_index": first_index + k}
            events += [self._event("response.output_item.added", output_index=first_index + k, item=added),
                       self._event("response.function_call_arguments.delta", **where, delta=done["arguments"]),
                       self._event("response.function_call_arguments.done", **where, name=done["name"],
                                   arguments=done["arguments"]),
                       self._event("response.output_item.done", output_index=first_index + k, item=done)]
        return events

    async def sse(self) -> AsyncIterator[str]:
        start = self._envelope("in_progress", [])
        yield self._event("response.created", response=start)
        yield self._event("response.in_progress", response=start)
        streamed, held, message_opened = "", "", False
        try:
            async for _, delta, _ in self.opened.events():
                if delta is not None:
                    held += delta
                    if held.strip():  # whitespace alone waits for the text after it
                        if not message_opened:
                            message_opened = True
                            for event in self._open_message():
                                yield event
                        yield self._text_delta(held)
                        streamed, held = streamed + held, ""
                    continue
                for event in await self._complete(streamed, message_opened):
                    yield event
        except (TimeoutError, EngineError) as error:
            timeout = self.server.config.request_timeout_s
            message = f"generation failed: {error or f'longer than request_timeout_s={timeout}'}"
            failed = self._envelope("failed", [], error={"code": "server_error", "message": message})
            yield self._event("response.failed", response=failed)

    async def _complete(self, streamed: str, message_opened: bool) -> list[str]:
        """The events after the turn is committed: the rest of the text, the calls, the end."""
        final = await self.finish(message_opened)
        events: list[str] = []
        message = final["output"][0] if final["output"] and final["output"][0]["type"] == "message" else None
        if message is not None:
            if not message_opened:
                events += self._open_message()
            text = message["content"][0]["text"]
            if text.startswith(streamed) and len(text) > len(streamed):
                events.append(self._text_delta(text[len(streamed):]))
            events += self._close_message(message)
        events += self._call_events(first_index=1 if message is not None else 0)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return [*events, self._event(kind, response=final)]
