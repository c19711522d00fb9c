"""From a judge's hint or a user's correction to a candidate lesson: a short standing rule.

`lesson_from_hint` is rule-based, like the hint rules it reads after (judge/rules.py), so
that what enters a user's experience can be read and tested without a model.

Decisions and why:

- **Only standing preferences become lessons; corrections of facts do not.** A hint such
  as "The answer should be 16." or "Avoid the error the previous action caused: ..." is
  right for its own conversation, and the per-turn hint path (OPD) already uses it there.
  Carried into every later prompt it is noise at best and wrong at worst. Self-distillation
  with privileged context works when the context is a shared rule and fails when it is
  specific to one instance (arXiv 2605.11182); the same split decides what generalises
  here. So a clause that states or fixes a fact is rejected: an arithmetic expression
  ("3 × 4 = 13"), "the answer is/should be ..." (unless followed by a style word:
  "should be shorter"), "... is wrong/right", a reference to the previous action, and
  "fix/redo/recalculate the ..." and "check your math/answer ..." (fixing *this* answer,
  which a standing "check your math" in every later prompt does not make right: on the
  student persona such a lesson had the most support of all and no effect), "... looks
  wrong", a bare re-ask ("Try again."), and a rule that only points back at such a fact
  ("please say that in the comment").
- **One rule per lesson.** The lesson starts at the first clause that is a rule (an
  imperative, "don't ...", "no ..."), after the lead-in that people put in front of it
  ("Hmm, not quite.", "you forgot to show how you got 42,", "please", "you should",
  "the response should", "could you") is dropped. The clauses that follow it in the same
  sentence stay ("Don't use a list, write normal sentences") unless they are an
  observation or a reason ("I think ...", "my teacher would know ...") or state a fact
  ("like 3 + 4 = 7"). Later sentences are left out: the judge already sends several
  hints separately, and one rule per lesson keeps merging and contradiction well defined.
- **Short.** At most `max_chars` (160) characters: clauses after the first are dropped
  until it fits; a first clause longer than that is not a short rule and is rejected
  rather than cut mid-thought (a cut rule can say the opposite of the whole one).
- Quoted phrases stay as they are ("Don't say “Certainly!”"): a quote names the exact
  words the user minds, which is a standing rule, not a fact about one answer.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LESSON_CHARS", "lesson_from_hint"]

MAX_LESSON_CHARS = 160

_RULE_VERBS = frozenset("""add address always answer apply ask avoid be begin bold break call change check cite
    close convert cut delete do don't double-check drop emphasise emphasize end explain finish focus follow format
    give greet group highlight include keep label lead leave limit list make mention move name never number only open
    phrase point prefer put quote refer remove rename replace reply respond rewrite round say show sign skip sort sound
    spell split start state stay stick stop summarise summarize switch talk tell translate try use walk
    write""".split())
_STYLE_WORDS = frozenset("""short shorter brief concise long longer detailed clear simple plain friendly friendlier kind
    kinder warm formal casual polite in written given shown""".split())

_MARKERS = re.compile(r"\[/?hint\]", re.IGNORECASE)
_LABEL = re.compile(r"^(?:hint|lesson|rule|correction|feedback|note|tip|suggestion|instruction)\s*:\s*", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*\u2022>]+|\d+[.)])\s+")
# "..." and “...”; ‘...’ and '...' (an apostrophe inside a word, "don't", opens none;
# `_clean` has made every ’ a straight one)
_QUOTED = re.compile(r"\u201c[^\u201d]*\u201d|\u2018[^\u2019'\n]*['\u2019]|\"[^\"]*\"|(?<![\w'])'[^'\n]{1,80}'(?![\w'])")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_CLAUSE = re.compile(r"\s*(?:[,;]|\s[\u2013\u2014]\s)\s*")  # not " - ": "54 - 9 = 45" is one clause
_QUOTES = "\"'`\u201c\u201d\u2018\u2019"

_LEAD_INS = [re.compile(p, re.IGNORECASE) for p in (
    r"^(?:no+|nope|nah|hm+|um+|uh+|ok(?:ay)?|well|oh|ah|yes|yeah|sure|thanks|thank you|great|good|nice|"
    r"almost there|close|not quite|one thing(?: though)?)\s*[,.!]+\s*",  # interjections end in punctuation:
    r"^(?:but|and|so|also|actually|again)\b[\s,]*",  # "No, use X" loses "No", "No more X" keeps it
    r"^(?:please|just|kindly|next time|from now on|in (?:the )?future|going forward)\b[\s,]*",
    r"^(?:(?:can|could|would|will) you(?: please)?|i (?:want|need|would like|'d like) you to|"
    r"make sure (?:to|you)|remember to|be sure to|try to)\s+",
)]
_DONT_LEADS = re.compile(
    r"^(?:you|the (?:response|reply|answer|assistant|comment|output)s?|responses|answers|replies)\s+"
    r"(?:should not|shouldn't|must not|mustn't|need not|needn't)\s+", re.IGNORECASE)
_SHOULD_BE = re.compile(
    r"^(?P<subject>(?:the |your )?(?:final |whole )?(?:response|reply|answer|comment|output|explanation)s?)\s+"
    r"(?:should|must|needs to) be\s+(?P<rest>.+)$", re.IGNORECASE)
_DO_LEADS = re.compile(
    r"^(?:you|the (?:response|reply|answer|assistant|comment|output)s?|responses|answers|replies)\s+"
    r"(?:should|must|need to|needs to|have to|has to)\s+(?!have\b)", re.IGNORECASE)
_PREFER = re.compile(r"^i (?:prefer|would prefer|'d prefer)\s+", re.IGNORECASE)

_FACT = re.compile(
    r"\d\s*[+*/\u00d7\u00f7=]\s*\d|\d\s+-\s+\d"  # arithmetic ("2-3 sentences" is a range, not a sum)
    r"|\b(?:got|worked out|found|calculated|computed)\s+-?\d"  # "show how you got 42": this answer's number
    r"|\bshould be\s+-?\d|\b(?:is|was|are|were)\s+(?:wrong|incorrect|right|correct|not right)\b"
    r"|\bthe previous action\b|\b(?:this|that) error\b"
    r"|^(?:fix|correct|redo|re-do|recalculate|recompute|recheck)\s+(?:the|this|that|it|your)\b"
    r"|\b(?:looks?|seems?|is probably|might be)\s+(?:wrong|off|incorrect|right|correct)\b"  # about this answer
    r"|^(?:check|double-check|recheck|re-check|verify)\s+(?:your |the |my )?(?:math|maths|arithmetic|calculations?|"
    r"numbers|sums?|working|answer|result)\b"  # "check your math again": fix this answer, no standing rule
    r"|^(?:try|do|say|write|answer)\s+(?:it\s+|that\s+)?(?:again|once more|one more time|over)$"  # a re-ask
    r"|\b(?:like|e\.g\.|for example|such as)\s+-?\d"
    r"|^\w+ (?:that|this)(?:\s+(?:in|to|on|at|for|too|again|instead|first)\b|$)", re.IGNORECASE)  # "say that in ..."
_ANSWER_IS = re.compile(r"\b(?:the )?(?:final |correct |right )?answer (?:is|was|should be)\s+(?P<next>\S+)",
                        re.IGNORECASE)
_OBSERVATION = re.compile(
    r"^(?:i|i'm|i've|my|you|you're|you've|it|it's|that|that's|this|this is|these|they|he|she|we|there|nobody|"
    r"because|since|as|so|otherwise|which)\b|\bi (?:think|thought|believe|know|said|asked|meant|wanted|have to)\b",
    re.IGNORECASE)


def lesson_from_hint(hint_text: str, max_chars: int = MAX_LESSON_CHARS) -> str | None:
    """A hint or correction as one short imperative rule ending in ".", or None if it is not one.

    "please show all the steps with the numbers" -> "Show all the steps with the numbers."
    "you forgot to show how you got 42, please show every step" -> "Show every step."
    "mention the actual mistake: the student wrote 3 × 4 = 13" -> "Mention the actual mistake."
    "The answer should be 16." -> None (a fact for one conversation, not a preference)
    """
    text, quotes = _protect_quotes(_clean(hint_text))
    segments = [part for sentence in _SENTENCE.split(text) for part in sentence.split(": ")]
    for segment in segments:  # what follows a colon elaborates (an example, the facts): its own segment
        clauses = [c.strip(" .!?" + _QUOTES) for c in _CLAUSE.split(segment)]
        for i, clause in enumerate(clauses):
            rule = _as_rule(clause)
            if rule is None:
                continue
            kept = [rule] + [c for c in clauses[i + 1:] if c and not _FACT.search(c) and not _OBSERVATION.search(c)]
            while kept and len(_finish(kept, quotes)) > max_chars:
                kept.pop()
            return _finish(kept, quotes) if kept else None
    return None


def _clean(text: str) -> str:
    text = _MARKERS.sub(" ", text).replace("\u2019", "'").replace("**", "").replace("__", "")
    text = " ".join(text.split())
    previous = None
    while previous != text:
        previous = text
        text = _BULLET.sub("", _LABEL.sub("", text)).strip()
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES and text[0] != "'":
            text = text[1:-1].strip()
    return text


def _protect_quotes(text: str) -> tuple[str, list[str]]:
    """Quoted phrases swapped for placeholders, so that "Certainly!" does not end a sentence."""
    quotes: list[str] = []

    def hold(match: re.Match[str]) -> str:
        quotes.append(match.group())
        return f"\x00{len(quotes) - 1}\x00"

    return _QUOTED.sub(hold, text), quotes


def _as_rule(clause: str) -> str | None:
    """The clause rewritten as an imperative, or None if it is not a rule about how to answer."""
    previous = None
    while previous != clause:
        previous = clause
        for lead in _LEAD_INS:
            clause = lead.sub("", clause).strip()
    if not clause or _FACT.search(clause) or _is_fact(clause):
        return None
    clause = _DONT_LEADS.sub("don't ", clause)
    should_be = _SHOULD_BE.match(clause)
    if should_be:
        clause = f"make {should_be['subject'].lower()} {should_be['rest']}"
    clause = _PREFER.sub("prefer ", _DO_LEADS.sub("", clause))
    words = clause.split()
    first = words[0].lower().strip(",.!") if words else ""
    if first in _RULE_VERBS or (first == "no" and len(words) >= 2):
        return clause
    return None


def _is_fact(clause: str) -> bool:
    answer = _ANSWER_IS.search(clause)
    return answer is not None and answer["next"].lower().strip(",.") not in _STYLE_WORDS


def _finish(clauses: list[str], quotes: list[str]) -> str:
    text = ", ".join(clauses)
    text = re.sub(r"\x00(\d+)\x00", lambda m: quotes[int(m.group(1))], text).strip(" ,;:")
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."
