"""What people write back, read by rules where a short reply says it plainly in any language.

Rules of the default judge for user and feedback next states (called from
`judge.evidence.rule_verdict` after the doubt, rating and machine rules, before the
classifier). The classifier reads replies through English-leaning cues and the nearest
tuning replies, so a plain reply in words it has not seen ("Dat klopt niet.", "meh.
boring", "worked like a charm") fell to its prior; these rules read the reply's intent
from multilingual lexicons (`judge.lexicons`):

- a rejection is -1: it says the answer is wrong ("No, sbagliato.", "lol not even
  close"), does not work ("this crashes on an empty list"), is not what was asked, is
  bad or dull ("meh. boring", "that's so generic it hurts"), is too much of something
  ("Too defensive."), leaves something out ("missing the date"), or praises it with irony
  ("wow, groundbreaking.");
- a "no" followed by a value or name the answer did not have states the right one
  ("no, it's 36"): -1, and `judge.rules` turns the rest into the hint;
- thinking aloud or stepping away ("let me think how to fit this in", "vou falar com a
  minha mulher") says nothing about the answer: 0;
- a follow-up question or a request to build on the answer ("roughly how many people
  live there", "show me an iterative version in go") is progression: +1, unless it asks
  for the answer differently (shorter, again, in another language) or doubts it;
- approval without thanks ("worked like a charm", "Solid explanation", "nailed it", 👍),
  and thanks in any of about fifty languages ("Köszönöm!", "ขอบคุณครับ"), are +1 when no
  negation, contrast ("I asked for ..."), question or request for change goes with it;
- a reply that says what the answer is and then what it wants instead ("To jest po
  włosku. Potrzebuję po hiszpańsku.") is -1, in any language (`THAT_IS`, `WANTS`);
- a new topic announced as one ("totally different topic, ...", "btw", "Otra pregunta:")
  is +1; a value of the answer asked back before thinking aloud ("36? hang on, let me
  check") does not stop the reply being read as thinking aloud (0).

Question marks of other scripts (Greek ";", Arabic "؟", full-width "？") are read as "?"
(`asked_plainly`), and scripts written without spaces (Thai, Japanese, Chinese) and Korean
are matched anywhere in a word.

Decisions and why: each rule reads only replies of at most `MAX_WORDS` words (a long
reply mixes intents; the classifier weighs them), and errs towards silence: a question
never counts as a rejection ("is that wrong?" asks), approval loses to any negation or
"but", and a follow-up loses to any doubt or request for change.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from openclaw_rl.judge.doubts import proposal
from openclaw_rl.judge.lexicons import (
    APPROVAL,
    BUT,
    CHANGE,
    DEFECT,
    DEFERRAL,
    DOUBT_VERBS,
    FOLLOW_UP_OPENERS,
    LEADING_NO,
    MISSING,
    NEGATION,
    NEGATIVE_EVALUATION,
    NOT_ASKED,
    SARCASM,
    THANKS,
    THAT_IS,
    TOO,
    TOPIC_CHANGE,
    WANTS,
    WRONG,
)

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material

__all__ = ["MAX_WORDS", "asked_plainly", "judges_only", "people_verdict", "sarcastic"]

MAX_WORDS = 25  # longer replies are left to the classifier
MAX_REJECTION_WORDS = 14
_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")  # no spaces
_QUESTION_MARKS = str.maketrans({"\u037e": "?", "\u061f": "?", "\uff1f": "?", "\uff01": "!", "\u2019": "'"})


def _lexicon(alternation: str) -> re.Pattern[str]:
    """Whole-word matching for alphabetic phrases; CJK phrases match anywhere (no spaces between words)."""
    phrases = alternation.split("|")
    worded = "|".join(re.escape(p) for p in phrases if not _CJK.search(p))
    cjk = "|".join(re.escape(p) for p in phrases if _CJK.search(p))
    return re.compile(rf"(?<![^\W_])(?:{worded})(?![^\W_])" + (f"|{cjk}" if cjk else ""), re.IGNORECASE)


_WRONG, _DEFECT, _NOT_ASKED = _lexicon(WRONG), _lexicon(DEFECT), _lexicon(NOT_ASKED)
_NEGATIVE, _SARCASM, _APPROVAL = _lexicon(NEGATIVE_EVALUATION), _lexicon(SARCASM), _lexicon(APPROVAL)
_THANKS, _NEGATION, _BUT, _CHANGE = _lexicon(THANKS), _lexicon(NEGATION), _lexicon(BUT), _lexicon(CHANGE)
_DEFERRAL, _DOUBT, _MISSING = _lexicon(DEFERRAL), _lexicon(DOUBT_VERBS), _lexicon(MISSING)
_TOPIC_CHANGE, _WANTS = _lexicon(TOPIC_CHANGE), _lexicon(WANTS)
_THAT_IS = re.compile(rf"^(?:{THAT_IS})(?![^\W_])", re.IGNORECASE)
_NO_THANKS = re.compile(r"\bno,? thanks?\b|\bthanks?,? (?:anyway|for trying|but)\b|\bthanks? for nothing\b",
                        re.IGNORECASE)
_ASKED_OTHERWISE = re.compile(r"(?<!what )(?<!how )\bi (?:asked|said|wanted|meant|needed|told you)\b", re.IGNORECASE)
_CORRECT_IT = re.compile(r"\bcorrect (?:the|it|this|that|my|your|these|those|all)\b", re.IGNORECASE)
_TOO = re.compile(rf"(?:{TOO})(?<!too bad)", re.IGNORECASE | re.MULTILINE)
_NEGATORS = re.compile(r"(?:\b(?:(?:not|nothing|never|hardly|isn't|wasn't|if|nicht|nichts|pas|rien|niet|niets|inte"
                       r"|nada|nulla)\W+|(?:no|non|nie)\s+)(?:\w+\W+)?)$"  # "No, wrong." is no negator
                       r"|\b(?:i was|i'm|i am|we were|i feel|my)\s+(?:\w+\s+)?$", re.IGNORECASE)  # "I was wrong"
_FILLERS = r"(?:ok(?:ay)?|cool|nice|great|thanks|thx|got it|i see|right|lovely|sure|alright|perfect|interesting|hm+" \
           r"|oh|ah|so|and|added to my list|noted)"
_OPENER = re.compile(rf"^\W*(?:{_FILLERS}\W+)*(?:{FOLLOW_UP_OPENERS})(?![^\W_])\W*\w+\W+\w+", re.IGNORECASE)
_FILLER_LEAD = re.compile(rf"^\W*(?:{_FILLERS}\W+)*", re.IGNORECASE)
_AUXILIARY = re.compile(r"^\W*(?:can|could|would|will|do|does|did|should|is|are|was|were|shall|may|might|must)\b",
                        re.IGNORECASE)  # opens a question only with its question mark ("will review tomorrow")
_IDENTITY_DOUBT = re.compile(r"\b(?:is|was|are|were)n'?t (?:it|that|this|those|these)\b|\bshould be\b"
                             r"|\bactually\b|\bwould be\b", re.IGNORECASE)
_NEAR_MISS = re.compile(r"\b(?:almost|nearly|close|not quite|worked out)\b", re.IGNORECASE)
_ORDERS = re.compile(r"(?:^|[.!?;]\s+)(?:please\s+)?(?:show|explain|write|give|make|add|remove|use|keep|try|redo"
                     r"|rewrite|tell|list|put|change|fix|include|say|answer|do|check|could you|can you)\b",
                     re.IGNORECASE)
_QUOTE = re.compile(r"(?<!\w)'[^']*'(?!\w)|\"[^\"]*\"|\u201c[^\u201d]*\u201d|\u00ab[^\u00bb]*\u00bb")
_VERIFY = re.compile(r"\b(?:right|correct|true|sure|really|certain)\s*\?|^\W*why\b", re.IGNORECASE)
_LEADING_NO = re.compile(rf"^\W*(?:(?:hm+|uh+|um+|ah|oh|well|wait|ugh)\W+)?(?:no+|{LEADING_NO})(?![^\W_])[\s,.!:;\u2014\u060c\u3001\uff0c-]+"
                         r"(?P<rest>\S.*)$", re.IGNORECASE | re.DOTALL)
_COURTESY = re.compile(r"^(?:problem|worries|thanks?|thank you|need|rush|idea|clue|way|doubt|kidding|matter"
                       r"|pressure|hurry|biggie|that's all|that's it|all good)\b", re.IGNORECASE)
_COPULA_VALUE = re.compile(r"^(?:it's|it is|its|that's|that is|es|c'est|ist|è|é|is het|het is|det är|это|the answer is)"
                           r"\s+(?P<value>[^\s,.!?]+)", re.IGNORECASE)


def people_verdict(m: Material) -> tuple[int, str] | None:
    """The vote a short user or feedback reply gives on its face, with why, or None."""
    if m.machine:
        return None
    text = asked_plainly(m.next_state)
    if not text or len(text.split()) > MAX_WORDS:
        return None
    return rejection(text) or stated_correction(text, m.action) or redirection(text) \
        or deferral(text, m.action) or new_topic(text) or follow_up(text) or approval(text) or gratitude(text)


def asked_plainly(text: str) -> str:
    """The reply on one line, with the question marks of other scripts as "?" (Greek ";", Arabic "؟")."""
    text = " ".join(text.translate(_QUESTION_MARKS).split())
    if re.search(r"[\u0370-\u03ff]", text) and text.endswith(";"):
        text = text[:-1] + "?"  # Greek writes its question mark as a semicolon
    return text


def sarcastic(text: str) -> bool:
    """Whether `text` praises with irony ("wow, groundbreaking.", "thanks for nothing")."""
    return bool(_SARCASM.search(text.replace("\u2019", "'")))


def judges_only(sentence: str) -> bool:
    """Whether a sentence only judges the answer (bad, ironic, not what was asked), so states no fix."""
    sentence = sentence.replace("\u2019", "'")
    return any(p.search(sentence) for p in (_NEGATIVE, _SARCASM, _NOT_ASKED))


def _sentence_of(text: str, at: int) -> str:
    start = max(text.rfind(mark, 0, at) for mark in ".!?;\n") + 1
    ends = [i for i in (text.find(mark, at) for mark in ".!?;\n") if i >= 0]
    return text[start: min(ends) + 1 if ends else len(text)]


def rejection(text: str) -> tuple[int, str] | None:
    """-1 where a short reply says the answer is wrong, broken, not what was asked, bad or too much."""
    if len(text.split()) > MAX_REJECTION_WORDS:
        return None
    approves = _APPROVAL.search(text) or _THANKS.search(text)
    for name, pattern in (("irony", _SARCASM), ("not what was asked", _NOT_ASKED), ("does not work", _DEFECT),
                          ("wrong", _WRONG), ("incomplete", _MISSING), ("too much", _TOO), ("bad", _NEGATIVE)):
        for found in pattern.finditer(text):
            if _sentence_of(text, found.start()).rstrip().endswith("?") or _NEGATORS.search(text[:found.start()]):
                continue
            if pattern is _NEGATIVE and approves:
                continue
            return -1, f"a rejection ({name}): {found.group(0).strip()!r}"
    return None


def stated_correction(text: str, answer: str) -> tuple[int, str] | None:
    """-1 where a reply says no and then names a value or a name the answer did not have ("no, it's 36"),
    or says in three words or more what should be instead ("Não, a reunião é na segunda.")."""
    found = _LEADING_NO.match(text)
    if found is None:
        return None
    rest = found.group("rest")
    if _COURTESY.match(rest) or _APPROVAL.search(rest) or _THANKS.search(rest) or rest.rstrip().endswith("?"):
        return None
    answered_numbers = set(re.findall(r"\d+(?:[.,]\d+)?", answer))
    answered = set(re.findall(r"[^\W_]+", answer.lower()))
    new_numbers = [n for n in re.findall(r"\d+(?:[.,]\d+)?", rest) if n not in answered_numbers]
    names = [w for w in re.findall(r"(?<=\s)[A-Z][^\W\d_]+", " " + rest[1:]) if w.lower() not in answered]
    copula = _COPULA_VALUE.match(rest)
    named = copula.group("value") if copula and copula.group("value").lower() not in answered else None
    new = new_numbers + names + ([named] if named else [])
    if new:
        return -1, f"a no that states {new[0]!r}, which the answer did not have"
    if len(rest.split()) >= 3 and not _DEFERRAL.search(rest):  # "Não, a reunião é na segunda."
        return -1, "a no followed by what should be"
    return None


def redirection(text: str) -> tuple[int, str] | None:
    """-1 where a reply says what the answer is, then what it wants instead ("To jest po włosku. Potrzebuję ...")."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!。！,;，])\s*", text) if s.strip()]
    if len(sentences) < 2 or "?" in text or _APPROVAL.search(text) or _THANKS.search(text):
        return None
    says = any(_THAT_IS.match(s) for s in sentences[:-1])
    wants = next((w for s in sentences[1:] if (w := _WANTS.search(s))), None)
    return (-1, f"says what the answer is, then wants {wants.group(0)!r}") if says and wants else None


