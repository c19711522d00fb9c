"""What an action was aimed at, against what the request named: the target rules of the machine judge.

Called from `judge.evidence.machine_verdict` on tool and environment output; each returns
why the action was aimed at something other than what the request named, or None. A
success string that follows is no evidence then ("SMS delivered to Martin" when Marta was
asked for):

- `target_mismatch`: a file other than the one asked for (the test file of an asked-for
  module counts as that module when the call runs tests), the right files in the
  opposite order, an argument that names something else (a city, a value to type, a
  search term), an outcome line naming another item. A currency code is grounded by the
  currency's name or symbol ("JPY" by "yen").
- `named_mismatch`: a name-like argument (one with a capital or a digit, under any key but
  free text, and not a title the call makes up) whose words the request does not name:
  "Martin" for Marta, "Q2 pitch v2" for v3, "Daily Digest" for "Weekly Deals".
- `weekday_mismatch`: a weekday in the call, or only other weekdays in the outcome, when
  the request named a weekday (in any of a dozen languages).
- `unit_mismatch`: a unit of the dimension the request measured in that the request did
  not name (`unit="lb"` for "2 kg"), or the request's number with another unit of the
  same dimension in the outcome (a conversion changes the number, a mistake keeps it).
- `shell_intent_mismatch`: a command whose options print something other than what was
  asked: a count (`grep -c`, `| wc -l`) where lines were asked for, file names
  (`grep -l`), the non-matching lines (`grep -v`), the first lines for the last ones
  (`head` / `tail`), or the opposite sort order.

Over 400 lines: the five target rules share one set of grounding helpers (words, files,
names, currency codes, payload fields), which would otherwise be split from the rules
that read them.

Decisions and why: names are compared by words, not embeddings, which cannot tell "Bern"
from "Berlin" or "v2" from "v3"; all-capital codes the lexicons do not know (airports,
tickers) are not compared, since a request rarely spells them; each rule speaks only
when the request names a thing of the same kind (a weekday, a unit, a count), so a
request that names none leaves the turn to the other rules and the classifier.
"""

from __future__ import annotations

import json
import re
import unicodedata
from difflib import SequenceMatcher
from typing import TYPE_CHECKING

from openclaw_rl.judge.lexicons import ALIASES, COUNT_WORDS, UNITS, WEEKDAY_ABBREVIATIONS, WEEKDAYS

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material, ToolCall

__all__ = ["STOPWORDS", "Miss", "action_target_mismatch", "files", "grounded_share", "named_mismatch", "payload_fields",
           "shell_intent_mismatch", "target_mismatch", "unit_mismatch", "weekday_mismatch", "words"]

FILE = re.compile(
    r"(?<![\w.-])(/?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|txt|md|json|ya?ml|csv|log|sh|sql|js|ts|html|css|toml|cfg|ini|bak"
    r"|gz|zip|tar|xml|go|rs|c|h|cpp|java|rb|lock|env|conf|ipynb|tsx|jsx|pdf|docx?|xlsx?|pptx?|odt|rtf|png|jpe?g"
    r"|gif|svg|webp|mp3|mp4|wav|parquet))\b",
    re.IGNORECASE,
)
_TARGET_ARGS = frozenset("path file filename filepath city location option value name target base currency label url "
                         "site".split())
_SEARCH_ARGS = frozenset("query pattern search term keyword".split())  # paraphrased: most words must ground
_TYPED_ARGS = frozenset("text input".split())  # compared only with a value quoted in the request
_OUTCOME_VALUE = re.compile(
    r"^(?:text \"|(?P<page>(?:status|alert) \"))?(?:Deleted|Removed|Added(?: to (?:the |your )?\w+)?|Selected"
    r"|Saved|Opened|Archived|Moved)\s*:\s*\"?(?P<value>[^\"\n]+?)\"?\.?$",
    re.IGNORECASE | re.MULTILINE,
)
_WEB_ADDRESS = re.compile(r"https?://|www\.|\b[\w-]+\.(?:com|org|net|io|dev|app|co|de|fr|uk|nl|es|it)\b", re.IGNORECASE)
_QUOTED = re.compile(r"(?<!\w)['\"\u2018\u201c]([^'\"\u2019\u201d]{1,60})['\"\u2019\u201d](?!\w)")
STOPWORDS = frozenset(
    """a an the of to in on at for from by with and or is are was be it its this that these those as into my your our
    please me i you we what which who how where when can could would should will do does did named called
    item""".split()
)


