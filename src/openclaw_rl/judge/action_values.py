"""Values an action carries that the request also names: months, versions, near-miss numbers.

Rules of the machine judge (called from `judge.evidence.machine_verdict` beside the target
rules of `judge.targets`), each for a value the target rules do not read because it hides
inside a path, a command or a file's text. Each returns a `Miss` whose `fix` names the
request's value, or None:

- `month_mismatch`: the request names a month (by name in the lexicon languages, or as
  2024-11), and the call's dates and paths name another one, and either never the asked
  one or an output that lists months shows only others (`tar czf logs-2024-11.tar.gz
  logs/2024-10/` for "the November 2024 logs", which lists logs/2024-10/ files).
- `version_mismatch`: the request names a version (1.8.0), and the call writes another one
  and never the asked one (an edit to `version = "1.7.3"`).
- `choice_mismatch`: the request names one of a closed set of choices (an environment,
  a size, a colour, a cabin, a priority, a visibility, a role, a sort order, a file format,
  a meal, a part of the day), and the call or the JSON it got back names another member of
  the set and never the asked one (`environment="production"` for "deploy to staging").
- `near_miss_name`: an identifier in the call (a branch, a path, a key: a token with a
  digit, "/", "-", "_" or "@") that is nearly one the request names, while the request's
  never appears in the call (`feature/logout` for "create feature/login").
- `near_miss_number`: a number of three digits or more in the call that differs from one
  the request names by one digit, or by two swapped digits, while the request's own number
  appears nowhere in the call (`fuser -k 8080/tcp` for port 8081, invoice 2213 for 2231).
  Such a number is a slip, not another choice.

Decisions and why: each speaks only where the request names a value of its kind and the
call never uses that value, so a call that uses the asked value and also others (an edit's
old line, a second path) is left alone; numbers are read from every string the call
carries, paths and commands included, because that is where these slips hide.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import TYPE_CHECKING

from openclaw_rl.judge.lexicons import MONTHS
from openclaw_rl.judge.targets import Miss, payload_fields

if TYPE_CHECKING:
    from openclaw_rl.judge.evidence import Material

__all__ = ["choice_mismatch", "month_mismatch", "near_miss_name", "near_miss_number", "value_mismatch",
           "version_mismatch"]

_MONTH_NAMES = {name: number for name, number in MONTHS.items() if len(name) >= 4 or name in ("june", "july")}
_MONTH_WORD = re.compile(r"(?<![^\W\d_])(" + "|".join(sorted(_MONTH_NAMES, key=len, reverse=True)) + r")(?![^\W\d_])",
                         re.IGNORECASE)
_YEAR_MONTH = re.compile(r"(?<!\d)((?:19|20)\d{2})[-_/.](0[1-9]|1[0-2])(?!\d)")
_YEAR = re.compile(r"(?<!\d)(?:19|20)\d{2}(?!\d)")
_VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*)(?![\w.]*\d)")
_VERSION_ASKED = re.compile(r"\b(?:version|release|bump|upgrade|downgrade|pin|tag)\b|\bv\d", re.IGNORECASE)
_OLD_KEYS = frozenset("old old_str old_string old_text search find before original".split())  # what an edit replaces


def _strings(m: Material, skip: frozenset[str] = frozenset()) -> list[str]:
    """Every string the calls carry (nested values too), but those under `skip` keys."""
    found: list[str] = []

    def walk(value: object, key: str = "") -> None:
        if key.lower() in skip:
            return
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)

    for call in m.calls:
        walk(call.arguments)
    return found


def value_mismatch(m: Material) -> Miss | None:
    """The first miss any of the value rules finds, or None."""
    return month_mismatch(m) or version_mismatch(m) or near_miss_number(m) or near_miss_name(m) or choice_mismatch(m)


def month_mismatch(m: Material) -> Miss | None:
    """Why the call's dates or paths are in another month than the one the request named, or None."""
    asked = {_MONTH_NAMES[w.lower()] for w in _MONTH_WORD.findall(m.request)}
    asked |= {int(month) for _, month in _YEAR_MONTH.findall(m.request)}
    if len(asked) != 1:
        return None
    years = set(_YEAR.findall(m.request))

    def fits(year: str, month: int) -> bool:
        return month in asked and (not years or year in years)

    used = [(year, int(month)) for text in _strings(m) for year, month in _YEAR_MONTH.findall(text)]
    shown = [(year, int(month)) for year, month in _YEAR_MONTH.findall(m.next_state)]
    stray = [(year, month) for year, month in used if not fits(year, month)]
    if not stray or (any(fits(*u) for u in used) and (not shown or any(fits(*s) for s in shown))):
        return None  # the asked month is used, and the output, if it lists any, shows it
    year, month = stray[0]
    wanted = f"{next(iter(years))}-{min(asked):02d}" if years else f"month {min(asked)}"
    return Miss(f"the call works on {year}-{month:02d}; the request named {wanted}",
                f"Use {wanted}, the month the request named, not {year}-{month:02d}.")


def version_mismatch(m: Material) -> Miss | None:
    """Why the call writes another version than the one the request named, or None."""
    if not _VERSION_ASKED.search(m.request):
        return None
    asked = set(_VERSION.findall(m.request))
    if not asked:
        return None
    written = [v for text in _strings(m, _OLD_KEYS) for v in _VERSION.findall(text)]
    if not written or any(w == a or w.startswith(f"{a}.") for w in written for a in asked):
        return None  # 3.12.1 is a 3.12
    wanted = sorted(asked)[0]
    return Miss(f"the call writes version {written[0]}; the request asked for {wanted}",
                f"Use version {wanted}, as the request says, not {written[0]}.")


