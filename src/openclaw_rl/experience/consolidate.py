"""Consolidation: a candidate lesson joins a user's experience by merging, replacing or adding.

`learn` is the one call the judge's side makes for every screened hint or correction
(after `lesson_from_hint`): `consolidate`, then `enforce_cap`. Each returns the changes it
made, for the store to record and the user to undo.

The rule, in order. The numbers are cosine similarities measured with all-MiniLM-L6-v2,
the encoder the embedding judge ships, on the 62 labelled pairs in tests/test_experience.py
(18 paraphrases, 21 contradictions, 23 different preferences) and on the student and
teacher personas' own corrections after the judge's rule hints and `lesson_from_hint`
(bench/experience_consolidation.py: 39 pairs of wordings of one check, 390 pairs of
wordings of two different checks of one persona):

1. **Replace** every lesson that is on the same topic (similarity >= `topic_similarity`,
   0.45) and that the candidate contradicts (polarity.py): the user changed their mind,
   and the newer word wins. Contradictions embed close together ("Always use emojis" /
   "Never use emojis": 0.88), so this is checked before a merge can swallow them.
   Measured contradictions on one topic: 0.47 to 0.92. On the labelled pairs: precision
   19/19, recall 19/21 (missed: "Reply in English" / "in Spanish" and "Give the final
   answer first" / "at the end", which have no polar cue); no persona pair is replaced.
2. **Merge** into the most similar remaining lesson when the similarity is >=
   `merge_similarity` (0.55) *and* the two agree on something (polarity.agreement: a
   shared content word or graded axis on the same side): support + 1, the turn joins the
   provenance, and the lesson *keeps its wording*. Paraphrases measure 0.24 to 0.88;
   different preferences up to 0.52 on the labelled pairs ("Answer in one sentence" /
   "Answer in French"; "Don't use bold text" / "Don't use headings" 0.50) and up to 0.65
   among a persona's checks, so similarity alone cannot separate them; the agreement
   gate stops rules about different things merging however close they embed. Measured:
   labelled paraphrases merged 11/18 with 1 wrong merge (the "first/end" contradiction
   above); persona wordings of one check merged 16/39, and 1 of 390 pairs of different
   checks merged ("Remove the formatting and write it as a short paragraph" / "Keep it
   shorter, three or four sentences is enough": both on the short side). At 0.50 the
   labelled recall rises to 13/18 and the wrong merges double; at 0.60 it falls to 9/18.
   A missed merge leaves two wordings of one rule (tokens, which the cap bounds); a
   wrong merge loses a rule, so the threshold errs high. The wording stays because it is the
   anchor every later merge is judged against: when the newer wording won, a lesson
   wandered along a chain of merges, each close to the last and the ends far apart
   (measured on a persona stream, bench/experience_consolidation.py: "Write a real answer
   in full sentences" became "Answer the question, in sentences with the numbers", then
   "Finish with the actual number", then "Give the final answer as a number at the end",
   absorbing three different rules). The price: a contradiction the cue rule misses but
   the agreement gate lets through keeps the older side (1 of the 62 labelled pairs,
   "Give the final answer first" / "... at the end"); the user can edit or delete it.
3. Otherwise **add** it, with support 1.

A turn counts once per lesson: merging a candidate into a lesson that already lists its
turn changes nothing (the judge may send several hints of one turn, or retry).

The cap (`enforce_cap`): at most `max_lessons` lessons and `max_tokens` tokens of lesson
text. Over it, the lesson with the lowest retention `support * 0.5 ** (age / half_life)`
goes first (age since it was last backed; ties: the least recently backed, then the
oldest id). Support alone would never let a new preference in once the set is full of
well-supported ones, and recency alone would evict the rules the user has repeated most.
The lesson that the change being capped just wrote is exempt while others remain, so
the user's latest correction always reaches the next prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from openclaw_rl.experience.lessons import Change, Experience, Lesson, step
from openclaw_rl.experience.polarity import agreement, contradiction

__all__ = ["ConsolidationPolicy", "CountTokens", "Embed", "consolidate", "enforce_cap", "learn", "retention",
           "similarities"]

Embed = Callable[[list[str]], Any]  # texts -> (n, d) array-like (numpy, or a CPU torch tensor)
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class ConsolidationPolicy:
    merge_similarity: float = 0.55
    """Cosine similarity at or above which a candidate merges into a lesson (see the module docstring)."""
    topic_similarity: float = 0.45
    """Cosine similarity at or above which a contradicting candidate replaces a lesson."""
    max_lessons: int = 12
    """At most this many lessons per user."""
    max_tokens: int = 256
    """At most this many tokens of lesson text per user (`count_tokens` of each lesson, summed)."""
    max_sources: int = 32
    """Turn ids kept per lesson as provenance (the most recent); `support` keeps counting past it."""
    half_life_s: float = 14 * 86_400.0
    """Time after which a lesson's support counts half when the cap picks what to evict."""

    def __post_init__(self) -> None:
        if not 0.0 < self.topic_similarity <= self.merge_similarity <= 1.0:
            raise ValueError(
                f"need 0 < topic_similarity <= merge_similarity <= 1, got {self.topic_similarity} and "
                f"{self.merge_similarity}; a contradiction must be detectable at least as far out as a merge")
        if self.max_lessons < 1 or self.max_tokens < 1 or self.max_sources < 1:
            raise ValueError(f"max_lessons, max_tokens and max_sources must be >= 1, got {self.max_lessons}, "
                             f"{self.max_tokens} and {self.max_sources}")
        if self.half_life_s <= 0:
            raise ValueError(f"half_life_s must be > 0, got {self.half_life_s}")


