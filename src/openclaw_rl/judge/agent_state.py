"""Agent next states the lexical cues misread: parameters, GUI state, system noise, short doubts.

Rules of the default judge (called from `judge.evidence.rule_verdict`, before the
classifiers), each for a kind of next state that a success word or a question mark
made the classifiers misread (issue 40; measured on tests/data/judge_agent_states.jsonl):

- `parameter_mismatch`: a call that writes to an e-mail address the request did not name,
  or whose numbers (a quantity, an amount, a time, a date, an
  option of a shell command such as `-n 200` or `-mtime +30`) are not numbers the
  request named is aimed at something else, whatever success its output reports
  ("Alarm set for 7:30" when 6:30 was asked for). Numbers are compared with number
  words ("three"), month names ("March 12" is 3 and 12) and 12-hour times ("7pm" is 19)
  read from the request; a year counts only when the request names one.
- `gui_problem`: a GUI observation that shows a validation message (an `alert`, an
  element marked `invalid=true`, a status that states a limit such as "too large" or
  "already exists"), a field that still shows another value than the one the action
  typed or set, or a checkbox or switch left in the state the request asked to change.
- `neutral_notice`: tool or environment output that only says work is queued, pending or
  in progress, or broadcasts something unrelated ("[broadcast] the runners restart at
  18:00"), and reports no result, says nothing about the action: 0, not progression.
- `short_doubt`: a short reply that doubts the answer by naming something the answer did
  not have ("wait, isn't it Canberra?", "don't spiders have eight?") is a correction,
  and `doubt_fix` turns it into a hint ("The answer should be Canberra."). A doubt that
  adds to the answer ("wasn't he also a journalist?") is a follow-up, not a correction.

Decisions and why: these are rules, not classifier features, because each is about the
relation between two texts (the call and the request, the action and the page) that
sentence similarities do not carry, and a rule can say why. Each errs towards silence:
it speaks only where the structure it reads (a number, an element line, an opener) is
present, and otherwise leaves the turn to the classifiers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from openclaw_rl.judge.doubts import doubt_fix, short_doubt
from openclaw_rl.judge.targets import Miss

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material

__all__ = ["doubt_fix", "gui_problem", "neutral_notice", "parameter_mismatch", "short_doubt", "validation_messages"]

# -- numbers the request names and numbers the action uses --------------------------------

_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {"thirty": 30, "forty": 40, "fifty": 50, "hundred": 100,
                                                      "dozen": 12, "half": 0.5, "a couple": 2, "single": 1}
_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS |= {m[:3]: i for m, i in list(_MONTHS.items())}
_PM = re.compile(r"\b(\d{1,2})(?::\d{2})?\s*pm\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:19|20)\d{2}\b")
_DATE = re.compile(r"\b(\d{4})-(\d{1,2})(?:-(\d{1,2}))?\b")  # a day, or a month ("2025-05")
_SKIPPED_KEYS = frozenset("id element_id element index ref page offset limit max_results top_k timeout timeout_s seed "
                          "code expression content text body message data subject script".split())
_SHELL_KEYS = ("command", "cmd", "input")
_CODE = re.compile(r"[=(){}\[\];'\"]")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_SHELL_NUMBER = re.compile(r"(?:^|\s|=)\+?(\d+(?:\.\d+)?)(?=\s|$|[;&|])")


def _numbers(text: str) -> set[float]:
    return {float(n.replace(",", "")) for n in re.findall(r"(?<![\w.])\d+(?:[.,]\d+)?", text)}


def request_numbers(request: str) -> set[float]:
    """Every number the request names: digits, number words, month numbers, 12-hour times as 24-hour."""
    lower = request.lower()
    found = _numbers(re.sub(r"(\d)([a-z])", r"\1 \2", lower))
    words = set(re.findall(r"[a-z]+", lower))
    found |= {float(v) for w, v in _NUMBER_WORDS.items() if w in words or (" " in w and w in lower)}
    found |= {float(v) for w, v in _MONTHS.items() if w in words}
    found |= {float(int(h) % 12 + 12) for h in _PM.findall(lower)}
    return found


def _action_numbers(key: str, value: object, years: bool) -> set[float]:
    if isinstance(value, bool) or key.lower() in _SKIPPED_KEYS or key.lower().endswith("_id"):
        return set()
    if isinstance(value, int | float):
        return {float(value)}
    if not isinstance(value, str):
        return set()
    if key.lower() in _SHELL_KEYS:  # the values of a command's options and arguments, not its flags
        command = re.sub(r"\S*[/.]\S*|'[^']*'|\"[^\"]*\"", " ", value)
        return {float(n) for n in _SHELL_NUMBER.findall(command)}
    if len(value) > 60 or _CODE.search(value):  # code or file text (an edit's old line) is not a parameter
        return set()
    found = set()
    for year, month, day in _DATE.findall(value):
        found |= {float(month)} | ({float(day)} if day else set()) | ({float(year)} if years else set())
    value = _DATE.sub(" ", value)
    found |= {n for n in _numbers(value.replace(":", " ")) if n != 0}
    return found


def parameter_mismatch(m: Material) -> Miss | None:
    """Why a call's numbers are not the request's, or None (also when the request names no number)."""
    addresses = set(_EMAIL.findall(m.request.lower()))
    for call in m.calls:
        for key, value in call.arguments.items():
            used = set(_EMAIL.findall(value.lower())) if isinstance(value, str) and addresses else set()
            if used - addresses:
                return Miss(f"{call.name} was given {key}={value!r}; the request named {sorted(addresses)[0]}",
                            f"Use {sorted(addresses)[0]}, the address the request named, not {value}.")
    asked = request_numbers(m.request)
    if not asked:
        return None
    years = bool(_YEAR.search(m.request))
    for call in m.calls:
        for key, value in call.arguments.items():
            stray = sorted(n for n in _action_numbers(key, value, years) if n not in asked)
            if stray:
                named = ", ".join(f"{n:g}" for n in sorted(asked)[:4])
                return Miss(f"{call.name} was given {key}={value!r}; the request names no {stray[0]:g}",
                            f"Use the values the request gave ({named}), not {stray[0]:g}.")
    return None


# -- what a GUI page shows after the action ------------------------------------------------

_ALERT = re.compile(r"^\s*alert \"([^\"\n]+)\"", re.MULTILINE)
_STATUS = re.compile(r"^\s*(?:status|text) \"([^\"\n]+)\"", re.MULTILINE)
_LIMIT = re.compile(r"\b(?:too (?:large|big|long|short|small|many|few)|exceeds?|maximum|minimum|at least|at most"
                    r"|already (?:exists|taken|in use)|not allowed|not supported|unsupported|invalid|required"
                    r"|incomplete)\b", re.IGNORECASE)
_SUCCESS = re.compile(r"\b(?:saved|success\w*|done|added|sent|updated|complete[d]?|created|downloaded|finished)\b",
                      re.IGNORECASE)
_ELEMENT = re.compile(r"^\s*\[(\d+)\] (\w+) \"[^\"\n]*\"(.*)$", re.MULTILINE)
_VALUE = re.compile(r"\bvalue=\"([^\"\n]*)\"")
_CHECKED = re.compile(r"\bchecked=(true|false)\b")
_TURN_ON = re.compile(r"\b(?:turn on|switch on|enable|activate|tick|check|opt in|select)\b", re.IGNORECASE)
_TURN_OFF = re.compile(r"\b(?:turn off|switch off|disable|deactivate|untick|uncheck|opt out|deselect)\b",
                       re.IGNORECASE)
_SET_KEYS = ("text", "value", "option")


def validation_messages(observation: str) -> list[str]:
    """The validation messages a page shows: its alerts, and status lines that state a limit."""
    alerts = [a for a in _ALERT.findall(observation) if not _SUCCESS.search(a)]
    limits = [s for s in _STATUS.findall(observation) if _LIMIT.search(s) and not _SUCCESS.search(s)]
    return alerts + limits


_ELEMENT_KEYS = ("element_id", "element", "id", "ref", "index")
_ACTED_ON = re.compile(r"^(?:Clicked|Typed \"[^\"\n]*\" into|Selected \"[^\"\n]*\" in|Checked|Unchecked|Toggled)"
                       r" \[(\d+)\]",
                       re.MULTILINE)


def _element(arguments: dict, observation: str) -> int | None:
    """The element a GUI action acted on: its argument under any usual key, else the one the page reports."""
    given = next((arguments[k] for k in _ELEMENT_KEYS if isinstance(arguments.get(k), int)
                  and not isinstance(arguments.get(k), bool)), None)
    reported = _ACTED_ON.search(observation)
    return given if given is not None else int(reported.group(1)) if reported else None


def gui_problem(m: Material) -> str | None:
    """Why an environment's page shows that the action did not take, or None."""
    if m.role != "environment":
        return None
    messages = validation_messages(m.next_state)
    if messages:
        return f"the page shows a validation message: {messages[0]!r}"
    if re.search(r"\binvalid=true\b", m.next_state):
        return "the page marks a field invalid"
    elements = {int(i): (kind, rest) for i, kind, rest in _ELEMENT.findall(m.next_state)}
    for call in m.calls:
        target = _element(call.arguments, m.next_state)
        if not isinstance(target, int) or target not in elements:
            continue
        kind, rest = elements[target]
        given = next((call.arguments[k] for k in _SET_KEYS if isinstance(call.arguments.get(k), str)), None)
        shown = _VALUE.search(rest)
        if given is not None and shown and shown.group(1).strip().lower() != given.strip().lower():
            return f"[{target}] still shows {shown.group(1)!r}, not {given!r}"
        checked = _CHECKED.search(rest)
        wanted = None if _TURN_ON.search(m.request) and _TURN_OFF.search(m.request) else \
            True if _TURN_ON.search(m.request) else False if _TURN_OFF.search(m.request) else None
        if checked and wanted is not None and (checked.group(1) == "true") != wanted:
            return f"[{target}] {kind} is left checked={checked.group(1)}"
    return None


