"""A user's experience: the standing rules learned from their corrections, for their next prompt.

The agent should change from a user's first correction, not after many weight updates.
The default model follows a user's accumulated corrections when they are in its context
(issue 38: teacher persona 0.19 -> 0.40 from the corrections alone), so every screened
hint or correction becomes a candidate *lesson* of the user who gave it, is consolidated
into that user's small, capped set, and is rendered into the system message of their
next request; a training method later distils the block into the weights.

The parts, each a pure function of frozen records (no store, serving or training here;
those import this package):

- `lessons`: `Lesson`, `Experience` (one user's lessons and a version), `Change` (one
  recorded, undoable step, with `to_dict`/`from_dict` for the store), `undo` / `revert`,
  `apply` / `replay` (rebuild from the change log), and the user's own `edit_lesson` /
  `delete_lesson`.
- `extract`: `lesson_from_hint`, a hint or correction as one short imperative rule, or
  None for what is not a standing preference (facts about one answer).
- `polarity`: `contradiction`, the explicit rule for "the newer lesson takes the other
  side".
- `consolidate`: `learn` = `consolidate` (replace, merge or add) + `enforce_cap`.
- `render`: `render` (the block within a token budget, one paragraph), `fitting` (the lessons
  it holds), `block_of` (the block of given lessons) and `place` (into the client's messages,
  in front of the first user message or in the system message).
- `checks`: the lessons that can be read off an answer ("one sentence", "don't show the
  working", "no bullet points", "don't say “Absolutely”", "end with a question"), and how
  well each of several answers keeps them (serving's `--lesson-samples`); `measures`: what
  those checks read off an answer's text.
- `rewriting`: when a picked answer is worth rewriting to the lessons, the request that asks
  for it, and which rewrite to serve (`--lesson-rewrites`).
- `arithmetic`: the numbers a text carries and the equations it states ("8 × 8 = 54"), which
  hold: what a lesson asking for "the actual mistake" or "what they got right" checks against
  the user's own working.
- `gate`: the experience gate's rule (`gate_decision`: does a new version make the user's own
  approved answers less likely, or rejected ones more likely?) and `take_back`, the
  change that undoes a rejected version (the scoring is judge/experience_gate.py's).

The embedding function is a parameter (`embed(texts) -> (n, d)`), so this package imports
nothing from the judge: the stack builder passes the embedding judge's encoder
(`judge.backends.SentenceEncoder().encode`, all-MiniLM-L6-v2), tests pass a fake.
"""

from openclaw_rl.experience.consolidate import (
    ConsolidationPolicy,
    CountTokens,
    Embed,
    consolidate,
    enforce_cap,
    learn,
    retention,
    similarities,
)
from openclaw_rl.experience.extract import MAX_LESSON_CHARS, lesson_from_hint
from openclaw_rl.experience.gate import GatePolicy, gate_decision, shift_statistic, take_back, too_few_turns
from openclaw_rl.experience.lessons import (
    Change,
    ChangeKind,
    Experience,
    GateDecision,
    Lesson,
    apply,
    delete_lesson,
    edit_lesson,
    replay,
    revert,
    undo,
)
from openclaw_rl.experience.polarity import agreement, contradiction
from openclaw_rl.experience.render import (
    HEADER,
    PLACEMENTS,
    block_of,
    fitting,
    merge_system,
    ordered,
    place,
    prepend_first_user,
    render,
)

__all__ = [
    "HEADER", "MAX_LESSON_CHARS", "Change", "ChangeKind", "ConsolidationPolicy", "CountTokens", "Embed",
    "Experience", "GateDecision", "GatePolicy", "Lesson", "agreement", "apply", "consolidate", "contradiction", "delete_lesson", "edit_lesson",
    "block_of", "enforce_cap", "fitting", "gate_decision", "learn", "lesson_from_hint", "merge_system", "ordered",
    "place", "PLACEMENTS", "prepend_first_user", "render", "replay",
    "retention", "revert", "shift_statistic", "similarities", "take_back", "too_few_turns", "undo",
]
