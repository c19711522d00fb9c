"""Simulated users with a hidden preference: the student and the teacher of SPEC section 5.

A persona opens a session about one problem, scores every response with its rubric (a
pure function, 0 to 1) and replies the way a person would: it approves and moves on when
the response meets its preference (evaluative), says what to change when it does not
(directive), and now and then just asks again without saying why.

Decisions and why:

- The rubric is a weighted mean of small named checks. Each check returns its score and
  the corrections a person would say when it fails ("please don't use bold text"), so
  a reply names the concrete problem the rubric found, and the oracle judge turns the
  same failures into hints. One source of truth for "what this user wants".
- The checks are deliberately surface-level (markup, phrases, which numbers appear):
  they must be cheap, deterministic and explainable, and the preference they encode is
  about style, which is what personalization means here. Correctness is one check
  among several, as it is for a real student who wants the homework to look like theirs.
- The absence checks ("no bold", "no chatbot phrases") give credit only to a response
  that is an answer at all (for the student, a sentence with a number in it): otherwise
  an empty or garbled reply would earn half the rubric for what it leaves out.
- Corrections are written as imperatives, prohibitions or "please ..." so that the
  rule-based hint extractor of the judge (`judge/rules.py`) can read them; re-asks and
  approvals contain no instruction at all, so they carry no directive signal.
- Replies come from template banks and a seeded `random.Random` (no LLM), so a whole
  experiment runs on a CPU and is reproducible.
- The first message of a problem is a pure function of the problem (its phrasing is
  drawn from an RNG seeded with the problem id): the oracle judge finds the problem of a
  turn by that message, and evaluation asks the same question every time.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Literal

from openclaw_rl.eval.problems import Problem, computed_values, final_number, numbers_in, render_steps, check_answer

__all__ = [
    "PERSONAS",
    "STUDENT",
    "TEACHER",
    "Check",
    "Criterion",
    "Persona",
    "Reply",
    "ReplyKind",
    "StudentAttempt",
    "get_persona",
    "student_attempt",
]

ReplyKind = Literal["approve", "correct", "reask"]
Measure = Callable[[Problem, str], tuple[float, list[str]]]  # -> (score in [0, 1], corrections when < 1)


@dataclass(frozen=True)
class Criterion:
    """One named part of a rubric: its weight and the function that measures it."""

    name: str
    weight: float
    measure: Measure
    description: str
    needs_answer: bool = False  # an absence check ("no bold"): no credit when there is no answer at all


@dataclass(frozen=True)
class Check:
    """A criterion measured on one response."""

    name: str
    weight: float
    score: float  # in [0, 1]; 1 means the preference is met
    fixes: tuple[str, ...]  # what the user would ask to change, in their words (empty when met)

    @property
    def passed(self) -> bool:
        return self.score >= 1.0 - 1e-9

    @property
    def lost(self) -> float:
        """How much of the rubric this check costs the response."""
        return self.weight * (1.0 - self.score)


@dataclass(frozen=True)
class Reply:
    text: str
    kind: ReplyKind
    satisfied: bool


@dataclass(frozen=True)
class Persona:
    """A simulated user: how it opens a session, what it wants, how it replies.

    `preference` is the hidden preference in words. It is never sent to the agent; an
    LLM that plays the user (`--user-model`) is prompted with it.
    """

    name: str
    role: str  # who the user is, for an LLM playing them
    preference: str
    criteria: tuple[Criterion, ...]
    opener: Callable[[Problem], str]
    is_answer: Callable[[str], bool]  # whether a response is an answer at all (gates the absence checks)
    no_answer_fixes: tuple[str, ...]
    approvals: tuple[str, ...]
    reasks: tuple[str, ...]
    approve_threshold: float = 0.8  # the rubric score at which the user is satisfied
    reask_rate: float = 0.2  # how often an unhappy user just asks again without saying why

    def __post_init__(self) -> None:
        total = sum(c.weight for c in self.criteria)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"persona {self.name}: criterion weights must sum to 1, got {total}")
        if not 0.0 <= self.reask_rate <= 1.0:
            raise ValueError(f"persona {self.name}: reask_rate must be in [0, 1], got {self.reask_rate}")

    def first_message(self, problem: Problem) -> str:
        return self.opener(problem)

    def checks(self, problem: Problem, response: str) -> list[Check]:
        found = []
        answered = self.is_answer(response)
        for c in self.criteria:
            score, fixes = c.measure(problem, response)
            if c.needs_answer and not answered:  # an empty reply has no bold text, and no merit either
                score, fixes = 0.0, list(self.no_answer_fixes)
            score = min(1.0, max(0.0, score))
            found.append(Check(c.name, c.weight, score, tuple(fixes) if score < 1.0 - 1e-9 else ()))
        return found

    def rubric(self, problem: Problem, response: str) -> float:
        """The personalization score of one response, in [0, 1]."""
        return sum(c.weight * c.score for c in self.checks(problem, response))

    def failed_checks(self, problem: Problem, response: str) -> list[Check]:
        """The checks that fall short, the costliest first."""
        return sorted((c for c in self.checks(problem, response) if not c.passed), key=lambda c: -c.lost)

    def reply(self, problem: Problem, response: str, turn_index: int, rng: random.Random) -> Reply:
        """What the user says next. `turn_index` is 0 for the reply to the first answer."""
        checks = self.checks(problem, response)
        if sum(c.weight * c.score for c in checks) >= self.approve_threshold:
            return Reply(rng.choice(self.approvals), "approve", satisfied=True)
        if rng.random() < self.reask_rate:
            return Reply(rng.choice(self.reasks), "reask", satisfied=False)
        distinct = {c.fixes: c for c in reversed(checks) if not c.passed and c.fixes}  # say one thing once
        named = _pick_by_cost(list(reversed(distinct.values())), 1 + (rng.random() < 0.5), rng)
        fixes = [rng.choice(c.fixes) for c in named]
        if not fixes:  # below threshold with nothing to name: only an evaluative signal remains
            return Reply(rng.choice(self.reasks), "reask", satisfied=False)
        frame = rng.choice(_CORRECTION_FRAMES + (_LATER_FRAMES if turn_index > 0 else ()))
        text = frame.format(fix=fixes[0], Fix=_capitalize(fixes[0]))
        if len(fixes) > 1:
            text += " " + rng.choice(_SECOND_FIX).format(fix=fixes[1], Fix=_capitalize(fixes[1]))
        return Reply(text, "correct", satisfied=False)

    def hints(self, problem: Problem, response: str, limit: int = 3) -> list[str]:
        """The failed checks as self-contained instructions (what the oracle judge hints)."""
        hints = (_capitalize(c.fixes[0]).rstrip(".") + "." for c in self.failed_checks(problem, response) if c.fixes)
        return list(dict.fromkeys(hints))[:limit]


def _pick_by_cost(failed: list[Check], count: int, rng: random.Random) -> list[Check]:
    """Up to `count` failed checks, drawn without replacement with odds by what each costs.

    A person mentions what bothers them most, but not always the same thing first: a
    markdown-heavy answer gets told about its bold text one time and its bullets the next.
    """
    pool, picked = list(failed), []
    while pool and len(picked) < count:
        total = sum(c.lost for c in pool)
        x, chosen = rng.random() * total, pool[-1]
        for c in pool:
            x -= c.lost
            if x < 0:
                chosen = c
                break
        picked.append(chosen)
        pool.remove(chosen)
    return picked


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


_CORRECTION_FRAMES = (
    "{Fix}.",
    "Hmm, not quite. {Fix}.",
    "One thing though. {Fix}.",
    "Almost there. {Fix}.",
    "That's close. {Fix}.",
    "Thanks, but {fix}.",
    "Not like that. {Fix}.",
)
_LATER_FRAMES = ("Still not right. {Fix}.", "Closer. {Fix}.")
_SECOND_FIX = ("Also, {fix}.", "And {fix}.", "{Fix} too.")


# -- shared surface checks --------------------------------------------------------------

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S|^\s*(?:=|-){3,}\s*$", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+?\*\*|__[^_\n]+?__")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,2}[.)])\s+\S", re.MULTILINE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z']+")


def _sentences(text: str) -> list[str]:
    """Pieces of text that end like a sentence and contain a word (linear time, no backtracking)."""
    pieces = (p.strip() for p in _SENTENCE_BREAK.split(text))
    return [p for p in pieces if p and p[-1] in ".!?" and re.search(r"[A-Za-z]", p)]


def _has_number(text: str, value: float) -> bool:
    return any(abs(n - value) < 1e-9 for n in numbers_in(text))


def no_headings(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not _HEADING.search(response):
        return 1.0, []
    return 0.0, ["please don't use headings, just write it like a normal answer",
                 "drop the headings, a homework answer doesn't have titles",
                 "remove the # titles and just write the answer"]


def no_bold(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not _BOLD.search(response):
        return 1.0, []
    return 0.0, ["please don't use bold text",
                 "don't make anything bold, my teacher would know it's not mine",
                 "remove the bold stars around the words"]


def no_lists(problem: Problem, response: str) -> tuple[float, list[str]]:
    if not _LIST_ITEM.search(response):
        return 1.0, []
    return 0.0, ["write it as plain sentences, no bullet points",
                 "don't use a list, write normal sentences",
                 "remove the bullet points and numbering and write it as a paragraph"]


# -- the student -------------------------------------------------------------------------

_AI_PHRASES = re.compile(
    r"\b(?:certainly|absolutely|great question|good question|as an ai|as a language model|i hope (?:this|that) helps|"
    r"hope (?:this|that) helps|happy to help|i'd be happy to|i would be happy to|of course|sure thing|"
    r"let's break (?:it|this) down|let's dive|feel free to|let me know if|step-by-step solution|"
    r"here's a step-by-step|here is a step-by-step|in conclusion|to summarize|i'm glad you asked)\b",
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
    if not _sentences(response):
        issues.append(["write it in full sentences", "explain it in proper sentences"])
    if not issues:
        return 1.0, []
    return max(0.0, 1.0 - 0.5 * len(issues)), [fix for issue in issues[:1] for fix in issue]


def shows_steps(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Every intermediate result appears, in several sentences that carry numbers."""
    intermediate = problem.values[:-1]
    shown = sum(_has_number(response, v) for v in intermediate) / len(intermediate)
    numeric_sentences = sum(bool(numbers_in(s)) for s in _sentences(response))
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
                "phrases such as 'Certainly!', 'Great question' or 'I hope this helps', every calculation "
                "step shown with its numbers, and the correct final answer."),
    criteria=(
        Criterion("no_headings", 0.10, no_headings, "no markdown headings", needs_answer=True),
        Criterion("no_bold", 0.10, no_bold, "no bold text", needs_answer=True),
        Criterion("no_lists", 0.10, no_lists, "no bullet points or numbered-list markup", needs_answer=True),
        Criterion("no_ai_phrases", 0.15, no_ai_phrases, "no chatbot phrases; each one found costs half",
                  needs_answer=True),
        Criterion("plain_prose", 0.15, plain_prose,
                  "ordinary sentences; no step or answer labels, LaTeX, code or tables (each costs half)",
                  needs_answer=True),
        Criterion("shows_steps", 0.25, shows_steps,
                  "0.7 x share of intermediate results shown + 0.3 x sentences with numbers per step"),
        Criterion("correct_answer", 0.15, correct_answer, "the final number is the answer"),
    ),
    opener=_student_opener,
    is_answer=lambda response: any(len(_WORD.findall(s)) >= 3 and numbers_in(s) for s in _sentences(response)),
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


