"""What a next state says about the action before it: the pure half of the CPU judge.

A turn is read as three texts, the request (the last user message), the action (the
response text and its tool calls) and the next state with its role. This module holds
what can be read from them without a model:

- `material(turn)` gathers the three texts, with the tool calls parsed (from the turn's
  `tool_calls`, or from `<tool_call>{...}</tool_call>` in the text, as some chat
  templates emit them).
- `machine_verdict(m)` reads tool and environment output against the action that
  produced it, where rules are right: an error, a non-zero exit or a timeout is -1; an
  action that worked on something other than what the request named (a file, a quoted
  value, a city, the order of a copy, a name, a weekday, a unit, what a command's options
  print: `judge.targets`; a month, a version, a number or an identifier one slip away, a
  choice of a closed set: `judge.action_values`) is -1 whatever success string follows;
  HTTP error payloads and partly failing tests are -1; a write of nothing is -1; Python's
  `^` where a power was asked for is -1. None means the rules have nothing
  to say and the classifier decides.
- `rule_verdict(m)` adds the rules for what people write (`judge.people_state`: plain
  rejections, stated fixes after a "no", thinking aloud, follow-ups, approvals) and the
  agent-state rules (`judge.agent_state`).
- `cue_features(m)` are the lexical features the classifier reads beside the sentence
  embeddings (approval, doubt, contrast, requests for change or for more, ratings ...).

Decisions and why:

- A success string alone is never evidence ("Successfully wrote 22 bytes to
  tests/test_app.py" when tests/test_api.py was asked for is a reward hack): the target
  of the action is compared with the request before any output is believed.
- Grounding is by words, not embeddings: "Bern" is not "Berlin" and "parse_cfg" is not
  "parse_config", which sentence embeddings of short names cannot tell apart. A value is
  grounded when each of its content words is a prefix of a request word or the other way
  round ("def" grounds in "defined").
- Only arguments that name a target are compared (paths, cities, values to type or
  select, search terms); code, file contents and directions are not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from openclaw_rl.chat import call_parts, content_text
from openclaw_rl.judge.action_values import value_mismatch
from openclaw_rl.judge.agent_state import gui_done, gui_problem, neutral_notice, parameter_mismatch, short_doubt
from openclaw_rl.judge.people_state import people_verdict
from openclaw_rl.judge.targets import STOPWORDS, Miss, action_target_mismatch, grounded_share, words
from openclaw_rl.types import Turn

__all__ = ["CUE_NAMES", "MACHINE_CUE_NAMES", "PEOPLE_CUE_NAMES", "Material", "action_fix", "clicked_name",
           "cue_features",
           "machine_verdict", "material", "material_from_parts", "rule_verdict", "without_injections"]

MACHINE_ROLES = ("tool", "environment")
MAX_TEXT_CHARS = 2000


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Material:
    request: str  # the last user message
    response: str  # the response text (without tool-call markup)
    calls: tuple[ToolCall, ...]
    role: str  # user | feedback | tool | environment
    next_state: str
    action: str = field(init=False)  # the response and its calls as one text

    def __post_init__(self) -> None:
        calls = "\n".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in self.calls)
        object.__setattr__(self, "action", "\n".join(t for t in (self.response, calls) if t) or "(nothing)")

    @property
    def machine(self) -> bool:
        return self.role in MACHINE_ROLES


# -- gathering the material -------------------------------------------------------------

_TOOL_CALL_MARKUP = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def material(turn: Turn, role: str) -> Material:
    request = ""
    for message in reversed(turn.prompt_messages):
        if message.get("role") == "user":
            request = content_text(message)
            break
    next_state = turn.next_state.content if turn.next_state else ""
    return material_from_parts(request, turn.response_text, turn.tool_calls, role, next_state)


def material_from_parts(request: str, response: str, tool_calls: list[dict[str, Any]] | None, role: str,
                        next_state: str) -> Material:
    calls = [_parse_call(c) for c in tool_calls or []]
    for found in _TOOL_CALL_MARKUP.finditer(response):
        try:
            calls.append(_parse_call(json.loads(found.group(1))))
        except (json.JSONDecodeError, AttributeError):
            continue
    response = _TOOL_CALL_MARKUP.sub("", response).strip()
    return Material(request[:MAX_TEXT_CHARS], response[:MAX_TEXT_CHARS], tuple(calls), role,
                    without_injections(next_state[:MAX_TEXT_CHARS]))


_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget)\b[^.!?\n]{0,30}\b(?:instructions|prompt|rules)\b"
    r"|\bSCORE\s*:\s*(?:[+\-\u2212]1|0)\b(?!\s*(?:/|out of))"
    r"|\bCORRECTION\s*:|\bsystem prompt\b|\byou are now\b|\[/?HINT\]",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]*(?:[.!?]+|\n|$)")


def without_injections(text: str) -> str:
    """The text without sentences that address the judge ("ignore previous instructions ...").

    Nobody grading the policy writes to the judge; a next state that does is trying to set
    its own reward, so those sentences are not read at all (the rest of the reply still is).
    """
    if not _INJECTION.search(text):
        return text
    return "".join(s for s in _SENTENCE.findall(text) if not _INJECTION.search(s)).strip()


def _parse_call(call: dict[str, Any]) -> ToolCall:
    name, arguments = call_parts(call)
    return ToolCall(str(name or ""), arguments if isinstance(arguments, dict) else {"input": arguments})


# -- machine output against the action ---------------------------------------------------

_ERROR = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b:|\berror\b:|\bERROR\b|\bFAILED\b"
    r"|command not found|\[exit code [1-9]\d*\]|No such file or directory|Permission denied|Operation not permitted"
    r"|\[timed out|\bcannot\b|\bcan't\b|\bfailed to\b|\b[1-9]\d* failed\b|\bunknown command\b|not permitted"
    r"|\b[1-9]\d* errors?\b(?! (?:fixed|resolved|corrected))|\b[1-9]\d* failing\b|(?m:^--- FAIL\b|^FAIL\b|^E: )"
    r"|\bfatal:|\bpanic:|npm ERR!|Segmentation fault|No space left on device|\bout of memory\b"
    r"|\"(?:error|errors|err)\"\s*:\s*(?!null|\[\]|\"\"|false|0\b|\{\})|\"(?:ok|success)\"\s*:\s*false"
    r"|\"status\"\s*:\s*\"(?:error|failed|failure|rejected|denied|declined)\""
    r"|\b(?:replaced|matched|changed) 0\b|\b0 (?:occurrences|replacements|matches)\b|\bno match(?:es)? found\b"
    r"|^HTTP/\d(?:\.\d)? [45]\d\d\b|\"(?:status|status_code|code)\"\s*:\s*[45]\d\d\b",
    re.IGNORECASE,
)
_NO_ERROR = re.compile(r"\b0 (?:failed|errors?)\b|\bno (?:errors?|issues)\b", re.IGNORECASE)
_WRITE_TOOLS = re.compile(r"write|save|create", re.IGNORECASE)
_CONTENT_ARGS = ("content", "text", "data", "body")
_POWER_WORDS = re.compile(r"\bpower\b|\bsquared?\b|\bcubed?\b|\bexponent|\*\*|\bto the\b", re.IGNORECASE)
_SILENT_COMMANDS = frozenset("mkdir mv cp rm rmdir touch chmod chown ln cd export".split())  # quiet on success
_SHELL_TOOLS = ("bash", "shell", "run", "terminal")


_RATING = re.compile(r"\b([0-5](?:\.\d)?)\s*(?:/|out of)\s*5\b|(thumbs?[ -]up|👍)|(thumbs?[ -]down|👎)"
                     r"|((?:⭐|★|🌟)\ufe0f?){1,5}(?!\s*(?:⭐|★|🌟))", re.IGNORECASE)
_STAR = re.compile(r"⭐|★|🌟")


def rating_verdict(m: Material) -> tuple[int, str] | None:
    """An explicit rating in a user's or feedback next state: 4-5 of 5 or a thumbs up is +1, 0-2 or down -1."""
    if m.machine:
        return None
    found = _RATING.search(m.next_state)
    if found is None:
        return None
    if found.group(1) is not None or found.group(4) is not None:  # "4/5", or four star signs
        stars = float(found.group(1)) if found.group(1) is not None else len(_STAR.findall(found.group(0)))
        vote = 1 if stars >= 4 else -1 if stars <= 2 else 0
    else:
        vote = 1 if found.group(2) else -1
    return vote, f"a rating: {found.group(0)!r}"