class Miss(str):
    """Why an action missed its target (the string itself), and `fix`: a hint naming what the request asked for."""

    fix: str

    def __new__(cls, reason: str, fix: str) -> Miss:
        made = super().__new__(cls, reason)
        made.fix = fix
        return made


_TEST_RUN = re.compile(r"test|pytest|jest|vitest|mocha|unittest|cargo test|go test", re.IGNORECASE)


def action_target_mismatch(m: Material) -> Miss | None:
    """The first miss any target rule finds, or None."""
    return (target_mismatch(m) or named_mismatch(m) or weekday_mismatch(m) or unit_mismatch(m)
            or shell_intent_mismatch(m))


def target_mismatch(m: Material) -> Miss | None:
    """Why the action's target is not the one the request named, or None."""
    request_files = files(m.request)
    request_words = words(m.request) + sorted(currency_codes(m.request))
    for call in m.calls:
        action_files = [f for value in call.arguments.values() if isinstance(value, str) and len(value) < 400
                        for f in files(value)]
        if request_files and action_files:
            asked = [_base(r) for r in request_files]
            stray = [f for f in action_files if _base(f) not in asked and not _tests_of(f, asked, call)]
            if stray and not set(asked) <= {_base(f) for f in action_files}:  # else an output it makes
                return Miss(f"{call.name} used {stray[0]}, the request named {request_files[0]}",
                            f"Use {request_files[0]}, the file the request named, not {stray[0]}.")
            pair = [_base(f) for f in action_files if _base(f) in asked]
            if len(set(pair)) == 2 and len(set(asked)) == 2 and pair != sorted(pair, key=asked.index):
                return Miss(f"{call.name} used {pair[0]} and {pair[1]} in the opposite order to the request",
                            f"Keep the request's order: {asked[0]} first, then {asked[1]}.")
        quoted = _QUOTED.findall(m.request)
        for key, value in call.arguments.items():
            key = key.lower()
            if not isinstance(value, str) or not 0 < len(value) <= 60 or "\n" in value or files(value):
                continue
            if key in _TYPED_ARGS and not quoted:
                continue
            if key in ("url", "site") and not _WEB_ADDRESS.search(m.request):
                continue  # a URL the call found: the request named the page, not its address
            need = 0.6 if key in _SEARCH_ARGS else 1.0
            compared = _identifier_words(value) if key in _SEARCH_ARGS else value  # load_config: load, config
            if key in _TARGET_ARGS | _SEARCH_ARGS | _TYPED_ARGS and grounded_share(compared, request_words) < need:
                return Miss(f"{call.name} was given {key}={value!r}, which the request does not name",
                            _use(_closest(value, m.request), key, value))
    for found in _OUTCOME_VALUE.finditer(m.next_state):
        value = found.group("value")
        other = _other_amount(value, m.request)
        if other or (not found.group("page") and grounded_share(value, request_words) < 1.0):
            return Miss(f"the outcome names {value!r}, which the request does not",
                        f"Choose what the request named{_amount_named(m.request)}, not {value!r}.")
    return None


