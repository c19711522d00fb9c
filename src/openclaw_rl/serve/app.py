"""The OpenAI-compatible HTTP face of the policy.

`POST /v1/chat/completions` is the request path: resolve the session, record the
previous turn's next state, sample through the engine, commit the turn, answer. Nothing
else (judging, training) runs here. Every response carries `X-Policy-Version`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from openclaw_rl.config import ServeConfig
from openclaw_rl.engine.base import ContextLengthError, Engine, EngineError, Started
from openclaw_rl.serve.chat import render_prompt
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.schema import (
    ApiError,
    ChatCompletionRequest,
    FeedbackRequest,
    error_response,
    validation_message,
)
from openclaw_rl.serve.sessions import next_state_of, resolve_session
from openclaw_rl.serve.completion import TurnInProgress
from openclaw_rl.store import Store, StoreError
from openclaw_rl.types import NextState, SamplingParams

log = logging.getLogger(__name__)


@dataclass
class Server:
    engine: Engine
    tokenizer: Any
    store: Store
    config: ServeConfig
    model_name: str
    metrics: Metrics


Background = Callable[[asyncio.Event], Awaitable[None]]


def create_app(server: Server, background: Sequence[Background] = ()) -> FastAPI:
    """The app; `background` loops (judge, trainer) run beside it until shutdown, which
    then closes the engine and the store."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        stop = asyncio.Event()
        tasks = [asyncio.create_task(loop(stop)) for loop in background]
        try:
            yield
        finally:
            stop.set()
            for task in tasks:
                try:
                    await asyncio.wait_for(task, 60)
                except Exception:  # a loop that fails to stop must not block shutdown
                    log.exception("background loop did not stop cleanly")
                    task.cancel()
            await server.engine.aclose()
            server.store.close()

    app = FastAPI(title="openclaw-rl", version="0.1.0", docs_url="/docs", redoc_url=None, lifespan=lifespan)
    app.state.server = server
    _install_middleware(app, server)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "policy_version": server.engine.policy_version}

    @app.get("/metrics")
    async def metrics() -> Response:
        server.metrics.policy_version.set(server.engine.policy_version)
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": server.model_name, "object": "model", "created": 0, "owned_by": "openclaw-rl",
                "policy_version": server.engine.policy_version}
        return {"object": "list", "data": [card]}

    @app.get("/v1/status")
    async def status() -> dict[str, Any]:
        counts = await run_in_threadpool(server.store.counts)
        samples = await run_in_threadpool(server.store.sample_counts)
        policy = await run_in_threadpool(server.store.policy)
        return {"policy_version": server.engine.policy_version, **counts, "samples_ready": samples["ready"],
                "samples": samples, "train_steps": policy["train_steps"], "last_update_at": policy["last_update_at"],
                "engine": server.engine.stats()}

    @app.get("/v1/sessions")
    async def sessions(limit: int = 100, offset: int = 0) -> dict[str, Any]:
        if not (1 <= limit <= 1000) or offset < 0:
            raise ApiError(400, f"limit must be 1..1000 and offset >= 0, got limit={limit} offset={offset}")
        found = await run_in_threadpool(server.store.list_sessions, limit, offset)
        return {"object": "list", "data": [
            {"id": s.id, "created_at": s.created_at, "closed_at": s.closed_at, "source": s.source, "turns": s.turn_count}
            for s in found
        ]}

    @app.get("/v1/sessions/{session_id}")
    async def session(session_id: str) -> dict[str, Any]:
        found = await run_in_threadpool(server.store.get_session, session_id)
        if found is None:
            raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
        turns = await run_in_threadpool(server.store.turns, session_id)
        verdicts = await run_in_threadpool(server.store.verdicts, [t.id for t in turns])
        views = []
        for turn in turns:
            view = turn.public_dict()
            if turn.id in verdicts:
                view["verdict"] = verdicts[turn.id].public_dict()
            views.append(view)
        return {"id": found.id, "created_at": found.created_at, "closed_at": found.closed_at,
                "source": found.source, "turns": views}

    @app.post("/v1/sessions/{session_id}/feedback")
    async def feedback(session_id: str, request: Request) -> dict[str, Any]:
        body = FeedbackRequest.model_validate(await _json_body(request))
        turn = await run_in_threadpool(server.store.last_main_turn, session_id)
        if turn is None or turn.next_state is not None or turn.closed:
            raise ApiError(409, f"session {session_id!r} has no main turn waiting for a next state",
                           param="session_id", code="no_open_turn")
        state = NextState(role="feedback", content=body.text, messages=[{"role": "feedback", "content": body.text}],
                          at=time.time())
        try:
            await run_in_threadpool(server.store.set_next_state, turn.id, state)
        except StoreError as error:  # another request paired it first
            raise ApiError(409, str(error), code="no_open_turn") from error
        server.metrics.next_states.labels("feedback").inc()
        return {"session_id": session_id, "turn_index": turn.index, "next_state": {"role": "feedback", "content": body.text}}

    @app.post("/v1/sessions/{session_id}/end")
    async def end(session_id: str) -> dict[str, Any]:
        try:
            closed = await run_in_threadpool(server.store.close_session, session_id)
        except StoreError as error:
            raise ApiError(404, str(error), param="session_id", code="session_not_found") from error
        return {"id": closed.id, "closed_at": closed.closed_at}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _chat(server, request)

    return app


# -- the request path ------------------------------------------------------------------


