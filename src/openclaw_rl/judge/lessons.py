"""The judge's side of experience: a judged turn's screened hints and corrections become lessons.

`LessonLearner.learn(turn, candidates)` runs each candidate through `lesson_from_hint`
(a standing rule, or nothing) and `learn` (merge, replace or add, then the cap), and
saves the owner's new experience with its changes (`Store.update_experience`: read,
change, save under a version check, again if another writer saved first).

Decisions and why:

- **What is a candidate**: every hint of the turn that passed the hint screen, and the
  explicit correction itself (a `feedback` next state, POST /v1/sessions/{id}/feedback),
  which passes the same screen first (judge/worker.py). A quarantined hint never becomes a
  lesson: a lesson reaches every later prompt of its user, so it must pass at least what a
  training signal passes. The hint check (does the teacher answer better with it?) is not
  asked: it judges one turn's answer, a lesson is a standing rule for later ones.
- **Whose**: the turn's owner (the key's user; the local admin on a keyless server). A
  lesson never crosses users: the store keys experience by owner, and `Experience`
  refuses a lesson of anyone else.
- **Idempotent**: a turn judged twice (a retry, or an admin released a quarantined hint)
  backs a lesson once (`consolidate`: a turn counts once per lesson).
- **Embedding**: the embedding judge's own encoder when the judge is the embedding judge,
  else one all-MiniLM-L6-v2 that the composition root loads at start (compose.lesson_learner;
  not on first use: a model loaded in the judge's worker thread can race another model's
  loading, which in transformers is not thread-safe, and a thread left loading outlives a
  stopped stack). Token counts (the cap) are the policy tokenizer's, as serving counts the
  block's budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from openclaw_rl.experience import Change, ConsolidationPolicy, CountTokens, Embed, Experience, learn, lesson_from_hint
from openclaw_rl.store import Store
from openclaw_rl.types import Turn
from openclaw_rl.users import LOCAL

__all__ = ["LessonLearner", "owner_of", "policy_token_counter"]

log = logging.getLogger(__name__)


def policy_token_counter(tokenizer: Any) -> CountTokens:
    """Tokens of a text under the policy's tokenizer, without special tokens (as in a prompt)."""
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


class LessonLearner:
    """Candidate lessons of a judged turn into its owner's experience, saved with their changes."""

    def __init__(self, store: Store, embed: Embed, count_tokens: CountTokens,
                 policy: ConsolidationPolicy = ConsolidationPolicy(), clock: Callable[[], float] = time.time):
        self.store, self.embed, self.count_tokens, self.policy, self.clock = store, embed, count_tokens, policy, clock

    def learn(self, turn: Turn, candidates: list[str]) -> list[Change]:
        """Every change the candidates made to the experience of `turn`'s owner (saved), in order."""
        if not self.rules(candidates):
            return []
        _, changes = self.store.update_experience(owner_of(turn), lambda e: self.propose(e, turn, candidates))
        self.logged(turn, changes)
        return changes

    @staticmethod
    def rules(candidates: list[str]) -> list[str]:
        """The standing rules among the candidates, each once, in order."""
        return list(dict.fromkeys(rule for text in candidates if (rule := lesson_from_hint(text))))

    def propose(self, experience: Experience, turn: Turn, candidates: list[str]) -> tuple[Experience, list[Change]]:
        """`experience` with the candidates' rules learned from `turn`, and the changes that made it (not saved)."""
        now, changes = self.clock(), []
        for rule in self.rules(candidates):
            experience, made = learn(experience, rule, str(turn.id), now, self.embed, self.count_tokens, self.policy)
            changes += made
        return experience, changes

    def logged(self, turn: Turn, changes: list[Change]) -> None:
        for change in changes:
            log.info("turn %d: lesson %s for %s (v%d): %s", turn.id, change.kind, change.owner, change.version,
                     self.store.as_logged("; ".join(change.after_text or change.before_text)))


def owner_of(turn: Turn) -> str:
    """Whose experience a turn's lessons go to: its owner (the local admin on a keyless server)."""
    return turn.owner or LOCAL.name