def _identifier_words(value: str) -> str:
    """An identifier's words: "load_config" and "loadConfig" are "load config"."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|[_.-]+", " ", value)


def _amount_named(request: str) -> str:
    amounts = sorted(_amounts(request))
    return f" ({amounts[0][0]:g} {amounts[0][1]})" if amounts else ""


def _closest(value: str, request: str) -> str | None:
    """What the request names that `value` most resembles: a quoted name, a capitalised one, a token with a digit."""
    names = _QUOTED.findall(request) + re.findall(r"[A-Z][\w'-]*(?: [A-Z][\w'-]*)*", request[1:]) \
        + re.findall(r"\b\w*\d\w*\b", request)
    names = [n for n in names if n.lower() not in STOPWORDS and n.lower() != value.lower()]
    scored = sorted(((SequenceMatcher(None, n.lower(), value.lower()).ratio(), n) for n in names), reverse=True)
    if scored and scored[0][0] >= 0.4:
        return scored[0][1]
    plain = [w for w in re.findall(r"[^\W_]+", request) if w.lower() not in STOPWORDS and len(w) > 2]
    scored = sorted(((SequenceMatcher(None, w.lower(), value.lower()).ratio(), w) for w in plain), reverse=True)
    return scored[0][1] if scored and scored[0][0] >= 0.5 else None  # "large" for "Small"


def _use(named: str | None, key: str, value: str) -> str:
    return f"Use {named}, as the request says, not {value}." if named else \
        f"Use the {key} the request named, not {value}."


def _other_amount(value: str, request: str) -> bool:
    """Whether an outcome names an amount (500 GB) where the request named another of that dimension (1 TB)."""
    asked, named = _amounts(request), _amounts(value)
    dimensions = {UNITS[u][1] for _, u in asked} & {UNITS[u][1] for _, u in named}
    return any(not {a for a in asked if UNITS[a[1]][1] == d} & named for d in dimensions)


def _tests_of(path: str, asked: list[str], call: ToolCall) -> bool:
    """Whether `path` is the test file of an asked-for module and the call runs tests (not writes them)."""
    if not (_TEST_RUN.search(call.name) or any(isinstance(v, str) and _TEST_RUN.search(v)
                                               for v in call.arguments.values())) or re.search(
            r"write|edit|create|save", call.name, re.IGNORECASE):
        return False
    stem = _base(path).rpartition(".")[0]
    return any(stem in (f"test_{s}", f"{s}_test", f"{s}.test", f"{s}.spec") for s in (a.rpartition(".")[0]
                                                                                          for a in asked))


def files(text: str) -> list[str]:
    return [f for f in FILE.findall(text) if not re.fullmatch(r"\d+\.\d+", f)]


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1].lower()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def grounded_share(value: str, request_words: list[str]) -> float:
    """The share of `value`'s content words that are (a prefix of) a request word, or have one as prefix."""
    found = [_grounded(w, request_words) for w in words(value) if w not in STOPWORDS]
    return sum(found) / len(found) if found else 1.0


def _grounded(word: str, request_words: list[str]) -> bool:
    return any(r.startswith(word) or (len(r) >= 3 and word.startswith(r)) for r in request_words)


def currency_codes(text: str) -> set[str]:
    """The ISO codes of the currencies `text` names by code, name or symbol."""
    tokens = re.findall(r"[^\W\d_]+\$?|[$€£¥₺₽₹₩円元]", text.lower())
    return {code for token in tokens for code in ALIASES.get(token, ())}


# -- names -----------------------------------------------------------------------------

_IDENTITY_KEYS = re.compile(  # keys that say which thing or person the call acts on, not how (a filter, a format)
    r"(?:^|_)(?:to|recipients?|contacts?|person|user(?:name)?|name|title|document|doc|draft|file|newsletter|list"
    r"|project|channel|account|playlist|album|song|track|artist|book|product|item|event|meeting|room|team|group"
    r"|folder|board|page|task|ticket|destination|origin|venue|restaurant|hotel|store|shop|attendees?|invitees?"
    r"|assignee|owner|members?|friend|who|target|subscription|calendar|guests?|customer|client|patient|speaker"
    r"|host|reviewers?|approver|participants?)$", re.IGNORECASE)
