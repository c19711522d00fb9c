"""A simulated user of your own: `openclaw-rl simulate --persona docs.examples.brief_persona:BRIEF`
(run from the repository root, or put the module anywhere on PYTHONPATH).

This user wants the answer in at most 40 words, with the final number in it.
"""

from openclaw_rl.eval.personas import Criterion, Persona
from openclaw_rl.eval.problems import Problem, check_answer


def brief(problem: Problem, response: str) -> tuple[float, list[str]]:
    """A measure: a score in [0, 1] and, below 1, what the user would ask to change, in their words."""
    words = len(response.split())
    if words <= 40:
        return 1.0, []
    return max(0.0, 1.0 - (words - 40) / 80), [f"that's {words} words, I need it in under 40"]


def has_answer(problem: Problem, response: str) -> tuple[float, list[str]]:
    return (1.0, []) if check_answer(response, problem.answer) else (0.0, ["what is the final answer? I don't see it"])


BRIEF = Persona(
    name="brief",
    role="a busy parent checking a child's math homework",
    preference="Short answers: at most 40 words, the final number stated plainly.",
    criteria=(
        Criterion("brief", 0.6, brief, "at most 40 words", needs_answer=True),
        Criterion("answer", 0.4, has_answer, "the final number is in the answer"),
    ),
    opener=lambda problem: f"Quick one: {problem.question}",
    is_answer=lambda response: any(ch.isdigit() for ch in response),
    no_answer_fixes=("just give me the answer, with the number",),
    approvals=("Thanks, that's all I needed.", "Perfect, short and clear."),
    reasks=("Hmm, no. Again?",),
    approve_threshold=0.9,
)
