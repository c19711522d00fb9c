"""The experience routes: a user sees, edits, deletes and undoes the lessons learned from them.

    GET    /v1/experience                  the caller's lessons, version and latest changes
    PUT    /v1/experience/lessons/{id}     rewrite one lesson's text  {"text": "..."}
    DELETE /v1/experience/lessons/{id}     delete one lesson
    DELETE /v1/experience                  delete every lesson (one change: one undo brings them back)
    POST   /v1/experience/undo             undo the latest change, or {"version": N} the change that made N
    POST   /v1/experience/absorption       measure, on the policy served now (under the user's personal
                                           adapter when they are served one), how far each lesson still
                                           moves it (judge/absorption.py); GET shows the measurements

An admin adds `?user=NAME` to any of them to act on that user's experience, and GET
lists every user with an experience (`users`).

Decisions and why:

- **Every edit is a recorded change** (experience/lessons.py), saved with the store's
  version check and retried on a conflict with the judge (`Store.update_experience`), so
  a lesson the judge learns while the user edits is never lost and every step can be
  undone, an undo included.
- **No existence oracle**: lesson ids are per user (the version that made the lesson), so
  another user's lesson is simply not among the caller's and gets the same 404 as an id
  that never existed; `?user=` of a non-admin naming someone else is a 404 "no user", as
  for `DELETE /v1/users/{name}/data`.
- **An edited text passes the hint screen** (judge/screen.py, with no conversation to
  ground it): a lesson goes into every later prompt of its user and into what the
  experience teacher distils into the shared weights, so it may not bring in a URL, a
  contact, a command or other people's data that a correction could not have.
- **The experience gate's decisions show per change** (`gate`: passed or rejected, the
  reason and its numbers; judge/experience_gate.py). A version it rejected is followed by
  the `undone` change that took it back; undoing that change (`POST /v1/experience/undo
  {"version": N}`) serves the rejected lessons after all, the user's or admin's call.
- Deleting a user's data (`DELETE /v1/users/{name}/data`) removes the experience and its
  change log outright (store/conversations.py); `DELETE /v1/experience` keeps the log, so
  it can be undone.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from openclaw_rl.experience import MAX_LESSON_CHARS, Change, Experience, Lesson, delete_lesson, edit_lesson, revert
from openclaw_rl.experience.lessons import step
from openclaw_rl.judge.absorption import (
    ABSORBED_SHARE, MEASURABLE_GAP, absorbed, experience_absorption, served_with_block, weights_line,
)
from openclaw_rl.judge.screen import screen_hint
from openclaw_rl.serve.schema import ApiError, Whole, body_doc
from openclaw_rl.serve.server import Server, caller_of, owner_for
from openclaw_rl.serve.sessions import shown_session_id
from openclaw_rl.store import ExperienceConflict

__all__ = ["LessonEdit", "UndoRequest", "experience_routes"]

ParseBody = Callable[[Request, type[BaseModel]], Awaitable[Any]]


class LessonEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_LESSON_CHARS,
                      description="the lesson's new text: one short rule, e.g. 'Show every step.'")


class UndoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Whole | None = Field(default=None, ge=1, le=2**62,
                                  description="undo the change that made this version (default: the latest change)")


def experience_routes(app: FastAPI, server: Server, parse_body: ParseBody) -> None:
    store = server.store

    @app.get("/v1/experience")
    async def experience(request: Request, user: str | None = None,
                         limit: int = Query(20, ge=0, le=1000)) -> dict[str, Any]:
        """The lessons learned from the caller (an admin: from `user`), and the latest `limit` changes."""
        owner = owner_for(request, user)
        view = await run_in_threadpool(_view, store, owner, limit)
        if caller_of(request).admin:
            view["users"] = await run_in_threadpool(store.experience_owners)
        return view

    @app.put("/v1/experience/lessons/{lesson_id}", openapi_extra=body_doc(LessonEdit, required=True))
    async def edit(request: Request, lesson_id: int, user: str | None = None) -> dict[str, Any]:
        owner = owner_for(request, user)
        body = await parse_body(request, LessonEdit)
        text = " ".join(body.text.split())
        if not text:
            raise ApiError(400, "text: the lesson text is blank; write the rule, e.g. 'Show every step.'",
                           param="text")
        if reason := screen_hint(text, ""):
            raise ApiError(400, f"text: the hint screen holds this lesson ({reason}); a lesson goes into every later "
                           "prompt and into training, so it may not bring in URLs, contacts, commands or other "
                           "people's data", param="text", code="lesson_screened")
        return await _change(store, owner, lesson_id,
                             lambda e: _one(edit_lesson(e, lesson_id, text, time.time())))

    @app.delete("/v1/experience/lessons/{lesson_id}")
    async def delete(request: Request, lesson_id: int, user: str | None = None) -> dict[str, Any]:
        owner = owner_for(request, user)
        return await _change(store, owner, lesson_id, lambda e: _one(delete_lesson(e, lesson_id)))

    @app.delete("/v1/experience")
    async def delete_all(request: Request, user: str | None = None) -> dict[str, Any]:
        """Every lesson deleted, as one change (one undo brings them all back)."""
        owner = owner_for(request, user)
        return await _change(store, owner, None, _delete_all)

    @app.post("/v1/experience/undo", openapi_extra=body_doc(UndoRequest, required=False))
    async def undo(request: Request, user: str | None = None) -> dict[str, Any]:
        owner = owner_for(request, user)
        body = await parse_body(request, UndoRequest) if (await request.body()).strip() else UndoRequest()

        def update(experience: Experience) -> tuple[Experience, list[Change]]:
            target = (store.experience_change(owner, body.version) if body.version is not None
                      else next(iter(store.experience_changes(owner, 1)), None))
            if target is None:
                raise ApiError(404, f"no change v{body.version} of {owner!r} to undo (GET /v1/experience lists them)",
                               param="version", code="change_not_found") if body.version is not None else \
                    ApiError(409, f"{owner!r} has no change to undo", code="nothing_to_undo")
            try:
                return _one(revert(experience, target))
            except ValueError as error:
                raise ApiError(409, str(error), param="version", code="undo_conflict") from error

        return await _change(store, owner, None, update)

    _absorption_route(app, server)


def _absorption_route(app: FastAPI, server: Server) -> None:
    store = server.store

    @app.post("/v1/experience/absorption")
    async def absorption(request: Request, user: str | None = None,
                         turns: int = Query(8, ge=1, le=64)) -> dict[str, Any]:
        """Measure each lesson of the caller (an admin: of `user`) on up to `turns` of their latest
        turns served with it, on the policy version served now and under their adapter if they are
        served one; the view with the measurements, and `measured_on` the weights (None: nothing measured)."""
        owner = owner_for(request, user)
        experience = await run_in_threadpool(store.experience, owner)
        served = await run_in_threadpool(served_with_block, store, owner, 50)
        found = await experience_absorption(server.engine, server.tokenizer, experience.lessons, served, turns)
        measured = [(a.lesson_id, a.policy_version, a.gap_per_token, a.turns) for a in found]
        adapter = found[0].adapter_version if found else None  # one pass: one user's weights
        await run_in_threadpool(store.record_absorption, owner, measured, adapter)
        view = await run_in_threadpool(_view, store, owner, 20)
        return {**view, "measured": len(measured), "measured_on": {
            "policy_version": found[0].policy_version, "adapter_version": adapter} if found else None}


async def _change(store, owner: str, lesson_id: int | None,
                  update: Callable[[Experience], tuple[Experience, list[Change]]]) -> dict[str, Any]:
    """Apply `update` to `owner`'s experience (retried on a conflict with another writer); the view after it."""
    def apply(experience: Experience) -> tuple[Experience, list[Change]]:
        try:
            return update(experience)
        except KeyError:  # another user's lesson is not in this experience: the same answer as none at all
            raise ApiError(404, f"no lesson {lesson_id} (GET /v1/experience lists yours)", param="lesson_id",
                           code="lesson_not_found") from None

    try:
        _, changes = await run_in_threadpool(store.update_experience, owner, apply)
    except ExperienceConflict as error:
        raise ApiError(409, str(error), code="experience_conflict") from error
    view = await run_in_threadpool(_view, store, owner, 20)
    return {**view, "changes_made": [_change_view(change) for change in changes]}