# -- output that says nothing about the action -------------------------------------------

_NOTICE = re.compile(
    r"\bqueued\b|\bin (?:the )?queue\b|position in queue|\bsubmitted to\b|accepted for delivery|being prepared"
    r"|will be notified|\bprogress:?\s*\d{1,2}\s*%|\bestimated\b|\bmaintenance\b|check back|\bbroadcast\b"
    r"|^\s*notice\b|\bdeprecated\b|\bwaiting for\b|please wait|\bin progress\b|\bETA\b|time remaining"
    r"|this (?:may|might|could|can|will) take|may take a (?:while|few|several|moment)|\bcollecting\b"
    r"|session (?:will |is about to )?expire|will expire in|reload to update|new version\b[^\n]*\bavailable"
    r"|status:\s*(?:running|pending|starting|in[_ ]progress|scheduled)\b", re.IGNORECASE | re.MULTILINE)
_RESULT = re.compile(r"\b(?:finished|completed?|done|healthy|passed|saved|downloaded|created|succeeded|ready)\b"
                     r"|\b\d+ (?:passed|rows?|results?|files?)\b", re.IGNORECASE)
_WORKING = re.compile(r"\b(?:done|complete|completed|progress|uploading|downloading|preparing|processing|loading"
                      r"|building|copying|syncing|indexing|installing|exporting|importing|generating|rendering"
                      r"|encoding|compressing|extracting|scanning|running|pending)\b|\.\.\.|\u2026", re.IGNORECASE)
_PERCENT = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d+)?)\s?%")
_FRACTION = re.compile(r"[\[(]\s*(\d+)\s*/\s*(\d+)\b")


def _progress_line(line: str) -> bool:
    """A line that reports work under way: a working word with a share below 100% or a count short of its total."""
    if not _WORKING.search(line):
        return False
    return any(float(p) < 100 for p in _PERCENT.findall(line)) or any(
        int(done) < int(total) for done, total in _FRACTION.findall(line))


def neutral_notice(m: Material) -> str | None:
    """Why machine output is only a pending state, progress or an unrelated notice, or None."""
    if not m.machine:
        return None
    lines = m.next_state.splitlines()
    progress = [line for line in lines if _progress_line(line)]
    found = _NOTICE.search(m.next_state)
    said = found.group(0).strip() if found else progress[0].strip()[:60] if progress else None
    rest = "\n".join(line for line in lines if line not in progress)
    if said is None or _RESULT.search(rest):
        return None
    return f"the output only says {said!r}, nothing about the action's result"
