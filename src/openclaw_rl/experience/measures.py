"""What a lesson check measures on an answer's text (experience/checks.py reads the lessons).

Counts (`words`, `sentences`, `count_steps`, `warmth`, `long_words`), whether a feature is
present (`PRESENT`: a list, Markdown, an emoji, a "Step N" label, a closing question, an
opening greeting, an apology, an example, a table, a code block) and where a wanted phrase stands
(`has_phrase`). Each is a pure function of the text, English where it reads words.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from openclaw_rl.experience.arithmetic import unnumbered, values

__all__ = ["PRESENT", "answer_first", "count_steps", "has_phrase", "long_words", "sentence_list", "sentences",
           "warmth", "words"]

_OPERATOR = re.compile(r"\d\s*(?:[-+*/\u00d7\u00f7x^]|\s-\s)\s*\(?\d|\d\s*=\s*\d|=\s*\$?\d")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
# words of praise and encouragement an answer can carry (English); a warmer answer has more kinds of them
_WARM_WORDS = re.compile(
    r"\b(?:great|good|nice|well done|excellent|awesome|wonderful|fantastic|brilliant|amazing|impressive|"
    r"proud|keep (?:it )?up|keep going|you can do it|good job|nice work|great job|love|glad|happy|thank(?:s| you)|"
    r"perfect|superb|terrific|lovely|congratulations|bravo|super)\b", re.IGNORECASE)
_LONG_WORD = 8  # letters: "calculation", "multiplication", "approximately"; not "answer", "number", "total"
_WORD = re.compile(r"[^\W\d_]+")

_QUESTION_AT_END = re.compile(r"\?[^\w?]*\Z")  # the last thing said is a question ("...?", "...? 😊", '..."?')
PRESENT: dict[str, Callable[[str], bool]] = {
    "list": re.compile(r"^\s*(?:[-*+\u2022]|\d{1,2}[.)])\s+\S", re.MULTILINE).search,
    "markdown": re.compile(r"\*\*[^*\n]+?\*\*|__[^_\n]+?__|^\s{0,3}#{1,6}\s+\S|`", re.MULTILINE).search,
    "emoji": re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF]").search,
    "label": re.compile(r"\bstep\s*\d+\s*[:.)-]", re.IGNORECASE).search,  # "Step 1:", "**Step 2.**"
    "question": lambda text: bool(_QUESTION_AT_END.search(text.strip())),  # ends with a question to the user
    "greeting": re.compile(r"\A\W*(?:hi|hello|hey|dear|greetings|howdy|good (?:morning|afternoon|evening))\b",
                           re.IGNORECASE).search,  # opens with a greeting
    "apology": re.compile(r"\b(?:sorry|apolog(?:y|ies|ise|ize|ised|ized|ising|izing))\b", re.IGNORECASE).search,
    "example": re.compile(r"\b(?:for (?:example|instance)|e\.g\.|(?:an|another|one|this|my|the) example|"
                          r"examples?:|imagine|suppose)", re.IGNORECASE).search,
    "table": lambda text: len(re.findall(r"^\s*\|.*\|\s*$", text, re.MULTILINE)) >= 2,  # a header and a row
    "code": re.compile(r"```|<code>").search,
}


def words(text: str) -> int:
    return len(text.split())


def sentence_list(text: str) -> list[str]:
    """The sentences of `text`, each line of a text laid out in lines read apart."""
    return [" ".join(p.split()) for line in text.strip().splitlines() for p in _SENTENCE_END.split(line) if p.strip()]


def sentences(text: str) -> int:
    """Sentences, and lines where an answer is laid out in lines (a list has as many)."""
    body = text.strip()
    if not body:
        return 0
    lines = [line for line in body.splitlines() if line.strip()]
    return max(len(_SENTENCE_END.split(" ".join(lines))), len(lines))


def count_steps(text: str) -> int:
    """Written-out steps: distinct lines or sentences that carry arithmetic (a line said again is
    not another step). A "Step N:" label or a list number is not working: the 135M model, told to
    show every step, writes outlines of "Step 1: Determine the total." with no number worked out,
    and counting their labels made checked sampling prefer them (docs/experience.md)."""
    return sum(bool(_OPERATOR.search(p)) for p in set(sentence_list(text)))


def warmth(text: str) -> int:
    """Kinds of praise and encouragement in the text ("great", "well done", "keep it up", ...)."""
    return len({m.group().lower() for m in _WARM_WORDS.finditer(text)})


def long_words(text: str) -> int:
    """Per mille of the text's words that have `_LONG_WORD` letters or more (the fewer, the plainer
    the wording: "work out" for "calculate", "about" for "approximately")."""
    found = _WORD.findall(text)
    return round(1000 * sum(len(w) >= _LONG_WORD for w in found) / len(found)) if found else 0


def has_phrase(text: str, phrase: str, at: str = "") -> bool:
    """Whether `text` says `phrase` (any case, spaces as they come): anywhere, or in its first
    sentence (`at` "start") or its last ("end")."""
    pattern = r"\s+".join(map(re.escape, phrase.lower().split()))
    if at:
        said = sentence_list(text)
        text = (said[0] if at == "start" else said[-1]) if said else ""
    return bool(re.search(pattern, text.lower()))


def answer_first(text: str, asked: frozenset[float] = frozenset()) -> bool | None:
    """Whether the answer states a result before its working: its first sentence carries a number
    that is not one of the request's (`asked`) and works nothing out (no "8 x 8 = 64"); None when
    the answer has no such number anywhere (no result to read)."""
    text = unnumbered(text)  # a list's "1. " states no result
    if not set(values(text)) - asked:
        return None
    said = sentence_list(text)
    first = said[0] if said else ""
    return bool(set(values(first)) - asked) and not _OPERATOR.search(first)
