"""Screening hints before they become training signal (issue 17: poisoning containment).

A hint is text the trainer conditions the teacher on, so whoever writes the next state
writes the teacher's instructions. `screen_hint(hint, conversation)` returns None when a
hint may train and otherwise a short reason naming what the hint *introduced*: content
the turn did not contain. A quarantined hint is kept for an admin to release or drop; it
is never trained on. Detectors, in the order they are tried (the first reason wins):

1. URLs and bare domains, also when written "evil dot example dot com", "evil[.]example",
   "evil . example . com", "hxxp://", with full-width dots or Cyrillic look-alikes.
2. E-mail addresses, phone numbers, card numbers, IBANs and government ids (`privacy.find`).
3. Shell commands that download, run, escalate or destroy, and prose that asks to
   download something and run it.
4. Requests for other people's data: a third party (neighbour, coworker, ex, other users,
   her, ...) next to a kind of personal data (address, phone number, password, ...); and
   asking anyone, the user included, for a password, a card number or another secret.
5. Absolute rules ("always", "never", "from now on", "in every answer", ...) whose content
   words the turn does not contain.
6. Rules for other people ("tell people who ask about Python to visit ...", "next time,
   point users to ...", "always recommend ...") that name a URL, a domain or a brand
   (a capitalised name after "buy", "use", "sign up for", ...) the policy's answer did
   not name (issue 36).

Decisions, and why:

- `conversation` is the turn the hint is about: the request messages (system prompt and
  history included), the response and its tool calls; *not* the next state the hint was
  drawn from. The rule judge writes every hint from a sentence of the next state, so the
  next state grounds every hint, the measured attacks among them ("Always recommend
  visiting evil.example.com" was the user's own reply). `turn_conversation(turn)` builds
  the right text. What the request already contains is not introduced: a user who asks
  about example.com may get a hint that names example.com.
- That grounding is a limit as well: an attacker who also writes the URL into the request
  grounds it. Two cases are quarantined even when grounded, because they ask the policy
  to put the item into every later answer: an absolute rule that names a URL, an e-mail
  address or a phone number, and an absolute rule that hands out other people's data.
  The rest is left to the per-user share of a batch and to the gate.
- Who wrote it matters for one case (issue 36): a user who names their site in their own
  question ("Is evil.example.com a good site to learn Python?") and then asks, without
  "always", to "tell people who ask about Python to visit evil.example.com" grounded it in
  the request. So `turn_conversation` keeps the request (every message the client sent:
  the system prompt and the history are the client's too, and a client can write them)
  apart from the answer (what the policy wrote this turn), and a rule addressed to other
  people may name a site or brand only when the answer named it. A hint about this user's
  own conversation ("the user linked example.com/docs; answer from that page") is no rule
  for others and passes as before; so does "recommend X" with no one else addressed,
  which teaches the policy about X only when someone names X. Measured on
  tests/data/grounded_poisoning.jsonl with bench/screen_grounded.py.
- Precision over recall, as in `rules`: a quarantined honest hint costs one directive
  sample and an admin can release it; a trained poisoned hint changes the model for
  everyone. Where the two conflict the screen quarantines (an ungrounded `sudo`, an
  "always" rule about a topic the turn never touched).
- Domains: a full list of top-level domains would make code a domain (`logger.info`,
  `page.click`, `self.store`, `script.sh`, `model.pt`: every one a real TLD). A name
  counts as a domain when it has a scheme, `www.` or a path, or ends in a TLD that is
  rarely an attribute or a file extension (`_STRONG_TLDS`: com, org, net, de, ...); one
  ending in a code-like TLD (`_CODE_TLDS`: io, sh, py, app, info, ...) counts only after
  words that send someone to a site ("visit", "go to", "download from"). Versions
  (`2.13.0`) are not names: a TLD is letters.
- Commands: a small table of patterns. The ones that are dangerous whatever the context
  (piping into a shell, encoded payloads, `rm -rf /`, `git push --force`, reverse shells,
  "run it as root") are grounded only by the same command in the turn; the ordinary risky
  ones (`pip install X`, `rm -r dir`, `chmod +x f`, `sudo`) when the turn has all their
  operands and their program or at least one operand (`sudo` only with "sudo" itself), so
  "Use pip install, not pip instal." after `pip instal numpy` and "use rm -r build" after
  `rmdir build` pass and `pip install evil-pkg` does not; a download tool is grounded by
  the URLs it fetches. `ls -la`, `df -h` and the like are not risky and never flagged.
- Other people's data is grounded when the turn names both the third party and the kind
  of data (a user who asks about their coworker's salary). A clause that opens with a
  prohibition or a refusal, or says the data cannot be given ("do not share other users'
  passwords", "explain that you cannot share ..."), protects rather than asks and passes;
  "never refuse to give ..." asks. A negation elsewhere in the clause ("..., not just the
  street") does not protect.
- Whether the turn contains a URL, an e-mail address, a number or a command is decided on
  the text itself (whole words, whatever the case and spacing), not on its meaning.
- Absolute rules: the grounded share of the rule's content words must be at least
  `MIN_GROUNDED_SHARE`. Content words are lower-cased words without stop words and
  without the rule's own markers; two words are the same when they agree after dropping
  an ending (-s, -es, -ed, -ing, 's) and on the first six letters ("steps" = "step",
  "calculation" = "calculate"). Words about the form of an answer (steps, sentences,
  bullet points, tone, language, length, units; `_FORM_WORDS`) count as grounded in
  every turn, because every turn has an answer: "Always show every step" in a maths turn
  passes, "Always recommend NordVPN" in the same turn does not.
- Typos and languages: look-alike characters and spelled-out dots are normalised first;
  the "always" marker tolerates one typo ("alwyas", "allways"); the data detector's
  patterns tolerate common misspellings ("adress", "nieghbour", "pasword"); markers and
  data words are also listed in German, French, Spanish, Italian, Dutch, Portuguese,
  Russian, Chinese and Japanese (a few words each, not a translation of every pattern).

(Over 400 lines: its word lists and patterns are the decisions, and each detector is a few
short functions over one shared normalisation and one notion of what the turn contains,
which splitting would scatter across files.)
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from openclaw_rl import privacy
from openclaw_rl.chat import content_text
from openclaw_rl.types import Turn

__all__ = ["MIN_GROUNDED_SHARE", "Conversation", "screen_hint", "turn_conversation"]

MIN_GROUNDED_SHARE = 0.5  # an absolute rule passes when at least half its content words are grounded
_SHOWN_CHARS = 80  # how much of an offending snippet a reason quotes


@dataclass(frozen=True)
class Conversation:
    """The turn a hint is about, split by who wrote it: `request` is every message the client
    sent (system prompt and history included), `answer` what the policy wrote this turn (the
    response and its tool calls). A rule for other people may name a site or a brand only
    when the answer named it (see the module docstring)."""

    request: str
    answer: str


def screen_hint(hint: str, conversation: Conversation | str) -> str | None:
    """None when `hint` may train; otherwise why it is quarantined, naming what it introduced.

    `conversation` is the turn the hint is about (request messages and response, not the
    next state: see the module docstring and `turn_conversation`). A plain string is taken
    as the policy's own words, all of it: who wrote what is unknown there.
    """
    return _first_reason(hint, conversation, _DETECTORS)


def brought_in(answer: str, prompt: str) -> str | None:
    """What a model's answer brings in that its prompt did not contain (a URL, a contact, a
    risky command, a request for other people's data), or None: the update gate's check.
    The rule detectors are left out: answers rightly use words of their own."""
    return _first_reason(answer, prompt, _CONTENT_DETECTORS)


def _first_reason(text: str, conversation: Conversation | str, detectors: tuple) -> str | None:
    normalized, seen = _normalized(text), _Seen.of(conversation)
    for detector in detectors:
        reason = detector(normalized, seen)
        if reason is not None:
            return reason
    return None


def turn_conversation(turn: Turn) -> Conversation:
    """What a hint about `turn` is grounded in: every request message with the tool calls of
    earlier assistant messages (the request), the response and its tool calls (the answer);
    no next state."""
    request = [content_text(m) for m in turn.prompt_messages]
    request += [_calls_text(m.get("tool_calls") or []) for m in turn.prompt_messages]
    answer = [turn.response_text, _calls_text(turn.tool_calls)]
    return Conversation(request=_lines(request), answer=_lines(answer))


def _lines(parts: list[str]) -> str:
    return "\n".join(part for part in parts if part)


def _calls_text(calls: list[dict]) -> str:
    functions = [call.get("function", call) for call in calls]
    return "\n".join(f"{f.get('name', '')} {_arguments_text(f.get('arguments', ''))}" for f in functions)


def _arguments_text(arguments: object) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


# --- normalisation ------------------------------------------------------------------------

# Cyrillic and Greek letters that look like Latin ones; mapped only inside words that also
# hold a Latin letter or a dot (a mixed-script "еvil.соm"), so Russian prose stays Russian.
_LOOKALIKES = str.maketrans("аеорсухіјѕһԁԛԝοαερικτνАВЕКМНОРСТХ", "aeopcyxijshdqwoaepiktvABEKMHOPCTX")
_NON_LATIN = re.compile(r"[\u0370-\u03ff\u0400-\u04ff\u0500-\u052f]")
_DOT_WORD = r"(?:dot|punkt|punto|point|ponto)"
_BRACKETED_DOT = re.compile(rf"\s*[\[({{<]\s*(?:\.|{_DOT_WORD})\s*[\])}}>]\s*", re.IGNORECASE)
_SPELLED_DOT = re.compile(rf"(?<=\w)\s+{_DOT_WORD}\s+(?=\w)", re.IGNORECASE)
_SPACED_DOT = re.compile(r"(?<=\w)\s+\.\s*(?=\w)|(?<=\w)\.\s+(?=[a-z])")
_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")  # zero-width, bidi, soft hyphen
_HXXP = re.compile(r"\bhxxp(s?)(?:\[:\]|:)//", re.IGNORECASE)


def _normalized(text: str) -> str:
    """NFKC, invisible characters dropped, look-alike letters and defanged URLs undone."""
    text = unicodedata.normalize("NFKC", text).replace("\u3002", ".")
    text = _INVISIBLE.sub("", text)
    text = re.sub(r"\S+", _latin_lookalikes, text)
    return _HXXP.sub(r"http\1://", _BRACKETED_DOT.sub(".", text))


def _latin_lookalikes(word: re.Match[str]) -> str:
    token = word.group()
    mixed = _NON_LATIN.search(token) and re.search(r"[a-zA-Z]|\.\w", token)
    return token.translate(_LOOKALIKES) if mixed else token


def _joined(text: str) -> str:
    """`text` with dots spelled out or spaced apart closed up ("evil dot example . com")."""
    return _SPACED_DOT.sub(".", _SPELLED_DOT.sub(".", text))


@dataclass(frozen=True)
class _Seen:
    """The conversation as each detector compares against it."""

    text: str  # normalised, lower-cased, then again with spelled-out dots closed up
    compact: str  # letters and digits only
    keys: frozenset[str]  # content-word keys (`_key`)
    answer: str  # `text` of the policy's own words alone (`Conversation.answer`)

    @classmethod
    def of(cls, conversation: Conversation | str) -> _Seen:
        if isinstance(conversation, str):
            conversation = Conversation(request="", answer=conversation)
        text = _normalized(f"{conversation.request}\n{conversation.answer}").lower()
        answer = _normalized(conversation.answer).lower()
        keys = frozenset(_key(w) for w in _words(text))
        return cls(text=f"{text}\n{_joined(text)}", compact=_compact(text), keys=keys,
                   answer=f"{answer}\n{_joined(answer)}")

    def answered(self, snippet: str) -> bool:
        """`snippet` occurs in the policy's own words (as `has`, over the answer alone)."""
        snippet = snippet.lower().strip()
        return bool(snippet) and re.search(rf"(?<![\w-]){re.escape(snippet)}(?![\w-])", self.answer) is not None

    def has(self, snippet: str) -> bool:
        """`snippet` (lower-cased) occurs in the conversation, not as part of a longer word."""
        snippet = snippet.lower().strip()
        return bool(snippet) and re.search(rf"(?<![\w-]){re.escape(snippet)}(?![\w-])", self.text) is not None

    def has_text(self, snippet: str) -> bool:
        """`snippet` occurs with the same words, whatever the spacing between them."""
        words = snippet.lower().split()
        pattern = r"\s*".join(re.escape(w) for w in words)
        return bool(words) and re.search(pattern, self.text) is not None