_MADE_UP_KEYS = re.compile(r"^(?:title|name|label|filename|heading)$", re.IGNORECASE)
_CREATES = re.compile(r"create|new|add|write|post|compose|draft|generate|make|save|rename|upload", re.IGNORECASE)
_NAME_LIKE = re.compile(r"[A-Z]|[a-z][0-9]|[0-9][a-z]")
_CODE_LIKE = re.compile(r"[=(){}\[\];<>@/\\|]")


def _folded(text: str) -> str:
    """Without accents, so that "Português" meets "portuguese"."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def named_mismatch(m: Material) -> Miss | None:
    """Why a name-like argument names something the request did not, or None."""
    request_words = words(_folded(m.request)) + sorted(currency_codes(m.request))
    asked_days = weekdays(m.request)
    for call in m.calls:
        for key, value in call.arguments.items():
            if (not isinstance(value, str) or not _IDENTITY_KEYS.search(key) or not 0 < len(value) <= 40
                    or len(value.split()) > 5 or _CODE_LIKE.search(value) or files(value)
                    or not _NAME_LIKE.search(value) or not re.search(r"[^\W\d_]", value)
                    or (_MADE_UP_KEYS.match(key) and _CREATES.search(call.name))):
                continue
            if asked_days and weekdays(value):
                continue  # weekday_mismatch compares weekdays
            if _extends_a_name(key, value, request_words):
                continue  # "Abebe Girma" for "text Abebe": the contact's full name
            stray = [w for w in re.findall(r"[^\W_]+", _folded(value)) if w.lower() not in STOPWORDS and not w.isdigit()
                     and not _unknown_code(w) and not _grounded(w.lower(), request_words)]
            if stray:
                return Miss(f"{call.name} was given {key}={value!r}; the request does not name {stray[0]!r}",
                            _use(_closest(value, m.request), key, value))
    return None


_PERSON_KEYS = re.compile(r"(?:^|_)(?:to|recipients?|contacts?|person|user(?:name)?|attendees?|invitees?|assignee"
                          r"|owner|members?|friend|who|customer|guest|client|patient)$", re.IGNORECASE)


def _extends_a_name(key: str, value: str, request_words: list[str]) -> bool:
    """A person's full name whose first name the request gave: only capitalised words are added."""
    names = re.findall(r"[^\W_]+", _folded(value))
    return bool(_PERSON_KEYS.search(key)) and len(names) >= 2 and _grounded(names[0].lower(), request_words) \
        and all(w[0].isupper() for w in names[1:])


def _unknown_code(word: str) -> bool:
    """An all-capital code the lexicons do not know (an airport, a ticker): not compared."""
    return word.isupper() and 2 <= len(word) <= 4 and word.lower() not in ALIASES


# -- weekdays --------------------------------------------------------------------------

_WEEKDAY = re.compile(r"(?<![^\W\d_])(" + "|".join(sorted(WEEKDAYS, key=len, reverse=True)) + r")(?![^\W\d_])",
                      re.IGNORECASE)
_WEEKDAY_SHORT = re.compile(r"\b(" + "|".join(WEEKDAY_ABBREVIATIONS) + r")\b\.?(?![a-z])")


def weekdays(text: str) -> set[int]:
    """The weekdays `text` names (0 is Monday), by full name in any lexicon language or English abbreviation."""
    found = {WEEKDAYS[w.lower()] for w in _WEEKDAY.findall(text)}
    return found | {WEEKDAY_ABBREVIATIONS[w] for w in _WEEKDAY_SHORT.findall(text)}


def weekday_mismatch(m: Material) -> Miss | None:
    """Why the call or its outcome is on another weekday than the one asked for, or None."""
    asked = weekdays(m.request)
    if not asked:
        return None
    used = {d for call in m.calls for v in call.arguments.values() if isinstance(v, str) and len(v) <= 200
            for d in weekdays(v)}
    wanted = f"Use {_day_name(min(asked))}, the day the request named"
    if used - asked:
        other = _day_name(min(used - asked))
        return Miss(f"the call names another weekday than the request ({other})", f"{wanted}, not {other}.")
    shown = weekdays(m.next_state)  # one weekday shown for one asked: a confirmation, not a listing
    if not used and len(shown) == 1 and len(asked) == 1 and not shown & asked:
        other = _day_name(min(shown))
        return Miss(f"the outcome names another weekday than the request ({other})", f"{wanted}, not {other}.")
    return None


