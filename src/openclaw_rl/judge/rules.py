"""Rule-based hint extraction: the directive half of the CPU judge, without a model.

A next state that corrects the agent usually says so in a recognisable way: an
imperative ("Use plain text."), a prohibition ("don't", "no more"), a comparison
("... instead"), a wish ("you should", "please"); a tool or environment that rejects an
action prints an error line. These rules find such sentences and rewrite them as short,
self-contained instructions that can be appended to the user's message (docs/method.md §2,
step 5). They miss indirect corrections and irony; the model judge covers those.

Decisions and why:

- Precision over recall. A wrong hint pulls the policy towards the wrong behaviour,
  while a missed hint only costs one directive sample, so question sentences (other than
  polite requests such as "could you ...?") and approvals ("that works, thanks") are
  skipped, and approval wording only loses to explicit negation.
- Adjacent corrective sentences are one correction said in parts ("Don't use headings.
  Just write plain sentences.") and are joined into one hint, up to a length limit.
- For tool and environment output, error lines come first (the last line of a Python
  traceback, lines with "Error:", "error:", "FAILED", "command not found"); code-like
  lines are never read as sentences, so `return x` is not taken as an instruction.

`correction_hints` is what the default judge calls once it has read a correction (vote
-1): `extract_hints`, and where that finds nothing, the fixes people state rather than
order ("No, it fell in 1989.", "That's Spanish, not Italian.", "I thought it was
Canberra?"), the error lines of shell tools ("rm: cannot remove 'tmp': Is a
directory"), and the requirements a web page states ("Password must be at least 8
characters."). A sentence that only judges ("That's not right at all.") states no fix.
"""

from __future__ import annotations

import re

from openclaw_rl.judge.agent_state import doubt_fix, looks_like_page, validation_messages
from openclaw_rl.judge.lexicons import LEADING_NO, MISSING, WANTS, WRONG
from openclaw_rl.judge.people_state import judges_only
from openclaw_rl.judge.votes import MIN_HINT_CHARS, dedupe_hints

__all__ = ["MAX_HINTS", "correction_hints", "extract_hints"]

MAX_HINTS = 3
MAX_SENTENCE_CHARS = 200  # longer sentences are cut at a word boundary
MAX_MERGED_CHARS = 160  # adjacent corrections are joined while the hint stays this short
MAX_ERROR_CHARS = 160

_ROLES = ("user", "feedback", "tool", "environment")
_MACHINE_ROLES = ("tool", "environment")

_IMPERATIVE_VERBS = frozenset(
    """add always answer apply apologise apologize avoid be call change check cite convert cut delete do drop
    emphasise emphasize explain fix focus follow format give handle highlight include keep lead leave limit
    list make mention move never offer only point put quote reduce remove rename reorder replace reply
    respond restrict return rewrite run say send set shorten show simplify skip sort spell start stick stop
    substitute swap switch tell translate trim try update use write lose ditch tone rephrase reword split merge
    combine expand elaborate clarify capitalise capitalize lowercase uppercase round double halve divide multiply
    scale insert append prepend flip reverse lower raise increase decrease bump drop name label
    mark address open close end finish begin cap sign greet""".split()
)

# Sentence openings that are lower case in the middle of a joined hint.
_LOWERCASE_STARTS = frozenset("a an the it its this that these those your my there each every all no".split())

# Strong cues say "do it differently" on their own; weak cues lose to approval wording.
_STRONG_CUES = re.compile(
    r"\binstead\b|(?<!\bi )(?<!\bwe )\b(?:don't|dont|do not)\b|\bno more\b|\bshould(?:n't| not)\b",
    re.IGNORECASE,
)
_WEAK_CUES = re.compile(r"\bshould\b(?! i\b)(?! we\b)|\bplease\b|\bwithout\b|\bmust\b(?! be (?:joking|kidding)\b)"
                        r"|\b(?:needs?|has|have) to\b", re.IGNORECASE)
_CLAUSE = re.compile(r"[,;]\s+|\s+[\u2013\u2014-]\s+")
_APPROVAL = re.compile(
    r"\b(?:thanks?|thank you|perfect|great|exactly|correct|awesome|nice|love|works?|worked)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|no|never|wrong|instead)\b|n't\b", re.IGNORECASE)