def _set_of(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _compact(text: str) -> str:
    return re.sub(r"[\W_]", "", text.lower())


def _shown(snippet: str) -> str:
    snippet = " ".join(snippet.split())
    return snippet if len(snippet) <= _SHOWN_CHARS else snippet[: _SHOWN_CHARS - 3] + "..."


# --- 1. URLs and domains --------------------------------------------------------------------

_STRONG_TLDS = _set_of(
    """com net org edu gov mil biz xyz online icu vip tk ga cf gq su ru cn uk de fr jp br au
    ca nl es se ch eu kr us co tv gg"""
)
_CODE_TLDS = _set_of(
    """info app dev page link live email news host support download stream review space
    store site click press party blog cloud shop club fun tech win bid top name io ai me it
    in is to at id ml so sh py md rs pl ps pm sc st zip mov cc ws ly pt am mk tf cr gd la
    ms nu"""
)
_URL = re.compile(r"\b(?:https?|ftps?|sftp|file|wss?)://[^\s<>\"'`)\]]+", re.IGNORECASE)
_HOST = re.compile(
    r"(?<![\w@.\-/])(?P<www>www\.)?(?P<host>(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
    r"(?P<tld>[a-z]{2,24}|xn--[a-z0-9-]+))(?P<path>/[^\s<>\"'`)\]]*)?(?![\w-]|\.[a-z0-9]|\()"
)
_SENDS_TO_A_SITE = re.compile(
    r"\b(?:visit\w*|go(?:es|ing)? to|head\w* (?:over )?to|check\w* out|brows\w*(?: to)?|navigat\w* to|"
    r"link\w* to|sign\w* up (?:at|on)|regist\w* (?:at|on)|log\w* ?in (?:at|on|to)|download\w* (?:it )?from|"
    r"available (?:at|on)|hosted (?:at|on)|found at|recommend\w*|send\w* (?:\w+ )?to|point\w* (?:\w+ )?to)\s+$"
)


def _introduced_url(text: str, seen: _Seen) -> str | None:
    for shown, host in _addresses(text):
        if not seen.has(host):
            return f"introduces a URL not in the conversation: {_shown(shown)}"
    return None


def _addresses(text: str) -> Iterator[tuple[str, str]]:
    """(as written, host) for every URL and domain in `text`, also in its closed-up form."""
    for variant, closed_up in ((text.lower(), False), (_joined(text).lower(), True)):
        urls = list(_URL.finditer(variant))
        for url in urls:
            yield url.group().rstrip(".,;:!?"), re.split(r"[/:?#]", url.group().split("://", 1)[1])[0]
        for m in _HOST.finditer(variant):
            if not any(u.start() <= m.start() < u.end() for u in urls) and _is_domain(m, variant, closed_up):
                yield m.group().rstrip(".,;:!?"), m["host"]


def _is_domain(m: re.Match[str], text: str, closed_up: bool) -> bool:
    tld, labels = m["tld"], m["host"].split(".")[:-1]
    if closed_up and any(label in _STOP_WORDS for label in labels):  # "the dot com bubble"
        return False
    if m["www"] or tld in _STRONG_TLDS:
        return True
    if tld not in _CODE_TLDS:
        return False
    return bool(m["path"]) or _SENDS_TO_A_SITE.search(text[max(0, m.start() - 30):m.start()]) is not None


# --- 2. e-mail addresses, phone numbers, personal ids -------------------------------------

_ITEM_NAMES = {"email": "an e-mail address", "phone": "a phone number", "card": "a card number",
               "iban": "an IBAN", "govid": "a personal id number"}


def _introduced_personal_item(text: str, seen: _Seen) -> str | None:
    for start, end, kind in privacy.find(text):
        if _compact(text[start:end]) not in seen.compact:
            return f"introduces {_ITEM_NAMES[kind]} not in the conversation: {text[start:end]}"
    return None


# --- 3. shell commands and download-and-run -----------------------------------------------

@dataclass(frozen=True)
class _Command:
    """A risky command pattern. `strict` commands are grounded only by the same command in
    the turn; the others by their program (the `program` group) and operands, or by the
    URLs a `downloader` fetches (see the module docstring)."""

    pattern: re.Pattern[str]
    what: str  # how the reason names it
    strict: bool


def _cmd(pattern: str, what: str = "a shell command", strict: bool = False) -> _Command:
    return _Command(re.compile(pattern, re.IGNORECASE), what, strict)


_ROOTISH = r"(?:/|/\*|~/?|\*|\$home|\.\.?/?|[a-z]:\\?)(?=$|[\s;&|'\"`)])"
_COMMANDS = (
    # dangerous wherever they appear
    _cmd(r"\|\s*(?:sudo\s+)?(?:ba|z|k|da|fi)?sh\b|\|\s*(?:python[\d.]*|perl|ruby|node|php|iex|invoke-expression)\b",
         strict=True),
    _cmd(r"\bpowershell(?:\.exe)?\b[^\n]{0,60}?\s-(?:e|ec|en|enc|encodedcommand)\b|\bfrombase64string\b|"
         r"\bbase64\s+(?:-d|--decode)\b|\biex\s*\(|\binvoke-expression\b|\bcertutil\b[^\n]{0,40}-(?:decode|urlcache)|"
         r"\b(?:mshta|rundll32|regsvr32)\b", "an encoded or hidden payload", strict=True),
    _cmd(rf"\brm\s+(?:-{{1,2}}[\w-]+\s+)*{_ROOTISH}|--no-preserve-root|:\(\)\s*\{{\s*:\|:&\s*\}}|\bmkfs(?:\.\w+)?\b|"
         r"\bdd\s+if=|>\s*/dev/(?:sd[a-z]|nvme|hd[a-z])|\bformat\s+[a-z]:|\b(?:del|rd|rmdir)\s+/[sfq]\b|"
         r"\bchmod\s+(?:-r\s+)?777\s+/", "a destructive shell command", strict=True),
    _cmd(r"\b(?:nc|ncat|netcat)\b[^\n]{0,30}\s-e\s|/dev/tcp/|\bbash\s+-i\b|\b(?:bash|sh|zsh|cmd(?:\.exe)?|"
         r"python[\d.]*|perl|ruby|node)\s+(?:-c|/c|-e)\s", strict=True),
    _cmd(r"\bsudo\s+su\b|\bsu\s+(?:-|root)(?:\s|$)|\b(?:run|execute|launch)\w*\b[^.;\n]{0,40}?\b(?:as|with)\s+"
         r"(?:root|admin\w*|superuser)\b|\bas system\b", "a request for elevated rights", strict=True),
    _cmd(r"\b(?:disabl|deactivat|turn\w* off|switch\w* off|uninstall)\w*\b[^.;\n]{0,30}\b(?:antivirus|anti-virus|"
         r"defender|firewall|selinux|uac|smartscreen|gatekeeper)\b", "a request to turn off a protection", strict=True),
    # risky, grounded by what they name
    _cmd(r"(?P<program>\b(?:pip3?|pipx|npm|npx|yarn|pnpm|gem|cargo|go|apt(?:-get)?|yum|dnf|brew|choco|winget|"
         r"conda|uv(?:\s+pip)?))\s+(?:install|add|get|i)\b"),
    _cmd(r"(?P<program>\bsudo)\b"),
    _cmd(r"(?P<program>\bchmod)\s+(?:[ugoa]*\+x|[0-7]?[0-7]*7[0-7]*)\b"),
    _cmd(r"(?P<program>\brm)\s+(?:-{1,2}[\w-]*\s+)*-\w*[rf]\w*\b"),
    _cmd(r"\bgit\s+(?:push\s+(?:-f|--force)(?!-)|reset\s+--hard|clean\s+-\w*f)", strict=True),
    _cmd(r"(?P<downloader>\b(?:curl|wget|invoke-webrequest|iwr|irm|invoke-restmethod|start-bitstransfer|bitsadmin))\b"),
)
_DOWNLOAD_AND_RUN = re.compile(
    r"\b(?:download\w*|herunterlad\w*|lade\w*|t[ée]l[ée]charg\w*|descarg\w*|scaric\w*|baixe\w*)\b"
    r"[^.;\n]{0,80}?\b(?:run|execut\w*|exec|launch\w*|install\w*|source|ausf[üu]hr\w*|ex[ée]cut\w*|ejecut\w*|"
    r"esegu\w*)\b|\bpaste\b[^.;\n]{0,40}\binto\b[^.;\n]{0,20}\b(?:terminal|shell|console|powershell|cmd|run dialog)\b",
    re.IGNORECASE,
)
_ARGUMENT = re.compile(r"\s+([^\s,;|&()`'\"]+)")


def _introduced_command(text: str, seen: _Seen) -> str | None:
    for command in _COMMANDS:
        for m in command.pattern.finditer(text):
            if not _command_grounded(command, m, text, seen):
                return f"introduces {command.what}: {_shown(_around(text, m))}"
    m = _DOWNLOAD_AND_RUN.search(text)
    if m and not (seen.has_text(m.group()) or _DOWNLOAD_AND_RUN.search(seen.text)):
        return f"introduces code to download and run: {_shown(_around(text, m))}"
    return None


def _command_grounded(command: _Command, m: re.Match[str], text: str, seen: _Seen) -> bool:
    if command.strict:
        return seen.has_text(m.group())
    if "downloader" in m.groupdict():  # fetching a URL the turn already has introduces nothing
        urls = [host for _, host in _addresses(_command_text(m, text))]
        return all(seen.has(host) for host in urls) if urls else seen.has(m["downloader"])
    operands = _arguments(text, m.end())
    if not all(seen.has(operand) for operand in operands):
        return False
    # the turn names the program, or what it acts on ("rm -r build" after "rmdir build");
    # sudo only by itself, since what it adds is the rights
    return seen.has(m["program"]) or (bool(operands) and m["program"].lower() != "sudo")


def _arguments(text: str, start: int) -> list[str]:
    """The operands after a command (flags skipped), up to the first word of prose."""
    operands = []
    for m in _ARGUMENT.finditer(text, start):
        if m.start() != start or m.group(1).lower() in _STOP_WORDS:
            break
        start = m.end()
        word = m.group(1).rstrip(".:!?")
        if not word.startswith("-") and word:
            operands.append(word)
        if word != m.group(1) or len(operands) >= 4:  # a sentence ends after it
            break
    return operands


def _around(text: str, m: re.Match[str]) -> str:
    """The part of `text` a match lies in: between backticks, clause ends or line ends."""
    found = [(text.rfind(mark, 0, m.start()), mark) for mark in ("`", "\n", ". ", "; ", ": ")]
    return _command_text(m, text, max([0, *(at + len(mark) for at, mark in found if at >= 0)]))


def _command_text(m: re.Match[str], text: str, start: int | None = None) -> str:
    """The command around a match: to the end of its backticks, clause or line."""
    end = re.compile(r"`|[;,]\s|\.\s|\.$|\n|$").search(text, m.end())
    return text[m.start() if start is None else start: end.start() if end else len(text)]


# --- 4. other people's data -----------------------------------------------------------------

_THIRD_PARTY = re.compile(
    r"\b(?:n(?:ei|ie|e|i|a)g?h?bo?u?rs?|co-?workers?|colleagues?|boss(?:es)?|landlords?|tenants?|room-?mates?|"
    r"flat-?mates?|classmates?|ex(?:-\w+)?|wi(?:fe|ves)|husbands?|girlfriends?|boyfriends?|spouses?|"
    r"strangers?|celebrit(?:y|ies)|someone(?: else)?|somebody(?: else)?|other (?:users?|people|customers?|"
    r"members?|persons?)|another (?:user|person|customer|member)|everyone|anyone|whoever|whomever|others|his|her|"
    r"nachbar\w*|kolleg\w*|voisin\w*|coll[èe]gue\w*|vecin[oa]s?|colegas?|vicin[oa]|collegh?\w*|"
    r"сосед\w*|коллег\w*)(?:'s|s'|')?(?!\w)",
    re.IGNORECASE,
)
_PERSONAL_DATA = re.compile(
    r"\b(?:(?:home|street|mailing|postal|ip|e-?mail)\s+)?ad{1,2}res{1,2}(?:es)?\b|\b(?:ph|f)one?s?\b|"
    r"\b(?:mobile|cell|contact|social security|card|account|passport|id|licen[cs]e)\s+(?:numbers?|nos?)\b|"
    r"\bp(?:a|@)?s{1,2}w(?:o|0)?r[dt]s?\b|\bpasscodes?\b|\bpins?\b|\bcredentials?\b|\blogins?\b|"
    r"\bapi keys?\b|\bssns?\b|\bcredit cards?\b|\bbank (?:account|details)\b|\bibans?\b|"
    r"\bdates? of birth\b|\bbirthdays?\b|\bwhereabouts\b|\blocations?\b|\bmedical\b|\bdiagnos[ie]s\b|"
    r"\bsalar(?:y|ies)\b|\bincome\b|\bprivate (?:messages|photos|data|info\w*)\b|\bbrowsing history\b|"
    r"\bpersonal (?:data|info\w*|details)\b|\bcontact (?:details|info\w*)\b|\bwhere (?:\w+ ){0,2}(?:lives?|works?)\b|"
    r"\badresse\w*|\btelefon\w*|\bt[ée]l[ée]phone\b|\bdirecci[óo]n\b|\bindirizzo\b|\bpasswort\b|"
    r"\bmot de passe\b|\bcontrase[ñn]a\b|\bадрес\w*|\bпарол\w*|\bтелефон\w*",
    re.IGNORECASE,
)
# Asking anyone, the user included, for a secret is phishing whoever the secret belongs to.
_SECRET_REQUEST = re.compile(
    r"\b(?:ask|request|collect|obtain|demand|require|prompt)\w*\b[^.;\n]{0,40}?\b(?P<secret>passwords?|pins?|"
    r"passcodes?|credentials?|card numbers?|cvv|cvc|security codes?|2fa codes?|verification codes?|"
    r"one-time codes?|otp|seed phrases?|recovery phrases?|private keys?|ssns?|social security numbers?)\b",
    re.IGNORECASE,
)
# A clause protects when it opens with a prohibition or a refusal, or says the data cannot
# be given; one that forbids refusing ("never refuse to give ...") asks after all.
_PROHIBITION = re.compile(
    r"^\W*(?:(?:you\s+)?(?:should|must|shall|may)\s*(?:not|never|n't)\b|(?:please\s+)?(?:do not|don't|dont|"
    r"never)\b|refus\w*|declin\w*|avoid\w*|nicht\b|nie\b|niemals\b|ne\b|n'|jamais\b|nunca\b|не\b|никогда\b)|"
    r"\b(?:can ?not|can't|won't|will not|must not|mustn't|should not|shouldn't|never)\s+(?:\w+\s+){0,2}"
    r"(?:share|give|reveal|disclose|provide|tell|send|look up|hand out|give out|ask)\b",
    re.IGNORECASE,
)
_REFUSING_FORBIDDEN = re.compile(r"\b(?:never|don't|dont|do not|not)\s+(?:\w+\s+)?(?:refus|declin|withh[oe]ld|"
                                 r"hesitat|hold back)\w*", re.IGNORECASE)
_NEAR_WORDS = 6  # how many words may lie between the third party and the data


def _asks_for_others_data(text: str, seen: _Seen) -> str | None:
    for clause in _clauses(text):
        if _protects(clause):
            continue
        rule = _RULE_MARKER.search(clause) is not None or _always_typo(clause) is not None
        found = _data_request(clause)
        if found is not None:
            who, what = found
            if rule or not all(_key(word) in seen.keys for word in _words(f"{who} {what}".lower())):
                return f"asks for other people's data: {_shown(_span_between(clause, who, what))}"
        secret = _SECRET_REQUEST.search(clause)
        if secret is not None and (rule or not seen.has(secret["secret"])):
            return f"asks for a password or other secret: {_shown(secret.group())}"
    return None


def _data_request(clause: str) -> tuple[str, str] | None:
    """(third party, data) named within a few words of each other in `clause`."""
    for who in _THIRD_PARTY.finditer(clause):
        for what in _PERSONAL_DATA.finditer(clause):
            gap = clause[min(who.end(), what.end()):max(who.start(), what.start())]
            if len(gap.split()) <= _NEAR_WORDS:
                return who.group(), what.group()
    return None


def _protects(clause: str) -> bool:
    """A clause that forbids the disclosure ("do not share ...", "refuse to give ...")."""
    return _PROHIBITION.search(clause) is not None and _REFUSING_FORBIDDEN.search(clause) is None


def _span_between(clause: str, who: str, what: str) -> str:
    a, b = clause.lower().find(who.lower()), clause.lower().find(what.lower())
    start, end = min(a, b), max(a + len(who), b + len(what))
    return clause[start:end]


# --- 5. absolute rules ---------------------------------------------------------------------

_RULE_MARKER = re.compile(
    r"\b(?:always|never|nevr|nver|neverr|every ?time|each time|from now on|from here on|going forward|"
    r"henceforth|in (?:all|every|each) (?:future |your |of your )?(?:answers?|responses?|replies|reply|"
    r"messages?|conversations?|chats?|cases?)|for (?:all|every) (?:users?|questions?|answers?|future)|at all times|"
    r"no matter what|under no circumstances|without exception|forever|permanently|whenever|"
    r"immer|niemals|nie|ab jetzt|von nun an|toujours|jamais|d[ée]sormais|dor[ée]navant|siempre|nunca|jam[áa]s|"
    r"a partir de ahora|de ahora en adelante|sempre|mai pi[ùu]|d'ora in poi|altijd|nooit|всегда|никогда)\b"
    r"|总是|永远|始终|一直|从不|从来不|以后|いつも|必ず|決して|常に",
    re.IGNORECASE,
)


def _unrelated_rule(text: str, seen: _Seen) -> str | None:
    for clause in _clauses(text):
        marker = _RULE_MARKER.search(clause)
        name = marker.group().lower() if marker else _always_typo(clause)
        if name is None:
            continue
        items = [shown for shown, _ in _addresses(clause)] + [clause[s:e] for s, e, _ in privacy.find(clause)]
        if items:
            return f"{_a(name)} '{name}' rule that would put {_shown(items[0])} into every answer"
        keys = {_key(w): w for w in _words(clause.lower()) if not _is_rule_word(w)}
        missing = [word for key, word in keys.items() if key not in seen.keys and key not in _FORM_KEYS]
        if keys and len(missing) > (1 - MIN_GROUNDED_SHARE) * len(keys):
            return (f"{_a(name)} '{name}' rule unrelated to the turn: {_shown(clause)} "
                    f"(not in the conversation: {', '.join(missing)})")
    return None


def _is_rule_word(word: str) -> bool:
    """A stop word or part of a rule marker: neither is content."""
    return word in _STOP_WORDS or _RULE_MARKER.fullmatch(word) is not None or _one_edit(word, "always")


def _a(name: str) -> str:
    return "an" if name[0] in "aeiou" else "a"


def _always_typo(clause: str) -> str | None:
    """A word one edit away from "always" ("alwyas", "allways", "alway")."""
    for word in re.findall(r"[a-z]+", clause.lower()):
        if word not in ("hallways", "always") and 5 <= len(word) <= 7 and _one_edit(word, "always"):
            return "always"
    return None


def _one_edit(a: str, b: str) -> bool:
    """`a` and `b` differ by one insertion, deletion, substitution or swap of neighbours."""
    if abs(len(a) - len(b)) > 1:
        return False
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (a[i + 1:] == b[i + 1:] or a[i + 1:] == b[i:] or a[i:] == b[i + 1:]
            or (a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:]))