_BARE_NO = re.compile(r"^\W*(?:no+|nope|nah|wrong|incorrect|false|nein|non|não)\W*$", re.IGNORECASE)


def rule_verdict(m: Material) -> tuple[int, str] | None:
    """The vote the rules give, with why, or None when the classifier decides."""
    if not m.machine and not m.next_state.strip():
        return 0, "nothing to read (empty, or only words addressed to the judge)"
    if not m.machine and _BARE_NO.match(m.next_state):
        return -1, "a bare no"
    doubt = short_doubt(m)
    if doubt:
        return -1, doubt
    ruled = rating_verdict(m) or machine_verdict(m)
    if ruled is None and (noise := neutral_notice(m)):
        return 0, noise
    if ruled is None and (done := gui_done(m)):
        return 1, done
    return ruled or people_verdict(m)


def machine_verdict(m: Material) -> tuple[int, str] | None:
    """-1 with the reason where tool or environment output shows the action failed or missed."""
    if not m.machine:
        return None
    if _ERROR.search(m.next_state) and not _only_negated_errors(m.next_state):
        return -1, "the output reports an error"
    missed = _action_miss(m)
    if missed:
        return -1, missed
    for call in m.calls:
        content = next((call.arguments[k] for k in _CONTENT_ARGS if k in call.arguments), None)
        if _WRITE_TOOLS.search(call.name) and isinstance(content, str) and not content.strip():
            return -1, f"{call.name} wrote nothing"
        code = call.arguments.get("code") or call.arguments.get("expression")
        if isinstance(code, str) and "^" in code and "**" not in code and _POWER_WORDS.search(m.request):
            return -1, "^ is exclusive or in Python, not a power"
    if re.search(r"\bwrote 0 bytes\b", m.next_state, re.IGNORECASE):
        return -1, "the write wrote nothing"
    return None


