"""The HTTP face of the policy: the app, its guard and every route group.

The generation routes (OpenAI chat, completions and Responses, Anthropic Messages) hand
their bodies to the request path (serve/pipeline.py): resolve the session, record the
previous turn's next state, sample through the engine, commit the turn, answer. Nothing
else (judging, training) runs here. Every response carries `X-Policy-Version`. The guard
decides who asks (users.py) and applies their limits; session routes show each user only
their own sessions; policy and quarantine routes are the admins' (rollback requests are
carried out by the trainer, through the store).

(Over 400 lines: the guard and the route groups share the request helpers and the error
format, and read best as one file; each group is one function.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers

from openclaw_rl.serve.anthropic_messages import (
    CountTokensRequest,
    MessagesRequest,
    anthropic_error,
    count_tokens,
    create_message,
)
from openclaw_rl.serve.openai_chat import chat_completion, chat_spec
from openclaw_rl.serve.openai_completions import CompletionRequest, completion
from openclaw_rl.serve.openai_responses import ResponsesRequest, create_response, stored_response
from openclaw_rl.serve.schema import (
    MAX_ID_CHARS,
    ApiError,
    body_doc,
    ChatCompletionRequest,
    FeedbackRequest,
    PinRequest,
    RollbackRequest,
    error_response,
    validation_message,
)
from openclaw_rl.serve.completion import Caller
from openclaw_rl.serve.adapters import adapter_routes
from openclaw_rl.serve.collapse import ServedCollapse, collapse_routes
from openclaw_rl.serve.dashboard import dashboard_routes, keyless
from openclaw_rl.serve.experience import LessonEdit, UndoRequest, experience_routes
from openclaw_rl.serve.server import Background, Server, caller_of, exposure_problem
from openclaw_rl.serve.sessions import private_session_id, shown_session_id
from openclaw_rl.store import StoreError
from openclaw_rl.types import NextState, Session
from openclaw_rl.users import LOCAL, User, UserError

log = logging.getLogger(__name__)


def create_app(server: Server, background: Sequence[Background] = (), owns_engine: bool = True) -> FastAPI:
    """The app; `background` loops (judge, trainer) run beside it until shutdown, which
    then closes the store and, unless another app serves the same engine (`owns_engine`
    False), the engine."""
    app = FastAPI(title="openclaw-rl", version="0.1.0", docs_url="/docs", redoc_url=None,
                  lifespan=_lifespan(server, background, owns_engine))
    app.state.server = server
    _install_middleware(app, server)
    served = ServedCollapse(server.store)
    _status_routes(app, server, served)
    _session_routes(app, server)
    _policy_routes(app, server)
    _generation_routes(app, server)
    experience_routes(app, server, parse_body)
    adapter_routes(app, server, parse_body)
    dashboard_routes(app, server, _GENERATION)
    collapse_routes(app, served)
    _publish_body_schemas(app, [ChatCompletionRequest, CompletionRequest, MessagesRequest, CountTokensRequest,
                                ResponsesRequest, FeedbackRequest, RollbackRequest, PinRequest, LessonEdit,
                                UndoRequest])
    return app


def _lifespan(server: Server, background: Sequence[Background], owns_engine: bool = True) -> Callable:
    """Start the background loops with the app; at shutdown stop them, then close the engine and store."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        stop = asyncio.Event()
        tasks = [asyncio.create_task(loop(stop)) for loop in background]
        for loop, task in zip(background, tasks):
            task.add_done_callback(functools.partial(_report_failure, server, _loop_name(loop)))
        try:
            yield
        finally:
            stop.set()
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    continue  # a loop that died while serving: _report_failure said so then
                try:
                    await asyncio.wait_for(task, 60)
                except Exception:  # a loop that fails to stop must not block shutdown
                    log.exception("background loop did not stop cleanly")
                    task.cancel()
            if owns_engine:
                await server.engine.aclose()
            server.store.close()

    return lifespan


def _loop_name(loop: Background) -> str:
    """A background loop's name for logs and /healthz: its function's, without the closure's parts."""
    name = getattr(loop, "__qualname__", "") or type(loop).__name__
    return name.replace(".<locals>.<lambda>", "").replace(".<locals>.", ".")


