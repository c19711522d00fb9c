"""Verdicts and teacher targets -> training samples, per method (pure).

What each method needs (docs/method.md §3):

| method   | needs                                 | a turn without it is rejected because   |
|----------|---------------------------------------|-----------------------------------------|
| binary   | a verdict with reward +1 or -1        | r = 0 or no verdict carries no signal   |
| opd      | a selected hint (teacher log-probs)   | no hint, no directive signal            |
| combined | either of the two                     | neither signal                          |
| topk     | a selected hint (teacher top-K)       | no hint                                 |

A missing term stays None in the sample: the loss treats it as zero, never as the
behaviour policy.
"""

from __future__ import annotations

from openclaw_rl.judge.teacher import TeacherResult, logprob_temperature, logprob_top_p
from openclaw_rl.types import Sample, Turn, Verdict

METHODS = ("binary", "opd", "combined", "topk")
TEACHER_METHODS = ("opd", "combined", "topk")  # the methods that read teacher log-probs (scoring them costs prefills)


def build_sample(turn: Turn, verdict: Verdict, teacher: TeacherResult | None, method: str) -> Sample | str:
    """A ready sample, or the reason this turn gives the method nothing to learn."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if turn.kind != "main":
        return "side turns are never trained"
    if not turn.response_token_ids:
        return "empty response"
    reward = float(verdict.reward) if verdict.status == "ok" and verdict.reward else None
    has_teacher = teacher is not None
    if method == "binary" and reward is None:
        return "no verdict" if verdict.status != "ok" else "reward 0 carries no evaluative signal"
    if method in ("opd", "topk") and not has_teacher:
        return "no hint: no directive signal"
    if method == "combined" and reward is None and not has_teacher:
        return "neither a non-zero reward nor a hint"
    use_teacher = has_teacher and method != "binary"
    return Sample(
        turn_id=turn.id,
        session_id=turn.session_id,
        policy_version=turn.policy_version,
        prompt_token_ids=turn.prompt_token_ids,
        response_token_ids=turn.response_token_ids,
        behaviour_logprobs=turn.behaviour_logprobs,
        temperature=logprob_temperature(turn),
        top_p=logprob_top_p(turn),
        reward=reward if method in ("binary", "combined") else None,
        teacher_logprobs=teacher.logprobs if use_teacher else None,
        teacher_top_ids=teacher.top_ids if use_teacher and method == "topk" else None,
        teacher_top_logprobs=teacher.top_logprobs if use_teacher and method == "topk" else None,
        hint=teacher.hint if use_teacher else None,
    )