# -- the teacher -------------------------------------------------------------------------


@dataclass(frozen=True)
class StudentAttempt:
    """A student's worked answer with one arithmetic slip that carries through."""

    sentences: tuple[str, ...]
    values: tuple[int, ...]  # what the student computed at each step
    slip_step: int
    right_value: int  # what the slipped step should have given

    @property
    def wrong_value(self) -> int:
        return self.values[self.slip_step]

    @property
    def final(self) -> int:
        return self.values[-1]


def student_attempt(problem: Problem) -> StudentAttempt:
    """The (deterministic) wrong answer the teacher's student handed in for `problem`."""
    rng = random.Random(f"attempt:{problem.id}")
    options = []
    for k in range(len(problem.steps)):
        for delta in (1, -1, 2, -2, 10, -10):
            values = computed_values(problem.steps, slip=(k, problem.values[k] + delta))
            if all(isinstance(v, int) and v > 0 for v in values) and values[-1] != problem.answer:
                options.append((k, values))
    k, values = rng.choice(options)  # the last step always admits a slip of +1
    sentences = render_steps(problem.steps, values) + [f"So the answer is {values[-1]}."]
    return StudentAttempt(tuple(sentences), tuple(int(v) for v in values), k, problem.values[k])


def _calc(problem: Problem, values: tuple[int, ...], k: int) -> str:
    """Step k's calculation as the student wrote it, e.g. "64 - 9 = 54"."""
    sentence = render_steps(problem.steps, values)[k]
    match = re.search(r"\d+ [+\-×÷] \d+ = \d+", sentence)
    return match.group() if match else str(values[k])