def _day_name(day: int) -> str:
    return next(name for name, d in WEEKDAYS.items() if d == day).capitalize()


# -- units -----------------------------------------------------------------------------

_SYMBOLS = frozenset("km kg lb oz ft mm cm ml mg mb gb tb kb yd °c °f".split())  # a unit named without a number
_UNIT_NAMES = sorted((u for u in UNITS if u not in ("in", "t", "b", "k", "st", "pt", "kn", "cl", "dl")),
                     key=len, reverse=True)
_AMOUNT = re.compile(r"(\d+(?:[.,]\d+)?)\s*(" + "|".join(map(re.escape, _UNIT_NAMES)) + r")(?![^\W\d_])",
                     re.IGNORECASE)
_UNIT_WORD = re.compile(r"(?<![^\W\d_])(" + "|".join(map(re.escape, (u for u in _UNIT_NAMES if len(u) > 2
                                                                      or u in _SYMBOLS)))
                        + r")(?![^\W\d_])", re.IGNORECASE)
_UNIT_KEYS = re.compile(r"^(?:units?|uom|measure|from_unit|to_unit|unit_of_measure|scale|temperature_unit)$",
                        re.IGNORECASE)
_TEMPERATURE_LETTERS = {"c": "°c", "f": "°f", "°c": "°c", "°f": "°f", "ºc": "°c", "ºf": "°f"}


def payload_fields(output: str, listings: bool = True) -> dict[str, object]:
    """The top-level fields of tool output that is a JSON object (with `listings`, the first object of a list)."""
    try:
        parsed = json.loads(output)
    except (json.JSONDecodeError, ValueError):
        return {}
    if listings and isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
        parsed = parsed[0]
    return parsed if isinstance(parsed, dict) else {}


def _amounts(text: str) -> set[tuple[float, str]]:
    return {(float(n.replace(",", ".")), UNITS[u.lower()][0]) for n, u in _AMOUNT.findall(text)}


def unit_mismatch(m: Material) -> Miss | None:
    """Why the call or its outcome measures in another unit than the request, or None."""
    amounts = _amounts(m.request)
    asked = {u for _, u in amounts} | {UNITS[w.lower()][0] for w in _UNIT_WORD.findall(m.request)}
    dimensions = {UNITS[u][1] for u in asked}
    if not asked:
        return None
    for name, arguments in [(c.name, c.arguments) for c in m.calls] + [("the output", payload_fields(m.next_state))]:
        for key, value in arguments.items():
            if not isinstance(value, str) or len(value) > 60:
                continue
            used = {u for _, u in _amounts(value)}
            unit = _TEMPERATURE_LETTERS.get(value.lower(), value.lower()) if "temperature" in dimensions \
                else value.lower()
            if _UNIT_KEYS.match(key) and unit in UNITS:
                used.add(UNITS[unit][0])
            stray = [u for u in used if UNITS[u][1] in dimensions and u not in asked]
            if stray:
                return Miss(f"{name} has {key}={value!r}; the request measures in {sorted(asked)[0]}",
                            f"Use {sorted(asked)[0]}, the unit the request gave, not {stray[0]}.")
    for number, unit in _amounts(m.next_state):
        same = [u for n, u in amounts if n == number and UNITS[u][1] == UNITS[unit][1]]
        if same and unit not in same:
            return Miss(f"the outcome has {number:g} {unit} where the request asked for {number:g} {same[0]}",
                        f"Use {number:g} {same[0]}, as the request says, not {number:g} {unit}.")
    return None


# -- what a command's options print ------------------------------------------------------