def deferral(text: str, answer: str = "") -> tuple[int, str] | None:
    """0 where a reply thinks aloud or steps away ("let me think", "one sec", "ich schau mal").

    A value of the answer asked back first ("36? hang on, let me check") is surprise, not a
    question, so it does not stop the reading.
    """
    text = _without_echoes(text, answer)
    found = _DEFERRAL.search(text)
    if found is None or "?" in text or _THANKS.search(text) or _APPROVAL.search(text):
        return None
    return 0, f"thinking aloud or stepping away: {found.group(0)!r}"


_ECHO = re.compile(r"^\W*(?P<echo>[^?!.]{1,24}?)\s*\?+!?\s*")


def _without_echoes(text: str, answer: str) -> str:
    """The reply without a leading question that only repeats words of the answer ("780 km?!")."""
    found = _ECHO.match(text)
    if not found or not answer:
        return text
    answered = set(re.findall(r"[^\W_]+", answer.lower()))
    echoed = re.findall(r"[^\W_]+", found.group("echo").lower())
    return text[found.end():] if echoed and set(echoed) <= answered else text


def new_topic(text: str) -> tuple[int, str] | None:
    """+1 where a reply announces another question or topic ("totally different topic, ...", "btw")."""
    found = _TOPIC_CHANGE.search(text)
    if found is None or _CHANGE.search(text) or _DOUBT.search(text):
        return None
    return 1, f"a new topic: {found.group(0)!r}"