def _report_failure(server: Server, name: str, task: asyncio.Task) -> None:
    """A loop that ended on an error is said at once, and on /healthz, while serving goes on."""
    if task.cancelled() or task.exception() is None:
        return
    error = task.exception()
    server.failed_loops[name] = f"{type(error).__name__}: {error}"
    log.error("background loop %s stopped: %s; serving goes on without it (GET /healthz says so)",
              name, server.failed_loops[name], exc_info=error)


def _status_routes(app: FastAPI, server: Server, served: ServedCollapse) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """Liveness; `degraded`, with each stopped loop's error, when a judge or trainer loop died."""
        if server.failed_loops:
            return {"status": "degraded", "policy_version": server.engine.policy_version,
                    "failed_loops": dict(server.failed_loops)}
        return {"status": "ok", "policy_version": server.engine.policy_version}

    @app.get("/metrics")
    async def metrics() -> Response:
        server.metrics.policy_version.set(server.engine.policy_version)
        await run_in_threadpool(served.show, server.metrics)  # the served-traffic collapse detectors, everyone's
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": server.model_name, "object": "model", "created": 0, "owned_by": "openclaw-rl",
                "policy_version": server.engine.policy_version}
        return {"object": "list", "data": [card]}

    @app.get("/v1/status")
    async def status(request: Request) -> dict[str, Any]:
        """The policy, training and engine state; session and turn counts are the caller's own
        (an admin's: everyone's), so no user learns how much others use the server."""
        user = caller_of(request)
        counts = await run_in_threadpool(server.store.counts, None if user.admin else user.name)
        samples = await run_in_threadpool(server.store.sample_counts)
        policy = await run_in_threadpool(server.store.policy)
        return {"policy_version": server.engine.policy_version, **counts, "samples_ready": samples["ready"],
                "samples": samples, "train_steps": policy["train_steps"], "last_update_at": policy["last_update_at"],
                "engine": server.engine.stats()}



async def owned_session(server: Server, user: User, session_id: str) -> Session:
    """The session, if `user` may see it (theirs of that name where another user holds the id:
    serve/sessions.py); 404 otherwise, the same answer as for no session at all, so that nobody
    learns which ids other users have."""
    found = await run_in_threadpool(server.store.get_session, session_id)
    if found is not None and not user.may_see(found.owner):
        found = await run_in_threadpool(server.store.get_session, private_session_id(session_id, user.name))
    if found is None or not user.may_see(found.owner):
        raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
    return found


