"""The rules added after tuning on the second held-out split (docs/judge.md).

Every case here was written for this file, on its own topics and in its own languages,
one mechanism per test, with controls that look alike but must be left alone: thanks,
approval, doubts, irony and thinking aloud in many languages and scripts
(`judge/world_lexicons.py`, `judge/people_state.py`, `judge/doubts.py`); GUI pages that
come back as tool output (`judge/agent_state.py`); queue and progress payloads; values
hidden in paths, commands and payloads (`judge/action_values.py`, `judge/targets.py`);
and the hints each correction gives (`judge/rules.py`).
"""

from __future__ import annotations

import json

import pytest

from openclaw_rl.judge.action_values import month_mismatch, near_miss_number, version_mismatch
from openclaw_rl.judge.evidence import action_fix, material_from_parts, rule_verdict
from openclaw_rl.judge.rules import correction_hints


def call(name: str, **arguments) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]


def tool(request: str, calls: list[dict], output: str):
    return material_from_parts(request, "", calls, "tool", output)


def said(answer: str, reply: str):
    return rule_verdict(material_from_parts("a question", answer, [], "user", reply))


def vote(ruled) -> int | None:
    return None if ruled is None else ruled[0]


# -- what people write, in many languages ------------------------------------------------

@pytest.mark.parametrize("reply", [
    "Köszönöm szépen!", "Asante sana rafiki", "شكرا جزيلا", "תודה רבה!", "ขอบคุณมากครับ", "धन्यवाद!",
    "감사합니다!", "Terima kasih banyak", "Cảm ơn bạn nhé", "Дякую!", "Ευχαριστώ πολύ για τη βοήθεια",
    "Kiitos paljon", "Mulțumesc frumos", "Hvala lijepa", "Diolch yn fawr", "ありがとうございます。助かります"])
def test_thanks_in_any_of_forty_languages_is_approval(reply):
    assert vote(said("Here is the recipe.", reply)) == 1


@pytest.mark.parametrize("reply", ["thanks, but it still crashes", "no thanks", "thanks anyway, I'll ask someone else",
                                   "dzięki, ale to nie działa", "Köszönöm, de nem ezt kértem"])
def test_thanks_beside_a_but_or_a_refusal_is_no_approval(reply):
    assert vote(said("Here is the recipe.", reply)) != 1


@pytest.mark.parametrize("reply", ["nailed it", "that did the trick 🙌", "works now!", "🎉🎉", "Tökéletes, pontosan",
                                   "완벽해요", "Mantap, berhasil", "Τέλειο!", "bang on, my sister owes you a coffee",
                                   "correct, that settles the argument"])
def test_approval_without_thanks_is_approval(reply):
    assert vote(said("The bridge opened in 1932.", reply)) == 1


@pytest.mark.parametrize("reply", ["works now, but the footer vanished", "correct the spelling of my surname"])
def test_approval_words_beside_a_but_or_an_order_are_no_approval(reply):
    assert vote(said("The bridge opened in 1932.", reply)) != 1


@pytest.mark.parametrize("reply, score", [("★★★★☆ clear summary", 1), ("⭐ unreadable", -1), ("⭐⭐⭐ fine", 0)])
def test_star_signs_are_a_rating(reply, score):
    assert vote(said("A summary of the report.", reply)) == score


@pytest.mark.parametrize("answer, reply, value", [
    ("Sydney.", "hm, Canberra surely?", "Canberra"), ("O Douro.", "Não seria o Tejo?", "Tejo"),
    ("Brno.", "Nebyla to Praha?", "Praha"), ("It was 1067.", "wait, 1066?", "1066"),
    ("Ungefähr 8.000 Meter.", "Waren es nicht 8.848 Meter?", "8.848"),
    ("Le dollar.", "Euh, c'est pas la livre ?", "livre")])
def test_a_doubt_that_names_another_value_is_a_correction_with_it_as_the_hint(answer, reply, value):
    assert vote(said(answer, reply)) == -1
    assert any(value in hint for hint in correction_hints(reply, "user"))


@pytest.mark.parametrize("answer, reply", [("It was 1067.", "1067?"), ("About 42 km.", "42 km?! let me check the map")])
def test_the_answer_asked_back_is_no_doubt(answer, reply):
    assert vote(said(answer, reply)) in (None, 0)


@pytest.mark.parametrize("reply", ["42 km?! ok let me check the map first",
                                   "Moment, ich muss erst im Kalender schauen.", "Je vais d'abord voir avec ma sœur.",
                                   "so if the bus is late we... no wait, depends on the ferry"])
def test_thinking_aloud_in_other_languages_is_neutral(reply):
    assert vote(said("About 42 km by road.", reply)) == 0


