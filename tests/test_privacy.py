"""Redaction of the logs: each kind found and masked in sentences, wrong checksums and
ordinary text (code, versions, timestamps, counts, math) left alone, kinds, parse_kinds."""

from __future__ import annotations

import statistics
import time

import pytest

from openclaw_rl.privacy import KINDS, find, parse_kinds, redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cards: Luhn-valid, with spaces, dashes, Amex grouping, Mastercard's 2-series, plain
        ("My card is 4111 1111 1111 1111, thanks.", "My card is [card], thanks."),
        ("Use 5555-5555-5555-4444 for the test.", "Use [card] for the test."),
        ("amex 3782 822463 10005 and discover 6011111111111117", "amex [card] and discover [card]"),
        ("Mastercard 2223 0031 2200 3222 expires 12/27", "Mastercard [card] expires 12/27"),
        # the card is found inside a run of neighbouring numbers
        ("qty 2 4111 1111 1111 1111 2024", "qty 2 [card] 2024"),
        ("Meine Kreditkarte: 4111-1111-1111-1111, gültig bis 12/27.", "Meine Kreditkarte: [card], gültig bis 12/27."),
    ],
)
def test_card_numbers_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Write to alice.smith+logs@example.co.uk today.", "Write to [email] today."),
        ("<bob@mail.example.com>", "<[email]>"),
        ("mailto:carol_99@example.org.", "mailto:[email]."),
        ("Schreib an jörg@müller.de, bitte.", "Schreib an [email], bitte."),
    ],
)
def test_emails_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Call (415) 555-2671 after five.", "Call [phone] after five."),
        ("US: 415-555-2671, 415.555.2671, 1-800-555-0199", "US: [phone], [phone], [phone]"),
        ("UK office 020 7946 0958, mobile 07911 123456.", "UK office [phone], mobile [phone]."),
        ("Ruf mich an: 030 12345678 oder 0151 23456789.", "Ruf mich an: [phone] oder [phone]."),
        ("Festnetz (030) 1234 5678, Fax 030/1234567", "Festnetz [phone], Fax [phone]"),
        ("Appelez le 01 42 68 53 00 ou le 06.12.34.56.78.", "Appelez le [phone] ou le [phone]."),
        ("+44 20 7946 0958, +49 30 1234567, +33 6 12 34 56 78", "[phone], [phone], [phone]"),
        ("+1 415 555 2671 or +14155552671", "[phone] or [phone]"),
        ("India +91 98765 43210, Japan +81 3-1234-5678", "India [phone], Japan [phone]"),
        ("+44 (0)20 7946 0958 and 0049 30 1234567", "[phone] and [phone]"),
        # a bare run of digits is a phone only when the text says so
        ("my phone: 4155552671", "my phone: [phone]"),
    ],
)
def test_phone_numbers_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IBAN DE89 3704 0044 0532 0130 00 BIC COBADEFFXXX", "IBAN [iban] BIC COBADEFFXXX"),
        ("Meine IBAN lautet DE89370400440532013000.", "Meine IBAN lautet [iban]."),
        ("Pay GB82 WEST 1234 5698 7654 32 or GB82WEST12345698765432", "Pay [iban] or [iban]"),
        ("Mon IBAN : FR14 2004 1010 0505 0001 3M02 606, merci", "Mon IBAN : [iban], merci"),
        ("FR1420041010050500013M02606", "[iban]"),
    ],
)
def test_ibans_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # shapes rare enough to mask wherever they appear
        ("My SSN is 536-90-4399.", "My SSN is [govid]."),
        ("NI number AB 12 34 56 C, or AB123456C", "NI number [govid], or [govid]"),
        ("Mi DNI es 54362315-K y mi NIE X-2482300W.", "Mi DNI es [govid] y mi NIE [govid]."),
        ("Il mio codice fiscale è RCCMNL83S18D969H.", "Il mio codice fiscale è [govid]."),
        ("Numéro de sécurité sociale : 2 95 10 99 126 111 93", "Numéro de sécurité sociale : [govid]"),
        ("Meu CPF é 390.533.447-05.", "Meu CPF é [govid]."),
        # plain digits with one check digit: masked after a word naming them
        ("social security number: 536904399", "social security number: [govid]"),
        ("SSN 536 90 4399", "SSN [govid]"),
        ("Mijn BSN is 111222333.", "Mijn BSN is [govid]."),
        ("Steuer-ID: 36 574 261 809", "Steuer-ID: [govid]"),
        ("meine Steueridentifikationsnummer lautet 36574261809", "meine Steueridentifikationsnummer lautet [govid]"),
        ("Aadhaar 2341 2341 2346", "Aadhaar [govid]"),
        ("CPF 39053344705", "CPF [govid]"),
    ],
)
def test_government_ids_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_log_line_with_everything_planted() -> None:
    text = ("Hi, I'm Alice (alice@example.com, +1 415 555 2671). Charge 4111 1111 1111 1111, "
            "refund to DE89 3704 0044 0532 0130 00; my SSN is 536-90-4399. Model v2.13.0 answered in 812 ms.")
    assert redact(text) == ("Hi, I'm Alice ([email], [phone]). Charge [card], refund to [iban]; "
                            "my SSN is [govid]. Model v2.13.0 answered in 812 ms.")


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # Luhn fails
        "IBAN DE89 3704 0044 0532 0130 01",  # mod 97 fails
        "GB82WEST12345698765433",
        "DE5137040044053201300 and QZ57123456789012345678",  # mod 97 holds, but DE has 22 characters, QZ is no country
        "SSN 666-12-3456 and 900-12-3456 and 123-00-4567",  # never issued
        "DNI 54362315Z",  # wrong letter
        "NIE X-2482300A",
        "CF RCCMNL83S18D969A",
        "NIR 2 95 10 99 126 111 99",
        "CPF 231.002.999-00",
        "BSN 111222334",
        "Steuer-ID 36574261890",
        "Aadhaar 2341 2341 2347",
        "NINO QQ123456C and GB123456A",  # prefixes HMRC never issues
        "call 555-0100 1234",  # too short, not a number anywhere
    ],
)
def test_wrong_checksums_and_impossible_numbers_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "torch 2.13.0, python 3.11.7, numpy 1.26.4, cuda 12.4.1",
        "released 2024-05-01 12:30:00, again at 2024-05-01T12:30:00Z",
        "dates 01/05/2024, 05.01.2024, 1.5.2024; p. 123-145",
        "epoch 1714566600, in ms 1714566600123, in us 1714566600123009",  # both pass Luhn
        "account 7992 7398 7130 0008",  # passes Luhn, but no card starts with 7
        "port 8080, pid 4242424, 1234567 orders, uid 1000, 86400000 ms",
        "int max 2147483647, 2^32 = 4294967296, 6 * 7 = 42",
        "x = 12345678 * 9876543 + 3.141592653589793",
        "weights 0.1234 0.5678 0.9123 0.4567 and 0.5 0.25 0.125",
        "the years 2021 2022 2023 2024 2025",
        "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        "matrix 1024 4096 16384 65536; steps 100000 200000 300000",
        "Bestellung 0815 4711 erhalten, Rechnung 1.234,56 €",
        "$1,234,567.89 and 1,234,567,890 rows",
        "10.0.0.1:8080, 192.168.100.200, 255.255.255.0",
        "uuid 550e8400-e29b-41d4-a716-446655440000",
        "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "ISBN 978-3-16-148410-0, ZIP 94105-1234, ticket ABC-123456, PR #123456",
        "a plain 536904399 with no word naming it, and 36574261809 too",
        "y = x @ w.T\n@property\ndef f(self): return q@k.transpose(-2, -1)",
        "npm install pkg@1.2.3; docker pull img@sha256:abc; ping @alice",
        "git clone git@github.com:org/repo.git",
        "def f(x: int) -> int:\n    return x * 1000003 % 998244353\n",
    ],
)
def test_ordinary_text_code_and_numbers_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_kinds_chooses_which_items_are_masked() -> None:
    text = "alice@example.com, 4111 1111 1111 1111, +44 20 7946 0958, DE89370400440532013000, 536-90-4399"
    assert redact(text, ("email",)) == (
        "[email], 4111 1111 1111 1111, +44 20 7946 0958, DE89370400440532013000, 536-90-4399")
    assert redact(text, ("card", "govid")) == (
        "alice@example.com, [card], +44 20 7946 0958, DE89370400440532013000, [govid]")
    assert redact(text, ()) == text
    assert redact(text) == "[email], [card], [phone], [iban], [govid]"