def gratitude(text: str) -> tuple[int, str] | None:
    """+1 where a reply thanks, in any language, with no negation, contrast, question or change beside it."""
    found = _THANKS.search(text)
    if found is None or _NO_THANKS.search(text) or "?" in text or _NEGATION.search(text) or _BUT.search(text) \
            or _CHANGE.search(text) or _NEAR_MISS.search(text) or _ORDERS.search(text) or _ASKED_OTHERWISE.search(text):
        return None
    return 1, f"thanks: {found.group(0)!r}"


def follow_up(text: str) -> tuple[int, str] | None:
    """+1 where a reply asks a new question or asks to build on the answer, without doubting or redoing it."""
    text = _QUOTE.sub("''", text)  # a question mark inside a quotation asks nothing
    asks = "?" in text or (_OPENER.match(text) and not _AUXILIARY.match(_FILLER_LEAD.sub("", text)))
    if (len(text.split()) < 2 and not (_CJK.search(text) and len(text) >= 3)) or not asks:
        return None
    if _DOUBT.search(text) or _VERIFY.search(text) or _CHANGE.search(text) or _TOO.search(text) \
            or _IDENTITY_DOUBT.search(text) or _states_a_negation(text) or proposal(text) is not None:
        return None  # a reply that proposes another answer ("Sind es nicht neun?") is no follow-up
    return 1, "a follow-up question or request"


def _states_a_negation(text: str) -> bool:
    """A negation outside the reply's questions ("What? That's not Romeo and Juliet at all.")."""
    return any(_NEGATION.search(s) for s in re.split(r"(?<=[.!?])\s+", text) if not s.rstrip().endswith("?"))


def approval(text: str) -> tuple[int, str] | None:
    """+1 where a reply approves with no negation, contrast, question or request for change beside it."""
    found = _APPROVAL.search(text)
    if found is None or "?" in text or _NEGATION.search(text) or _BUT.search(text) or _CHANGE.search(text) \
            or _NEAR_MISS.search(text) or _ORDERS.search(text) or _CORRECT_IT.search(text) \
            or _ASKED_OTHERWISE.search(text):
        return None
    return 1, f"approval: {found.group(0)!r}"
