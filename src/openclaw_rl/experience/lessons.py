"""The records of a user's experience: lessons, the experience that holds them, and changes.

Decisions and why:

- Everything is a frozen dataclass and every operation returns a new `Experience` with a
  `Change` beside it. The store persists both; an experience is never edited in place,
  so a reader (a request being served) always sees one whole version.
- A `Change` keeps the complete lessons it removed (`before`) and put in (`after`), not
  a diff of fields. That one shape covers every kind (added, merged, replaced, dropped,
  edited, deleted, undone), is enough to undo any of them, and gives the dashboard its
  before/after text without a second query.
- Versions only go up. Undoing a change is itself a change (kind `undone`) with a new
  version, so a turn that recorded "served with experience version 7" always names one
  fixed set of lessons, even after an undo.
- A lesson's id is the version of the change that created it: unique within its owner's
  experience without a counter of its own, and never reused after an undo.
- A change the experience gate decided on (experience/gate.py) carries the decision
  (`Change.gate`): the version it checked, passed or rejected, and why in numbers. A
  rejected version is saved and taken back at once by one `undone` change carrying the
  same decision, so the history shows it and undoing that change puts it back.
- No embedding is stored on a lesson. Consolidation embeds the candidate and the (at
  most a dozen or so) lessons in one batch, which costs milliseconds off the request
  path, and a cached vector would silently go stale when the encoder changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

__all__ = ["Change", "ChangeKind", "Experience", "GateDecision", "Lesson", "apply", "delete_lesson", "edit_lesson",
           "replay", "revert", "undo"]

ChangeKind = Literal["added", "merged", "replaced", "dropped", "edited", "deleted", "undone"]


@dataclass(frozen=True)
class Lesson:
    """One standing rule of one user, e.g. "Show every step of the calculation."."""

    id: int  # unique within the owner's experience: the version of the change that created it
    owner: str  # the user whose corrections it came from; a lesson never crosses users
    text: str  # a short imperative rule, as `lesson_from_hint` writes it
    support: int  # how many distinct turns backed it (all of them, not only those in `sources`)
    sources: tuple[str, ...]  # turn ids that backed it, oldest first; the most recent `max_sources`
    created_at: float  # unix seconds
    updated_at: float  # unix seconds: the last time a turn backed it or its text changed

    def __post_init__(self) -> None:
        if self.support < 1:
            raise ValueError(f"lesson {self.id} of {self.owner!r} has support {self.support}; a lesson needs >= 1 turn")
        if not self.text.strip():
            raise ValueError(f"lesson {self.id} of {self.owner!r} has empty text; write the rule it stands for")


@dataclass(frozen=True)
class Experience:
    """One user's lessons at one version. `lessons` is kept sorted by id."""

    owner: str
    lessons: tuple[Lesson, ...] = ()
    version: int = 0  # 0: nothing learned yet; +1 with every change

    def __post_init__(self) -> None:
        strangers = sorted({lesson.owner for lesson in self.lessons} - {self.owner})
        if strangers:
            raise ValueError(f"the experience of {self.owner!r} holds lessons of {strangers}; "
                             "lessons never cross users")
        ids = [lesson.id for lesson in self.lessons]
        if ids != sorted(set(ids)):
            raise ValueError(f"lesson ids must be unique and sorted, got {ids}; build it with Experience.with_lessons")

    def with_lessons(self, lessons: list[Lesson] | tuple[Lesson, ...], version: int) -> Experience:
        return Experience(self.owner, tuple(sorted(lessons, key=lambda lesson: lesson.id)), version)

    def lesson(self, lesson_id: int) -> Lesson:
        for lesson in self.lessons:
            if lesson.id == lesson_id:
                return lesson
        raise KeyError(f"{self.owner!r} has no lesson {lesson_id}; the ids are {[x.id for x in self.lessons]}")


@dataclass(frozen=True)
class GateDecision:
    """What the experience gate (experience/gate.py) decided about one new experience version."""

    outcome: Literal["passed", "rejected"]
    checked_version: int  # the version the gate checked (against the one before the changes that made it)
    reason: str  # in words, with the numbers: "approved answers -0.212 nats/token ..." or "too few labelled turns"
    approved_turns: int = 0  # the user's approved (+1) turns read (scored unless too few)
    rejected_turns: int = 0  # the user's rejected (-1) turns read
    approved_shift: float | None = None  # mean Δ over approved turns (per token log π(y | new) − log π(y | old))
    rejected_shift: float | None = None  # the same over rejected turns
    statistic: float | None = None  # D = approved_shift − rejected_shift (each side only when scored); < 0: worse
    p_value: float | None = None  # one-sided bootstrap p of "D is within the tolerance"
    tolerance: float | None = None  # nats per token D may fall below 0 before the version can be rejected
    policy_version: int | None = None  # the shared weights every scoring ran on
    adapter_version: int | None = None  # the user's personal adapter they ran under (None: none)


