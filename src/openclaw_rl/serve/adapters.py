"""The personal adapter routes: each user sees, pins, rolls back and resets their own adapter.

    GET    /v1/adapters                 the caller's adapter: the version served, the kept ones, the history
                                        (each version with the lessons measured absorbed under it)
    POST   /v1/adapters/rollback        {"to": N}: serve version N's weights again, as a new version
    POST   /v1/adapters/pin             {"version": N, "pinned": true}: keep N's weights whatever the retention
    DELETE /v1/adapters                 reset: the adapter and its history deleted, the base model served
    POST   /v1/adapters/off             admins: the user gets the shared model; the adapter kept, frozen
    POST   /v1/adapters/on              admins: its current version serves (and trains) again

An admin adds `?user=NAME` to act on that user's adapter, and a GET without it lists every
user's. With `serve --personal-adapters off` the GET answers an empty list and the others
409 (docs/personal-adapters.md).

Decisions and why:

- **A user's own rails are theirs to pull.** Rolling back, pinning or resetting one
  user's adapter changes what that user alone is served (every other row of a batch keeps
  its own adapter), so each user may do it to their own, unlike the shared model's
  rollback and pin (admins only: `/v1/policy/*`).
- **Off and on are the admins'.** An admin turns an adapter off because of what it learnt
  (a poisoned correction, a complaint); the user could otherwise switch it straight back.
  The switch is kept in the store (a restart keeps it) and outlives the user's own reset,
  so a reset cannot turn on what an admin turned off; deleting the user's data removes it.
- **No existence oracle**: a non-admin's `?user=` naming someone else is a 404 "no
  user", as for `/v1/experience` and `DELETE /v1/users/{name}/data`.
- Deleting a user's data (`DELETE /v1/users/{name}/data`) deletes their adapter and its
  history too (serve/app.py, store/conversations.py).
- **Lessons absorbed, per version**: each version of the history carries `lessons`, what
  `POST /v1/experience/absorption` measured under it (judge/absorption.py): how many of the
  user's current lessons were measured (`measured`) and those the rule calls absorbed at that
  version along the adapter's line (`absorbed`, id and text); null when none was measured.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from openclaw_rl.judge.absorption import absorbed_by_adapter_version
from openclaw_rl.serve.schema import ApiError, PinRequest, RollbackRequest, body_doc
from openclaw_rl.serve.server import PersonalAdmin, Server, caller_of, owner_for
from openclaw_rl.store import StoreError

ParseBody = Callable[[Request, type[BaseModel]], Awaitable[Any]]


def adapter_routes(app: FastAPI, server: Server, parse_body: ParseBody) -> None:
    store = server.store

    @app.get("/v1/adapters")
    async def adapters(request: Request, user: str | None = None) -> dict[str, Any]:
        """The caller's adapter (an admin's: `user`'s, or without it every user's)."""
        caller = caller_of(request)
        owners = [owner_for(request, user)] if user is not None or not caller.admin else None
        history = await run_in_threadpool(store.adapter_versions, owners[0] if owners else None, 10_000)
        owners = owners if owners is not None else sorted({record["owner"] for record in history})
        lessons = await run_in_threadpool(lambda: {owner: _lessons_absorbed(store, owner) for owner in owners})
        try:
            data = [_view(server.personal, owner, [r for r in history if r["owner"] == owner], lessons[owner])
                    for owner in owners]
        except ValueError as error:  # a name no adapter directory can have
            raise ApiError(400, str(error), param="user") from error
        return {"object": "list", "personal_adapters": server.config.personal_adapters, "data": data}

    @app.post("/v1/adapters/rollback", openapi_extra=body_doc(RollbackRequest))
    async def rollback(request: Request, user: str | None = None) -> dict[str, Any]:
        owner, personal = owner_for(request, user), _personal(server)
        body = await parse_body(request, RollbackRequest)
        try:
            version = await personal.rollback(owner, body.to)
        except ValueError as error:
            raise ApiError(404, f"{error}; GET /v1/adapters lists them, pin versions to keep them", param="to",
                           code="version_not_kept") from error
        return {"object": "adapter.rollback", "user": owner, "version": version, "weights_of": body.to}

    @app.post("/v1/adapters/pin", openapi_extra=body_doc(PinRequest))
    async def pin(request: Request, user: str | None = None) -> dict[str, Any]:
        owner, personal = owner_for(request, user), _personal(server)
        body = await parse_body(request, PinRequest)
        if body.pinned and body.version not in personal.versions(owner):
            raise ApiError(404, f"{owner!r} has no kept adapter version {body.version} (kept: "
                           f"{personal.versions(owner)})", param="version", code="version_not_kept")
        try:
            await run_in_threadpool(store.pin_adapter_version, owner, body.version, body.pinned)
        except StoreError as error:
            raise ApiError(404, str(error), param="version", code="version_not_found") from error
        return {"object": "adapter.pin", "user": owner, "version": body.version, "pinned": body.pinned}

    _switch_routes(app, server)

    @app.delete("/v1/adapters")
    async def reset(request: Request, user: str | None = None) -> dict[str, Any]:
        owner = owner_for(request, user)
        await _personal(server).reset(owner)
        return {"object": "adapter.deleted", "user": owner, "deleted": True}


def _switch_routes(app: FastAPI, server: Server) -> None:
    """The admin's off / on switch of a user's adapter."""

    @app.post("/v1/adapters/off")
    async def turn_off(request: Request, user: str | None = None) -> dict[str, Any]:
        return await _switch(request, user, on=False)

    @app.post("/v1/adapters/on")
    async def turn_on(request: Request, user: str | None = None) -> dict[str, Any]:
        return await _switch(request, user, on=True)

    async def _switch(request: Request, user: str | None, on: bool) -> dict[str, Any]:
        caller = caller_of(request)
        if not caller.admin:
            raise ApiError(403, f"only an admin may turn a personal adapter {'on' if on else 'off'} (openclaw-rl "
                           "users add NAME --admin); DELETE /v1/adapters resets your own", code="admin_only",
                           kind="permission_error")
        owner, personal = owner_for(request, user), _personal(server)
        try:
            await personal.set_on(owner, on, by=caller.name)
        except ValueError as error:  # a name no adapter directory can have
            raise ApiError(400, str(error), param="user") from error
        return {"object": "adapter.switch", "user": owner, "on": on, "serving": _serving(personal, owner)}


def _view(personal: PersonalAdmin | None, owner: str, history: list[dict[str, Any]],
          lessons: dict[int, dict[str, Any]]) -> dict[str, Any]:
    serving = _serving(personal, owner) if personal is not None else None
    kept = set(personal.versions(owner)) if personal is not None else set()
    on = personal.is_on(owner) if personal is not None else True
    return {"user": owner, "on": on, "serving": serving, "kept": sorted(kept),
            "versions": [{**record, "serving": record["version"] == serving, "kept": record["version"] in kept,
                          "lessons": lessons.get(record["version"])} for record in history]}


def _lessons_absorbed(store, owner: str) -> dict[int, dict[str, Any]]:
    """Adapter version -> how many of `owner`'s lessons were measured under it, and those absorbed at it."""
    texts = {lesson.id: lesson.text for lesson in store.experience(owner).lessons}
    found: dict[int, dict[str, Any]] = {}
    for lesson_id, measured in sorted(store.absorption(owner).items()):
        if lesson_id not in texts:  # deleted since: not among the user's lessons
            continue
        for version, state in absorbed_by_adapter_version(measured).items():
            entry = found.setdefault(version, {"measured": 0, "absorbed": []})
            entry["measured"] += 1
            if state:
                entry["absorbed"].append({"id": lesson_id, "text": texts[lesson_id]})
    return found


def _serving(personal: PersonalAdmin, owner: str) -> int | None:
    """The adapter version `owner` is served; None: the shared model (no adapter, or turned off)."""
    return personal.current(owner) if personal.is_on(owner) else None


def _personal(server: Server) -> PersonalAdmin:
    if server.personal is None:
        raise ApiError(409, "personal adapters are off on this server: serve with --personal-adapters on",
                       code="personal_adapters_off")
    return server.personal


