"""The teacher: grading a student's worked answer, who wants specific, friendly comments.

The first message is a problem and a student's worked answer with one arithmetic slip
that carries through (`student_attempt`, deterministic per problem). Hidden preference:
a comment a teacher could hand to a child, naming the wrong step and its right value,
praising a step the student got right, using the actual numbers, warm, plain text and
a few sentences long.

Rubric (weights sum to 1):

    names_error          0.30   the slipped step's right value and the wrong value or an error word
                                (1); the right value alone, or the wrong one called wrong (0.6);
                                an error word only (0.25)
    names_correct_step   0.20   a sentence that praises a correct step by its number (1);
                                either the number or praise alone (0.5)
    friendly_tone        0.20   two kinds of friendly words (1), one (0.5); any harsh word gives 0
    specific             0.10   three numbers from the problem or the working; a third each
    no_markdown          0.10   no headings, bold or lists; a third each
    reasonable_length    0.10   25 to 120 words; linear outside

`no_markdown` gives no credit to a response that is not a comment at all (no sentence of
five words or more).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from openclaw_rl.eval.personas import (
    MARKDOWN_BOLD, MARKDOWN_HEADING, MARKDOWN_LIST_ITEM, SENTENCE_BREAK, Criterion, Persona, mentions, sentences,
    word_count,
)
from openclaw_rl.eval.problems import Problem, computed_values, numbers_in, render_steps

__all__ = ["TEACHER", "StudentAttempt", "student_attempt"]


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


@functools.lru_cache(maxsize=4096)  # every teacher check asks for it
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
    right = mentions(response, attempt.right_value)
    wrong = mentions(response, attempt.wrong_value)
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
    for sentence in SENTENCE_BREAK.split(response):
        if (_PRAISE_WORDS.search(sentence) and any(mentions(sentence, v) for v in good_values)
                and not mentions(sentence, attempt.wrong_value)):
            return 1.0, []
    named = any(mentions(response, v) for v in good_values)
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
    kinds = [bool(p.search(response)) for p in (MARKDOWN_HEADING, MARKDOWN_BOLD, MARKDOWN_LIST_ITEM)]
    if not any(kinds):
        return 1.0, []
    return 1.0 - sum(kinds) / 3, ["write it as a plain comment, no bold or bullet points",
                                  "don't use markdown, it's a note for a child, just plain sentences",
                                  "remove the formatting and write it as a short paragraph"]


MIN_COMMENT_WORDS, MAX_COMMENT_WORDS = 25, 120


def reasonable_length(problem: Problem, response: str) -> tuple[float, list[str]]:
    words = word_count(response)
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
    is_answer=lambda response: any(word_count(s) >= 5 for s in sentences(response)),
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

