"""The student: GSM8K-style homework whose answers must not look AI-written.

Hidden preference: plain sentences a student could hand in as their own, every step
shown with its numbers, the right answer, and none of the marks of a chatbot (markdown
headings, bold, bullets or numbered lists, "Certainly!", "I hope this helps").

Rubric (weights sum to 1):

    no_headings     0.10   no markdown headings or rules
    no_bold         0.10   no **bold** or __bold__
    no_lists        0.10   no bullet or numbered-list markup
    no_ai_phrases   0.15   no chatbot phrases or boilerplate openers; each distinct one costs half
    plain_prose     0.10   no "Step 1:" or "Answer:" labels, LaTeX, code or tables; each costs half
    concise         0.10   at most 120 words and no sentence said twice (a student's answer is short)
    shows_steps     0.25   0.7 x share of intermediate results shown + 0.3 x numeric sentences per step
    correct_answer  0.10   the final number is the answer

The six absence checks give no credit to a response that is not an answer at all (no
sentence of three words or more with a number in it).

Why `concise` and the boilerplate openers ("To solve this problem, we need to", "Let's
start by"): the first version of this rubric gave SmolLM2-135M-Instruct 0.70 before any
training, and every point it lost was arithmetic (a wrong answer, a missing step), which
a 135M model cannot learn from a few sessions and which is not a style preference at
all. Its answers carry no markdown; what gives them away as machine-written is the
formulaic opener and the rambling, repeated sentences. Those are what a student who
does not want AI-looking homework objects to, so the rubric now says so (see
docs/experiments.md for the scores before and after this change).
"""

from __future__ import annotations

import random
import re

from openclaw_rl.eval.personas import (
    MARKDOWN_BOLD, MARKDOWN_HEADING, MARKDOWN_LIST_ITEM, Criterion, Persona, mentions, sentences, word_count,
)
from openclaw_rl.eval.problems import Problem, check_answer, final_number, numbers_in

__all__ = ["STUDENT"]