# Leading words dropped before reading a sentence as an instruction. Interjections and
# labels ("hint:") only go when punctuation follows them ("No, use X" but not "No more X").
_LEADING_INTERJECTION = re.compile(
    r"^(?:thanks|thank you|thx|ty|hm+|uh+|um+|ugh+|no+|nope|nah|ok(?:ay)?|k|well|hey|hi|"
    r"hello|oh+|ah+|yes|yeah|yep|sure|great|good|nice|cool|perfect|alright|right|sorry|"
    r"wait|lol|hint|note|tip|suggestion)\b(?:\s*[,.!:;\u2026\u2013\u2014-]+\s*|\s+(?=(?:but|and|so|then)\b))",
    re.IGNORECASE,
)
_LEADING_FILLER = re.compile(
    r"^(?:please|pls|plz|just|also|and|but|so|actually|again|then|instead|next time)\b[\s,]*", re.IGNORECASE
)
_POLITE_REQUEST = re.compile(
    r"^(?:(?:can|could|would|will) you(?: please)?|why don't you|why not|"
    r"(?:i want|i'd like|i would like|i need) you to)\s+",
    re.IGNORECASE,
)
_YOU_SHOULD_NOT = re.compile(r"^you (?:should not|shouldn't|must not|mustn't)\s+", re.IGNORECASE)
_YOU_SHOULD = re.compile(r"^you (?:should|need to|must|have to)\s+(?!have\b)", re.IGNORECASE)
_TRAILING_FILLER = re.compile(r"(?:[\s,]+(?:please|thanks|thank you|thx))+\s*(?=[.!?]*$)", re.IGNORECASE)
_DONT = re.compile(r"\b(?:don't|dont)\b", re.IGNORECASE)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_BULLET = re.compile(r"^\s*(?:[-*\u2022>]+|\d+[.)])\s+")
_QUOTES = "\"'`\u201c\u201d\u2018\u2019"
_CODE_CHARS = set("{}()[]=<>;$|\\")

_TRACEBACK_HEADER = "Traceback (most recent call last)"
_ERROR_LINE = re.compile(r"Error:|error:|ERROR:|FAILED|command not found"
                         r"|^\S+:\d+(?::\d+)?:?\s+[A-Z]+\d+\b"  # a linter's diagnostic: path:line:col: F401 ...
                         r"|\berror\[[A-Z]?\d+\]")  # a compiler's: error[E0308]


def extract_hints(next_state_text: str, role: str) -> list[str]:
    """Up to 3 distinct instructions, each longer than 10 characters, read from a next state.

    `role` is the next state's role (user, feedback, tool, environment); tool and
    environment output is also searched for error lines, which come first.
    """
    if role not in _ROLES:
        raise ValueError(f"next state role {role!r} is not one of {', '.join(_ROLES)}")
    text = next_state_text.replace("\u2019", "'").replace("\r\n", "\n")
    hints: list[str] = []
    prose_lines = text.splitlines()
    if role in _MACHINE_ROLES:
        errors, error_line_numbers = _error_lines(prose_lines)
        hints += [_error_hint(line) for line in errors]
        prose_lines = [
            line
            for i, line in enumerate(prose_lines)
            if i not in error_line_numbers and not _looks_like_code(line)
        ]
    hints += _corrections(prose_lines)
    return dedupe_hints([h for h in hints if len(h) > MIN_HINT_CHARS], MAX_HINTS)


def _corrections(lines: list[str]) -> list[str]:
    """Corrective sentences as instructions, adjacent ones joined into one hint."""
    hints: list[str] = []
    joinable = False  # whether the previous sentence was a correction
    for line in lines:
        for sentence in _SENTENCE_END.split(line):
            instruction = _as_instruction(sentence) or _clause_instruction(sentence)
            if instruction is None:
                joinable = False
                continue
            joined = f"{hints[-1][:-1]}; {_continue_clause(instruction)}" if joinable else ""
            if joinable and not hints[-1].endswith("...") and len(joined) <= MAX_MERGED_CHARS:
                hints[-1] = joined
            else:
                hints.append(instruction)
            joinable = True
    return hints


