"""The OpenAI request shapes we accept, and the OpenAI error format we answer with."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator

from openclaw_rl.serve.structured import request_constraint, response_format_constraint
from openclaw_rl.types import Constraint


class ApiError(Exception):
    """An error a client caused or must know about, in the OpenAI error format."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return error_response(self.status, self.message, param=self.param, code=self.code, kind=self.kind, headers=headers)


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None,
                   kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def validation_message(error: ValidationError) -> tuple[str, str]:
    """A one-line message naming the first bad field, and that field's path."""
    first = error.errors()[0]
    # A tagged union puts the tag in the path (messages.0.user.content): leave it out.
    loc = [p for i, p in enumerate(first["loc"]) if not (p in ROLES and i and isinstance(first["loc"][i - 1], int))]
    path = ".".join(str(p) for p in loc) or "body"
    seen = first.get("input")
    shown = f" (got {seen!r})" if not isinstance(seen, (dict, list)) and first["type"] != "missing" else ""
    more = f"; and {error.error_count() - 1} more problem(s)" if error.error_count() > 1 else ""
    return f"{path}: {first['msg']}{shown}{more}", path


MAX_NAME_CHARS = 64  # a function name, as OpenAI limits it

# Scalars are strict (issue 36): pydantic's lax mode reads "stream": "yes" as true,
# "seed": false as 0 and "n": 1.0 as 1, so a client's mistake ran as something it did not
# ask for. A flag must be a JSON boolean, a count a JSON integer, a number a JSON number
# (an integer too: `"temperature": 1` is what clients send); anything else is a 400 naming
# the field.
Flag = Annotated[bool, Strict()]
Whole = Annotated[int, Strict()]
Real = Annotated[float, Strict()]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Lenient):
    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class _Message(_Lenient):
    name: str | None = None


class SystemMessage(_Message):
    role: Literal["system", "developer"]
    content: Content


class UserMessage(_Message):
    role: Literal["user"]
    content: Content


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[ToolCall] | None = None

    @model_validator(mode="after")
    def _says_something(self) -> AssistantMessage:
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Content
    tool_call_id: str | None = None


# One class per role, told apart by `role`: the published schema then says exactly which
# fields each role needs (a fuzzer or a client generator reads it), and so does validation.
ChatMessage = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
ROLES = ("system", "developer", "user", "assistant", "tool")


class FunctionSpec(_Lenient):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: Flag | None = None


class ToolSpec(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: Flag = False


# Limits every API shares, checked at the edge so that no request can fail its batch-mates.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # int64, as OpenAI documents it
MAX_CHOICES = 8  # n: each choice is a row of the engine's batch
MAX_STOPS, MAX_STOP_CHARS = 4, 256
MAX_TOP_LOGPROBS = 20
MAX_ID_CHARS = 256  # user, session and response ids travel in headers and logs


def stop_tuple(stop: str | list[str] | None) -> tuple[str, ...]:
    return (stop,) if isinstance(stop, str) else tuple(stop or ())


def check_stops(stop: str | list[str] | None) -> str | list[str] | None:
    stops = stop_tuple(stop)
    if len(stops) > MAX_STOPS:
        raise ValueError(f"at most {MAX_STOPS} stop sequences are supported, got {len(stops)}")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ValueError(f"a stop sequence may have at most {MAX_STOP_CHARS} characters")
    return stop


def check_response_format(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """text, json_object or json_schema, whose schema the server can enforce (serve/structured.py)."""
    response_format_constraint(value)
    return value


Seed = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
Temperature = Field(default=None, ge=0.0, le=2.0)  # None: the server's --default-temperature
TopP = Field(default=None, gt=0.0, le=1.0)  # None: the server's --default-top-p
UserId = Field(default=None, max_length=MAX_ID_CHARS)


class ChatCompletionRequest(_Lenient):
    model: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: Flag = False
    stream_options: StreamOptions | None = None
    max_tokens: Whole | None = Field(default=None, ge=1)
    max_completion_tokens: Whole | None = Field(default=None, ge=1)
    temperature: Real | None = Temperature
    top_p: Real | None = TopP
    stop: str | list[str] | None = None
    seed: Whole | None = Seed
    logprobs: Flag = False
    top_logprobs: Whole | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    n: Whole = Field(default=1, ge=1, le=MAX_CHOICES)
    user: str | None = UserId
    response_format: dict[str, Any] | None = None

    _stops = field_validator("stop")(classmethod(lambda cls, v: check_stops(v)))
    _format = field_validator("response_format")(classmethod(lambda cls, v: check_response_format(v)))

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        self.constraint  # a forced tool call the server cannot enforce is a 400 here, not a failed decode
        return self

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        return stop_tuple(self.stop)

    @property
    def constraint(self) -> Constraint | None:
        """What the output must match: a forced tool call, else the response format (serve/structured.py)."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None
        choice = self.tool_choice.model_dump() if isinstance(self.tool_choice, BaseModel) else self.tool_choice
        return request_constraint(self.response_format, tools, choice)


class FeedbackRequest(_Lenient):
    text: str = Field(min_length=1)


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: Whole = Field(ge=0, le=2**62, description="the version whose weights should serve again")


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Whole = Field(ge=0, le=2**62)
    pinned: Flag = True


def body_doc(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """The OpenAPI request body of a route that parses `model` itself (to answer every
    bad body in the OpenAI error format), so clients and fuzzers see the real schema."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}