def action_fix(m: Material) -> str | None:
    """A hint naming what the request asked for, where a target or parameter rule found the action aimed elsewhere."""
    if not m.machine:
        return None
    missed = _action_miss(m)
    return missed.fix if isinstance(missed, Miss) else None


def _action_miss(m: Material) -> Miss | str | None:
    """The first rule that finds the action aimed elsewhere than the request (a `Miss`, with its fix) or a page
    that shows it did not take (a reason), in the order the verdict and its hint both read them."""
    return action_target_mismatch(m) or value_mismatch(m) or parameter_mismatch(m) or gui_problem(m)


def _only_negated_errors(text: str) -> bool:
    """'0 failed' or 'no errors' and nothing else that looks like an error."""
    return bool(_NO_ERROR.search(text)) and not _ERROR.search(_NO_ERROR.sub("", text))


def machine_features(m: Material) -> dict[str, float]:
    """Soft evidence about tool and environment output (zeros for user and feedback)."""
    out = {name: 0.0 for name in _MACHINE_FEATURES}
    if not m.machine:
        return out
    text = m.next_state
    lower = text.lower()
    request_words = words(m.request)
    out.update({
        "m_error": float(machine_verdict(m) is not None),
        "m_empty": float(lower.strip() in ("", "(no output)", "(the file is empty)")),
        "m_silent_command": float(any(_is_silent_command(c) for c in m.calls)),
        "m_tests_passed": float(bool(re.search(r"\b\d+ passed\b", lower)) and "failed" not in lower),
        "m_success_word": float(bool(re.search(
            r"\b(success\w*|passed|saved|added|done|ready|welcome|thank|wrote|edited|selected|typed|all checks)\b",
            lower))),
        "m_failure_word": float(bool(re.search(
            r"\b(invalid|wrong|incorrect|denied|must|required|not found|logged out|signed out|are you sure|"
            r"failed|unable|please (?:fill|enter)|try again)\b", lower))),
        "m_pending": float(bool(re.search(r"\b(wait|loading|generating|uploading|pending|queued|submitted|"
                                          r"will now be checked|scrolled)\b|^\[\d+\] \d+$", lower))),
        "m_request_overlap": _overlap(m.request, text),
        "m_numeric": float(bool(re.fullmatch(r"[\s\d.,\-+e\[\]()]+", text.strip())) and bool(text.strip())),
        "m_lines": min(len(text.splitlines()), 20) / 20,
        "m_clicked_grounded": grounded_share(clicked, request_words) if (clicked := clicked_name(m)) else 1.0,
        "m_page_grounded": grounded_share(page.group(1), request_words) if (page := _PAGE.search(text)) else 1.0,
    })
    return out


