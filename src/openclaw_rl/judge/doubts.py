"""Short doubts: a reply that proposes another value or name than the answer gave, in any language.

A doubt is a correction when it proposes an alternative to what the answer said:

- as the answer's identity ("wait, isn't it Canberra?", "thought it was 15?", "¿no era el
  Tajo?", "Sind es nicht neun?", "1912 no?"): any word of the proposal the answer did not
  have makes it a correction;
- as another question with a negated verb ("don't spiders have eight?"): only when it
  names a value of the kind the answer gave and differs from it, a number of the same
  kind (a year for a year, a count for a count) or a capitalised name. "wasn't she only
  about 20 when she wrote it?" asks about her age, which an answer giving a year did not
  state: a follow-up, not a correction.

A doubt that adds to the answer ("wasn't he also a journalist?") or approves it is no
correction. `doubt_fix` turns a doubt into the statement it suggests, the hint ("The
answer should be Canberra.", "Spiders have eight.").

Decisions and why: the identity forms are listed per language (`judge.lexicons`:
NEGATED_COPULA, DOUBT_VERBS, TAG_QUESTIONS) because word order differs (a tag after the
value in "1912 no?" and "Rabat değil mi?", a negated copula before it elsewhere); the
value is compared by words with the answer, never with the request, since a doubt names
what the user expected the answer to be.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from openclaw_rl.judge.lexicons import DOUBT_VERBS, NEGATED_COPULA, TAG_QUESTIONS

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material

__all__ = ["MAX_DOUBT_WORDS", "doubt_fix", "proposal", "short_doubt"]

MAX_DOUBT_WORDS = 14

_INTERJECTIONS = r"wait|hang on|hold on|hm+|uh+|um+|er+m?|oh|huh|but|so|really|sorry|euh|eh|äh|ähm|ehm|ah|ну|hein" \
                 r"|pues|bueno|tja|also|well|mmm+|えっと|嗯|음|อืม"
_LEAD = rf"^\W*(?:(?:{_INTERJECTIONS})\W+)*"
_NEG_AUX = r"(?:is|was|are|were|do|does|did|should|would|wo|ca|has|have)n'?t"
_SURE = r"(?:are )?(?:you )?sure|¿?seguro|¿?segura|sicher|t'es sûr|tu es sûr|vous êtes sûr|sûr|sicuro|sicura|certo" \
        r"|tem certeza|weet je het zeker|zeker|na pewno|pewien|pewna|säker|emin misin|emin|уверен|уверена|точно" \
        r"|確か|确定|真的吗|jsi si jistý|jisté|biztos|sigur|σίγουρα|chắc không|yakin|정말|확실해"
_DOUBT_OPENER = re.compile(_LEAD + rf"(?:(?:{_SURE})(?![^\W_])|{_NEG_AUX}\b|i (?:thought|was sure)\b)",
                           re.IGNORECASE)
_ADDS = re.compile(r"\b(?:also|too|as well|again|another)\b", re.IGNORECASE)
_APPROVES = re.compile(r"\b(?:thanks?|thx|ty|great|perfect|right|correct|exactly)\b(?!\s*\?)", re.IGNORECASE)
_FUNCTION_WORDS = frozenset(
    """a an the it its it's that that's this is was are were be been do does did don't doesn't didn't isn't wasn't
    aren't weren't shouldn't should wouldn't would you your sure not no i thought think was wait hang on hold hmm
    uh um oh so but really in of to for on at by with and or than then there they he she we me my more bigger
    smaller el la los las lo un una uno es era fue son eran que de del le les l' une ce c'est était pas n'est
    der die das den dem ein eine es ist war sind waren wäre wären nicht dass il i gli un' è non erano sono
    o os as um uma é foi não era eram het een de dat is was zijn waren niet czy to nie był była było są
    det är var inte att и а не это то что был была было разве""".split())
_IDENTITY = re.compile(
    rf"^\W*(?:(?:{_INTERJECTIONS}|ok(?:ay)?)\W+)*¿?\s*(?:"
    rf"{_NEG_AUX} (?:it|that|this|those|these|there)(?: be)?|(?:are )?(?:you )?sure (?:it's|it is|that's|that is) not"
    r"|(?:don't |do )?you mean|shouldn't (?:it|that) be"
    rf"|(?:{DOUBT_VERBS})(?:[\s,]+(?:that|que|dass|che|dat|że|att|что|it|het|es|c'|ce))?(?:\s*(?:it|that|they|he|she"
    r"|es|c'|het|det|to|это|era|fue|war|was|is|was|were|'s|are|fosse|foi|était|c'était|wären|waren|var|był|było))*"
    rf"|{NEGATED_COPULA})(?:\b|(?<=[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f]))[\s,:]*"
    r"(?P<value>(?:[^?!.？]|(?<=\d)\.(?=\d))+?)\s*(?:吗|か|ですか|เหรอ|ไหม|요)?"
    r"\s*[?？!.]*$", re.IGNORECASE)
_TAGGED = re.compile(rf"{_LEAD}(?P<value>[^?？\s]+(?:\s+[^?？\s]+){{0,3}}?)[\s,]+¿?(?:{TAG_QUESTIONS})\s*[?？]+$",
                     re.IGNORECASE)  # at most four words before the tag
_POSTFIX = re.compile(rf"{_LEAD}(?P<value>[^?？\s]{{1,20}}?)\s*(?:じゃないですか|じゃないの|じゃない|ではないですか"
                      r"|ではありませんか|じゃなかった|아니에요|아닌가요|아니었나요|아니야|아냐|不是吗|不是嗎)\s*[?？]+$",
                      re.IGNORECASE)  # the value first, then "isn't it", with no space in Japanese and Korean
_BARE = re.compile(rf"{_LEAD}(?P<value>\d[\d.,]*(?:\s*[^\W\d_]{{1,4}})?|[^\W\d_][\w'-]*(?:\s+[^\W\d_][\w'-]*){{0,2}})"
                   r"\s*[?？]+!?$", re.IGNORECASE)  # "wait, 212?", "Lyon?": a value asked back


_QUESTION_WORD = re.compile(r"(?:what|why|how|who|when|where|which|really|seriously|sure|and|so|ok(?:ay)?|yes|no"
                            r"|huh|sorry|pardon|wait|hm+|und|y|et|e|en|i|и|а|och|og|ve|és|και|also|then|in|for"
                            r"|with|at|on|from|to|or|again|more|another|anything|something|nothing|everything"
                            r"|this|that|it|one|all|none|both|here|there|now|later|today|tomorrow|yesterday|please"
                            r"|thanks|thank|hello|hi|hey|cool|nice|great|good|right|correct|true|false|done|ready"
                            r"|same|different|better|worse|next|else|first|last|oh|ah|eh)",
                            re.IGNORECASE)  # "Und Graz?": and what about Graz; "Again?" asks for it again


def proposal(text: str) -> str | None:
    """What a doubt proposes the answer should have been ("Canberra" of "isn't it Canberra?"), or None."""
    text = text.replace("\u2019", "'").strip()
    for pattern in (_IDENTITY, _TAGGED, _POSTFIX):
        found = pattern.match(text)
        if found and found.group("value").strip(" ,"):
            return found.group("value").strip(" ,")
    bare = _BARE.match(text)
    value = bare.group("value") if bare else ""
    if value and (value[0].isdigit() or all(w[0].isupper() for w in value.split())) \
            and not _QUESTION_WORD.fullmatch(value.split()[0]):
        return value  # a number, or a name in capitals ("New York?"), asked back
    return None


def _new_words(value: str, answer: str) -> list[str]:
    answered = set(re.findall(r"[^\W_]+", answer.lower()))
    return [w for w in re.findall(r"[^\W_][\w'-]*", value.lower()) if w not in _FUNCTION_WORDS and w not in answered]


def short_doubt(m: Material) -> str | None:
    """Why a short user reply doubts the answer by proposing something it did not have, or None."""
    text = m.next_state.replace("\u2019", "'").strip()
    if m.machine or len(text.split()) > MAX_DOUBT_WORDS or _ADDS.search(text) or _APPROVES.search(text):
        return None
    asks = text.endswith(("?", "？")) or re.search(rf"\b(?:{DOUBT_VERBS})\b", text, re.IGNORECASE)
    proposed = proposal(text)
    if proposed is not None and asks:
        new = _new_words(proposed, m.action)
        return f"a doubt proposing {new[0]!r}, which the answer did not have" if new else None
    if not asks or not _DOUBT_OPENER.match(text):
        return None
    rival = _rival_value(text, m.action)
    return f"a doubt naming {rival!r} where the answer had another" if rival else None


def _kind(number: float) -> str:
    return "year" if number.is_integer() and 1000 <= number <= 2100 else "amount"


_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def _numbers(text: str) -> set[float]:
    found = {float(n.replace(",", ".")) for n in re.findall(r"\d+(?:[.,]\d+)?", text)}
    return found | {float(_NUMBER_WORDS[w]) for w in re.findall(r"[a-z]+", text.lower()) if w in _NUMBER_WORDS}


def _rival_value(text: str, answer: str) -> str | None:
    """A number or name in `text` of a kind the answer gave, that differs from the answer's."""
    given = _numbers(answer)
    kinds = {_kind(n) for n in given}
    rivals = [n for n in _numbers(text) if n not in given and _kind(n) in kinds]
    if rivals:
        return f"{rivals[0]:g}"
    names = set(re.findall(r"(?<=\s)[A-Z][a-z]+", " " + answer[1:]))
    if names:
        stray = [w for w in re.findall(r"(?<=\s)[A-Z][a-z]+", text[1:]) if w not in names]
        return stray[0] if stray else None
    return None