_SHELL_KEYS = ("command", "cmd", "input", "script")
_FIRST = re.compile(r"\b(?:first|top|beginning|start|head|opening|earliest|oldest)\b", re.IGNORECASE)
_LAST = re.compile(r"\b(?:last|latest|newest|bottom|end|final|tail|recent|most recent)\b", re.IGNORECASE)
_NOT = re.compile(r"\b(?:not|without|except|exclud\w*|don't|doesn't|no|other than|ignor\w*|skip\w*|filter out"
                  r"|remove|omit\w*)\b|n't\b", re.IGNORECASE)
_FILES_ASKED = re.compile(r"\b(?:files?|which|where|fichiers?|dateien?|archivos?|bestand\w*)\b", re.IGNORECASE)
_COUNT = re.compile(rf"\b(?:{COUNT_WORDS}|any|whether|is there|are there|does|do)\b", re.IGNORECASE)  # or yes/no
_DESCENDING = re.compile(r"\b(?:descending|largest first|biggest first|highest first|newest first|reverse"
                         r"|most first|decreasing|(?:highest|largest|biggest|most) to (?:lowest|smallest|least)"
                         r"|z to a)\b", re.IGNORECASE)
_ASCENDING = re.compile(r"\b(?:ascending|smallest first|lowest first|oldest first|a to z|increasing"
                        r"|alphabetical\w*|(?:lowest|smallest|least) to (?:highest|largest|biggest|most))\b",
                        re.IGNORECASE)


def _grep_option(command: str, short: str, long: str) -> bool:
    return bool(re.search(rf"\bgrep\b[^|;&\n]*?\s(?:-[a-zA-Z]*{short}[a-zA-Z]*|--{long})(?=\s|$)", command))


def _intents(command: str, request: str) -> tuple[str, str] | None:
    """What `command` prints that `request` did not ask for, and what to do instead; or None."""
    if (_grep_option(command, "c", "count") or re.search(r"\|\s*wc\b", command)) and not _COUNT.search(request):
        return "prints a count, and the request asks for no count", "Print the lines themselves, not a count."
    if _grep_option(command, "l", "files-with-matches") and not _FILES_ASKED.search(request):
        return "prints file names, and the request asks for no files", "Print the matching lines, not file names."
    if _grep_option(command, "v", "invert-match") and not _NOT.search(request):
        return "prints the lines that do not match", "Print the lines that match (without -v)."
    # head and tail reading a file, not the end of a pipe (`git log | head` shows the newest)
    if re.search(r"(?:^|&&|;)\s*head\b", command) and _LAST.search(request) and not _FIRST.search(request):
        return "prints the first lines, and the request asks for the last", "Print the last lines (tail)."
    if re.search(r"(?:^|&&|;)\s*tail\b(?!\s+-f)", command) and _FIRST.search(request) and not _LAST.search(request):
        return "prints the last lines, and the request asks for the first", "Print the first lines (head)."
    if re.search(r"\bsort\b", command) and not re.search(r"\b(?:tail|head)\b", command):
        reverse = re.search(r"\bsort\b[^|;&\n]*\s(?:-[a-zA-Z]*r[a-zA-Z]*|--reverse)\b", command)
        if reverse and _ASCENDING.search(request) and not _DESCENDING.search(request):
            return "sorts in reverse, and the request asks for ascending order", "Sort in ascending order (no -r)."
        if not reverse and _DESCENDING.search(request) and not _ASCENDING.search(request):
            return "sorts in ascending order, and the request asks for descending", "Sort in descending order (-r)."
    return None


def shell_intent_mismatch(m: Material) -> Miss | None:
    """Why a shell command's options print something other than what the request asked for, or None."""
    for call in m.calls:
        for key in _SHELL_KEYS:
            command = call.arguments.get(key)
            if isinstance(command, str) and (found := _intents(command, m.request)):
                return Miss(f"{command.strip()[:60]!r} {found[0]}", found[1])
    return None
