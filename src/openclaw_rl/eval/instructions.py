"""Instruction following as a retention probe: short requests, each with one instruction a program can check.

    instruction_items(n=24)           seeded (request, instruction, check) items, every kind in turn
    instruction_probe(tokenizer, n)   the RetentionProbe (what --gate-retention-instructions 24 sets)

A user who teaches the model one style ("answer in one sentence") must not cost it the
ability to follow the next instruction it is given. In the spirit of IFEval (Zhou et al.,
2023, verifiable instructions), each item is an everyday request with one instruction
whose keeping a few lines of code decide: the case of the letters, a word limit, a word
to start or end with, a keyword used twice, no commas, quotation marks around the answer,
a number of bullet points, a title in <<double angle brackets>>, JSON only, a P.S.

Decisions and why:

- Our own instructions and wording, 12 kinds, item i of kind i mod 12: each kind is asked
  as often as the others, and the request and the kind's parameter (the word, the limit)
  come from an RNG stream of the item's own ("instructions:i"), so a larger n keeps the
  smaller one's items.
- A check reads the answer as the user sees it: surrounding whitespace ignored, words are
  runs of letters, digits and apostrophes, and a word to end with may be followed by
  punctuation ("... indeed." ends with "indeed"). An empty answer keeps no instruction,
  not even "no commas". A title is any text in << >>, the instruction's example too: the
  format is what the kind checks (as IFEval's does).
- No instruction needs a long answer, so the gate's default 64 tokens suffice; a word
  limit above what 64 tokens hold is not asked.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openclaw_rl.chat import render_prompt
from openclaw_rl.eval.retention import RetentionProbe

__all__ = ["KINDS", "InstructionItem", "instruction_items", "instruction_probe", "words"]

REQUESTS = (
    "Describe the sea on a windy day.", "Tell me about the moon.", "Explain what a library is for.",
    "Write a short note to a friend about your weekend.", "Describe your favourite season.",
    "Give some advice to someone learning to cook.", "Explain why people keep pets.",
    "Describe a busy market in the morning.", "Tell me about travelling by train.",
    "Explain where rain comes from.", "Describe a walk in the forest.", "Explain why sleep matters.",
    "Tell me about the history of bicycles.", "Describe a quiet evening at home.",
    "Explain how to make a cup of tea.", "Give three reasons to learn a second language.",
)
_END_WORDS = ("indeed", "goodbye", "done", "always", "today")
_START_WORDS = ("Honestly", "Well", "Certainly", "Yes", "First")
_KEYWORDS = ("light", "water", "time", "home", "friend")
_WORD = re.compile(r"[A-Za-z0-9']+")
_BULLET = re.compile(r"^\s*[-*\u2022]\s+\S", re.MULTILINE)
_TITLE = re.compile(r"<<[^<>\n]+>>")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(frozen=True)
class InstructionItem:
    """One request with its instruction, and the check of an answer's text."""

    kind: str
    request: str
    instruction: str
    check: Callable[[str], bool]

    @property
    def prompt(self) -> str:
        return f"{self.request} {self.instruction}"


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def _lowercase(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return ("Write your whole answer in lowercase letters, with no capital letters at all.",
            lambda text: bool(words(text)) and not any(c.isupper() for c in text))


def _uppercase(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return ("Write your whole answer in capital letters.",
            lambda text: bool(words(text)) and not any(c.islower() for c in text))


def _no_commas(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return "Do not use any commas in your answer.", lambda text: bool(words(text)) and "," not in text


def _max_words(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    limit = rng.choice((15, 25, 35))
    return f"Answer in at most {limit} words.", lambda text: 1 <= len(words(text)) <= limit


def _end_word(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    word = rng.choice(_END_WORDS)
    return (f"End your answer with the word \"{word}\".",
            lambda text: bool(words(text)) and words(text)[-1].lower() == word)


def _start_word(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    word = rng.choice(_START_WORDS)
    return (f"Begin your answer with the word \"{word}\".",
            lambda text: bool(words(text)) and words(text)[0].lower() == word.lower())


def _keyword_twice(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    word = rng.choice(_KEYWORDS)
    return (f"Use the word \"{word}\" at least twice.",
            lambda text: sum(w.lower() == word for w in words(text)) >= 2)


def _quoted(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return ("Wrap your entire answer in double quotation marks.",
            lambda text: len(text.strip()) > 2 and text.strip()[0] == text.strip()[-1] == '"')


def _bullets(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    count = rng.choice((2, 3, 4))
    return (f"Answer with exactly {count} bullet points, each on its own line starting with \"- \".",
            lambda text: len(_BULLET.findall(text)) == count)


def _title(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return ("Give your answer a title wrapped in double angle brackets, such as <<A Day Out>>.",
            lambda text: _TITLE.search(text) is not None)


def _json_only(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return "Answer with valid JSON only, and nothing else.", _is_json


def _postscript(rng: random.Random) -> tuple[str, Callable[[str], bool]]:
    return ("At the end of your answer, add a postscript starting with \"P.S.\".",
            lambda text: re.search(r"(^|\n)\s*P\.S\.", text) is not None)


def _is_json(text: str) -> bool:
    body = text.strip()
    if fenced := _FENCE.match(body):
        body = fenced.group(1)
    try:
        json.loads(body)
    except ValueError:
        return False
    return bool(body)


KINDS: dict[str, Callable[[random.Random], tuple[str, Callable[[str], bool]]]] = {
    "lowercase": _lowercase, "uppercase": _uppercase, "no_commas": _no_commas, "max_words": _max_words,
    "end_word": _end_word, "start_word": _start_word, "keyword_twice": _keyword_twice, "quoted": _quoted,
    "bullets": _bullets, "title": _title, "json_only": _json_only, "postscript": _postscript,
}


def instruction_items(n: int = 24) -> list[InstructionItem]:
    """`n` items, every kind in turn; request and parameter from the item's own RNG stream."""
    if n < 1:
        raise ValueError(f"the instruction-following retention probe needs at least one item, got n={n}")
    names = list(KINDS)
    items = []
    for i in range(n):
        rng = random.Random(f"instructions:{i}")
        request = rng.choice(REQUESTS)
        instruction, check = KINDS[names[i % len(names)]](rng)
        items.append(InstructionItem(names[i % len(names)], request, instruction, check))
    return items


def instruction_probe(tokenizer: Any, n: int = 24) -> RetentionProbe:
    """The probe: each request with its instruction as a user's first message, the answer checked."""
    items = instruction_items(n)
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": item.prompt}], None, None) for item in items]
    return RetentionProbe("instructions", prompts, [item.check for item in items])