def _clause_instruction(sentence: str) -> str | None:
    """An imperative clause after a comma or semicolon ("this crashes on [], make it return 0"), as an instruction."""
    for separator in _CLAUSE.finditer(sentence):
        rest = sentence[separator.end():]  # the instruction runs to the end of the sentence
        if _first_word(_strip_lead(rest.strip())) in _IMPERATIVE_VERBS:
            return _as_instruction(rest)
    return None


def _as_instruction(sentence: str) -> str | None:
    """The sentence rewritten as an instruction, or None if it is not a correction."""
    sentence = _BULLET.sub("", sentence).replace("**", "").replace("__", "")
    sentence = " ".join(sentence.split())
    if len(sentence) >= 2 and sentence[0] in _QUOTES and sentence[-1] in _QUOTES:
        sentence = sentence[1:-1].strip()
    if not sentence:
        return None

    stripped = _strip_lead(sentence)
    polite = _POLITE_REQUEST.match(stripped)
    if polite:
        stripped = stripped[polite.end() :]
    if sentence.endswith("?") and not polite:
        return None  # a real question asks, it does not correct

    strong, weak = _STRONG_CUES.search(sentence), _WEAK_CUES.search(sentence)
    approval = _APPROVAL.search(sentence) and not _NEGATION.search(sentence)
    imperative = _first_word(stripped) in _IMPERATIVE_VERBS
    if not (strong or imperative or polite or (weak and not approval)):
        return None

    instruction = _YOU_SHOULD_NOT.sub("do not ", stripped)
    instruction = _YOU_SHOULD.sub("", instruction)
    instruction = _DONT.sub("do not", instruction)
    instruction = _TRAILING_FILLER.sub("", instruction)
    instruction = instruction.rstrip(" .!?,;:").strip()
    if not _closes_a_quote(instruction):  # "start with 'Hi Sam'" keeps its closing quote; a stray one goes
        instruction = instruction.rstrip(" .!?,;:" + _QUOTES).strip()
    if not instruction:
        return None
    if len(instruction) > MAX_SENTENCE_CHARS:
        instruction = instruction[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + "..."
    ended = instruction.endswith("...") or (instruction[-1:] in _QUOTES and instruction[-2:-1] in (".", "!", "?"))
    return instruction[0].upper() + instruction[1:] + ("" if ended else ".")


def _closes_a_quote(text: str) -> bool:
    """Whether the text ends with a quote mark that closes a quotation opened in it."""
    last = text[-1:]
    if last == "'":
        return re.search(r"(?<![\w'])'[^'\n]+'$", text) is not None
    return (last == '"' and text.count('"') % 2 == 0) or {"\u201d": "\u201c", "\u2019": "\u2018"}.get(last, "\0") in text


def _strip_lead(sentence: str) -> str:
    """The sentence without greetings, interjections and filler words in front."""
    previous = None
    while previous != sentence:
        previous = sentence
        sentence = _LEADING_INTERJECTION.sub("", sentence)
        sentence = _LEADING_FILLER.sub("", sentence)
    return sentence


def _first_word(text: str) -> str:
    match = re.match(r"([A-Za-z']+)(?=[\s,]|$)", text)
    return match.group(1).lower() if match else ""


def _continue_clause(instruction: str) -> str:
    """A following instruction as the second half of a joined hint ("...; write ...")."""
    first = _first_word(instruction)
    if first in _IMPERATIVE_VERBS or first in _LOWERCASE_STARTS or instruction.startswith("Do not"):
        return instruction[0].lower() + instruction[1:]
    return instruction  # may start with a name ("Python ...") or "I"


def _error_lines(lines: list[str]) -> tuple[list[str], set[int]]:
    """Error lines of tool output, and the line numbers they and tracebacks occupy."""
    errors: list[str] = []
    taken: set[int] = set()
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith(_TRACEBACK_HEADER):
            # The frames are indented; the exception itself is the first unindented line.
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
                end += 1
            taken.update(range(i, min(end + 1, len(lines))))
            if end < len(lines):
                errors.append(lines[end].strip())
            i = end + 1
            continue
        if _ERROR_LINE.search(lines[i]):
            errors.append(lines[i].strip())
            taken.add(i)
        i += 1
    return errors, taken


def _error_hint(line: str) -> str:
    line = " ".join(line.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[:MAX_ERROR_CHARS].rsplit(" ", 1)[0] + "..."
    return f"Avoid the error the previous action caused: {line}"


def _looks_like_code(line: str) -> bool:
    stripped = line.strip()
    if not stripped or line[0] in " \t":
        return True
    code_chars = sum(ch in _CODE_CHARS for ch in stripped)
    return code_chars / len(stripped) > 0.05 or len(stripped.split()) < 3


# -- after a correction: fixes that are stated, asked as doubt, or printed ------------------

_DOUBT = re.compile(
    r"\b(?:i thought|i believe|i'm (?:pretty |quite |fairly )?sure|pretty sure|isn't it|wasn't it|shouldn't it be"
    r"|it should be|should be|it's actually|actually|more like|closer to)\b[\s,]*"
    r"(?:(?:it|that|they) ?(?:'s|is|was|were|are|has)\s+|that\s+)?"
    r"(?P<fix>[^?.!]+)",
    re.IGNORECASE,
)
_STATES = re.compile(
    r"\b(?:is|are|was|were|has|have|had|equals|means|fell|wrote|needs?|takes?|comes?)\b|'s\b|, not\b"
    r"|\bi (?:asked|said|wanted|meant|need(?:ed)?)\b|\s(?:é|est|ist|es|è|sind|son)\s"
    r"|, (?:nicht|no|non|pas|não|niet|nie|inte|не)\b",
    re.IGNORECASE,
)
_JUDGES_ONLY = re.compile(r"\bat all\b|\bnothing to do with\b|\bmake[s]? (?:no )?sense\b|\bi (?:don't|do not) think\b"
                          r"|\bthat'?s not\b|\bthis is not\b|\bthat is not\b|\bnot what\b", re.IGNORECASE)
_VERDICT_WORDS = frozenset(
    """that this it is was be not no nope wrong right correct incorrect true false bad good really sure quite still
    tbh answer sounds sound looks look seems seem awful terrible ugh try again mistake very so totally completely
    thats its isnt wasnt dont think the a an s t oh hmm well just i me my you your for of in with like what get got
    don't doesn't won't isn't i'm happy need want wanted had mind work works do does did one more time another go
    understand mean meant what's all quite exactly""".split()
)
_LEADING_NO = re.compile(
    rf"^\W*(?:no+|wrong|incorrect|hm+|hmm+|actually|well|{WRONG}|{LEADING_NO})(?![^\W_])[\s,.!:;\u2026-]+",
    re.IGNORECASE)
_WANTS = re.compile(rf"(?<!what )(?<!not )(?<!don't )(?<![^\W_])(?:{WANTS})", re.IGNORECASE)  # not "what I wanted"
_MISSING = re.compile(rf"(?<![^\W_])(?:{MISSING})|抜けて|足りない|缺少|漏了|빠졌", re.IGNORECASE)
_SPECIFIC = re.compile(r"\d|[\"'\u201c\u2018\u300c\u00ab]")  # a number or a quotation: says what exactly
_SHELL_ERROR = re.compile(r"\bcannot\b|\bcan't\b|No such file|Permission denied|not permitted|\bunknown command\b"
                          r"|\bfailed to\b|Could not|\bnot found\b", re.IGNORECASE)
_STATUS_LINE = re.compile(r"^\[(?:exit code|timed out)|^\W*\d+ (?:failed|passed)\b", re.IGNORECASE)
_PAGE_NOISE = re.compile(r"^(?:Page \"|\[\d+\] |Clicked \[|Typed \"|Selected \"|Scrolled )")
_PAGE_TEXT = re.compile(r"^(?:text|heading|alert|status) \"(.*)\"$")
_BARE_VALUE = re.compile(r"^(?:it|that|this)(?:'s| is| was)\s+([^\s.!?]+(?: [^\s.!?]+)?)[.!]?$", re.IGNORECASE)
_REQUIREMENT = re.compile(r"\b(?:must|required|please|should|at least|at most|only|enter|fill in)\b", re.IGNORECASE)


def correction_hints(next_state_text: str, role: str) -> list[str]:
    """Up to 3 hints from a next state already read as a correction (see the module docstring)."""
    text = next_state_text.replace("\u2019", "'").replace("\r\n", "\n")
    page = looks_like_page(text, role)
    alerts = [_sentence_hint(a) for a in validation_messages(text)] if page else []
    if page:
        text = _page_text(text)
    hints = alerts + extract_hints(text, role)
    if role in _MACHINE_ROLES:
        hints += [_error_hint(line.strip()) for line in text.splitlines()
                  if _SHELL_ERROR.search(line) and not _STATUS_LINE.match(line.strip())]
        if page:
            hints += [_sentence_hint(line) for line in text.splitlines() if _REQUIREMENT.search(line)]
    elif not hints:
        hints = _joined([doubt_fix(sentence) or _stated_fix(sentence) or _wanted(sentence)
                         for sentence in _sentences(text)])
    return dedupe_hints([h for h in hints if len(h) > MIN_HINT_CHARS], MAX_HINTS)


def _joined(fixes: list[str | None]) -> list[str]:
    """Adjacent stated fixes as one hint ("C is 100. 1000 is M."), while it stays short."""
    hints: list[str] = []
    joinable = False
    for fix in fixes:
        if fix is None:
            joinable = False
            continue
        if joinable and len(hints[-1]) + len(fix) < MAX_MERGED_CHARS:
            hints[-1] = f"{hints[-1]} {fix}"
        else:
            hints.append(fix)
        joinable = True
    return hints


def _page_text(observation: str) -> str:
    """A GUI observation's prose: element lines and page headers dropped, `text "..."` unwrapped."""
    lines = []
    for line in observation.splitlines():
        line = line.strip()
        unwrapped = _PAGE_TEXT.match(line)
        if unwrapped:
            lines.append(unwrapped.group(1))
        elif line and not _PAGE_NOISE.match(line):
            lines.append(line)
    return "\n".join(lines)


def _sentences(text: str) -> list[str]:
    return [s.strip() for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？])", line)
            if s.strip()]