def _right_calc(problem: Problem, attempt: StudentAttempt) -> str:
    fixed = list(attempt.values)
    fixed[attempt.slip_step] = attempt.right_value
    return _calc(problem, tuple(fixed), attempt.slip_step)


def _correct_steps(attempt: StudentAttempt) -> list[int]:
    """Steps the student got right: those before the slip, else (slip first) those after it."""
    before = list(range(attempt.slip_step))
    return before or [k for k in range(len(attempt.values)) if k != attempt.slip_step
                      and attempt.values[k] != attempt.wrong_value]


_ERROR_WORDS = re.compile(r"\b(?:mistake|error|slip|wrong|incorrect|not quite|should be|should have been|"
                          r"instead of|double-check|check)\b", re.IGNORECASE)
_PRAISE_WORDS = re.compile(r"\b(?:correct|right|good|well done|nicely|great|nice|perfect)\b", re.IGNORECASE)
_FRIENDLY = re.compile(
    r"\b(?:good|great|nice|well done|good job|keep (?:it )?up|keep going|almost|so close|close|nearly|"
    r"don't worry|no worries|excellent|awesome|proud|effort|you've got this|nicely|lovely|thank you)\b",
    re.IGNORECASE,
)
_HARSH = re.compile(r"\b(?:careless|lazy|sloppy|stupid|terrible|awful|bad|obviously|silly|pathetic)\b",
                    re.IGNORECASE)


