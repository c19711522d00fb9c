"""A simulated user who wants to be talked to: `openclaw-rl demo --persona docs.examples.sam_persona:SAM`
(run from the repository root, or put the module anywhere on PYTHONPATH).

Sam is an adult relearning school math. Sam wants to be greeted by name, a short plain answer
with the number in it, and a question at the end to check it landed. The measures are written
here, apart from the server's lesson checks, the way anyone would write their own user.
"""

import re

from openclaw_rl.eval.personas import Criterion, Persona
from openclaw_rl.eval.problems import Problem, check_answer

_FIRST_SENTENCE = re.compile(r"^.*?(?:[.!?](?=\s)|\n|$)", re.DOTALL)


def greets_sam(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Sam's name in the opening sentence."""
    opening = _FIRST_SENTENCE.match(response.strip()).group()
    if re.search(r"\bsam\b", opening, re.IGNORECASE):
        return 1.0, []
    if re.search(r"\bsam\b", response, re.IGNORECASE):
        return 0.5, ["say my name at the start, like 'Hi Sam'"]
    return 0.0, ["start with 'Hi Sam', you always forget my name", "greet me first, I'm Sam",
                 "please start with 'Hi Sam'"]


def asks_back(problem: Problem, response: str) -> tuple[float, list[str]]:
    """The last thing said is a question to Sam, not his own question repeated back."""
    text = response.strip().rstrip(" )\"'")
    if not text.endswith("?"):
        return 0.0, ["end with a question so I can tell you if I got it",
                     "ask me a question at the end to check I understood",
                     "finish by asking me something"]
    asked = set(re.findall(r"\w+", problem.question.lower()))
    last = re.findall(r"\w+", re.split(r"(?<=[.!?])\s+", text)[-1].lower())
    if last and sum(w in asked for w in last) / len(last) >= 0.6:  # mostly the problem's own words
        return 0.0, ["don't just repeat my question, ask me something about the answer"]
    return 1.0, []


def short(problem: Problem, response: str) -> tuple[float, list[str]]:
    words = len(response.split())
    if words <= 80:
        return 1.0, []
    return max(0.0, 2.0 - words / 80), ["that's too long, keep it under 80 words", "shorter please, a few sentences"]


def plain(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not re.search(r"\*\*|^\s*#|^\s*(?:[-*\u2022]|\d+[.)])\s", response, re.MULTILINE):
        return 1.0, []
    return 0.0, ["no bullet points or bold, just talk to me normally"]


def right_number(problem: Problem, response: str) -> tuple[float, list[str]]:
    if check_answer(response, problem.answer):
        return 1.0, []
    return 0.0, ["I don't think that number is right", "what's the actual answer?"]


SAM = Persona(
    name="sam",
    role="an adult named Sam relearning school math with an AI tutor",
    preference=("Be greeted by name ('Hi Sam'), get a short answer in plain sentences (under 80 words, no "
                "lists or bold) with the right number, and be asked a question at the end to check "
                "understanding."),
    criteria=(
        Criterion("greets_sam", 0.25, greets_sam, "Sam's name in the opening sentence", needs_answer=True),
        Criterion("asks_back", 0.25, asks_back, "ends with a question to Sam", needs_answer=True),
        Criterion("short", 0.2, short, "at most 80 words", needs_answer=True),
        Criterion("plain", 0.1, plain, "no lists, headings or bold", needs_answer=True),
        Criterion("right_number", 0.2, right_number, "the final number is the answer"),
    ),
    opener=lambda problem: f"Hi, it's Sam. {problem.question}",
    is_answer=lambda response: any(ch.isdigit() for ch in response) and len(response.split()) >= 3,
    no_answer_fixes=("I need an actual answer with the number",),
    approvals=("Thanks, that makes sense!", "Great, got it.", "Perfect, thank you."),
    reasks=("Hmm, can you try that again?",),
    approve_threshold=0.75,  # form alone reaches 0.8; the base model meets it on no first answer (docs/experiments.md)
)