def _session_routes(app: FastAPI, server: Server) -> None:
    """Sessions, each visible to its owner (and admins) only. (Over 60 lines: one short nested
    function per route, each checking the owner where it reads; apart, the routes would lose
    the one place that shows every session route and its owner check together.)"""
    @app.get("/v1/sessions")
    async def sessions(request: Request, limit: int = Query(100, ge=1, le=1000),
                       offset: int = Query(0, ge=0, le=2**62)) -> dict[str, Any]:
        user = caller_of(request)
        found = await run_in_threadpool(server.store.list_sessions, limit, offset, None if user.admin else user.name)
        return {"object": "list", "data": [
            {"id": shown_session_id(s.id, s.owner), "created_at": s.created_at, "closed_at": s.closed_at,
             "source": s.source, "turns": s.turn_count, "owner": s.owner}
            for s in found
        ]}

    @app.get("/v1/sessions/{session_id}")
    async def session(request: Request, session_id: str) -> dict[str, Any]:
        found = await owned_session(server, caller_of(request), session_id)
        turns = await run_in_threadpool(server.store.turns, found.id)
        verdicts = await run_in_threadpool(server.store.verdicts, [t.id for t in turns])
        samples = await run_in_threadpool(server.store.sample_states, [t.id for t in turns])
        held = await run_in_threadpool(server.store.quarantine_of, [t.id for t in turns])
        views = []
        for turn in turns:
            view = turn.public_dict()
            if turn.id in verdicts:
                view["verdict"] = verdicts[turn.id].public_dict()
            view["sample"], view["quarantine"] = samples.get(turn.id), held.get(turn.id, [])
            views.append(view)
        return {"id": session_id, "created_at": found.created_at, "closed_at": found.closed_at,
                "source": found.source, "owner": found.owner, "turns": views}

    @app.post("/v1/sessions/{session_id}/feedback", openapi_extra=body_doc(FeedbackRequest))
    async def feedback(session_id: str, request: Request) -> dict[str, Any]:
        found = await owned_session(server, caller_of(request), session_id)
        body = FeedbackRequest.model_validate(await _json_body(request))
        turn = await run_in_threadpool(server.store.last_main_turn, found.id)
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
    async def end(request: Request, session_id: str) -> dict[str, Any]:
        found = await owned_session(server, caller_of(request), session_id)
        try:
            closed = await run_in_threadpool(server.store.close_session, found.id)
        except StoreError as error:
            raise ApiError(404, str(error), param="session_id", code="session_not_found") from error
        return {"id": session_id, "closed_at": closed.closed_at}

    @app.delete("/v1/sessions/{session_id}")
    async def delete(request: Request, session_id: str) -> dict[str, Any]:
        """Forget a session: its turns, next states, verdicts, samples and log lines."""
        found = await owned_session(server, caller_of(request), session_id)
        deleted = await run_in_threadpool(server.store.delete_sessions, [found.id])
        return {"id": session_id, "object": "session.deleted", "deleted": True, **deleted}

    @app.delete("/v1/users/{name}/data")
    async def delete_user_data(request: Request, name: str) -> dict[str, Any]:
        """Forget every session of a user (their own, or anyone's for an admin), their experience and
        their personal adapter."""
        user = caller_of(request)
        if not (user.admin or user.name == name):
            raise ApiError(404, f"no user {name!r}", param="name", code="user_not_found")
        deleted = await run_in_threadpool(lambda: server.store.delete_sessions(owner=name))
        if server.personal is not None:  # their personal adapter's weights (its history went with the store rows)
            await server.personal.delete(name)
        return {"user": name, "object": "user_data.deleted", "deleted": True, **deleted}