def names_error(problem: Problem, response: str) -> tuple[float, list[str]]:
    """1 when the comment gives the right value of the wrong step and says it is wrong."""
    attempt = student_attempt(problem)
    right = _has_number(response, attempt.right_value)
    wrong = _has_number(response, attempt.wrong_value)
    flagged = bool(_ERROR_WORDS.search(response))
    if right and (wrong or flagged):
        return 1.0, []
    score = 0.6 if right or (wrong and flagged) else 0.25 if flagged else 0.0
    wrong_calc, right_calc = _calc(problem, attempt.values, attempt.slip_step), _right_calc(problem, attempt)
    return score, [f"mention the actual mistake: the student wrote {wrong_calc} but it should be {right_calc}",
                   f"tell the student exactly which step is wrong: {wrong_calc} should be {right_calc}",
                   f"point out that {attempt.wrong_value} is wrong, it should be {attempt.right_value}, "
                   "please say that in the comment"]


def names_correct_step(problem: Problem, response: str) -> tuple[float, list[str]]:
    """1 when one sentence praises a step the student got right, by its number (and does
    not mention the wrong value, so "9 × 10 is 90, not 89" is no praise for the 9)."""
    attempt = student_attempt(problem)
    good = _correct_steps(attempt)
    good_values = [attempt.values[k] for k in good]
    for sentence in _SENTENCE_BREAK.split(response):
        if (_PRAISE_WORDS.search(sentence) and any(_has_number(sentence, v) for v in good_values)
                and not _has_number(sentence, attempt.wrong_value)):
            return 1.0, []
    named = any(_has_number(response, v) for v in good_values)
    praised = bool(_PRAISE_WORDS.search(response))
    good_calc = _calc(problem, attempt.values, good[0]) if good else "the method"
    return 0.5 if named or praised else 0.0, [
        f"mention what they did right too, like {good_calc}",
        f"say that the step {good_calc} is correct before getting to the mistake",
        f"start with something they got right, for example {good_calc}",
    ]


def friendly_tone(problem: Problem, response: str) -> tuple[float, list[str]]:
    harsh = _HARSH.search(response)
    if harsh:
        return 0.0, [f"don't call the work {harsh.group().lower()}, be encouraging",
                     f"please be kinder, never say {harsh.group().lower()} to a child"]
    kinds = {m.group().lower() for m in _FRIENDLY.finditer(response)}
    if len(kinds) >= 2:
        return 1.0, []
    return len(kinds) / 2, ["make it friendlier, start with something encouraging",
                            "be kinder, say something encouraging like nice work on the first part",
                            "keep it warm and encouraging, they are only ten"]


def specific(problem: Problem, response: str) -> tuple[float, list[str]]:
    """Numbers from the problem or the student's working appear in the comment."""
    attempt = student_attempt(problem)
    pool = set(problem.literals) | set(attempt.values) | {attempt.right_value}
    used = {n for n in numbers_in(response) if n in pool}
    if len(used) >= 3:
        return 1.0, []
    a, b = problem.literals[:2]
    return len(used) / 3, ["be specific and use the numbers from the problem",
                           f"mention the actual numbers, like {a} and {b}",
                           "use the numbers from the student's work so they know what you mean"]


