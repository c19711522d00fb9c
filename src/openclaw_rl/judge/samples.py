"""A judged turn -> its one training sample, with every signal the judge found (pure).

The judge does not know which method will train: it writes what it has, once per turn,
and each trainer's method keeps the signals it reads when it claims the sample
(train/methods.py), or records why the turn gives it nothing.

| signal            | in the sample as                          | absent when                         |
|-------------------|-------------------------------------------|-------------------------------------|
| reward            | `reward`: the majority vote, 0 included   | no verdict (a judge failure)        |
| teacher log-probs | `teacher_logprobs`, `hint`                | no hint, or no teacher was scored   |
| teacher top-k     | `teacher_top_ids`, `teacher_top_logprobs` | as teacher log-probs                |
| experience        | `experience`: the prompt without the block, its log-probs and the served prompt's | no block served, or the judge scored no experience pass |

Only what no method can train on is rejected here: side turns, empty responses, and a
turn with no verdict (the judge failed, so no teacher was scored either). A
missing signal stays None, never a stand-in: no verdict is not reward 0, and no
teacher is not the behaviour policy.
"""

from __future__ import annotations

from openclaw_rl.judge.teacher import TeacherResult, logprob_temperature, logprob_top_p
from openclaw_rl.types import ExperienceTargets, Sample, Turn, Verdict


def turn_sample(turn: Turn, verdict: Verdict, teacher: TeacherResult | None,
                experience: ExperienceTargets | None = None) -> Sample | str:
    """The turn's sample with every signal it has, or the reason no method can learn from it."""
    if turn.kind != "main":
        return "side turns are never trained"
    if not turn.response_token_ids:
        return "empty response"
    if verdict.status != "ok" and teacher is None:
        return "no verdict"
    return Sample(
        turn_id=turn.id,
        session_id=turn.session_id,
        policy_version=turn.policy_version,
        prompt_token_ids=turn.prompt_token_ids,
        response_token_ids=turn.response_token_ids,
        behaviour_logprobs=turn.behaviour_logprobs,
        temperature=logprob_temperature(turn),
        top_p=logprob_top_p(turn),
        constraint=turn.sampling.get("constraint"),
        reward=float(verdict.reward) if verdict.status == "ok" and verdict.reward is not None else None,
        teacher_logprobs=teacher.logprobs if teacher else None,
        teacher_top_ids=teacher.top_ids if teacher else None,
        teacher_top_logprobs=teacher.top_logprobs if teacher else None,
        hint=teacher.hint if teacher else None,
        experience=experience,
    )