def test_an_item_of_another_kind_is_not_masked_as_the_one_asked_for() -> None:
    # an IBAN's and a card's digits look like phone numbers; asking for phones alone leaves them whole
    text = "IBAN DE89 3704 0044 0532 0130 00, card 4111 1111 1111 1111"
    assert redact(text, ("phone",)) == text


def test_find_returns_spans_in_order_that_do_not_overlap() -> None:
    text = "mail bob@example.com or call +44 20 7946 0958"
    spans = find(text)
    assert [(text[start:end], kind) for start, end, kind in spans] == [
        ("bob@example.com", "email"), ("+44 20 7946 0958", "phone")]


def test_redact_rejects_unknown_kinds_and_a_bare_string() -> None:
    with pytest.raises(ValueError, match=r"\['phones'\].*email, phone, card, iban, govid"):
        redact("x", ("phones",))
    with pytest.raises(ValueError, match="parse_kinds"):
        redact("x", "email")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", KINDS),
        ("none", ()),
        ("ALL", KINDS),
        ("email", ("email",)),
        ("card, email", ("email", "card")),  # in KINDS order, whatever order given
        ("iban,govid,iban", ("iban", "govid")),
    ],
)
def test_parse_kinds_reads_a_cli_value(value: str, expected: tuple[str, ...]) -> None:
    assert parse_kinds(value) == expected


def test_parse_kinds_names_the_unknown_kind_and_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'cards' in 'email,cards'.*'all', 'none'.*email, phone, card, iban, govid"):
        parse_kinds("email,cards")
    with pytest.raises(ValueError, match="no redact kinds"):
        parse_kinds(" , ")


def test_redact_stays_fast_on_a_long_message_full_of_numbers() -> None:
    # the request path logs every turn: a 2000-character message of numbers and planted items
    # takes a few milliseconds here; the bound is loose enough for a loaded CI machine and
    # still catches a detector that goes quadratic or hands every number to the matcher
    text = ("[15496, 11, 995, 2024, 1714566600123] 0.1234 0.5678 12 345 678 901 2 3 4 "
            "2024-05-01 12:30:00 mail a@b.com +44 20 7946 0958 4111 1111 1111 1111 ") * 15
    text = text[:2000]
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        redact(text)
        timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.05
