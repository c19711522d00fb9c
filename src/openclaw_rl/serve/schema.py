"""The OpenAI request shapes we accept, and the OpenAI error format we answer with."""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


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
    path = ".".join(str(p) for p in first["loc"]) or "body"
    seen = first.get("input")
    shown = f" (got {seen!r})" if not isinstance(seen, (dict, list)) and first["type"] != "missing" else ""
    more = f"; and {error.error_count() - 1} more problem(s)" if error.error_count() > 1 else ""
    return f"{path}: {first['msg']}{shown}{more}", path


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        if isinstance(self.content, list):
            for part in self.content:
                if part.get("type") not in ("text", None) or not isinstance(part.get("text", ""), str):
                    raise ValueError(f"only text content parts are supported, got type {part.get('type')!r}")
        return self


class ToolSpec(_Lenient):
    type: Literal["function"] = "function"
    function: dict[str, Any]

    @model_validator(mode="after")
    def _named(self) -> ToolSpec:
        if not isinstance(self.function.get("name"), str):
            raise ValueError("a tool's function needs a name")
        return self


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    n: int = Field(default=1, ge=1, le=1)
    user: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        if len(stops) > 4:
            raise ValueError(f"stop takes at most 4 sequences, got {len(stops)}")
        if isinstance(self.tool_choice, str) and self.tool_choice not in ("none", "auto", "required"):
            raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a function, got {self.tool_choice!r}")
        return self

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class FeedbackRequest(_Lenient):
    text: str = Field(min_length=1)