# -- the statement a doubt suggests ------------------------------------------------------

_IT_FIX = re.compile(_LEAD + rf"(?:(?:are )?(?:you )?sure (?:it's|it is|that's|that is) not|{_NEG_AUX} (?:it|that|this)"
                     r"(?: be)?)\s+(?P<fix>[^?!.]+)", re.IGNORECASE)
_INVERTED = re.compile(_LEAD + rf"(?P<aux>{_NEG_AUX})\s+(?P<rest>[^?!.]+)\?", re.IGNORECASE)
_PRONOUN = frozenset("it that this he she they there we you".split())


def doubt_fix(sentence: str) -> str | None:
    """A doubting question as the statement it suggests, or None.

    "isn't it Canberra?" -> "The answer should be Canberra."; "don't spiders have eight?" ->
    "Spiders have eight."; "isn't a leap year 366?" -> "A leap year is 366." (the verb goes
    after a leading pronoun, else before the first number, else before the last word);
    "1912 no?", "¿no era el Tajo?" -> "The answer should be 1912.", "... el Tajo.".
    """
    sentence = sentence.replace("\u2019", "'").strip()
    if _ADDS.search(sentence):
        return None
    it_fix = _IT_FIX.match(sentence)
    if it_fix:
        return f"The answer should be {it_fix.group('fix').strip()}."
    inverted = _INVERTED.match(sentence)
    if inverted is None:
        proposed = proposal(sentence) if sentence.endswith(("?", "？")) else None
        return f"The answer should be {proposed}." if proposed else None
    aux = inverted.group("aux").lower().replace("'", "")[:-2]
    aux = {"wo": "will", "ca": "can"}.get(aux, aux)
    words = inverted.group("rest").split()
    if aux not in ("do", "does", "did") and len(words) >= 2:
        at = 1 if words[0].lower() in _PRONOUN else next(
            (i for i, w in enumerate(words) if re.match(r"\d", w) and i > 0), len(words) - 1)
        words = words[:at] + [aux] + words[at:]
    statement = " ".join(words)
    return statement[0].upper() + statement[1:] + "."