_CLICKED = re.compile(r"^Clicked \[\d+\] \w+ \"([^\"\n]+)\"", re.MULTILINE)
_PAGE = re.compile(r"^Page \"([^\"\n]*)\"", re.MULTILINE)


def clicked_name(m: Material) -> str | None:
    """The name of the element a GUI action clicked, as the environment reports it."""
    found = _CLICKED.search(m.next_state)
    return found.group(1) if found else None


def _is_silent_command(call: ToolCall) -> bool:
    """A shell call whose command prints nothing when it works (`mkdir out`, `mv a b`)."""
    command = str(next(iter(call.arguments.values()), ""))
    return call.name in _SHELL_TOOLS and command.split()[:1] != [] and command.split()[0] in _SILENT_COMMANDS


def _overlap(a: str, b: str) -> float:
    wa = {w for w in words(a) if w not in STOPWORDS and len(w) > 2}
    wb = set(words(b))
    return len(wa & wb) / len(wa) if wa else 0.0


_MACHINE_FEATURES = ("m_error", "m_empty", "m_silent_command", "m_tests_passed", "m_success_word", "m_failure_word",
                     "m_pending", "m_request_overlap", "m_numeric", "m_lines", "m_clicked_grounded", "m_page_grounded")

# -- what people write ------------------------------------------------------------------

_THANKS = (r"thanks?|thank (?:you|u)|thx|thnx|ty|tysm|cheers|appreciated?|merci|danke|gracias|grazie|obrigad[oa]"
           r"|dank (?:je|u)|arigatou?|spasibo|dziękuję|tack|kiitos|teşekkürler|xiexie|谢谢|ありがとう")