def _policy_routes(app: FastAPI, server: Server) -> None:
    """The version history, rollback and pinning (train/runner.py carries rollbacks out).
    (Over 60 lines: one short nested function per route, registered together so the admin
    checks of the routes that change what serves are read in one place.)"""
    @app.get("/v1/policy/versions")
    async def versions(request: Request, limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
        user = caller_of(request)
        found = await run_in_threadpool(server.store.versions, limit)
        if not user.admin:  # who taught a version is the admins' business; the counts are everyone's
            for record in found:
                if record["samples"]:
                    record["samples"] = {"count": record["samples"]["count"]}
        served = server.engine.policy_version
        return {"object": "list", "served": served,
                "data": [{**record, "serving": record["version"] == served} for record in found]}

    @app.post("/v1/policy/rollback", openapi_extra=body_doc(RollbackRequest))
    async def rollback(request: Request) -> dict[str, Any]:
        _admin_only(request, "roll back")
        body = await parse_body(request, RollbackRequest)
        target = await run_in_threadpool(server.store.version, body.to)
        if target is None or not target["weights"]:
            raise ApiError(404, f"version {body.to} has no kept weights (GET /v1/policy/versions lists each "
                           "version's `weights`; pin versions to keep them)", param="to", code="version_not_kept")
        request_id = await run_in_threadpool(server.store.request_rollback, body.to, caller_of(request).name)
        deadline = time.monotonic() + server.config.request_timeout_s
        while (done := await run_in_threadpool(server.store.request, request_id))["status"] == "pending":
            if time.monotonic() > deadline:
                raise ApiError(504, f"no trainer carried out the rollback to v{body.to} within "
                               f"{server.config.request_timeout_s:g} s: is one running (serve with training, or "
                               "`openclaw-rl train` on this data dir)? It stays queued", kind="server_error")
            await asyncio.sleep(0.2)
        if done["status"] == "failed":
            raise ApiError(409, done["message"], param="to", code="rollback_failed")
        return {"object": "policy.rollback", "version": done["result"], "weights_of": body.to,
                "message": done["message"]}

    @app.post("/v1/policy/pin", openapi_extra=body_doc(PinRequest))
    async def pin(request: Request) -> dict[str, Any]:
        _admin_only(request, "pin versions")
        body = await parse_body(request, PinRequest)
        try:
            await run_in_threadpool(server.store.pin_version, body.version, body.pinned)
        except StoreError as error:
            raise ApiError(404, str(error), param="version", code="version_not_found") from error
        return {"object": "policy.pin", "version": body.version, "pinned": body.pinned}


    @app.get("/v1/quarantine")
    async def quarantine(request: Request, status: str = Query("held", pattern="^(held|released|dropped|all)$"),
                         limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
        """Hints the judge's screen held back from training (judge/screen.py), with why."""
        _admin_only(request, "read the quarantine")
        found = await run_in_threadpool(server.store.quarantined, None if status == "all" else status, limit)
        return {"object": "list", "data": found}

    @app.post("/v1/quarantine/{quarantine_id}/{decision}")
    async def decide(request: Request, quarantine_id: int, decision: str) -> dict[str, Any]:
        """release: the turn is judged again with the hint allowed to train; drop: it never trains."""
        _admin_only(request, "release or drop quarantined hints")
        if decision not in ("release", "drop"):
            raise ApiError(404, f"no route POST /v1/quarantine/{{id}}/{decision[:40]}: use release or drop",
                           code="not_found")
        try:
            return await run_in_threadpool(server.store.decide_quarantine, quarantine_id,
                                           "released" if decision == "release" else "dropped", caller_of(request).name)
        except StoreError as error:
            raise ApiError(404, str(error), param="quarantine_id", code="not_in_quarantine") from error


def _admin_only(request: Request, what: str) -> None:
    if not caller_of(request).admin:
        raise ApiError(403, f"only an admin may {what} (openclaw-rl users add NAME --admin)", code="admin_only",
                       kind="permission_error")


def _generation_routes(app: FastAPI, server: Server) -> None:
    """The APIs that generate: each parses its body and hands a TurnSpec to the pipeline."""
    @app.post("/v1/chat/completions", openapi_extra=body_doc(ChatCompletionRequest))
    async def chat_completions(request: Request) -> Response:
        return await _chat(server, request)

    @app.post("/v1/responses", openapi_extra=body_doc(ResponsesRequest))
    async def responses(request: Request) -> Response:
        body = await parse_body(request, ResponsesRequest)
        return await create_response(server, body, caller(request))

    @app.get("/v1/responses/{response_id}")
    async def response(request: Request, response_id: str) -> dict[str, Any]:
        return await stored_response(server, response_id, caller_of(request))

    @app.post("/v1/completions", openapi_extra=body_doc(CompletionRequest))
    async def completions(request: Request) -> Response:
        body = await parse_body(request, CompletionRequest)
        return await completion(server, body, caller(request))

    @app.post("/v1/messages", openapi_extra=body_doc(MessagesRequest))
    async def messages(request: Request) -> Response:
        try:  # answered in Anthropic's error shape, which keeps the OpenAI fields
            body = await parse_body(request, MessagesRequest)
            return await create_message(server, body, caller(request))
        except ApiError as error:
            return anthropic_error(error)

    @app.post("/v1/messages/count_tokens", openapi_extra=body_doc(CountTokensRequest))
    async def messages_count_tokens(request: Request) -> Response:
        try:
            return JSONResponse(await count_tokens(server, await parse_body(request, CountTokensRequest),
                                                   caller_of(request)))
        except ApiError as error:
            return anthropic_error(error)



def _publish_body_schemas(app: FastAPI, models: list[type[BaseModel]]) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# -- the request path ------------------------------------------------------------------


def caller(request: Request) -> Caller:
    """Who asks, and what the optional openclaw headers say: turn kind, close the session after it, session id."""
    kind = request.headers.get("x-turn-type", "main").strip().lower()
    if kind not in ("main", "side"):
        raise ApiError(400, f"X-Turn-Type must be 'main' or 'side', got {kind[:40]!r}", param="X-Turn-Type")
    done = request.headers.get("x-session-done", "").strip().lower() in ("1", "true", "yes")
    session_id = request.headers.get("x-session-id") or None
    if session_id is not None:
        check_identifier(session_id, "X-Session-Id")
    return Caller(caller_of(request), kind, done, session_id)  # type: ignore[arg-type]


def check_identifier(value: str, name: str) -> str:
    if len(value) > MAX_ID_CHARS or not value.isprintable():
        raise ApiError(400, f"{name} must be at most {MAX_ID_CHARS} printable characters, got {len(value)} characters",
                       param=name)
    return value


async def parse_body(request: Request, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate(await _json_body(request))
    except ValidationError as error:
        message, param = validation_message(error)
        raise ApiError(400, message, param=param) from error
    except RecursionError as error:
        raise ApiError(400, "the request body is nested too deeply", param="body") from error


async def _chat(server: Server, request: Request) -> Response:
    body = await parse_body(request, ChatCompletionRequest)
    return await chat_completion(server, body, chat_spec(server, body, caller(request)))


# -- middleware and errors -------------------------------------------------------------


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise ApiError(400, "the request body is empty; send a JSON object", param="body")
    try:
        data = await run_in_threadpool(json.loads, raw) if len(raw) > 1 << 16 else json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}", param="body", code="invalid_json") from error
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}", param="body")
    return data


def _install_middleware(app: FastAPI, server: Server) -> None:
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

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug must still answer in the format clients parse (and be logged in full here).
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {type(error).__name__}; the server log has the details",
                              kind="server_error")

    @app.exception_handler(RequestValidationError)
    async def request_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"loc": ("query",), "msg": "invalid request"}
        param = ".".join(str(p) for p in first["loc"][1:]) or str(first["loc"][0])
        return error_response(400, f"{param}: {first['msg']}", param=param)

    app.add_middleware(_Guard, server=server)


