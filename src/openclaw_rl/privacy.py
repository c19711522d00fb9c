"""Masking personal data in text we keep: emails, phones, card numbers, IBANs, government ids.

`redact(text)` replaces each item found with a typed mask (`[email]`, `[phone]`, `[card]`,
`[iban]`, `[govid]`). It runs on the request path (the JSONL logs), so one regex pass finds
the runs of capitals and digits every item lies in, runs with fewer than 6 digits stop
there, and in the rest each detector's regex proposes candidates that a checksum confirms;
nothing walks the whole text character by character in Python.

Decisions, and why:

- Checksums come from python-stdnum (Luhn, ISO 13616 IBANs with each country's length and
  layout, and national ids) rather than our own copies: it is maintained, tested against
  the official specifications, and a wrong check digit here is a leak or a mangled log.
- Phones come from phonenumbers (the port of Google's libphonenumber): its metadata says
  which digit strings are real numbers in each region and its matcher already refuses
  dates, times and page ranges. It is slow on whole texts (about 4 ms per region for 2000
  characters), so it only sees the 7-17 digits our own regex proposes: groups joined by one
  separator, after an optional +country code and (area code), which a list of numbers
  ("0.1234 0.5678", "1 2 3 4") is not. A `+` number is kept when it is valid; a national
  or `00` number (read in each of `PHONE_REGIONS`) must also be grouped the way that
  region writes it (STRICT_GROUPING), which is what keeps "0.5 0.25 0.125" and "0815 4711"
  out; a bare run of digits with no separators is a phone only after a word like "phone",
  "tel" or "call", since `2147483647` is a valid Dallas number too.
- Emails use a regex: email-validator checks an address you already have, it does not find
  one in free text. The domain must end in letters, so `pkg@1.2.3`, `@property` and
  `x @ w.T` are left alone; a "domain" followed by `(` (`q@k.transpose(...)`) is code, and
  one followed by `:path` (`git@github.com:org/repo`) is an SSH target.
- Cards are 13-19 digits, alone or in groups of 3-6 after a first group of 4, that pass
  Luhn and start like a payment card (2221-2720, or 3-6). Luhn alone passes one random
  number in ten, and epoch-millisecond timestamps (13 digits starting with 1) are common
  in logs.
- Government ids whose written shape is already rare are masked wherever they appear
  when stdnum validates them: US SSN `ddd-dd-dddd` (its issued ranges; an SSN has no
  check digit), ES DNI/NIE, IT codice fiscale, FR NIR, BR CPF `ddd.ddd.ddd-dd`, and the UK
  NINO by HMRC's prefix rules (stdnum has no NINO). Ids that are plain digits with one check digit
  (US SSN without dashes, NL BSN, DE Steuer-ID, BR CPF without dots, IN Aadhaar) pass
  for one random number in ten or eleven, so they are masked only within a few words
  after a word naming them ("SSN", "BSN", "Steuer-ID", "CPF", "Aadhaar", ...).
- Detection does not depend on `kinds`: an IBAN is never half-masked as a phone when only
  phones are asked for; `kinds` only chooses which of the items found are masked. When two
  items overlap, the earlier kind in `_PRIORITY` keeps its span.
- Only uppercase IBANs, NINOs and codici fiscali are matched: that is how they are
  written, and lowercase would let hex hashes and identifiers in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import phonenumbers
from stdnum import iban, luhn
from stdnum.br import cpf
from stdnum.de import idnr
from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.in_ import aadhaar
from stdnum.iso7064 import mod_97_10
from stdnum.it import codicefiscale
from stdnum.nl import bsn
from stdnum.us import ssn

KINDS = ("email", "phone", "card", "iban", "govid")
# the regions whose national formats (no +country code) are recognised; + and 00 numbers
# are recognised from any country
PHONE_REGIONS = ("US", "GB", "DE", "FR")

_PRIORITY = ("email", "iban", "card", "govid", "phone")
_CONTEXT_CHARS = 48  # how far before a number a naming word counts ("Steueridentifikationsnummer lautet: ")

Span = tuple[int, int, str]  # (start, end, kind)


def parse_kinds(value: str) -> tuple[str, ...]:
    """A CLI value ("all", "none" or a comma-separated list such as "email,card") as kinds."""
    cleaned = value.strip().lower()
    if cleaned == "all":
        return KINDS
    if cleaned == "none":
        return ()
    names = [name.strip() for name in cleaned.split(",") if name.strip()]
    if not names:
        raise ValueError(f"no redact kinds in {value!r}: use 'all', 'none' or a list of {', '.join(KINDS)}")
    for name in names:
        if name not in KINDS:
            raise ValueError(f"unknown redact kind {name!r} in {value!r}: "
                             f"use 'all', 'none' or a comma-separated list of {', '.join(KINDS)}")
    return tuple(kind for kind in KINDS if kind in names)


def redact(text: str, kinds: Iterable[str] = KINDS) -> str:
    """`text` with each email, phone, card, IBAN or government id of `kinds` replaced by
    `[kind]`; everything else is left exactly as it was."""
    wanted = _checked(kinds)
    if not wanted or not text:
        return text
    parts, last = [], 0
    for start, end, kind in find(text):
        if kind in wanted:
            parts += [text[last:start], f"[{kind}]"]
            last = end
    return "".join(parts) + text[last:] if parts else text


def find(text: str) -> list[Span]:
    """Every item found in `text`, in text order, none overlapping."""
    found = list(_emails(text))
    runs = []
    for run in _RUN.finditer(text):
        start, end = run.span()
        if end - start < 6:
            continue
        digits = len(run.group()) - len(run.group().translate(_DROP_DIGITS))
        if digits < 6:  # every item has 6 digits or more: most runs ("2.13.0", "8080") stop here
            continue
        letters = any(c.isalpha() for c in run.group())
        if letters:
            found += _ibans(text, start, end)
        if digits >= 13:
            found += _cards(text, start, end)
        found += _govids(text, start, end, digits, letters)
        if digits >= _PHONE_DIGITS[0]:
            runs.append((start, end))
    # phones last, around what is already found: the matcher is the slow part, and a card
    # or an IBAN is not a phone
    found += [phone for start, end in runs for phone in _phones(text, start, end, found)]
    return sorted(_without_overlaps(found))


def _checked(kinds: Iterable[str]) -> frozenset[str]:
    if isinstance(kinds, str):
        raise ValueError(f"kinds must be a collection of kinds, not the string {kinds!r}: "
                         "parse_kinds turns a CLI value into one")
    wanted = frozenset(kinds)
    unknown = sorted(wanted - set(KINDS))
    if unknown:
        raise ValueError(f"unknown redact kinds {unknown}: choose from {', '.join(KINDS)}")
    return wanted


def _without_overlaps(found: list[Span]) -> list[Span]:
    kept: list[Span] = []
    for span in sorted(found, key=lambda s: (_PRIORITY.index(s[2]), s[0])):
        if all(span[1] <= other[0] or other[1] <= span[0] for other in kept):
            kept.append(span)
    return kept


def _named_before(text: str, start: int, words: re.Pattern[str]) -> bool:
    return words.search(text, max(0, start - _CONTEXT_CHARS), start) is not None


def _candidates(pattern: re.Pattern[str], text: str, start: int, end: int) -> Iterator[re.Match[str]]:
    # one character past the run, so a pattern's lookahead sees what follows it
    return pattern.finditer(text, start, end + 1)


def _valid_windows(text: str, start: int, end: int, min_chars: int, max_chars: int,
                   accept: Callable[[str], bool], anchored: bool = False) -> Iterator[tuple[int, int]]:
    """The longest spans of whole groups in text[start:end] that `accept` takes, left to right
    (only the one that starts at `start` when `anchored`).

    A candidate can carry neighbours ("qty 2 4111 1111 1111 1111 2024"): trying each span
    of whole groups finds the item without cutting a group in half.
    """
    groups = [m.span() for m in _GROUP.finditer(text, start, end)]
    i = 0
    while i < len(groups):
        best, chars = -1, 0
        for j in range(i, len(groups)):
            chars += groups[j][1] - groups[j][0]
            if chars > max_chars:
                break
            if chars >= min_chars and accept(text[groups[i][0]:groups[j][1]]):
                best = j
        if best >= 0:
            yield groups[i][0], groups[best][1]
            i = best + 1
        elif anchored:
            return
        else:
            i += 1


def _words(*words: str) -> re.Pattern[str]:
    """Any of `words` starting a word, in any case."""
    return re.compile(r"\b(?:" + "|".join(words) + ")", re.IGNORECASE)


def _compact(raw: str) -> str:
    return _SEPARATOR.sub("", raw)


def _on_digits(is_valid: Callable[[str], bool]) -> Callable[[str], bool]:
    """`is_valid` applied to the letters and digits alone (stdnum strips only the usual separators)."""
    return lambda raw: is_valid(_compact(raw))


# Digits and capitals in groups joined by one or two separators: every item but an email
# lies inside one such run, and lowercase words end it.
_RUN = re.compile(r"[+(]?[A-Z0-9]+(?:[ \u00a0.\-/()]{1,2}[A-Z0-9]+)*\)?")
_DROP_DIGITS = str.maketrans("", "", "0123456789")
_GROUP = re.compile(r"[A-Za-z0-9]+")
_SEPARATOR = re.compile(r"[^A-Za-z0-9]")

# --- email -----------------------------------------------------------------------------

_EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]+@(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,63}(?![\w(\[]|\.[^\W_]|:[\w/~])")
_LOCAL_CHARS, _DOMAIN_CHARS = 64, 255  # RFC 5321's limits bound the search around each @


def _emails(text: str) -> Iterator[Span]:
    at = text.find("@")
    while at >= 0:
        m = _EMAIL.search(text, max(0, at - _LOCAL_CHARS), at + _DOMAIN_CHARS)
        while m is not None and m.end() <= at:
            m = _EMAIL.search(text, m.end(), at + _DOMAIN_CHARS)
        if m is not None and m.start() < at:
            yield m.start(), m.end(), "email"
            at = text.find("@", m.end())
        else:
            at = text.find("@", at + 1)


# --- IBAN ------------------------------------------------------------------------------

_IBAN_START = re.compile(r"(?<![\w-])[A-Z]{2}\d{2}")


def _is_iban(raw: str) -> bool:
    compact = _compact(raw)
    # the ISO 7064 checksum alone first: it is cheap and rejects 96 windows in 97
    return mod_97_10.is_valid(compact[4:] + compact[:4]) and iban.is_valid(compact)


def _ibans(text: str, start: int, end: int) -> Iterator[Span]:
    for m in _candidates(_IBAN_START, text, start, end):
        for span in _valid_windows(text, m.start(), end, 15, 34, _is_iban, anchored=True):
            yield *span, "iban"


# --- card ------------------------------------------------------------------------------

_DIGIT_RUN = re.compile(r"(?<![\w.,+-])\d+(?:[ -]\d+)*(?![\w-]|[.,]\d)")
_CARD_SHAPE = re.compile(r"\d{13,19}|\d{4}(?:[ -]\d{3,6}){2,4}")
_CARD_START = re.compile(r"[3-6]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720")  # 2221-2720: Mastercard


def _is_card(raw: str) -> bool:
    digits = _compact(raw)
    return (_CARD_SHAPE.fullmatch(raw) is not None and 13 <= len(digits) <= 19
            and _CARD_START.match(digits) is not None and luhn.is_valid(digits))


def _cards(text: str, start: int, end: int) -> Iterator[Span]:
    for run in _candidates(_DIGIT_RUN, text, start, end):
        if run.end() - run.start() >= 13:
            for span in _valid_windows(text, run.start(), run.end(), 13, 19, _is_card):
                yield *span, "card"


# --- government ids --------------------------------------------------------------------


def _is_nino(raw: str) -> bool:
    # HMRC's rules: these prefixes are never issued (stdnum has no NINO module)
    return _compact(raw)[:2] not in {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


# ids whose written shape is rare enough that a valid one is masked wherever it appears;
# each with the digits it has (at least) and whether it has letters, to skip runs cheaply
_SHAPED_IDS: tuple[tuple[re.Pattern[str], Callable[[str], bool], int, bool], ...] = (
    (re.compile(r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])"), _on_digits(ssn.is_valid), 9, False),
    (re.compile(r"(?<![\w.-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w-])"), cpf.is_valid, 11, False),
    (re.compile(r"(?<![\w-])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w-])"),
     _is_nino, 6, True),
    (re.compile(r"(?<![\w-])\d{8}-?[A-Z](?![\w-])"), dni.is_valid, 8, True),
    (re.compile(r"(?<![\w-])[XYZ]-?\d{7}-?[A-Z](?![\w-])"), nie.is_valid, 7, True),
    (re.compile(r"(?<![\w-])[A-Z]{6}[0-9LMNP-V]{2}[A-EHLMPR-T][0-9LMNP-V]{2}[A-Z][0-9LMNP-V]{3}[A-Z](?![\w-])"),
     codicefiscale.is_valid, 0, True),
    (re.compile(r"(?<![\w.-])[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}(?![\w-])"),
     nir.is_valid, 13, False),
)

# ids that are plain digits with a single check digit (one random number in ten or eleven
# passes): masked only after a word naming that id, and checked as that id alone
_NAMED_IDS: tuple[tuple[re.Pattern[str], Callable[[str], bool]], ...] = (
    (_words("ssn", "social security", "tax id"), _on_digits(ssn.is_valid)),
    (_words("bsn", "burgerservice", "sofi-?nummer"), _on_digits(bsn.is_valid)),
    (_words("steuer-?id", "steuer-?identifikation", "identifikationsnummer", "idnr", "tax id"),
     _on_digits(idnr.is_valid)),
    (_words("cpf"), _on_digits(cpf.is_valid)),
    (_words("aadhaa?r"), _on_digits(aadhaar.is_valid)),
)
_NAMED_ID_RUN = re.compile(r"(?<![\w.,-])\d+(?:[ ./-]\d+)*(?![\w-]|[.,]\d)")


def _govids(text: str, start: int, end: int, digits: int, letters: bool) -> Iterator[Span]:
    for pattern, is_valid, min_digits, has_letters in _SHAPED_IDS:
        if digits < min_digits or has_letters and not letters:
            continue
        for m in _candidates(pattern, text, start, end):
            if is_valid(m.group()):
                yield m.start(), m.end(), "govid"
    if digits < 9:
        return
    for run in _candidates(_NAMED_ID_RUN, text, start, end):
        if run.end() - run.start() < 9:
            continue
        for words, is_valid in _NAMED_IDS:
            if _named_before(text, run.start(), words):
                for span in _valid_windows(text, run.start(), run.end(), 9, 12, is_valid):
                    yield *span, "govid"


# --- phone -----------------------------------------------------------------------------

# How a phone is written: an optional +country code and (area code) or (0), then groups of
# digits all joined by the same separator. A list ("0.1234 0.5678", "1 2 3 4") breaks into
# short pieces here, so the matcher (about 0.1 ms a region per candidate) rarely runs.
_PHONE_SHAPE = re.compile(
    r"(?:\+\d{1,3}[ \u00a0.\-]?)?(?:\(\d{1,5}\)[ \u00a0.\-]?)?\d+(?:([ \u00a0.\-/])\d+(?:\1\d+)*)?")
# what has a phone's shape but is not one: an ISO date (the matcher would need the time
# after it to know), an IPv4 address
_NOT_PHONE = re.compile(r"(?:19|20)\d\d-[01]\d-[0-3]\d|\d{1,3}(?:\.\d{1,3}){3}")
_PHONE_WORDS = _words(
    "phone", "tel", "call", "mobile", "cell", "fax", "whatsapp", "sms", "text me", "ring", "contact",
    "telefon", "handy", "mobil", "rufnummer", "anruf", "t[ée]l[ée]phone", "portable", "appel",
    "tel[ée]fono", "m[óo]vil", "celular", "cellulare", "numero", "número")
_PHONE_DIGITS = (7, 17)  # E.164 allows 15, plus a 00 exit code
_PHONE_CONTEXT = 8  # characters either side handed to the matcher: it checks what touches a number
_STRICT = phonenumbers.Leniency.STRICT_GROUPING
# the matcher gives up on a candidate after this many failed parses (a phone is found first try)
_PHONE_TRIES = 4
# a region whose national numbers start with its trunk prefix 0 (GB, DE, FR) can only match
# a candidate that starts with 0; the US (prefix 1, often left out) can match any
_ZERO_PREFIXED = frozenset(
    region for region in PHONE_REGIONS
    if (phonenumbers.PhoneMetadata.metadata_for_region(region).national_prefix or "") == "0")


def _phones(text: str, start: int, end: int, found: list[Span]) -> Iterator[Span]:
    for m in _candidates(_PHONE_SHAPE, text, start, end):
        lo, hi = m.span()
        digits = sum(c.isdigit() for c in m.group())
        if not _PHONE_DIGITS[0] <= digits <= _PHONE_DIGITS[1] or _NOT_PHONE.fullmatch(m.group()):
            continue
        if any(lo < other_end and other_start < hi for other_start, other_end, _ in found):
            continue  # a card, an IBAN or an id already holds these digits
        if m.group().isdigit() and not _named_before(text, lo, _PHONE_WORDS):
            continue  # a bare number is a phone only when the text says so (2147483647 is valid)
        yield from _phones_in(text, lo, hi)


def _phones_in(text: str, start: int, end: int) -> Iterator[Span]:
    offset = max(0, start - _PHONE_CONTEXT)
    window = text[offset:end + _PHONE_CONTEXT]
    if text[start] == "+":
        matches = [m for m in phonenumbers.PhoneNumberMatcher(window, PHONE_REGIONS[0], max_tries=_PHONE_TRIES)
                   if m.raw_string.startswith("+")]
    else:
        first = text[start:end].lstrip("(")[:1]
        matches = [m for region in PHONE_REGIONS if first == "0" or region not in _ZERO_PREFIXED
                   for m in phonenumbers.PhoneNumberMatcher(window, region, leniency=_STRICT, max_tries=_PHONE_TRIES)]
    for m in matches:
        if start <= offset + m.start and offset + m.end <= end:
            yield offset + m.start, offset + m.end, "phone"
