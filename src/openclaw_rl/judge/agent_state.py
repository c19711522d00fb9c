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
  read from the request; a year counts only when the request names one, a date only
  when it names a day or month, and a duration counts in the units a call may use ("one
  hour" is also 60 and 3600). Product codes ("A4-80G-5R", `sku`) are no amounts, and a
  count the JSON output reports (`"quantity": 2`) must be one the request named.
- `gui_problem`: a GUI observation that shows a validation message (an `alert`, an
  element marked `invalid=true`, a status, text or dialog line that states a limit or a
  failure such as "too large", "already exists", "do not match", "please use the
  format"), a field that still shows another value than the one the action typed or set,
  a disabled element the action acted on, a checkbox or switch the request names left in
  the state it asked to change, or a number field it names showing another number. A
  page is read as a page whatever role brought it (tool output shaped as an accessibility
  tree too, `looks_like_page`). `gui_done` is the converse: the switch the request names
  now in the asked state, or the value the request gave now shown, is +1.
- `neutral_notice`: tool or environment output that only says work is queued, pending or
  in progress (also as JSON: `"status": "running"`, an `eta`), scheduled for later
  ("results will be posted when done"), waits for a lock, renews a session, sends a
  heartbeat, or broadcasts something unrelated ("[notice] ...", "[broadcast] the runners
  restart at 18:00"), and reports no result, says nothing about the action: 0.
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
from openclaw_rl.judge.lexicons import MONTHS
from openclaw_rl.judge.targets import Miss, payload_fields

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material

__all__ = ["doubt_fix", "gui_done", "gui_problem", "is_page", "looks_like_page", "neutral_notice", "parameter_mismatch",
           "request_numbers", "short_doubt", "validation_messages"]

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
                          "code expression content text body message data subject script sku isbn barcode serial "
                          "model reference".split())
_SHELL_KEYS = ("command", "cmd", "input")
_PRODUCT_CODE = re.compile(r"(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+")
_CODE = re.compile(r"[=(){}\[\];'\"]")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_MONTH_NAME = re.compile(r"(?<![^\W\d_])(?:"
                         + "|".join(sorted((n for n in MONTHS if len(n) > 3), key=len, reverse=True))
                         + r")(?![^\W\d_])|\d\s*(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)\b"
                         r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)\w*\.?\s*\d", re.IGNORECASE)
_DAY_MONTH = re.compile(r"\b\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?\b")
_COUNT_KEYS = re.compile(r"^(?:quantity|qty|count|guests|party_size|people|persons|seats|tickets|nights|adults|rooms"
                         r"|copies|boxes|units)$", re.IGNORECASE)
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
    return found | _durations(lower)


_DURATION = re.compile(r"\b(\d+(?:[.,]\d+)?|an?|one|two|three|four|five|six|half an?|a half)\s*"
                       r"(hours?|hrs?|h|minutes?|mins?|seconds?|secs?|days?|weeks?)\b")
_PER_UNIT = {"h": (60.0, 3600.0), "m": (60.0, 1 / 60), "s": (1 / 60,), "d": (24.0, 1440.0), "w": (7.0, 168.0)}


def _durations(request: str) -> set[float]:
    """A duration in the request in the units a call may give it in: "one hour" is also 60 (minutes) and 3600."""
    found = set()
    for amount, unit in _DURATION.findall(request):
        count = {"a": 1, "an": 1, "half a": 0.5, "half an": 0.5, "a half": 0.5}.get(amount) or _NUMBER_WORDS.get(
            amount) or float(amount.replace(",", "."))
        found |= {float(count)} | {count * factor for factor in _PER_UNIT[unit[0]]}
    return found


def _action_numbers(key: str, value: object, years: bool, dates: bool = True) -> set[float]:
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
    if _PRODUCT_CODE.fullmatch(value.strip()):  # "A4-80G-5R", "SQ-118": a code, not an amount
        return set()
    found = set()
    for year, month, day in _DATE.findall(value) if dates else ():  # a date only where the request gave one
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
    dates = bool(_DATE.search(m.request) or _DAY_MONTH.search(m.request) or _MONTH_NAME.search(m.request))
    named = ", ".join(f"{n:g}" for n in sorted(asked)[:4])
    for call in m.calls:
        for key, value in call.arguments.items():
            stray = sorted(n for n in _action_numbers(key, value, years, dates) if n not in asked)
            if stray:
                return Miss(f"{call.name} was given {key}={value!r}; the request names no {stray[0]:g}",
                            f"Use the values the request gave ({named}), not {stray[0]:g}.")
    for key, value in payload_fields(m.next_state).items():  # the count the outcome reports
        if _COUNT_KEYS.search(key) and isinstance(value, int | float) and not isinstance(value, bool) \
                and float(value) not in asked:
            return Miss(f"the output shows {key}={value}; the request names no {value:g}",
                        f"Use the values the request gave ({named}), not {value:g}.")
    return None


# -- what a GUI page shows after the action ------------------------------------------------

_ALERT = re.compile(r"^\s*alert \"([^\"\n]+)\"", re.MULTILINE)
_STATUS = re.compile(r"^\s*(?:status|text|dialog|alertdialog|tooltip|note) \"([^\"\n]+)\"", re.MULTILINE)
_LIMIT = re.compile(r"\b(?:too (?:large|big|long|short|small|many|few)|exceeds?|maximum|minimum|at least|at most"
                    r"|already (?:exists|taken|in use)|not allowed|not supported|unsupported|invalid|required"
                    r"|incomplete|(?:do|does|did)(?: not|n't) match|mismatch|please use|use the format|wrong format"
                    r"|locked|not available|unavailable|expired|try again|could not|couldn't"
                    r"|cannot|can't|must|error|failed|incorrect|wrong|not valid)\b", re.IGNORECASE)
_SUCCESS = re.compile(r"\b(?:saved|success\w*|done|added|sent|updated|complete[d]?|created|downloaded|finished)\b",
                      re.IGNORECASE)
_ELEMENT = re.compile(r"^\s*\[(\d+)\] (\w+) \"([^\"\n]*)\"(.*)$", re.MULTILINE)  # number, kind, name, the rest
_VALUE = re.compile(r"\bvalue=\"([^\"\n]*)\"")
_CHECKED = re.compile(r"\bchecked=(true|false)\b")
_TURN_ON = re.compile(r"\b(?:turn on|switch on|enable|activate|tick|check|opt in|select|allow|unmute|subscribe)\b",
                      re.IGNORECASE)
_TURN_OFF = re.compile(r"\b(?:turn off|switch off|disable|deactivate|untick|uncheck|opt out|deselect|stop|no longer"
                       r"|don't want|disallow|block|mute|unsubscribe)\b", re.IGNORECASE)
_TOGGLES = ("checkbox", "switch", "radio", "toggle")
_FIELDS = ("spinbutton", "textbox", "slider", "combobox", "searchbox")
_PAGE = re.compile(r"^\s*(?:Page \"|\[\d+\] \w+ \")", re.MULTILINE)
_SET_KEYS = ("text", "value", "option")


def validation_messages(observation: str) -> list[str]:
    """The validation messages a page shows: its alerts, and status, text or dialog lines that state a limit."""
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


def is_page(m: Material) -> bool:
    """Whether machine output is a GUI page (an accessibility tree), whatever role brought it."""
    return looks_like_page(m.next_state, m.role)


def looks_like_page(observation: str, role: str) -> bool:
    """An environment's observation, or tool output shaped as a page (`Page "..."`, `[12] button "..."` lines)."""
    return role == "environment" or (role in ("tool", "environment") and bool(_PAGE.search(observation)))


def _wanted_state(request: str) -> bool | None:
    """Whether the request asks to turn something on (True) or off (False); None when neither or both."""
    on, off = _TURN_ON.search(request), _TURN_OFF.search(request)
    return None if bool(on) == bool(off) else bool(on)


def _elements(observation: str) -> dict[int, tuple[str, str, str]]:
    """The page's elements by number: (kind, name, the rest of the line)."""
    return {int(i): (kind, name, rest) for i, kind, name, rest in _ELEMENT.findall(observation)}


def gui_problem(m: Material) -> str | None:
    """Why a page shows that the action did not take, or None."""
    if not is_page(m):
        return None
    messages = validation_messages(m.next_state)
    if messages:
        return f"the page shows a validation message: {messages[0]!r}"
    if re.search(r"\b(?:aria-)?invalid=\"?true\b", m.next_state):
        return "the page marks a field invalid"
    elements = _elements(m.next_state)
    for call in m.calls:
        target = _element(call.arguments, m.next_state)
        if not isinstance(target, int) or target not in elements:
            continue
        kind, _, rest = elements[target]
        if re.search(r"\bdisabled\b(?!=false)", rest):
            return f"[{target}] {kind} is disabled: the action could not take"
        given = next((call.arguments[k] for k in _SET_KEYS if isinstance(call.arguments.get(k), str)), None)
        shown = _VALUE.search(rest)
        if given is not None and shown and shown.group(1).strip().lower() != given.strip().lower():
            return f"[{target}] still shows {shown.group(1)!r}, not {given!r}"
    return _toggle_left(m, elements) or _field_left(m, elements)


def _named_in_request(name: str, request: str) -> bool:
    asked = {w for w in re.findall(r"[^\W\d_]{4,}", request.lower())}
    return any(w[:5] == a[:5] for w in re.findall(r"[^\W\d_]{4,}", name.lower()) for a in asked)


def _toggle_left(m: Material, elements: dict[int, tuple[str, str, str]]) -> str | None:
    """A checkbox or switch the request names (or the action clicked) left in the state the request asked to change.

    A `Miss` naming the request's element when the action acted on another one, else a plain reason.
    """
    wanted = _wanted_state(m.request)
    acted = {_element(call.arguments, m.next_state) for call in m.calls}
    for number, (kind, name, rest) in elements.items():
        checked = _CHECKED.search(rest)
        if kind not in _TOGGLES or not checked or wanted is None:
            continue
        if (number in acted or _named_in_request(name, m.request)) and (checked.group(1) == "true") != wanted:
            why = f"[{number}] {kind} {name!r} is left checked={checked.group(1)}"
            if number in acted:
                return why  # the right element, and the page says it did not take: no target to name
            return Miss(why, f"{'Tick' if wanted else 'Untick'} [{number}] {kind} {name!r}, the one the request "
                             f"named; it is still {'unchecked' if wanted else 'checked'}.")
    return None


def _field_left(m: Material, elements: dict[int, tuple[str, str, str]]) -> str | None:
    """A number field the request names that shows a number other than any the request gave (a `Miss` naming
    the request's value when the action acted on another element, a "+" button, say)."""
    asked = request_numbers(m.request)
    acted = {_element(call.arguments, m.next_state) for call in m.calls}
    for number, (kind, name, rest) in elements.items():
        shown = _VALUE.search(rest)
        if kind not in _FIELDS or not shown or not asked or not _named_in_request(name, m.request) \
                or not re.fullmatch(r"\d+(?:[.,]\d+)?", shown.group(1).strip()):
            continue
        if float(shown.group(1).replace(",", ".")) not in asked:
            value = ", ".join(f"{n:g}" for n in sorted(asked)[:2])
            why = f"[{number}] {name!r} still shows {shown.group(1)}, not {value}"
            return why if number in acted else Miss(
                why, f"Set {name} to {value}, as the request says; the page still shows {shown.group(1)}.")
    return None


def gui_done(m: Material) -> str | None:
    """Why a page shows the change the request asked for, or None: the switch in the asked state, the value set."""
    if not is_page(m) or gui_problem(m):  # gui_problem reads the validation messages first
        return None
    elements = _elements(m.next_state)
    for call in m.calls:
        target = _element(call.arguments, m.next_state)
        if target not in elements:
            continue
        kind, name, rest = elements[target]
        checked, shown = _CHECKED.search(rest), _VALUE.search(rest)
        wanted = _wanted_state(m.request)
        if kind in _TOGGLES and checked and wanted is not None and _named_in_request(name, m.request) \
                and (checked.group(1) == "true") == wanted:
            return f"[{target}] {kind} {name!r} is now checked={checked.group(1)}, as asked"
        given = next((call.arguments[k] for k in _SET_KEYS if isinstance(call.arguments.get(k), str)), None)
        if given and shown and shown.group(1).strip().lower() == given.strip().lower() \
                and given.strip().lower() in m.request.lower():
            return f"[{target}] {name!r} now shows {given!r}, the value the request gave"
    return None


# -- output that says nothing about the action -------------------------------------------

_NOTICE = re.compile(
    r"\bqueued\b|\bin (?:the )?queue\b|position in queue|\bsubmitted to\b|accepted for delivery|being prepared"
    r"|will be notified|\bprogress:?\s*\d{1,2}\s*%|\bestimated\b|\bmaintenance\b|check back|\bbroadcast\b"
    r"|^\s*notice\b|\bdeprecated\b|\bwaiting for\b|please wait|\bin progress\b|\bETA\b|time remaining"
    r"|this (?:may|might|could|can|will) take|may take a (?:while|few|several|moment)|\bcollecting\b"
    r"|session (?:will |is about to )?expire|will expire in|reload to update|new version\b[^\n]*\bavailable"
    r"|\bstatus\"?\s*[:=]\s*\"?(?:running|pending|starting|in[_ ]progress|scheduled|queued|waiting|processing"
    r"|accepted|submitted)\b|\"eta(?:_\w+)?\"\s*:|\bscheduled on\b|\bjobs? ahead\b|\bwill be (?:posted|sent|available"
    r"|ready|emailed|delivered)\b|^\s*\[(?:notice|system|info|broadcast|announcement|maintenance)\]"
    r"|\bwaiting for (?:cache )?lock\b|\bsession (?:was |has been )?(?:renewed|extended|refreshed)\b|\bheartbeat\b"
    r"|\bkeep-?alive\b|\bstill (?:working|running|processing|pending|in progress)\b|\bretrying in\b"
    r"|\bhas been received\b|\bwe(?:'ll| will) (?:email|notify|let you know|send you)\b|\b202 accepted\b"
    r"|\bin the background\b|\bare you still there\b|\bidle for\b",
    re.IGNORECASE | re.MULTILINE)
_FUTURE = re.compile(r"\b(?:when|once|until|after|as soon as)\s+(?:it(?:'s| is)\s+|they(?:'re| are)\s+)?"
                     r"(?:done|finished|complete[d]?|ready)\b|\bwill be \w+",
                     re.IGNORECASE)  # "results ... when done": not yet
_RESULT = re.compile(r"\b(?:finished|completed?|done|healthy|passed|saved|downloaded|created|succeeded|ready|placed"
                     r"|booked|confirmed|ordered|paid|shipped|delivered|sent|applied|deleted|removed|updated|added)\b"
                     r"|\b\d+ (?:passed|rows?|results?|files?)\b", re.IGNORECASE)
_WORKING = re.compile(r"\b(?:done|complete|completed|progress|uploading|downloading|preparing|processing|loading"
                      r"|building|copying|syncing|indexing|installing|exporting|importing|generating|rendering"
                      r"|encoding|compressing|extracting|scanning|running|pending)\b|\.\.\.|\u2026", re.IGNORECASE)
_PERCENT = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d+)?)\s?%")
_FRACTION = re.compile(r"[\[(]\s*(\d+)\s*/\s*(\d+)\b|\b(\d+)\s*/\s*(\d+)\s+(?:files|items|rows|records|objects"
                       r"|chunks|parts|tests|steps|photos|images|pages|documents|messages|packages|layers)\b")


def _progress_line(line: str) -> bool:
    """A line that reports work under way: a working word with a share below 100% or a count short of its total."""
    if not _WORKING.search(line):
        return False
    fractions = [(a or c, b or d) for a, b, c, d in _FRACTION.findall(line)]
    return any(float(p) < 100 for p in _PERCENT.findall(line)) or any(
        int(done) < int(total) for done, total in fractions)


def neutral_notice(m: Material) -> str | None:
    """Why machine output is only a pending state, progress or an unrelated notice, or None."""
    if not m.machine:
        return None
    lines = m.next_state.splitlines()
    progress = [line for line in lines if _progress_line(line)]
    found = _NOTICE.search(m.next_state)
    said = found.group(0).strip() if found else progress[0].strip()[:60] if progress else None
    rest = _FUTURE.sub(" ", "\n".join(line for line in lines if line not in progress))
    if said is None or _RESULT.search(rest):
        return None
    return f"the output only says {said!r}, nothing about the action's result"