class _Guard:
    """Pure ASGI middleware in front of every route: who asks (users.py), their limits
    (serve/limits.py), body size, metrics. The user goes to the route in `scope["state"]`.

    The body is read here in chunks and refused with 413 the moment it passes
    `max_body_bytes`, declared or chunked, so a client can never make the server hold
    more than the limit; what was read is then replayed to the route. (Pure ASGI rather
    than Starlette's BaseHTTPMiddleware, which wraps every streamed response in an
    extra task and queue.)"""

    def __init__(self, app: Any, server: Server) -> None:
        self.app, self.server = app, server
        self._trouble: str | None = None  # why no request can be served now, as last logged

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]
        version = str(self.server.engine.policy_version).encode()

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if not any(k.lower() == b"x-policy-version" for k, _ in message.get("headers", ())):
                    message = {**message, "headers": [*message.get("headers", ()), (b"x-policy-version", version)]}
            await send(message)

        user, rejection = self._identify(scope)
        generation = scope["method"] == "POST" and scope["path"] in _GENERATION
        # Limits keep users of a shared server from crowding each other out; with no key configured
        # there is one user (the laptop, or a driver like `simulate` or `agent`), and nobody to protect.
        if rejection is None and user is not None and user is not LOCAL and not keyless(scope["path"]):
            rejection = self._limit(user, scope, generation)
        else:
            generation = False  # nothing was counted open
        try:
            if rejection is None and scope["method"] in ("POST", "PUT", "PATCH"):
                body, rejection = await self._read_body(receive)
                receive = _replay(body, receive)
            if rejection is not None:
                await rejection(scope, receive, send_with_headers)
            else:
                scope.setdefault("state", {})["user"] = user
                await self.app(scope, receive, send_with_headers)
        finally:
            if generation and user is not None:
                self.server.limits.close_stream(user.name)
            metrics, endpoint = self.server.metrics, _endpoint_label(scope["path"])
            metrics.requests.labels(endpoint, str(status[0])).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

    def _identify(self, scope: dict) -> tuple[User | None, JSONResponse | None]:
        """(the user, None), or (None, the 401, 413 or 503 answer). The local admin only on a server
        that never had a key, on loopback (users.py, serve/server.py: it fails closed)."""
        limit = self.server.config.max_body_bytes
        headers = Headers(scope=scope)
        given = headers.get("authorization", "")
        given = given[len("Bearer "):].strip() if given.startswith("Bearer ") else headers.get("x-api-key", "")
        user, refusal = self._authenticate(given)
        if refusal is not None and not keyless(scope["path"]):
            return None, refusal
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None, error_response(413, f"the request body is {declared} bytes; the limit is {limit} bytes "
                                             "(max_body_bytes)", code="body_too_large")
        return user, None

    def _authenticate(self, key: str) -> tuple[User | None, JSONResponse | None]:
        """(the key's user, None), or (None, 401 for a wrong key, 503 while no key can be checked
        or the bind is public with no key); a change of the server's state is logged once."""
        users = self.server.users
        try:
            user = users.caller(key)
            problem = exposure_problem(self.server.config, users)
        except UserError as error:  # the users file is gone or unreadable
            user, problem = None, str(error)
        left = problem is None and user is None and not users.keys_configured
        self._say(problem or (f"no active user key is left in {users.path}: every request answers 401 until an "
                              "admin adds a user (openclaw-rl users add NAME); the server does not fall back to "
                              "serving without keys" if left else None))
        if problem is not None:
            return None, error_response(503, problem, code="no_api_keys", kind="server_error")
        if user is None:
            return None, error_response(401, "missing or wrong API key: send `Authorization: Bearer KEY` (or "
                                             "`x-api-key: KEY`); an admin makes keys with `openclaw-rl users add`"
                                             + ("; this server has no active user now (all revoked)" if left else ""),
                                        code="invalid_api_key")
        return user, None

    def _say(self, trouble: str | None) -> None:
        """Log the server's authentication trouble when it starts, changes or ends (not per request)."""
        if trouble != self._trouble:
            if trouble is not None:
                log.warning("%s", trouble)
            else:
                log.info("API keys can be checked again: requests are authenticated as usual")
            self._trouble = trouble

    def _limit(self, user: User, scope: dict, generation: bool) -> JSONResponse | None:
        feedback = scope["method"] == "POST" and scope["path"].endswith("/feedback")
        refused = self.server.limits.refusal(user.name, feedback, generation)
        if refused is None:
            return None
        message, retry_after_s = refused
        return error_response(429, f"{message}; retry in {retry_after_s} s", code="rate_limit_exceeded",
                              kind="rate_limit_error", headers={"Retry-After": str(retry_after_s)})

    async def _read_body(self, receive: Callable) -> tuple[bytes, JSONResponse | None]:
        """The whole body, or the 413 (over max_body_bytes) or 408 (not all sent within
        body_timeout_s: a client that stops mid-body must not hold a connection forever)."""
        limit, timeout_s = self.server.config.max_body_bytes, self.server.config.body_timeout_s
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        break
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        return b"", error_response(413, f"the request body is over the limit of {limit} bytes "
                                                        "(max_body_bytes)", code="body_too_large")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            return b"", error_response(408, f"the request body did not arrive within {timeout_s:g} s "
                                            f"(body_timeout_s); {size} bytes came", code="body_timeout",
                                       headers={"Connection": "close"})
        return b"".join(chunks), None


def _replay(body: bytes, receive: Callable) -> Callable:
    """A `receive` that hands the route the body read already, then the client's own events."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _endpoint_label(path: str) -> str:
    if path.startswith("/v1/quarantine"):
        return "/v1/quarantine" if path == "/v1/quarantine" else "/v1/quarantine/{id}/{decision}"
    if path.startswith("/v1/policy/"):
        return path if path in ("/v1/policy/versions", "/v1/policy/rollback", "/v1/policy/pin") else "other"
    if path.startswith("/v1/users/"):
        return "/v1/users/{name}/data"
    if path.startswith("/v1/sessions/"):
        return "/v1/sessions/{id}" + ("/feedback" if path.endswith("/feedback") else "/end" if path.endswith("/end") else "")
    if path.startswith("/v1/responses/"):
        return "/v1/responses/{id}"
    return path if path in _ENDPOINTS else "other"


_GENERATION = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions"})
_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions", "/v1/models",
              "/v1/status", "/v1/sessions", "/v1/collapse", "/healthz", "/metrics")