async def _chat(server: Server, request: Request) -> Response:
    try:
        body = ChatCompletionRequest.model_validate(await _json_body(request))
    except ValidationError as error:
        message, param = validation_message(error)
        raise ApiError(400, message, param=param) from error
    kind = request.headers.get("x-turn-type", "main").strip().lower()
    if kind not in ("main", "side"):
        raise ApiError(400, f"X-Turn-Type must be 'main' or 'side', got {kind!r}", param="X-Turn-Type")
    done = request.headers.get("x-session-done", "").strip().lower() in ("1", "true", "yes")
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    tools = [t.model_dump() for t in body.tools] if body.tools else None

    try:
        prompt_ids = render_prompt(server.tokenizer, messages, tools, body.tool_choice)
    except Exception as error:  # a template that rejects this conversation
        raise ApiError(400, f"messages cannot be rendered with the model's chat template: {error}", param="messages")
    context = server.engine.max_context
    if len(prompt_ids) >= context:
        raise ApiError(400, f"the prompt is {len(prompt_ids)} tokens but the model's context is {context} tokens; "
                       "shorten the conversation", param="messages", code="context_length_exceeded")
    max_new = body.max_completion_tokens or body.max_tokens or server.config.default_max_tokens
    params = SamplingParams(
        max_new_tokens=min(max_new, context - len(prompt_ids)),
        temperature=body.temperature,
        top_p=body.top_p,
        stop=body.stop_sequences,
        seed=body.seed,
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0,
    )

    ref = await run_in_threadpool(
        resolve_session, server.store, messages, request.headers.get("x-session-id"), body.user
    )
    await run_in_threadpool(server.store.ensure_session, ref.id, ref.source)
    if kind == "main":
        await run_in_threadpool(_record_next_state, server, ref.id, messages)

    stream = server.engine.stream(prompt_ids, params)
    timeout = server.config.request_timeout_s
    try:
        started = await asyncio.wait_for(anext(stream), timeout)
    except ContextLengthError as error:
        raise ApiError(400, str(error), param="messages", code="context_length_exceeded") from error
    except (EngineError, asyncio.TimeoutError) as error:
        await stream.aclose()
        raise ApiError(503, f"the engine could not start this request: {error or 'timed out'}",
                       kind="server_error") from error
    assert isinstance(started, Started)
    turn = TurnInProgress(server, body, ref, kind, done, messages, prompt_ids, params, started, tools)
    headers = {"X-Policy-Version": str(started.policy_version), "X-Session-Id": ref.id}
    if body.stream:
        return StreamingResponse(turn.sse(stream), media_type="text/event-stream", headers=headers)
    try:
        async with asyncio.timeout(timeout):
            async for _ in turn.consume(stream):
                pass
    except TimeoutError as error:
        raise ApiError(504, f"generation took longer than request_timeout_s={timeout}", kind="server_error") from error
    except EngineError as error:
        raise ApiError(500, str(error), kind="server_error") from error
    finally:
        await stream.aclose()
    generation = await turn.commit()
    return JSONResponse(turn.completion(generation), headers=headers)


def _record_next_state(server: Server, session_id: str, messages: list[dict]) -> None:
    previous = server.store.last_main_turn(session_id)
    if previous is None or previous.next_state is not None or previous.closed:
        return
    state = next_state_of(previous, messages)
    if state is None:
        return
    try:
        server.store.set_next_state(previous.id, state)
        server.metrics.next_states.labels(state.role).inc()
    except StoreError:  # a concurrent request of the same session paired it first
        pass


# -- middleware and errors -------------------------------------------------------------


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise ApiError(400, "the request body is empty; send a JSON object", param="body")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}", param="body", code="invalid_json") from error
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}", param="body")
    return data


def _install_middleware(app: FastAPI, server: Server) -> None:
    limit = server.config.max_body_bytes
    key = server.config.api_key

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return error.response()

    @app.exception_handler(ValidationError)
    async def validation_error(request: Request, error: ValidationError) -> JSONResponse:
        message, param = validation_message(error)
        return error_response(400, message, param=param)

    @app.exception_handler(404)
    async def not_found(request: Request, error: Exception) -> JSONResponse:
        detail = getattr(error, "detail", None)
        if isinstance(detail, str) and detail != "Not Found":
            return error_response(404, detail)
        return error_response(404, f"no route {request.method} {request.url.path}", code="not_found")

    @app.exception_handler(405)
    async def not_allowed(request: Request, error: Exception) -> JSONResponse:
        return error_response(405, f"{request.method} is not allowed on {request.url.path}", code="method_not_allowed")

    @app.middleware("http")
    async def guard(request: Request, call_next) -> Response:
        started = time.perf_counter()
        endpoint = _endpoint_label(request)
        response = await _guarded(request, call_next)
        response.headers.setdefault("X-Policy-Version", str(server.engine.policy_version))
        server.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        server.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        return response

    async def _guarded(request: Request, call_next) -> Response:
        if key and request.url.path != "/healthz":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
                return error_response(401, "missing or wrong API key: send `Authorization: Bearer KEY`",
                                      code="invalid_api_key")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return error_response(413, f"the request body is {declared} bytes; the limit is {limit} bytes "
                                       "(max_body_bytes)", code="body_too_large")
        if declared is None and request.method in ("POST", "PUT", "PATCH"):
            body = await request.body()  # chunked upload: read it (bounded) before anyone else does
            if len(body) > limit:
                return error_response(413, f"the request body is over the limit of {limit} bytes (max_body_bytes)",
                                      code="body_too_large")
        return await call_next(request)


def _endpoint_label(request: Request) -> str:
    path = request.url.path
    if path.startswith("/v1/sessions/"):
        return "/v1/sessions/{id}" + ("/feedback" if path.endswith("/feedback") else "/end" if path.endswith("/end") else "")
    return path if path in ("/v1/chat/completions", "/v1/models", "/v1/status", "/v1/sessions", "/healthz", "/metrics") else "other"