def similarities(embed: Embed, candidate: str, texts: list[str]) -> np.ndarray:
    """Cosine similarity of `candidate` to each of `texts`, from one batch through `embed`."""
    if not texts:
        return np.zeros(0)
    vectors = np.asarray(embed([candidate, *texts]), dtype=np.float64)  # (1 + n, d)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) + 1:
        raise ValueError(f"embed returned shape {vectors.shape} for {len(texts) + 1} texts; it must return (n, d)")
    vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    return vectors[1:] @ vectors[0]  # (n,)


def consolidate(experience: Experience, candidate_text: str, turn_id: str, now: float, embed: Embed,
                policy: ConsolidationPolicy = ConsolidationPolicy()) -> tuple[Experience, Change | None]:
    """`experience` with the candidate merged, replacing what it contradicts, or added.

    Returns the change made, or None when the candidate's turn already backs the lesson it
    would merge into.
    """
    candidate = " ".join(candidate_text.split())
    if not candidate:
        raise ValueError("the candidate lesson is empty; pass what lesson_from_hint returned, and skip None")
    lessons = experience.lessons
    sims = similarities(embed, candidate, [lesson.text for lesson in lessons])
    contradicted = [(lesson, float(s), why) for lesson, s in zip(lessons, sims) if s >= policy.topic_similarity
                    and (why := contradiction(lesson.text, candidate))]
    gone = {lesson.id for lesson, _, _ in contradicted}
    near = [(float(s), lesson) for lesson, s in zip(lessons, sims) if s >= policy.merge_similarity
            and lesson.id not in gone and agreement(lesson.text, candidate)]
    target = max(near, key=lambda pair: pair[0], default=None)
    if target and turn_id in target[1].sources and not contradicted:
        return experience, None
    before = tuple(lesson for lesson, _, _ in contradicted)
    reasons = [f"contradicts lesson {lesson.id} ({why}; similarity {s:.2f} >= {policy.topic_similarity})"
               for lesson, s, why in contradicted]
    if target:
        similarity, old = target
        after = _merged(old, turn_id, now, policy.max_sources)
        reasons.append(f"same as lesson {old.id} ({agreement(old.text, candidate)}; similarity {similarity:.2f} "
                       f">= {policy.merge_similarity})")
        kind = "replaced" if contradicted else "merged"
        return step(experience, kind, (*before, old), (after,), turn_id, "; ".join(reasons))
    new = Lesson(experience.version + 1, experience.owner, candidate, 1, (turn_id,), now, now)
    if contradicted:
        return step(experience, "replaced", before, (new,), turn_id, "; ".join(reasons))
    closest = (f"no lesson both close (>= {policy.merge_similarity}) and agreeing; closest similarity "
               f"{float(sims.max()):.2f}") if len(sims) else "the first lesson"
    return step(experience, "added", (), (new,), turn_id, closest)


def _merged(old: Lesson, turn_id: str, now: float, max_sources: int) -> Lesson:
    sources = old.sources if turn_id in old.sources else (*old.sources, turn_id)
    support = old.support if turn_id in old.sources else old.support + 1
    return replace(old, support=support, sources=sources[-max_sources:], updated_at=now)


def retention(lesson: Lesson, now: float, half_life_s: float) -> float:
    """Support, halved for every `half_life_s` since a turn last backed the lesson."""
    return lesson.support * 0.5 ** (max(0.0, now - lesson.updated_at) / half_life_s)


def enforce_cap(experience: Experience, now: float, count_tokens: CountTokens,
                policy: ConsolidationPolicy = ConsolidationPolicy(),
                protect: int | None = None) -> tuple[Experience, list[Change]]:
    """Evict lessons, lowest retention first, until the cap holds; one `dropped` change each.

    `protect` (a lesson id, usually the one just written) is evicted only if it alone
    breaks the cap.
    """
    changes: list[Change] = []
    while True:
        lessons = experience.lessons
        tokens = sum(count_tokens(lesson.text) for lesson in lessons)
        if len(lessons) <= policy.max_lessons and tokens <= policy.max_tokens:
            return experience, changes
        over = (f"{len(lessons)} lessons > {policy.max_lessons}" if len(lessons) > policy.max_lessons
                else f"{tokens} tokens > {policy.max_tokens}")
        pool = [lesson for lesson in lessons if lesson.id != protect] or list(lessons)
        victim = min(pool, key=lambda x: (retention(x, now, policy.half_life_s), x.updated_at, x.id))
        score = retention(victim, now, policy.half_life_s)
        experience, change = step(experience, "dropped", (victim,), (),
                                  reason=f"cap: {over}; lowest retention {score:.2f}")
        changes.append(change)


def learn(experience: Experience, candidate_text: str, turn_id: str, now: float, embed: Embed,
          count_tokens: CountTokens, policy: ConsolidationPolicy = ConsolidationPolicy()
          ) -> tuple[Experience, list[Change]]:
    """Consolidate one candidate lesson and hold the cap: every change made, in order."""
    experience, change = consolidate(experience, candidate_text, turn_id, now, embed, policy)
    if change is None:
        return experience, []
    written = change.after[0].id if change.after else None
    experience, dropped = enforce_cap(experience, now, count_tokens, policy, protect=written)
    return experience, [change, *dropped]