@pytest.mark.parametrize("reply", ["C'est du français. Je veux de l'allemand, par exemple 'Guten Morgen'.",
                                   "Das ist Englisch. Ich brauche es auf Spanisch."])
def test_saying_what_the_answer_is_then_what_is_wanted_is_a_correction_with_a_hint(reply):
    assert vote(said("Bonjour", reply)) == -1
    assert correction_hints(reply, "user")


@pytest.mark.parametrize("reply", ["btw, unrelated question: how do I descale a kettle",
                                   "Otra pregunta: cuánto cuesta el metro en Lisboa",
                                   "Και πόσο κοστίζει το εισιτήριο;"])
def test_a_new_topic_or_a_question_in_another_script_is_progression(reply):
    assert vote(said("The museum opens at 10.", reply)) == 1


@pytest.mark.parametrize("reply", ["oh sure, because everyone loves a forty-page readme.",
                                   "a slogan that sells, said no one ever", "wow, the enthusiasm is radiating"])
def test_irony_is_a_correction_without_a_hint(reply):
    assert vote(said("Here is the slogan.", reply)) == -1
    assert correction_hints(reply, "user") == []


def test_a_rejection_that_is_only_a_verdict_gives_no_hint_and_a_stated_amount_gives_one():
    assert vote(said("Use 100 ml of milk.", "that's barely enough for one cup. more like 300 ml")) == -1
    assert any("should be 300 ml" in h for h in correction_hints("that's barely enough for one cup. more like 300 ml",
                                                                  "user"))
    assert correction_hints("Nee, dat is complete onzin.", "user") == []


# -- GUI pages that come back as tool output ---------------------------------------------

PAGE = 'Clicked [4] button "Save".\n\nPage "Settings" (/settings)\n'


def test_a_page_is_read_as_a_page_whatever_role_brings_it():
    request = "Set the reminder lead time to 15 minutes and save."
    page = PAGE + '[2] spinbutton "Lead time" value="15"\ntext "Value must be between 1 and 10"'
    m = tool(request, call("click", element=4), page)
    assert vote(rule_verdict(m)) == -1
    assert any("between 1 and 10" in h for h in correction_hints(page, "tool"))


def test_a_named_switch_left_as_it_was_is_a_miss_with_a_hint_and_the_asked_state_is_done():
    request = "Stop the weekly digest emails."
    left = PAGE + '[3] checkbox "Weekly digest" checked=true\n[5] link "Help"'
    m = tool(request, call("click", element=5), left)
    assert vote(rule_verdict(m)) == -1 and "Untick" in action_fix(m)
    done = 'Clicked [3] checkbox "Weekly digest".\n\nPage "Settings" (/s)\n[3] checkbox "Weekly digest" checked=false'
    assert vote(rule_verdict(tool(request, call("click", element=3), done))) == 1


def test_a_named_number_field_left_at_another_value_is_a_miss():
    request = "Change the number of guests to 5."
    page = 'Clicked [7] button "+".\n\nPage "Booking" (/b)\n[6] spinbutton "Guests" value="4"\n[7] button "+"'
    m = tool(request, call("click", element=7), page)
    assert vote(rule_verdict(m)) == -1 and "5" in action_fix(m)
    typed = 'Typed "5" into [6] spinbutton "Guests".\n\nPage "Booking" (/b)\n[6] spinbutton "Guests" value="5"'
    assert vote(rule_verdict(tool(request, call("type", element=6, text="5"), typed))) == 1


# -- output that says nothing yet ----------------------------------------------------------

@pytest.mark.parametrize("output", [
    '{"status": "queued", "position": 3}', '{"state": "x", "status": "processing", "eta_seconds": 40}',
    "[notice] Your workspace was renewed for 2 hours.", "[system] Read-only mode tonight from 01:00.",
    "Build scheduled on runner linux-4 (2 jobs ahead). The log will be posted here when done."])
def test_queue_progress_and_notices_are_neutral(output):
    assert vote(rule_verdict(tool("Rebuild the docs.", call("build_docs"), output))) == 0


def test_a_finished_payload_is_not_neutral():
    output = '{"status": "completed", "pages": 41}'
    assert rule_verdict(tool("Rebuild the docs.", call("build_docs"), output)) is None
    assert vote(rule_verdict(tool("Order 2 lamps.", call("order", quantity=2),
                                  "Order #5512 placed: 2 lamps. Estimated delivery: Mon 3 Mar."))) is None


# -- values hidden in paths, commands, payloads ---------------------------------------------

