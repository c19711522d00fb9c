"""Which of a user's lessons can be checked on an answer, and how well each answer keeps them.

A lesson such as "Answer in one sentence." or "Don't show the working." says something about
the form of every later answer that can be read off the text. `checks(lessons)` turns each
lesson it can read into one or more `Check`s; `scores(answers, checks)` gives each of
several answers to one prompt the mean of its checks, in [0, 1]. What it is for: among
answers sampled for a user, which one keeps the user's lessons best (a probe in
scripts/answer_selection.py, docs/experiments.md "Picking among sampled answers").

What a lesson is read as. Each cue word is read in its clause (split at punctuation and at
"and", "but"), negated when a negator (not, no, never, don't, avoid, skip, omit, without,
leave out, ...) stands within the four words before it ("no intro and no formatting":
both negated; "don't show the working": negated):

- **a count limit**: "one sentence", "a single line", "in N sentences", "under N words",
  "at most N words/lines/sentences" ("a few" is three sentences or lines, ten words, where the
  lesson says short, else a range of two to four: "write a comment of a few sentences"): the
  answer passes when it keeps the limit (1 or 0); "one sentence per step" is a rate, not a limit;
  a **range**, "two or three sentences", "3 to 5 lines", "2-3 sentences", passes from its lower
  end to its upper;
- **length**: the short side ("short", "brief", "concise", a limit but not a range) or the long
  side ("detailed", "longer", "elaborate", and "more" at the end of its clause or before "than"
  or a word for content: "write a bit more", "say a little more than that", "more detail"; not
  "more friendly"): relative, the shortest (longest) of the answers scores 1 and the others by
  their rank;
- **warmth**: "be kinder", "friendlier", "warm and encouraging", "positive", "praise" (do) or
  "less praise" (don't): relative, by the kinds of praise and encouragement in the answer
  ("great", "well done", "keep it up", ...; `warmth`);
- **the request's numbers**: "use the numbers from the problem", "mention the actual numbers"
  ("the numbers", not "plain numbers"), "be specific" (do) or "don't repeat the numbers"
  (don't): relative, by how many of the numbers in the user's messages the answer carries (the
  request is passed to `scores`/`pick`);
- **the request's own working**: "mention the actual mistake", "say what is wrong" (`corrects`:
  1 when the answer gives the right result of an equation of the request that does not hold)
  and "what they did right", "something they got right" (`confirms`: 1 when it names a step
  that holds, its result and a term); every answer 1 when the request has no such equation
  (experience/arithmetic.py); "don't dwell on mistakes" gives no check;
- **working**: "show every step", "show the working / calculations" (do) or "don't show
  the working", "skip the calculations", "leave out the steps" (don't): relative, by the
  count of written-out steps (a distinct line or sentence with arithmetic; a "Step N" label
  alone is not one); a lesson that
  names "Step 1" is about the label, not the working (a label check below);
- **lists, Markdown, emojis**: "no bullet points", "no lists", "no formatting", "no
  Markdown", "no bold", "no headings", "remove the # titles", "no emojis" (don't: 1 when absent)
  and "use a list" (do: 1 when present); "no Step 1, Step 2 labels" (a label: "Step 1:");
- **quoted phrases to leave out**: "Don't say “Absolutely”", "drop the “To solve this problem”
  part" (a negator within the four words before the quote): 1 when the answer does not contain
  the phrase (any case); **to say**: a verb that asks for words before the quote ("start with
  “Hi Sam”", "sign off with “Cheers”", "call me “Captain”"): 1 when the answer says it, in its
  first sentence after "start/open/begin/greet with", in its last after "end/finish/close/sign";
- **a closing question**: "end with a question", "ask me a follow-up question" (do: 1 when the
  answer's last words are a question) or "don't ask me questions" (don't); **a greeting** ("greet
  me first", "say hello": the answer opens with hi, hello, dear, good morning ...); **apologies** ("stop
  apologizing", "don't say sorry"), **examples** ("give an example"; not the lesson's own "for
  example, ..."), **tables** and **code blocks**: present or absent as asked;
- **wording**: "simple words", "no jargon", "less technical", "like I'm five" (plainer) or
  "more technical": relative, by the share of words of eight letters or more;
- **the answer first**: "give the answer first", "start with the answer", "put the result up
  front": 1 when the answer's first sentence states a number that is not one of the request's and
  works nothing out ("It is 55."; not "8 x 8 = 64, ..."); an answer with no such number anywhere
  scores 0 beside one that has one, 1 when none has.

What is read off an answer lives in experience/measures.py. A lesson it cannot read (a
language, a topic, most tones) gives no check; an answer's score
is over the checks there are, and no checks at all scores every answer alike (0.5), so
the first answer stays the choice. The rules are English; a lesson in another language
gives no check.

`pick(answers, checks)` adds **consensus** to the checks (self-consistency): half a point
for an answer whose final number (its last, "Step N" labels and list numbers aside) is the
most common final number among the answers (any number, when no two agree; nothing when no
answer has one, as in most chat). Why: the form checks alone favour the shortest answers,
and at temperature 1 a 135M model's shortest answers are often not answers at all
(docs/experiments.md, "Picking among sampled answers").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from openclaw_rl.experience import arithmetic
from openclaw_rl.experience.arithmetic import last_number, numbers
from openclaw_rl.experience.measures import (
    PRESENT, answer_first, count_steps, has_phrase, long_words, sentences, warmth, words,
)


__all__ = ["CONSENSUS_WEIGHT", "Check", "checks", "consensus", "count_steps", "one_check", "pick", "scores",
           "sentences", "warmth", "words"]

_NUMBER_WORDS = {"one": 1, "a single": 1, "single": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a few": 3, "few": 3}
_COUNT = r"(\d+|one|a single|single|two|three|four|five|six|seven|eight|nine|ten|a few|few)"
_UNIT = r"(sentence|line|word|paragraph)s?"
# "in one sentence", "a single line", "under 50 words", "no more than two sentences", "at most 3 lines"
_LIMITED = re.compile(rf"\b(?:no more than|not more than|at most|up to|under|fewer than|less than|max(?:imum)?|"
                      rf"within)\s+{_COUNT}\s+{_UNIT}\b")
_EXACT = re.compile(rf"\b{_COUNT}\s+(?:short\s+|brief\s+|plain\s+|simple\s+)?{_UNIT}\b")
# "two or three sentences", "3 to 5 lines", "2-3 sentences": a range, kept from its lower end to its upper
_RANGE = re.compile(rf"\b{_COUNT}\s*(?:or|to|-|\u2013)\s*{_COUNT}\s+(?:short\s+|brief\s+|plain\s+|simple\s+)?{_UNIT}\b")
_RATE = re.compile(r"s?\s+(?:per|for each|for every|each|a)\b")  # "one sentence per step": a rate, not a limit
_QUOTED = re.compile(r'"([^"\n]{1,80})"|\u201c([^\u201d\n]{1,80})\u201d|\u2018([^\u2019\n]{1,80})\u2019'
                     r"|(?<![a-z])'([^'\n]{1,80})'(?![a-z])")
CONSENSUS_WEIGHT = 0.5
_NEGATORS = frozenset("not no never don't dont doesn't avoid skip omit without stop remove drop hide exclude "
                      "nothing none neither nor instead rather less fewer".split())
_PHRASES = (("do not", "don't"), ("leave out", "omit"), ("cut out", "omit"), ("get rid of", "remove"),
            ("rather than", "rather"), ("instead of", "instead"))
_CLAUSE = re.compile(r"[,;:.!?]|\b(?:and|but|then)\b")
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+")
_WINDOW = 4  # a negator governs a cue word at most this many words after it
# cue words (their first five letters) -> what they are about
_ABOUT = {"step": "working", "worki": "working", "calcu": "working", "arith": "working", "math": "working",
          "list": "list", "bulle": "list", "markd": "markdown", "forma": "markdown", "bold": "markdown",
          "headi": "markdown", "heade": "markdown", "title": "markdown", "emoji": "emoji"}
_A_FEW_WORDS, _A_FEW_RANGE = 10, (2, 4)  # "a few words will do": brief; "a few sentences": 2 to 4 (3 at most if short)
_NUMBERS_KINDS = frozenset({"more_numbers", "fewer_numbers"})
_ERROR_CUES = frozenset("mistake error wrong incorrect slip".split())  # "mention the actual mistake"
_DONE = frozenset("did got get done gets".split())  # "what they did right", "something they got right"
_SHORT = frozenset("short shorter brief briefer concise succinct terse".split())
_LONG = frozenset("long longer lengthy detailed thorough elaborate verbose".split())
# "write a bit more", "say a little more than that", "more detail": "more" on the long side only at the
# end of its clause or before "than" or a word for content ("more friendly" is about tone, not length)
_MORE_BEFORE = frozenset("than detail details words sentences lines text explanation context information "
                         "examples depth please".split())
# a lesson that asks for warmth ("be kinder", "friendlier", "more encouraging") or for less of it
_WARM_CUES = frozenset("kind kinder kindly friendly friendlier warm warmer warmth encouraging encourage "
                       "encouragement positive nicer gentle gentler praise supportive polite cheerful upbeat".split())
# whole words (a trailing "s" dropped) -> what they are about; "for example" is a lesson's own aside, not a wish
_ABOUT_WORDS = {"example": "example", "table": "table", "code": "code", "snippet": "code", "sorry": "apology",
                "greet": "greeting", "greeting": "greeting", "hello": "greeting", "hi": "greeting",
                "apologize": "apology", "apologise": "apology", "apologie": "apology", "apology": "apology",
                "apologizing": "apology", "apologising": "apology"}
_ASK_CUES = frozenset("ask asking end ending finish close follow followup add include".split())  # "... a question"
_THE_REQUESTS = frozenset("the my this that original same".split())  # "include the question": the request's own
# plainer wording: "no jargon", "less technical", "simple words", "plain English", "like I'm five"
_PLAIN_WORDS = re.compile(r"\b(?:simple|simpler|plain|plainer|easy|easier|everyday|short)\s+(?:words|language|terms|"
                          r"vocabulary|english)\b|\blike (?:i'm|i am|im|a|to a) (?:five|5|kid|child)\b|\beli5\b|"
                          r"\blayman'?s?\b")
_TECHNICAL = frozenset({"jargon", "technical"})  # asked for ("use the technical terms") or against ("no jargon")
_ANSWER_FIRST = re.compile(
    r"\b(?:answer|result|conclusion|bottom line|tl;?dr)\b[^.,;:!?]{0,30}?\b(?:first|up ?front|at the (?:top|start|"
    r"beginning))\b|\b(?:start|begin|lead|open)\w* with (?:the |your |a )?(?:final |short |direct |actual )?"
    r"(?:answer|result|conclusion|bottom line)\b")
# verbs that ask for a quoted phrase ("start with "Hi"", "call me "Sam"", "sign off with "Cheers"") and where
_SAY_VERBS = {"start": "start", "begin": "start", "open": "start", "greet": "start", "end": "end", "finish": "end",
              "close": "end", "sign": "end", "say": "", "use": "", "call": "", "include": "", "add": "", "write": "",
              "mention": "", "address": ""}


@dataclass(frozen=True)
class Check:
    """One thing a lesson asks of every answer. `kind`: `at_most` (a count of `unit` at most
    `limit`), `between` (a count of `unit` from `least` to `limit`), `shorter`/`longer` (relative
    length), `warmer`/`cooler` (relative count of kinds of praise and encouragement),
    `more_numbers`/`fewer_numbers` (relative count of the request's numbers), `corrects`/`confirms`
    (the request's equations that do not hold / hold), `less_working`/`more_working` (relative
    count of written-out steps), `plainer`/`technical` (relative share of long words), `answer_first`
    (a result stated in the first sentence, before any working), `without`/`with` (`unit`: a key of `measures.PRESENT`, or
    phrase: `phrase`, anywhere or, `at`, in the first or the last sentence)."""

    lesson: str
    kind: str
    unit: str = ""
    limit: int = 0
    phrase: str = ""
    least: int = 0
    at: str = ""


def checks(lessons: Sequence[str]) -> list[Check]:
    """Every check the lessons can be read as, in lesson order (see the module docstring)."""
    found: list[Check] = []
    for lesson in lessons:
        found += _read(lesson)
    return found


def _signs(text: str) -> tuple[dict[str, int], int]:
    """What the lesson's cue words are about, each +1 (do) or -1 (don't; the last mention wins),
    warmth among them, and its length side (-1 short, +1 long, 0 none)."""
    about: dict[str, int] = {}
    length = 0
    for clause in _CLAUSE.split(text):
        tokens = _TOKEN.findall(clause)
        for i, token in enumerate(tokens):
            negated = any(t in _NEGATORS for t in tokens[max(0, i - _WINDOW):i])
            sign = -1 if negated else 1
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            more = token == "more" and (following is None or following in _MORE_BEFORE)
            if token in _SHORT or token in _LONG or more:
                length = (-1 if token in _SHORT else 1) * sign
            if token in _WARM_CUES and not (token == "kind" and following == "of"):  # "what kind of": not a tone
                about["warmth"] = sign
            if token == "specific" or (token == "numbers" and "the" in tokens[max(0, i - 2):i]):  # not "plain numbers"
                about["numbers"] = sign
            word = token[:-1] if len(token) > 3 and token.endswith("s") and not token.endswith("ss") else token
            if word in _ERROR_CUES:
                about["errors"] = sign
            if word in ("right", "correct", "well") and tokens[i - 1:i] and tokens[i - 1] in _DONE:  # "got right"
                about["confirms"] = sign
            if word == "step" and tokens[i + 1:i + 2] and tokens[i + 1].isdigit():
                # "Step 1" names a label ("without Step 1, Step 2 labels"), not the working; one
                # negated mention negates the lesson's labels (", Step 2" stands in a clause of its own)
                about["label"] = min(sign, about.get("label", 1))
                continue
            if (topic := _ABOUT.get(word[:5])) is not None:
                about[topic] = sign
            if (topic := _ABOUT_WORDS.get(word)) is not None and not (word == "example" and tokens[i - 1:i] == ["for"]):
                about[topic] = sign
            if word == "question" and _ASK_CUES.intersection(tokens[:i]) and tokens[i - 1] not in _THE_REQUESTS:
                about["question"] = sign
            if word in _TECHNICAL:
                about["plain_words"] = -sign  # "no jargon", "less technical": plainer
    return about, length


def _read(lesson: str) -> list[Check]:
    text = " ".join(lesson.lower().replace("\u2019", "'").replace("\u2018", "'").split())
    for phrase, word in _PHRASES:
        text = text.replace(phrase, word)
    objects, length = _signs(text)
    found: list[Check] = []
    negated_limit = re.search(r"\b(?:not|don't|do not|never)\b[^.,;]*\b(?:one|a single|single) (?:sentence|line)",
                              text)
    ranges = []
    for match in _RANGE.finditer(text):
        least, most, unit = match.groups()
        low, high = (int(c) if c.isdigit() else _NUMBER_WORDS[c] for c in (least, most))
        if unit == "paragraph" or negated_limit or _RATE.match(text, match.end()) or not 0 < low <= high:
            continue
        ranges.append(match.span())
        if not any(c.kind == "between" and c.unit == unit for c in found):
            found.append(Check(lesson, "between", unit, high, least=low))
    for pattern in (_LIMITED, _EXACT):
        for match in pattern.finditer(text):
            count, unit = match.groups()
            if unit == "paragraph" or (pattern is _EXACT and negated_limit) or _RATE.match(text, match.end()):
                continue
            if any(start <= match.start() < end for start, end in ranges):  # the upper end of a range
                continue
            least, limit = 0, (int(count) if count.isdigit() else _NUMBER_WORDS[count])
            if count in ("a few", "few") and unit == "word":
                limit = _A_FEW_WORDS
            elif count in ("a few", "few") and length != -1 and pattern is _EXACT:  # "a comment of a few sentences"
                least, limit = _A_FEW_RANGE
            if limit > 0 and not any(c.kind in ("at_most", "between") and c.unit == unit for c in found):
                found.append(Check(lesson, "between" if least else "at_most", unit, limit, least=least))
        if found:
            break
    limited = any(c.kind == "at_most" for c in found)
    if length == -1 or (limited and length != 1):  # a limit is on the short side (a range is not)
        found.append(Check(lesson, "shorter"))
    elif length == 1:
        found.append(Check(lesson, "longer"))
    if "working" in objects:
        found.append(Check(lesson, "more_working" if objects["working"] > 0 else "less_working"))
    if "numbers" in objects:
        found.append(Check(lesson, "more_numbers" if objects["numbers"] > 0 else "fewer_numbers"))
    if "warmth" in objects:
        found.append(Check(lesson, "warmer" if objects["warmth"] > 0 else "cooler"))
    found += [Check(lesson, kind) for kind, cue in (("corrects", "errors"), ("confirms", "confirms"))
              if objects.get(cue, 0) > 0]  # "don't dwell on mistakes": no check
    if (plain := _PLAIN_WORDS.search(text)) and not _negated(text, plain.start()):
        objects["plain_words"] = 1
    if "plain_words" in objects:
        found.append(Check(lesson, "plainer" if objects["plain_words"] > 0 else "technical"))
    if (first := _ANSWER_FIRST.search(text)) and not _negated(text, first.start()):  # "don't give the answer first"
        found.append(Check(lesson, "answer_first"))
    for unit in ("list", "markdown", "emoji", "label", "question", "greeting", "apology", "example", "table", "code"):
        if unit in objects:
            found.append(Check(lesson, "with" if objects[unit] > 0 else "without", unit))
    found += [Check(lesson, "with" if at is not None else "without", "phrase", phrase=phrase, at=at or "")
              for phrase, at in _quoted(text)]
    return found


def _negated(text: str, start: int) -> bool:
    """Whether a negator stands within the four words before `start`, in its clause."""
    return any(t in _NEGATORS for t in _TOKEN.findall(_CLAUSE.split(text[:start])[-1])[-_WINDOW:])


def _quoted(text: str) -> list[tuple[str, str | None]]:
    """The quoted phrases a (lower-cased) lesson asks to leave out (at None: a negator within the four
    words before the quote, in its clause: "don't say "certainly"", "drop the "to solve this" part")
    or to say (a verb that asks for words before it in its clause; at "start" for "start/open/greet
    with", "end" for "end/finish/close/sign off with", "" anywhere: "call me "Sam""). A quote that
    is neither ("the "total" is wrong") gives no check."""
    phrases: dict[str, str | None] = {}
    for match in _QUOTED.finditer(text):
        phrase = " ".join(next(g for g in match.groups() if g is not None).strip(" .,!?").split())
        if not phrase:
            continue
        if _negated(text, match.start()):
            phrases[phrase] = None
        elif verbs := [_SAY_VERBS[t] for t in _TOKEN.findall(_CLAUSE.split(text[:match.start()])[-1])
                       if t in _SAY_VERBS]:
            phrases.setdefault(phrase, verbs[-1])
    return list(phrases.items())


def scores(answers: Sequence[str], found: Sequence[Check], request: str = "") -> list[float]:
    """Each answer's mean over the checks, in [0, 1]; relative checks rank the answers among
    themselves (ties share a rank); an empty answer 0. 0.5 for every answer when there is no check.
    `request`: the text the answers reply to (the user's messages), whose numbers `more_numbers`
    counts in each answer."""
    if not answers:
        return []
    if not found:
        return [0.5] * len(answers)
    totals = [0.0] * len(answers)
    for check in found:
        for i, value in enumerate(one_check(check, answers, request)):
            totals[i] += value
    return [t / len(found) if words(a) else 0.0 for t, a in zip(totals, answers)]  # an empty answer keeps nothing


def one_check(check: Check, answers: Sequence[str], request: str = "") -> list[float]:
    """Each answer's value on one check; `request` as for `scores`."""
    if check.kind in ("at_most", "between"):
        count = {"word": words, "sentence": sentences, "line": lambda t: len([x for x in t.splitlines() if x.strip()])
                 }[check.unit]
        return [float(max(1, check.least) <= count(a) <= check.limit) for a in answers]
    if check.kind in _NUMBERS_KINDS:
        asked = arithmetic.request_numbers(request)
        return _ranked([len(numbers(a) & asked) for a in answers], lower_is_better=check.kind == "fewer_numbers")
    if check.kind in arithmetic.SCORERS:
        return arithmetic.SCORERS[check.kind](answers, request)
    if check.kind in ("warmer", "cooler"):
        return _ranked([warmth(a) for a in answers], lower_is_better=check.kind == "cooler")
    if check.kind in ("shorter", "longer"):
        return _ranked([words(a) for a in answers], lower_is_better=check.kind == "shorter")
    if check.kind in ("less_working", "more_working"):
        return _ranked([count_steps(a) for a in answers], lower_is_better=check.kind == "less_working")
    if check.kind in ("plainer", "technical"):
        return _ranked([long_words(a) for a in answers], lower_is_better=check.kind == "plainer")
    if check.kind == "answer_first":  # an answer with no result passes only when none of them has one
        asked = arithmetic.request_numbers(request)
        first = [answer_first(a, asked) for a in answers]
        return [float(f if f is not None else all(x is None for x in first)) for f in first]
    if check.unit == "phrase":
        return [float(has_phrase(a, check.phrase, check.at) == (check.kind == "with")) for a in answers]
    return [float(bool(PRESENT[check.unit](a)) == (check.kind == "with")) for a in answers]


def _ranked(values: list[int], lower_is_better: bool) -> list[float]:
    """1 for the best value, 0 for the worst, evenly between by distinct value; all 1 if all equal."""
    distinct = sorted(set(values), reverse=not lower_is_better)
    if len(distinct) == 1:
        return [1.0] * len(values)
    place = {v: i for i, v in enumerate(distinct)}
    return [1.0 - place[v] / (len(distinct) - 1) for v in values]


def consensus(answers: Sequence[str]) -> list[bool]:
    """Whether each answer's final number (its last) is the most common final number among them;
    all False when no answer has a number."""
    finals = [last_number(a) for a in answers]
    counts = Counter(x for x in finals if x is not None)
    if not counts:
        return [False] * len(answers)
    top = max(counts.values())
    return [x is not None and counts[x] == top for x in finals]


def pick(answers: Sequence[str], found: Sequence[Check], request: str = "") -> tuple[int, list[float]]:
    """The answer to serve: the best by the checks plus `CONSENSUS_WEIGHT` for consensus, the first
    on a tie; and every answer's total. `request` as for `scores`."""
    kept = scores(answers, found, request)
    agree = consensus(answers)
    # an empty answer stays 0; one last on every relative check (kept 0) still counts its consensus
    totals = [k + CONSENSUS_WEIGHT * a if words(text) else 0.0 for k, a, text in zip(kept, agree, answers)]
    return max(range(len(answers)), key=lambda i: (totals[i], -i)), totals
