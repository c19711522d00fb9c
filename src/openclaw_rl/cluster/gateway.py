"""The gateway: one OpenAI-compatible address in front of N engine replicas.

Each replica is the ordinary serving app (serve/app.py) with its own engine; the gateway
only picks a replica and relays bytes, so streaming, tool calls, errors and the
`X-Policy-Version` header behave exactly as with one process.

Decisions and why:

- Session affinity by rendezvous hashing, for every generation API (chat, Responses,
  Anthropic Messages, completions). A session's key is its `X-Session-Id`, else the
  body's end user (`user`, or Anthropic's `metadata.user_id`: one person's
  conversations share a replica; the replica does not take it for a session), else a
  hash of the conversation's opening (every message before the first assistant
  message), which a client resends unchanged on every turn. Each
  replica scores `sha256(key, replica)` and the highest wins, so a session stays on one
  replica and, if that replica cannot be reached, moves to its second choice (and only
  sessions of the lost replica move). Affinity is for locality and ordering, not for
  correctness: every replica reads and writes the same store, so a session that moves
  is still paired with its previous turn.
- A session the gateway first met without an id learns it from the replica's
  `X-Session-Id` answer; feedback and end requests on that id then go to the same
  replica (a bounded map; a forgotten id falls back to hashing the id itself, which is
  also where header sessions land).
- A request is retried on the next replica only when it could not be delivered (the
  connection failed): once a replica has it, it may have recorded a turn, and a second
  copy would record another.
- `X-Replica` in every relayed response names the replica that answered (debugging,
  and the tests check affinity with it).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from openclaw_rl.serve.schema import error_response
from openclaw_rl.serve.sessions import history_hash

log = logging.getLogger(__name__)

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host", "te",
               "upgrade", "proxy-authorization", "proxy-authenticate", "trailer"}
_KNOWN_SESSIONS = 100_000
_GENERATION_PATHS = ("v1/chat/completions", "v1/responses", "v1/messages", "v1/completions")


def session_key(headers: dict[str, str], body: Any) -> str:
    """What pins a chat request to a replica: its session id, user, or conversation opening."""
    if headers.get("x-session-id"):
        return "session:" + headers["x-session-id"]
    if not isinstance(body, dict):
        return "body:" + hashlib.sha256(json.dumps(body, default=str).encode()).hexdigest()
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    user = body.get("user") or metadata.get("user_id")
    if isinstance(user, str) and user:
        return "user:" + user
    if isinstance(body.get("previous_response_id"), str):
        return "response:" + body["previous_response_id"]
    conversation = body.get("messages") or body.get("input") or body.get("prompt")
    if not isinstance(conversation, list):
        conversation = [{"role": "user", "content": conversation}]
    messages = [m for m in conversation if isinstance(m, dict)]
    first_reply = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    try:
        return "opening:" + history_hash(messages[:first_reply])
    except Exception:  # malformed messages: any replica will answer the 400
        return "body:" + hashlib.sha256(json.dumps(body, default=str).encode()).hexdigest()


def preference(key: str, replicas: int) -> list[int]:
    """Replica indices, most preferred first (rendezvous hashing: stable, spreads evenly)."""
    def score(i: int) -> bytes:
        return hashlib.sha256(f"{key}\x00{i}".encode()).digest()

    return sorted(range(replicas), key=score, reverse=True)


class Router:
    """Replica choice plus the session ids learned from replies."""

    def __init__(self, replica_urls: list[str]):
        if not replica_urls:
            raise ValueError("the gateway needs at least one replica URL")
        self.urls = list(replica_urls)
        self._sessions: collections.OrderedDict[str, int] = collections.OrderedDict()

    def order(self, key: str) -> list[int]:
        if key.startswith("session:") and (known := self._sessions.get(key[len("session:"):])) is not None:
            rest = [i for i in preference(key, len(self.urls)) if i != known]
            return [known, *rest]
        return preference(key, len(self.urls))

    def learn(self, session_id: str | None, replica: int) -> None:
        if not session_id:
            return
        self._sessions[session_id] = replica
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > _KNOWN_SESSIONS:
            self._sessions.popitem(last=False)


def create_gateway(replica_urls: list[str], request_timeout_s: float = 300.0) -> FastAPI:
    """The router app. Paths under /v1/sessions/{id} follow the session; the generation
    APIs follow `session_key`; everything else (models, status, metrics) goes to any
    replica. (Over 60 lines: one relay route and its client's lifespan share state.)"""
    router = Router(replica_urls)
    timeout = httpx.Timeout(request_timeout_s + 30.0, connect=5.0)
    client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal client
        client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=1000))
        try:
            yield
        finally:
            await client.aclose()

    app = FastAPI(title="openclaw-rl gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.router = router

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        """The gateway's health: each replica's policy version (None where it did not answer)."""
        versions: list[int | None] = []
        for url in router.urls:
            try:
                versions.append((await client.get(f"{url}/healthz", timeout=5.0)).json()["policy_version"])
            except (httpx.HTTPError, KeyError, ValueError):
                versions.append(None)
        live = [v for v in versions if v is not None]
        status = "ok" if len(live) == len(versions) else "degraded" if live else "down"
        return JSONResponse({"status": status, "policy_version": min(live) if live else None,
                             "replicas": [{"url": u, "policy_version": v} for u, v in zip(router.urls, versions)]},
                            status_code=200 if live else 503)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def relay(path: str, request: Request) -> Response:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        parts = path.split("/")
        if path in _GENERATION_PATHS and request.method == "POST":
            try:
                body = json.loads(raw) if raw else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = None  # the replica answers the 400
            order = router.order(session_key(headers, body))
        elif len(parts) >= 3 and parts[:2] == ["v1", "sessions"]:
            order = router.order("session:" + parts[2])
        else:
            order = list(range(len(router.urls)))
        url = f"/{path}" + (f"?{request.url.query}" if request.url.query else "")
        failures = []
        for replica in order:
            upstream = client.build_request(request.method, router.urls[replica] + url, headers=headers, content=raw)
            try:
                answer = await client.send(upstream, stream=True)
            except httpx.TransportError as error:  # not delivered: the next replica may take it
                failures.append(f"{router.urls[replica]}: {type(error).__name__}: {error}")
                log.warning("replica %s unreachable (%s); trying the next", router.urls[replica], error)
                continue
            router.learn(answer.headers.get("x-session-id"), replica)
            out_headers = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
            out_headers["X-Replica"] = str(replica)
            return StreamingResponse(_relay_body(answer), status_code=answer.status_code, headers=out_headers)
        return error_response(503, "no replica could be reached: " + "; ".join(failures), kind="server_error",
                              code="replicas_unreachable")

    return app


async def _relay_body(answer: httpx.Response):
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    finally:
        await answer.aclose()