def _one(pair: tuple[Experience, Change]) -> tuple[Experience, list[Change]]:
    return pair[0], [pair[1]]


def _delete_all(experience: Experience) -> tuple[Experience, list[Change]]:
    if not experience.lessons:
        return experience, []
    return _one(step(experience, "deleted", experience.lessons, (), reason="all deleted by the user"))


def _view(store, owner: str, limit: int) -> dict[str, Any]:
    experience = store.experience(owner)
    changes = store.experience_changes(owner, limit) if limit else []
    places = store.lesson_turns(owner, [x for lesson in experience.lessons for x in lesson.sources])
    measured = store.absorption(owner)
    return {"object": "experience", "user": owner, "version": experience.version,
            "absorbed_rule": {"share_of_first_gap": ABSORBED_SHARE, "measurable_first_gap": MEASURABLE_GAP},
            "lessons": [_lesson_view(lesson, places, measured.get(lesson.id, [])) for lesson in experience.lessons],
            "changes": [_change_view(change) for change in changes]}


def _lesson_view(lesson: Lesson, places: dict[str, tuple[str, int]], measured: list[dict]) -> dict[str, Any]:
    """The lesson, `from`: the session and turn index of each source still stored (provenance),
    and `absorption`: its measurements, oldest weights first (`adapter_version`: measured under the
    user's personal adapter; None: without one); `absorbed` by the rule (judge/absorption.py
    `absorbed`; None: cannot tell), comparing `absorption_line`, the measurements of one line of
    weights (the adapter's versions, or the shared model's: `weights_line`)."""
    found = [(turn_id, places[turn_id]) for turn_id in lesson.sources if turn_id in places]
    return {**asdict(lesson), "sources": list(lesson.sources), "absorption": measured,
            "absorbed": absorbed(measured), "absorption_line": weights_line(measured),
            "from": [{"turn_id": turn_id, "session_id": shown_session_id(session, lesson.owner), "index": index}
                     for turn_id, (session, index) in found]}


def _change_view(change: Change) -> dict[str, Any]:
    """The change; `gate`: the experience gate's decision on the version it made (None: not gated)."""
    return {"version": change.version, "kind": change.kind, "lesson_ids": list(change.lesson_ids),
            "before": list(change.before_text), "after": list(change.after_text), "turn_id": change.turn_id,
            "reason": change.reason, "gate": asdict(change.gate) if change.gate else None}