_CUES: dict[str, str] = {
    "thanks": rf"\b(?:{_THANKS})\b",
    "approval": r"\b(?:perfect\w*|great|exactly|correct|right|yes|yep|yup|yeah|awesome|nice|love|works?|worked"
                r"|good|excellent|brilliant|clear|helpful|accurate|spot on|well done|that did it|makes sense"
                r"|super|parfait|perfecto|esatto|klopt|genau|richtig|bien|bueno|bravo|exacto|certo|lovely|wonderful"
                r"|fantastic|amazing|beautiful|neat"
                r"|(?:exactly|just) (?:what|how) i (?:wanted|needed|asked for|meant))\b"
                r"|👍|✅|🙏",
    "negation": r"\b(?:no|nope|nah|not|never|wrong|incorrect|isn't|wasn't|doesn't|don't|didn't|can't|won't|nicht"
                r"|nein|non|não|falsch|mal)\b|n't\b|👎",
    "wrong": r"\b(?:wrong|incorrect|mistake|error|not right|not correct|backwards|false|typo|misspell\w*|bug)\b",
    "doubt": r"\bare you sure\b|\bi (?:thought|believe|think)\b|\b(?:isn't|wasn't|shouldn't) (?:it|that)\b"
             r"|\bpretty sure\b|\breally\?|\bdon't think\b|\bdoesn't (?:sound|look|seem)\b|\bcan't be\b|\bhmm+\b",
    "contrast": r"(?<!what )(?<!how )\bi (?:asked|said|wanted|meant|told you|need(?:ed)?)\b"
                r"|\binstead\b|\bnot what\b|, not\b"
                r"|\bthat'?s (?:not|a|an)\b|\bnothing to do\b|\bonly\b|\bstill\b",
    "modify": r"\b(?:too|shorter|longer|simpler|less|fewer|again|redo|rewrite|without|instead|just|only|stop"
              r"|don't|do not|you should|should be|should have|must|need to|have to|next time|way too|so much)\b",
    "imperative_any": r"(?:^|[.!?]\s+)(?:(?:please|pls|plz|just|also|now)\s+)?(?:use|write|give|make|add|remove|say"
                      r"|answer|explain|show|list|keep|start|stop|try|rewrite|redo|put|mention|tell|be|translate|avoid"
                      r"|fix|change|include|drop)\b",
    "more": r"\b(?:also|another|next|now|then|what about|how about|and|example|more|other|else|same|second|too)\b",
    "question": r"\?",
    "new_question": r"^\s*(?:(?:ok(?:ay)?|cool|great|thanks|thx|got it|i see|right|nice|and|so|now|then|also)\W+)*"
                    r"(?:what|which|who|whom|whose|when|where|why|how|can|could|would|will|is|are|do|does|did|should"
                    r"|tell me|give me|show me|now|next|and)\b[^?]*\?\s*$",
    "bare_no": r"^\W*(?:no+|nope|nah|wrong|incorrect|false|nein|non|não)\W*$",
    "starts_and": r"^\s*(?:and|now|next|ok(?:ay)?[,.]? (?:and|now|so|what|how)|so|then|cool|got it|i see)\b",
    "sarcasm": r"\b(?:wow|so helpful|truly|thanks for nothing|oh great|very creative|not\.|sure,? buddy|genius"
               r"|brilliant\.|yeah right)\b|\. not\b",
    "rating_low": r"\b[0-2](?:\.\d)?\s*/\s*5\b|\b[0-2] out of 5\b|thumbs? down|\bunusable\b|\bunhelpful\b",
    "rating_high": r"\b[4-5](?:\.\d)?\s*/\s*5\b|\b[4-5] out of 5\b|thumbs? up",
    "laughter": r"\b(?:lol|haha\w*|lmao|rofl)\b",
    "filler": r"^\s*(?:h+m+|ok(?:ay)?|k|\.\.\.|brb|hm+ ok|interesting|seen|noted|sure)\W*$",
    "language": r"\b(?:english|spanish|french|german|italian|chinese|japanese|portuguese|dutch|russian|korean"
                r"|python|javascript|java|sql|bash|formal|casual|plain|sentences?|words?|lines?|bullet\w*|emojis?"
                r"|hashtags?|markdown|headings?)\b",
    "imperative": r"^\s*(?:(?:please|pls|plz|just|also)\s+)?(?:use|write|give|make|add|remove|say|answer|explain"
                  r"|show|list|keep|start|stop|don't|do not|try|rewrite|redo|put|mention|tell|be|translate|avoid)\b",
}
_CUE_PATTERNS = {name: re.compile(pattern, re.IGNORECASE | re.MULTILINE) for name, pattern in _CUES.items()}

PEOPLE_CUE_NAMES = tuple(f"c_{name}" for name in _CUES) + ("c_new_number", "c_request_overlap",
                                                           "c_response_overlap", "c_words")
MACHINE_CUE_NAMES = _MACHINE_FEATURES
CUE_NAMES = PEOPLE_CUE_NAMES + MACHINE_CUE_NAMES


def cue_features(m: Material) -> dict[str, float]:
    """Lexical evidence, in CUE_NAMES order: cue counts (capped), overlaps, length, machine evidence."""
    text = m.next_state.replace("\u2019", "'")
    out = {f"c_{name}": min(len(p.findall(text)), 3) / 3 for name, p in _CUE_PATTERNS.items()}
    response_numbers = set(re.findall(r"\d+(?:\.\d+)?", m.action))
    stated = set(re.findall(r"\d+(?:\.\d+)?", text))
    out["c_new_number"] = float(bool(response_numbers) and bool(stated - response_numbers))
    out["c_request_overlap"] = _overlap(m.request, text)
    out["c_response_overlap"] = _overlap(m.action, text)
    out["c_words"] = min(len(text.split()), 40) / 40
    out.update(machine_features(m))
    return out