def no_markdown(problem: Problem, response: str) -> tuple[float, list[str]]:
    kinds = [bool(p.search(response)) for p in (_HEADING, _BOLD, _LIST_ITEM)]
    if not any(kinds):
        return 1.0, []
    return 1.0 - sum(kinds) / 3, ["write it as a plain comment, no bold or bullet points",
                                  "don't use markdown, it's a note for a child, just plain sentences",
                                  "remove the formatting and write it as a short paragraph"]


MIN_COMMENT_WORDS, MAX_COMMENT_WORDS = 25, 120


def reasonable_length(problem: Problem, response: str) -> tuple[float, list[str]]:
    words = len(_WORD.findall(response))
    if MIN_COMMENT_WORDS <= words <= MAX_COMMENT_WORDS:
        return 1.0, []
    if words < MIN_COMMENT_WORDS:
        return words / MIN_COMMENT_WORDS, ["write a bit more, two or three sentences",
                                           "please say a little more than that"]
    return max(0.0, 1.0 - (words - MAX_COMMENT_WORDS) / MAX_COMMENT_WORDS), [
        "keep it shorter, three or four sentences is enough", "make it shorter, a child won't read all that"]


def _teacher_opener(problem: Problem) -> str:
    rng = random.Random(f"opener:teacher:{problem.id}")
    ask = rng.choice((
        "Can you help me grade this? Write a short comment I can give back to my student.",
        "I'm grading homework. Please write feedback for this student's answer.",
        "Here is a problem and my student's answer. Could you write a comment for the student?",
        "Please grade this answer and write a comment for the student.",
        "Help me write feedback for one of my students on this problem.",
    ))
    return f"{ask}\n\nProblem: {problem.question}\n\nStudent's answer: {' '.join(student_attempt(problem).sentences)}"


TEACHER = Persona(
    name="teacher",
    role="a primary-school teacher grading a student's homework with an AI assistant",
    preference=("You want grading comments you can hand to a child: specific and friendly. The comment names the "
                "step the student got wrong and what it should be, names a step they got right, uses the actual "
                "numbers, sounds warm and encouraging, uses no markdown (no headings, bold or bullets) and is "
                "a few sentences long."),
    criteria=(
        Criterion("names_error", 0.30, names_error,
                  "1 with the right value of the wrong step and the wrong value or an error word; 0.6 partly"),
        Criterion("names_correct_step", 0.20, names_correct_step,
                  "1 when a sentence praises a correct step by its number; 0.5 for either alone"),
        Criterion("friendly_tone", 0.20, friendly_tone, "two kinds of friendly words; 0 with any harsh word"),
        Criterion("specific", 0.10, specific, "three numbers from the problem or the working"),
        Criterion("no_markdown", 0.10, no_markdown, "no headings, bold or lists (a third each)",
                  needs_answer=True),
        Criterion("reasonable_length", 0.10, reasonable_length,
                  f"{MIN_COMMENT_WORDS} to {MAX_COMMENT_WORDS} words, linear outside"),
    ),
    opener=_teacher_opener,
    is_answer=lambda response: any(len(_WORD.findall(s)) >= 5 for s in _sentences(response)),
    no_answer_fixes=("please write an actual comment for the student, in full sentences",
                     "write a real comment of a few sentences for the student"),
    approvals=(
        "Thanks, that's a great comment, I'll use it.",
        "Perfect, that's exactly the kind of feedback I give.",
        "Good, that's specific and kind. Thanks!",
        "Nice, I'll pass that on to the student.",
        "That works, thank you.",
        "Lovely, that's just what I wanted.",
    ),
    reasks=(
        "Hmm, that's not what I had in mind. Can you try again?",
        "No, that's not it. One more try?",
        "Not quite what I need. Another go?",
        "I'm not happy with that comment. Try again?",
        "Hmm, no. One more time?",
        "That won't do. Could you try again?",
    ),
)

PERSONAS: dict[str, Persona] = {p.name: p for p in (STUDENT, TEACHER)}


def get_persona(name: str) -> Persona:
    if name not in PERSONAS:
        raise ValueError(f"unknown persona {name!r}; choose one of {', '.join(PERSONAS)}")
    return PERSONAS[name]