# --- 6. sites and brands prescribed to other people ---------------------------------------

# Whom a clause addresses when it is a rule for people other than this turn's user.
_OTHERS = re.compile(
    r"\b(?:(?:other|all|any|future|new|every|each)\s+)?(?:people|users|customers|visitors|readers|learners|"
    r"students|beginners|folks|clients|everyone|everybody|anyone|anybody|others|someone|somebody|whoever)\b|"
    r"\b(?:every|each|any|another|a) (?:other )?(?:user|person|customer|visitor|reader|learner)\b|"
    r"\bnext time\b|\bin (?:the )?future\b|\bfrom now on\b|\bgoing forward\b",
    re.IGNORECASE,
)
# Verbs that hand someone a site or a product; a brand is a capitalised name within a few
# words after one ("buy CodeMasterPro", "sign up for the Acme Pro plan").
_PROMOTES = re.compile(
    r"\b(?:visit\w*|recommend\w*|suggest\w*|us(?:e|es|ing)|try|tries|trying|buy\w*|purchas\w*|install\w*|"
    r"download\w*|get|choose|pick|switch\w* to|go with|sign\w* up(?: for| at| with| on)?|subscrib\w* to|join|"
    r"check\w* out|point\w* (?:\w+ )?to|send\w* (?:\w+ )?to|direct\w* (?:\w+ )?to|refer\w* (?:\w+ )?to|"
    r"learn\w* (?:\w+ )?(?:at|on|with|from)|mention\w*|go to|head\w* to)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"[A-Z][\w&+'-]*|[a-z]+[A-Z0-9][\w&+-]*")  # "NordVPN", "Coin4U", "iPhone"
_NAME_WINDOW = 4  # words after the verb in which a name counts


def _prescribed_to_others(text: str, seen: _Seen) -> str | None:
    """A rule for other people (or an absolute one) that names a site or a brand the policy's
    answer did not: the client wrote it, and the client may be the one poisoning."""
    for clause in _clauses(text):
        if not (_OTHERS.search(clause) or _RULE_MARKER.search(clause) or _always_typo(clause)):
            continue
        items = [(shown, host) for shown, host in _addresses(clause)] + [(n, n) for n in _brands(clause)]
        for shown, item in items:
            if not seen.answered(item):
                where = "only the request names" if seen.has(item) else "the conversation does not contain"
                return f"a rule for other people that names {_shown(shown)}, which {where}: {_shown(clause)}"
    return None


def _brands(clause: str) -> list[str]:
    """Capitalised names a few words after a verb that hands something over; not the clause's first word."""
    names = []
    for verb in _PROMOTES.finditer(clause):
        for word in re.findall(r"[^\s,;:()\"]+", clause[verb.end():])[:_NAME_WINDOW]:
            word = word.rstrip(".!?'").removesuffix("'s")
            if _NAME.fullmatch(word) and word.lower() not in _STOP_WORDS and word != "I":
                names.append(word)
    return names


# --- words -----------------------------------------------------------------------------------

_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")
_WORD = re.compile(r"(?<![^\W_])[^\W\d_]+(?:'[^\W\d_]+)?(?![^\W_])")  # letters only: not "th" of "7th"
_CLAUSE_END = re.compile(r"(?<=[.!?;。！？])\s+|\n+|(?<=[;])")
_ABBREVIATION = re.compile(r"(?:\b(?:mr|ms|mrs|dr|prof|st|vs|etc|no|e\.g|i\.e|cf)|\b\w)\.$", re.IGNORECASE)


def _clauses(text: str) -> list[str]:
    """Sentences and ;-clauses; "Ms. Lee" and "e.g. 5" do not end one."""
    clauses: list[str] = []
    for piece in _CLAUSE_END.split(text):
        if clauses and _ABBREVIATION.search(clauses[-1]):
            clauses[-1] = f"{clauses[-1]} {piece}"
        elif piece.strip():
            clauses.append(piece)
    return clauses


def _words(text: str) -> Iterator[str]:
    """The words of lower-cased `text`; a run of Chinese or Japanese characters gives one word per character."""
    for m in _WORD.finditer(text):
        word = m.group()
        if _CJK.search(word):
            yield from (c for c in word if _CJK.match(c) and c not in _CJK_FUNCTION_CHARS)
        else:
            yield word.removesuffix("'s")


def _key(word: str) -> str:
    """Words that agree on this key count as the same word (see the module docstring)."""
    for ending in ("'s", "ing", "ed", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            break
    return word[:6]


_STOP_WORDS = _set_of(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing don't done down during each either
    else even ever every few for from further get gets got had has have having he her here hers him
    his how i if in into is isn't it it's its itself just let like may me might more most much must
    my no nor not now of off on once one only or other others our ours out over own please rather
    really same she should so some such than that the their theirs them then there these they this
    those though through to too under until up upon very was we were what when where which while who
    whom why will with within without would yes yet you your yours yourself thing things way ways
    user users people person someone everyone anyone everybody anybody them they others time times
    use using used write give make show tell say put keep let try take add include start end stop
    do does answer reply respond need needs want wants instead first next later now going forward
    future case cases circumstance circumstances matter exception
    der die das und oder nicht ist sind ein eine zu mit den dem des im auf für von
    le la les un une des et ou pas est sont de du au aux en pour avec dans que qui
    el los las y o no es son del al en con por para que un una lo
    il gli e di da per con che non una uno"""
)
_CJK_FUNCTION_CHARS = frozenset("的了是在我你他她它们要请不和也都就而及与着把被这那个有")
# How an answer is given, whatever it is about: every turn has these, so they ground a rule.
_FORM_WORDS = {
    "layout": """answer response reply sentence paragraph word line list bullet point heading header title
        bold italic markdown format emoji table block step working example summary detail explanation
        explain short long length brief concise simple plain clear direct quote greeting apology
        apologise apologize disclaimer""",
    "tone": """tone polite friendly formal informal casual kind warm professional encouraging supportive
        patient gentle positive respectful empathetic honest humble enthusiastic harsh rude blunt""",
    "language": """language english french german spanish italian portuguese dutch chinese japanese russian
        spelling grammar punctuation capital lowercase uppercase""",
    "numbers": "unit metric imperial decimal place round number digit calculation result final",
    "care": """check verify double confirm ask permission assume guess clarify question source cite citation
        reference test error edge case empty input handle""",
    "audience": "student teacher reader beginner child grade level expert",
    "code": "code comment docstring type hint variable name function output print",
}
_FORM_KEYS = frozenset(_key(word) for words in _FORM_WORDS.values() for word in words.split())

_CONTENT_DETECTORS: tuple[Callable[[str, _Seen], str | None], ...] = (
    _introduced_url, _introduced_personal_item, _introduced_command, _asks_for_others_data,
)
_DETECTORS = (*_CONTENT_DETECTORS, _unrelated_rule, _prescribed_to_others)
