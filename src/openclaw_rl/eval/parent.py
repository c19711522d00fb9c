"""The parent: checks a child's homework answer on the go and wants only the result, in one sentence.

The third persona, written for issue 38's study because it wants what the built-in two do
not, and the opposite of the student on one point: the student wants every step shown,
the parent wants no working at all. Two users with these preferences on one server pull
a shared model in opposite directions, which is what per-user experience must keep apart.

Hidden preference: one short plain sentence that gives the answer, with the right number
and its unit word from the question, nothing else: no working, no restated question, no
chatbot phrases, no markdown.

Rubric (weights sum to 1):

    one_sentence     0.30   one sentence (1), two (0.5), more (0)
    short            0.20   at most 25 words (1), none at 75 or more, linear between
    no_working       0.20   no arithmetic written out ("3 x 4 = 12"); each one costs a third
    correct_answer   0.20   the final number is the answer
    no_fluff         0.10   no chatbot phrases or markdown; each kind found costs half

The absence checks give no credit to a response that is not an answer at all (no
number in it): an empty reply is short, and worthless.

The base model (SmolLM2-135M-Instruct) writes a worked solution of several sentences to
every question, so its first answers score low here, and what would raise them is a
matter of form a small model can follow: say less.
"""

from __future__ import annotations

import random
import re

from openclaw_rl.eval.personas import (
    MARKDOWN_BOLD, MARKDOWN_HEADING, MARKDOWN_LIST_ITEM, Criterion, Persona, sentences, word_count,
)
from openclaw_rl.eval.problems import Problem, check_answer, final_number, numbers_in

__all__ = ["PARENT"]

SHORT_WORDS = 25
_WORKING = re.compile(r"\d\s*(?:[+*/\u00d7\u00f7x]|\s-\s)\s*\d[\d.,]*\s*=\s*\d")
_FLUFF = re.compile(
    r"\b(?:certainly|absolutely|great question|good question|i hope (?:this|that) helps|hope (?:this|that) helps|"
    r"happy to help|of course|sure thing|let's break|let's dive|feel free to|let me know if|in conclusion|"
    r"to summarize|to solve this|we need to|let's start|let's (?:calculate|find|first|begin)|step[- ]by[- ]step)\b",
    re.IGNORECASE)


def one_sentence(problem: Problem, response: str) -> tuple[float, list[str]]:
    count = max(1, len(sentences(response)), len([line for line in response.splitlines() if line.strip()]))
    if count == 1:
        return 1.0, []
    return (0.5 if count == 2 else 0.0), ["just give me the answer in one sentence",
                                          "one sentence is enough, I only need the result",
                                          "please answer in a single sentence"]


def short(problem: Problem, response: str) -> tuple[float, list[str]]:
    words = word_count(response)
    if words <= SHORT_WORDS:
        return 1.0, []
    return max(0.0, 1.0 - (words - SHORT_WORDS) / (2 * SHORT_WORDS)), [
        "keep it short, I'm reading this on my phone", "make it much shorter, a few words will do",
        "that's too long, keep it brief"]


def no_working(problem: Problem, response: str) -> tuple[float, list[str]]:
    found = len(_WORKING.findall(response))
    if not found:
        return 1.0, []
    return max(0.0, 1.0 - found / 3), ["don't show the working, I only need the result",
                                       "skip the calculations and just tell me the answer",
                                       "leave out the steps, just the final number"]


def correct_answer(problem: Problem, response: str) -> tuple[float, list[str]]:
    if check_answer(response, problem.answer):
        return 1.0, []
    if final_number(response) is None:
        return 0.0, ["tell me the actual number", "give me the final number, please"]
    return 0.0, ["that number doesn't look right to me", "I think the final number is wrong"]


def no_fluff(problem: Problem, response: str) -> tuple[float, list[str]]:
    kinds = [bool(_FLUFF.search(response)),
             bool(MARKDOWN_HEADING.search(response) or MARKDOWN_BOLD.search(response)
                  or MARKDOWN_LIST_ITEM.search(response))]
    if not any(kinds):
        return 1.0, []
    return max(0.0, 1.0 - 0.5 * sum(kinds)), ["no intro and no formatting, just the answer",
                                              "skip the chatty intro and just answer"]


def _parent_opener(problem: Problem) -> str:
    rng = random.Random(f"opener:parent:{problem.id}")
    return rng.choice((
        "Quick check of my kid's homework: {q}",
        "What's the answer to this one? {q}",
        "My son asked me this and I'm in a hurry: {q}",
        "{q} What's the answer?",
        "Checking homework: {q}",
    )).format(q=problem.question)


PARENT = Persona(
    name="parent",
    role="a busy parent checking a child's math homework on a phone",
    preference=("You only want the result: one short plain sentence with the right number, no working, no "
                "restating the question, no chatbot phrases such as 'To solve this' or 'I hope this helps', no "
                "markdown. Anything longer than a sentence annoys you."),
    criteria=(
        Criterion("one_sentence", 0.30, one_sentence, "one sentence (1), two (0.5), more (0)", needs_answer=True),
        Criterion("short", 0.20, short, f"at most {SHORT_WORDS} words; none at {3 * SHORT_WORDS}",
                  needs_answer=True),
        Criterion("no_working", 0.20, no_working, "no arithmetic written out; each one costs a third",
                  needs_answer=True),
        Criterion("correct_answer", 0.20, correct_answer, "the final number is the answer"),
        Criterion("no_fluff", 0.10, no_fluff, "no chatbot phrases, no markdown (each costs half)", needs_answer=True),
    ),
    opener=_parent_opener,
    is_answer=lambda response: bool(numbers_in(response)),
    no_answer_fixes=("I need the actual number", "please just tell me the number"),
    approvals=("Thanks!", "Perfect, thanks.", "Great, that's all I needed.", "Got it, thanks.", "Cheers."),
    reasks=("Hmm, that's not what I asked. Again?", "No. Try again?", "That's not helpful. One more time?",
            "I don't have time for that. Again?"),
)