def test_a_month_in_a_path_other_than_the_asked_one_is_a_miss():
    request = "back up the February 2023 invoices"
    wrong = tool(request, call("run", command="tar czf inv-2023-02.tgz invoices/2023-01/"), "invoices/2023-01/a.pdf")
    assert month_mismatch(wrong) is not None and "2023-02" in month_mismatch(wrong).fix
    right = tool(request, call("run", command="tar czf inv-2023-02.tgz invoices/2023-02/"), "invoices/2023-02/a.pdf")
    assert month_mismatch(right) is None


def test_another_version_written_is_a_miss_and_a_patch_of_the_asked_one_is_not():
    request = "Bump the app version to 3.2.0 in package.json."
    edit = call("edit_file", path="package.json", old='"version": "3.1.4"', new='"version": "3.1.5"')
    assert version_mismatch(tool(request, edit, "Edited package.json")) is not None
    edit = call("edit_file", path="package.json", old='"version": "3.1.4"', new='"version": "3.2.0"')
    assert version_mismatch(tool(request, edit, "Edited package.json")) is None
    assert version_mismatch(tool("upgrade python to 3.12", call("run", command="pyenv install 3.12.4"), "ok")) is None


def test_a_number_one_slip_from_the_asked_one_is_a_miss():
    request = "restart the service listening on port 5433"
    assert near_miss_number(tool(request, call("run", command="fuser -k 5432/tcp"), "5432/tcp: 91")) is not None
    assert near_miss_number(tool("close ticket 4721", call("close", ticket="4712"), "closed")) is not None
    assert near_miss_number(tool(request, call("run", command="fuser -k 5433/tcp"), "5433/tcp: 91")) is None
    assert near_miss_number(tool(request, call("run", command="fuser -k 8080/tcp"), "8080/tcp: 91")) is None


def test_a_unit_letter_or_a_payload_unit_other_than_the_asked_one_is_a_miss():
    request = "Set the sauna to 80 °C."
    assert vote(rule_verdict(tool(request, call("set_heat", value=80, unit="F"), '{"ok": true}'))) == -1
    assert vote(rule_verdict(tool(request, call("set_heat", value=80), '{"value": 80, "unit": "°F"}'))) == -1
    assert rule_verdict(tool(request, call("set_heat", value=80, unit="C"), '{"value": 80, "unit": "°C"}')) is None


def test_a_contacts_full_name_durations_and_product_codes_are_the_requests_values():
    assert rule_verdict(tool("message Ingrid that the keys are under the mat",
                             call("send_message", to="Ingrid Bergström", text="Keys under the mat"), "sent")) is None
    assert vote(rule_verdict(tool("message Ingrid that the keys are under the mat",
                                  call("send_message", to="Inga", text="Keys under the mat"), "sent"))) == -1
    assert rule_verdict(tool("reserve the studio for two hours on 3 May",
                             call("reserve", date="2025-05-03", duration_minutes=120), "reserved")) is None
    assert vote(rule_verdict(tool("reserve the studio for two hours on 3 May",
                                  call("reserve", date="2025-05-03", duration_minutes=90), "reserved"))) == -1
    assert rule_verdict(tool("order 3 boxes of nails", call("order", sku="NL-40MM-2K", quantity=3), "ok")) is None


def test_a_search_for_an_identifier_is_grounded_by_its_words():
    assert rule_verdict(tool("find where the headers are parsed", call("search", pattern="parseHeaders"),
                             "src/http.py:12")) is None
    assert vote(rule_verdict(tool("find where parse_config is used", call("search", pattern="parse_cfg"),
                                  "src/a.py:3"))) == -1


def test_a_linters_diagnostic_is_the_hint_of_a_failed_check():
    output = "app/views.py:7:5: E711 comparison to None\nFound 1 error.\n[exit code 1]"
    assert any("E711" in h for h in correction_hints(output, "tool"))


def test_another_member_of_a_closed_set_of_choices_is_a_miss():
    request = "Deploy the billing service to staging."
    wrong = tool(request, call("deploy", service="billing", environment="production"), '{"deployed": true}')
    assert vote(rule_verdict(wrong)) == -1 and "staging" in action_fix(wrong)
    assert rule_verdict(tool(request, call("deploy", service="billing", environment="staging"), "{}")) is None
    assert vote(rule_verdict(tool("Export the ledger as CSV.", call("export", what="ledger"),
                                  '{"ok": true, "format": "pdf"}'))) == -1
    assert rule_verdict(tool("Export the ledger.", call("export", what="ledger"), '{"format": "pdf"}')) is None