@dataclass(frozen=True)
class Change:
    """One step from version `version - 1` to `version` of `owner`'s experience."""

    kind: ChangeKind
    owner: str
    version: int  # the version this change produced
    before: tuple[Lesson, ...]  # the lessons it removed or rewrote, as they were
    after: tuple[Lesson, ...]  # the lessons it put in their place
    turn_id: str | None = None  # the turn whose hint or correction caused it, if any
    reason: str = ""  # why, in words: the similarity seen, the cue that contradicted, the cap exceeded
    gate: GateDecision | None = None  # the experience gate's decision on the version this change made (None: none)

    @property
    def lesson_ids(self) -> tuple[int, ...]:
        return tuple(sorted({lesson.id for lesson in (*self.before, *self.after)}))

    @property
    def before_text(self) -> tuple[str, ...]:
        return tuple(lesson.text for lesson in self.before)

    @property
    def after_text(self) -> tuple[str, ...]:
        return tuple(lesson.text for lesson in self.after)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, for the store's change log."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        lessons = {key: tuple(Lesson(**{**x, "sources": tuple(x["sources"])}) for x in data[key])
                   for key in ("before", "after")}
        gate = GateDecision(**data["gate"]) if data.get("gate") else None  # a change logged before the gate: none
        return cls(**{**data, **lessons, "gate": gate})


def step(experience: Experience, kind: ChangeKind, before: tuple[Lesson, ...], after: tuple[Lesson, ...],
         turn_id: str | None = None, reason: str = "") -> tuple[Experience, Change]:
    """Remove `before` (by id), put `after` in, and record it as the next version."""
    version = experience.version + 1
    gone = {lesson.id for lesson in before} | {lesson.id for lesson in after}
    kept = [lesson for lesson in experience.lessons if lesson.id not in gone]
    change = Change(kind, experience.owner, version, before, after, turn_id, reason)
    return experience.with_lessons([*kept, *after], version), change


def apply(experience: Experience, change: Change) -> Experience:
    """Replay a recorded change onto the version it was made from (the store's change log, after a restart)."""
    if change.owner != experience.owner or change.version != experience.version + 1:
        raise ValueError(f"change v{change.version} of {change.owner!r} does not follow v{experience.version} of "
                         f"{experience.owner!r}; replay a user's changes in version order, from version 0")
    return step(experience, change.kind, change.before, change.after, change.turn_id, change.reason)[0]


def replay(owner: str, changes: Iterable[Change]) -> Experience:
    """The experience that a user's change log, in version order, leads to."""
    experience = Experience(owner)
    for change in changes:
        experience = apply(experience, change)
    return experience


def revert(experience: Experience, change: Change) -> tuple[Experience, Change]:
    """The experience with `change` taken back, and the `undone` change that records it.

    Any change can be undone, not only the latest, as long as no later change touched
    its lessons: every lesson it put in must still be there unchanged, and none it
    removed may have come back. Otherwise undo the later changes first.
    """
    if change.owner != experience.owner:
        raise ValueError(f"change v{change.version} belongs to {change.owner!r}, not {experience.owner!r}")
    current = {lesson.id: lesson for lesson in experience.lessons}
    for lesson in change.after:
        if current.get(lesson.id) != lesson:
            raise ValueError(f"change v{change.version} ({change.kind}) cannot be undone: lesson {lesson.id} has "
                             "changed or gone since; undo the later changes that touched it first")
    put_in = {lesson.id for lesson in change.after}
    for lesson in change.before:
        if lesson.id in current and lesson.id not in put_in:
            raise ValueError(f"change v{change.version} ({change.kind}) cannot be undone: lesson {lesson.id} is "
                             "back already; undo the later change that restored it first")
    return step(experience, "undone", change.after, change.before, change.turn_id, f"undo of v{change.version}")


def undo(experience: Experience, change: Change) -> Experience:
    """The experience as it was before `change` (at a new version; see `revert`)."""
    return revert(experience, change)[0]


def edit_lesson(experience: Experience, lesson_id: int, text: str, now: float) -> tuple[Experience, Change]:
    """The user rewrites one of their lessons (PUT /v1/experience): support and provenance stay."""
    old = experience.lesson(lesson_id)
    new = replace(old, text=" ".join(text.split()), updated_at=now)
    return step(experience, "edited", (old,), (new,), reason="edited by the user")


def delete_lesson(experience: Experience, lesson_id: int) -> tuple[Experience, Change]:
    """The user removes one of their lessons (DELETE /v1/experience/{id})."""
    return step(experience, "deleted", (experience.lesson(lesson_id),), (), reason="deleted by the user")