def _wanted(sentence: str) -> str | None:
    """A sentence, in any language, that says what is wanted (in three words or more) or what is missing, by name.

    "La quiero en menos de 15 palabras.", "Potrzebuję po hiszpańsku, np. '...'", "「かもしれません」が抜けています。"
    """
    if sentence.endswith(("?", "？")) or judges_only(sentence):
        return None
    specific = bool(_SPECIFIC.search(sentence))
    if not ((_WANTS.search(sentence) and (specific or len(sentence.split()) >= 3))
            or (_MISSING.search(sentence) and specific)):
        return None
    return _sentence_hint(sentence)


def _stated_fix(sentence: str) -> str | None:
    """A sentence that says what is right ("No, it's 16.", "I thought it was Canberra?"), as a hint."""
    if judges_only(sentence):
        return None  # "that's so generic it hurts" states no fix
    doubt = _DOUBT.search(sentence)
    if doubt and len(doubt.group("fix").split()) <= 8 and not _JUDGES_ONLY.search(sentence):
        fix = doubt.group("fix").strip(" ,;:" + _QUOTES)
        if fix and not set(re.findall(r"[a-z']+", fix.lower())) <= _VERDICT_WORDS:
            return f"The answer should be {fix}."
    if sentence.endswith("?"):
        return None
    stripped = _LEADING_NO.sub("", sentence).strip()
    after_no = stripped != sentence.strip()
    if not stripped or _JUDGES_ONLY.search(stripped):
        return None
    words = re.findall(r"[^\W\d_]+(?:'[a-z]+)?|\d+", stripped.lower())
    content = [w for w in words if w not in _VERDICT_WORDS]
    if not content or not (_STATES.search(stripped) or (after_no and len(words) >= 3)):
        return None
    bare = _BARE_VALUE.match(stripped)  # "it's 36" says what the answer should be, in too few words
    return f"The answer should be {bare.group(1)}." if bare else _sentence_hint(stripped)


def _sentence_hint(sentence: str) -> str:
    sentence = " ".join(sentence.split()).strip(" " + _QUOTES)
    if len(sentence) > MAX_SENTENCE_CHARS:
        sentence = sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + "..."
    sentence = sentence[0].upper() + sentence[1:]
    return sentence if sentence[-1] in ".!?。！？" else sentence + "."