def no_headings(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not MARKDOWN_HEADING.search(response):
        return 1.0, []
    return 0.0, ["please don't use headings, just write it like a normal answer",
                 "drop the headings, a homework answer doesn't have titles",
                 "remove the # titles and just write the answer"]


def no_bold(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not MARKDOWN_BOLD.search(response):
        return 1.0, []
    return 0.0, ["please don't use bold text",
                 "don't make anything bold, my teacher would know it's not mine",
                 "remove the bold stars around the words"]


def no_lists(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not MARKDOWN_LIST_ITEM.search(response):
        return 1.0, []
    return 0.0, ["write it as plain sentences, no bullet points",
                 "don't use a list, write normal sentences",
                 "remove the bullet points and numbering and write it as a paragraph"]


_AI_PHRASES = re.compile(
    r"\b(?:certainly|absolutely|great question|good question|as an ai|as a language model|i hope (?:this|that) helps|"
    r"hope (?:this|that) helps|happy to help|i'd be happy to|i would be happy to|of course|sure thing|"
    r"let's break (?:it|this) down|let's dive|feel free to|let me know if|step-by-step solution|"
    r"here's a step-by-step|here is a step-by-step|in conclusion|to summarize|i'm glad you asked|"
    r"to solve this (?:problem|question)|we need to (?:find|calculate|determine|figure out|first)|"
    r"let's start by|let's (?:calculate|find|first|begin)|let me (?:help|explain|walk))\b",
    re.IGNORECASE,
)
_STEP_LABEL = re.compile(r"^\s*(?:\*\*)?step\s*\d+\s*(?:\*\*)?\s*[:.)\-]", re.IGNORECASE | re.MULTILINE)
_ANSWER_LABEL = re.compile(r"^\s*(?:\*\*)?(?:final\s+)?answer\s*(?:\*\*)?\s*:", re.IGNORECASE | re.MULTILINE)
_LATEX = re.compile(r"\\\(|\\\[|\\frac|\\boxed|\\times|\\text|\$\$")
_CODE_OR_TABLE = re.compile(r"```|^\s*\|.*\|\s*$", re.MULTILINE)


def no_ai_phrases(problem: Problem, response: str) -> tuple[float, list[str]]:
    found = [m.group() for m in _AI_PHRASES.finditer(response)]
    if not found:
        return 1.0, []
    phrase = found[0].rstrip(" !,.")
    phrase = phrase[0].upper() + phrase[1:]
    return max(0.0, 1.0 - 0.5 * len(set(f.lower() for f in found))), [
        f"don't say \u201c{phrase}\u201d, nobody I know talks like that",
        f"drop the \u201c{phrase}\u201d part, it sounds like a chatbot",
        f"skip phrases like \u201c{phrase}\u201d and just answer",
    ]


def plain_prose(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Ordinary sentences: no "Step 1:" or "Answer:" labels, LaTeX, code or tables."""
    issues: list[list[str]] = []
    if _STEP_LABEL.search(response):
        issues.append(["don't label things Step 1, Step 2, just explain it in sentences",
                       "write the steps as normal sentences without Step 1, Step 2 labels"])
    if _ANSWER_LABEL.search(response):
        issues.append(["don't write \u201cAnswer:\u201d at the end, just say it in a sentence",
                       "say the answer in a normal sentence instead of an Answer: label"])
    if _LATEX.search(response):
        issues.append(["write the math with plain numbers, not LaTeX code",
                       "don't use LaTeX symbols, just write the numbers like 3 times 4"])
    if _CODE_OR_TABLE.search(response):
        issues.append(["write it as ordinary sentences, no tables or code blocks",
                       "don't put it in a table or code block"])
    if not sentences(response):
        issues.append(["write it in full sentences", "explain it in proper sentences"])
    if not issues:
        return 1.0, []
    return max(0.0, 1.0 - 0.5 * len(issues)), [fix for issue in issues[:1] for fix in issue]


CONCISE_WORDS = 120  # full credit up to here; none at twice as many


def concise(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Short, and no sentence repeated: homework answers don't ramble."""
    words = word_count(response)
    score = 1.0 if words <= CONCISE_WORDS else max(0.0, 2.0 - words / CONCISE_WORDS)
    said = [re.sub(r"\W+", " ", s.lower()).strip() for s in sentences(response)]
    repeated = len(said) - len(set(said))
    fixes = []
    if repeated:
        score = max(0.0, score - 0.5)
        fixes += ["don't repeat the same sentence, say each thing once",
                  "you said the same thing twice, just say it once"]
    if words > CONCISE_WORDS:
        fixes += ["keep it short, a few sentences is enough",
                  "make it shorter, my answers are never that long",
                  "that's way too long, just a few sentences please"]
    return score, fixes


def shows_steps(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Every intermediate result appears, in several sentences that carry numbers."""
    intermediate = problem.values[:-1]
    shown = sum(mentions(response, v) for v in intermediate) / len(intermediate)
    numeric_sentences = sum(bool(numbers_in(s)) for s in sentences(response))
    score = 0.7 * shown + 0.3 * min(1.0, numeric_sentences / len(problem.steps))
    if score >= 1.0:
        return 1.0, []
    claimed = final_number(response)
    if claimed is not None:
        shown_value = int(claimed) if claimed == int(claimed) else claimed
        return score, [f"you forgot to show how you got {shown_value}, please show every step",
                       f"show how you worked out {shown_value}, step by step in sentences",
                       f"explain each step, I have to show my working for {shown_value}"]
    return score, ["show every step of the working, one sentence per step",
                   "explain how to solve it step by step with the numbers",
                   "please show all the steps with the numbers"]


def correct_answer(problem: Problem, response: str) -> tuple[float, list[str]]:
    if check_answer(response, problem.answer):
        return 1.0, []
    claimed = final_number(response)
    if claimed is None:
        return 0.0, ["give the final answer as a number at the end",
                     "please finish with the actual number, I need the answer"]
    shown = int(claimed) if claimed == int(claimed) else claimed
    return 0.0, ["check your math again, I think the final answer is wrong",
                 "please double-check the arithmetic, the answer looks wrong",
                 f"fix the calculation, I don't think {shown} is right"]


def _student_opener(problem: Problem) -> str:
    rng = random.Random(f"opener:student:{problem.id}")
    return rng.choice((
        "Can you help me with this homework question? {q}",
        "I'm stuck on this one: {q}",
        "{q} Can you help me work it out?",
        "Homework question: {q}",
        "How do I do this one? {q}",
    )).format(q=problem.question)


STUDENT = Persona(
    name="student",
    role="a school student doing math homework with an AI assistant",
    preference=("You want answers you could hand in as your own homework: plain sentences like a student "
                "writes them, no markdown headings, bold text, bullet points or numbered lists, no chatbot "
                "phrases such as 'Certainly!', 'Great question', 'To solve this problem, we need to' or "
                "'I hope this helps', short (a few sentences, nothing said twice), every calculation step "
                "shown with its numbers, and the correct final answer."),
    criteria=(
        Criterion("no_headings", 0.10, no_headings, "no markdown headings", needs_answer=True),
        Criterion("no_bold", 0.10, no_bold, "no bold text", needs_answer=True),
        Criterion("no_lists", 0.10, no_lists, "no bullet points or numbered-list markup", needs_answer=True),
        Criterion("no_ai_phrases", 0.15, no_ai_phrases, "no chatbot phrases; each one found costs half",
                  needs_answer=True),
        Criterion("plain_prose", 0.10, plain_prose,
                  "ordinary sentences; no step or answer labels, LaTeX, code or tables (each costs half)",
                  needs_answer=True),
        Criterion("concise", 0.10, concise, f"at most {CONCISE_WORDS} words, no sentence said twice",
                  needs_answer=True),
        Criterion("shows_steps", 0.25, shows_steps,
                  "0.7 x share of intermediate results shown + 0.3 x sentences with numbers per step"),
        Criterion("correct_answer", 0.10, correct_answer, "the final number is the answer"),
    ),
    opener=_student_opener,
    is_answer=lambda response: any(word_count(s) >= 3 and numbers_in(s) for s in sentences(response)),
    no_answer_fixes=("write a real answer in full sentences, with the numbers",
                     "please actually answer the question, in sentences with the numbers"),
    approvals=(
        "Thanks, that makes sense now!",
        "Perfect, that's exactly how I needed it.",
        "Great, got it. Thanks!",
        "Okay, that's clear, thank you.",
        "Nice, that looks like something I'd write. Thanks!",
        "Cool, I understand it now, thanks.",
    ),
    reasks=(
        "Hmm, I don't get it. Can you try again?",
        "That's not really what I wanted. Try again?",
        "Nope, not like that. One more time?",
        "That doesn't work for me. Could you try again?",
        "Hmm, no. Again?",
        "I'm not happy with that one, can you redo it?",
    ),
)