def test_an_identifier_one_slip_from_the_asked_one_is_a_miss():
    request = "create the branch fix/rate-limit"
    slip = tool(request, call("run", command="git checkout -b fix/rate-limits"), "Switched to a new branch")
    assert vote(rule_verdict(slip)) == -1 and "fix/rate-limit" in action_fix(slip)
    same = tool(request, call("run", command="git checkout -b fix/rate-limit"), "Switched to a new branch")
    assert rule_verdict(same) is None


def test_a_count_the_outcome_reports_other_than_the_asked_one_is_a_miss():
    request = "Get 3 tickets for the 19:30 show."
    assert vote(rule_verdict(tool(request, call("buy_tickets", show="19:30"), '{"ok": true, "tickets": 2}'))) == -1
    assert rule_verdict(tool(request, call("buy_tickets", show="19:30"), '{"ok": true, "tickets": 3}')) is None


def test_a_date_is_compared_only_when_the_request_gives_one():
    request = "Book a court for two on Sunday at 9."
    assert rule_verdict(tool(request, call("book", date="2025-08-17", time="09:00", players=2), "booked")) is None
    assert vote(rule_verdict(tool("Book a court on 16 August at 9.", call("book", date="2025-08-17", time="09:00"),
                                  "booked"))) == -1


@pytest.mark.parametrize("output", ['{"status": 404, "error": "Not Found"}', "HTTP/1.1 503 Service Unavailable",
                                    "=== 7 passed, 2 errors in 3.1s ==="])
def test_http_errors_and_test_errors_are_failures(output):
    assert vote(rule_verdict(tool("Fetch the price list.", call("fetch", document="price list"), output))) == -1


def test_an_address_the_call_found_is_no_target_the_request_named():
    assert rule_verdict(tool("Get my account details.", call("http_get", url="https://api.bank.test/me"),
                             '{"status": 200, "name": "Ola"}')) is None


def test_a_count_of_files_short_of_its_total_is_progress():
    assert vote(rule_verdict(tool("Back up the photos.", call("backup"), "Copying... 120/800 files"))) == 0


@pytest.mark.parametrize("reply", ["Muito longo, pode encurtar?", "Kannst du das kürzer machen?"])
def test_a_question_asking_for_it_shorter_in_another_language_is_no_follow_up(reply):
    assert vote(said("A long answer.", reply)) != 1


@pytest.mark.parametrize("reply", ["great 😒", "oh sure, because that's so clear"])
def test_praise_with_a_mark_of_irony_is_a_correction(reply):
    assert vote(said("Here is the summary.", reply)) == -1


def test_thanks_that_contrast_with_what_was_asked_are_no_approval():
    assert vote(said("A long essay.", "thanks for the essay, I asked for one word")) != 1
    assert vote(said("One word: serendipity.", "thanks, exactly what I asked for")) == 1


def test_a_conversion_into_the_named_unit_an_output_file_and_a_guest_are_read_as_they_are():
    assert rule_verdict(tool("Convert 5 miles to km.", call("convert", value=5, from_unit="mi", to_unit="km"),
                             '{"result": 8.05, "unit": "km"}')) is None
    assert rule_verdict(tool("Resize photo.jpg to 800px wide.",
                             call("run", command="convert photo.jpg -resize 800x photo_800.jpg"), "")) is None
    assert vote(rule_verdict(tool("Resize photo.jpg to 800px wide.",
                                  call("run", command="convert image.jpg -resize 800x photo_800.jpg"), ""))) == -1
    assert vote(rule_verdict(tool("Invite Sam to the standup.", call("invite", event="Standup", guest="Pam"),
                                  '{"invited": "Pam"}'))) == -1


@pytest.mark.parametrize("reply", ["Ez rossz.", "Αυτό είναι λάθος.", "Ini salah.", "이거 틀렸어요.", "זה לא נכון.",
                                   "that's the opposite of what I asked", "the totals don't add up",
                                   "oh brilliant, you just deleted my whole paragraph"])
def test_rejections_in_other_languages_and_words_are_corrections(reply):
    assert vote(said("Here is the table.", reply)) == -1


@pytest.mark.parametrize("reply", ["Não, a reunião é na segunda.", "Nie, spotkanie jest w poniedziałek rano.",
                                   "Hmm no, that's for Python 2, I'm on 3.12", "Όχι, η συνάντηση είναι την Τρίτη."])
def test_a_no_followed_by_what_should_be_is_a_correction_with_a_hint(reply):
    assert vote(said("The meeting is on Friday in Python 3.", reply)) == -1
    assert correction_hints(reply, "user")


@pytest.mark.parametrize("reply", ["no worries, all good", "No, let me think about it first", "Nein, danke!"])
def test_a_no_of_courtesy_or_thinking_aloud_is_no_correction(reply):
    assert vote(said("Do you need anything else?", reply)) != -1