def _one_slip(a: str, b: str) -> bool:
    """Same length, and one digit changed or two neighbouring digits swapped."""
    if len(a) != len(b) or a == b:
        return False
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(differ) == 1 or (len(differ) == 2 and differ[1] == differ[0] + 1
                                and a[differ[0]] == b[differ[1]] and a[differ[1]] == b[differ[0]])


def near_miss_number(m: Material) -> Miss | None:
    """Why a number in the call looks like a slip for one the request named, or None."""
    asked = set(re.findall(r"(?<![\d.,])\d{3,}(?![\d.,]\d)", m.request))
    if not asked:
        return None
    carried = " ".join(_strings(m))
    used = set(re.findall(r"(?<!\d)\d{3,}(?!\d)", carried))
    for wanted in sorted(asked):
        if wanted in used:
            continue
        slip = next((u for u in sorted(used) if _one_slip(wanted, u)), None)
        if slip:
            return Miss(f"the call uses {slip} where the request named {wanted}",
                        f"Use {wanted}, the number the request named, not {slip}.")
    return None


# -- closed sets of choices ---------------------------------------------------------------

_CHOICES = {
    "environment": "production prod|staging|development dev|qa|sandbox|preview",
    "size": "extra small xs|small|medium|large|extra large xl",
    "colour": "red|blue|green|black|white|grey gray|navy|yellow|orange|purple|pink|brown|beige|silver|gold",
    "cabin": "economy|premium economy|business",
    "priority": "low|normal|high|urgent|critical",
    "visibility": "public|private|internal|unlisted",
    "role": "viewer view only read-only|editor edit|commenter comment|owner|admin administrator",
    "order": "ascending asc|descending desc",
    "format": "pdf|csv|xlsx excel|docx|json|png|jpg jpeg|txt|html|markdown md",
    "meal": "breakfast|lunch|dinner",
    "daypart": "morning|afternoon|evening|night",
}
_CHOICE_OF: dict[str, tuple[str, str]] = {}  # a word -> (its set, its member)
for _set, _members in _CHOICES.items():
    for _member in _members.split("|"):
        for _word in (_member, *_member.split()):
            _CHOICE_OF.setdefault(_word, (_set, _member.split()[0]))
_CHOICE_WORD = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, _CHOICE_OF), key=len, reverse=True))
                          + r")(?![\w-])", re.IGNORECASE)
_FREE_TEXT_KEYS = frozenset("content text body message note notes description subject query title comment".split())


def _choices(text: str) -> set[tuple[str, str]]:
    return {_CHOICE_OF[w.lower()] for w in _CHOICE_WORD.findall(text)}


def choice_mismatch(m: Material) -> Miss | None:
    """Why the call (or what it got back) picks another member of a closed set than the request, or None."""
    asked = _choices(m.request)
    if not asked:
        return None
    sets = {name for name, _ in asked}
    carried = [v for v in _strings(m, _FREE_TEXT_KEYS) if len(v) <= 40]
    payload = [v for k, v in payload_fields(m.next_state, listings=False).items()
               if k.lower() not in _FREE_TEXT_KEYS and isinstance(v, str) and len(v) <= 40]  # a confirmation
    used = {c for text in carried + payload for c in _choices(text)}
    for name in sorted(sets):
        wanted = {member for s, member in asked if s == name}
        others = {member for s, member in used if s == name} - wanted
        if len(wanted) == 1 and others and not {member for s, member in used if s == name} & wanted:
            return Miss(f"the call picks {sorted(others)[0]} ({name}); the request asked for {next(iter(wanted))}",
                        f"Use {next(iter(wanted))}, the {name} the request named, not {sorted(others)[0]}.")
    return None


# -- identifiers one slip away --------------------------------------------------------------

_IDENTIFIER = re.compile(r"[\w.@/-]*[\w](?:[\w.@/-]*)")


def _identifiers(text: str) -> set[str]:
    return {t.strip(".-/").lower() for t in _IDENTIFIER.findall(text)
            if len(t.strip(".-/")) >= 5 and re.search(r"[\d/_@-]", t.strip(".-/")) and re.search(r"[^\W\d_]", t)}


def near_miss_name(m: Material) -> Miss | None:
    """Why an identifier in the call looks like a slip for one the request named, or None."""
    asked = _identifiers(m.request)
    if not asked:
        return None
    carried = " ".join(_strings(m)).lower()
    used = _identifiers(carried)
    for wanted in sorted(asked):
        if any(u == wanted or u.startswith(f"{wanted}/") or u.endswith(f"/{wanted}") for u in used):
            continue
        slip = next((u for u in sorted(used) if u not in m.request.lower() and not _same_file(u, wanted)
                     and SequenceMatcher(None, u, wanted).ratio() >= 0.8), None)
        if slip:
            return Miss(f"the call uses {slip} where the request named {wanted}",
                        f"Use {wanted}, as the request says, not {slip}.")
    return None


def _same_file(a: str, b: str) -> bool:
    """Whether two tokens name the same file by its base name (the target rules compare files)."""
    return a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]
