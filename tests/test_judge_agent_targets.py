"""The rules added after tuning on the first held-out split (docs/judge.md).

Every case here was written for this file, on topics and in languages the labelled splits
do not use, one mechanism per test: the target an action named against the request's
(`judge/targets.py`), progress and notices (`judge/agent_state.py`), short doubts in other
languages (`judge/doubts.py`), what people write (`judge/people_state.py`) and the hints
stated fixes give (`judge/rules.py`). Each mechanism has controls that look alike but
must be left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openclaw_rl.judge.evidence import action_fix, material_from_parts, rule_verdict
from openclaw_rl.judge.people_state import people_verdict
from openclaw_rl.judge.rules import correction_hints
from openclaw_rl.judge.targets import action_target_mismatch


def call(name: str, **arguments) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]


def tool(request: str, calls: list[dict], output: str, role: str = "tool"):
    return rule_verdict(material_from_parts(request, "", calls, role, output))


def said(request: str, answer: str, reply: str, role: str = "user"):
    return rule_verdict(material_from_parts(request, answer, [], role, reply))


def vote(ruled) -> int | None:
    return None if ruled is None else ruled[0]


# -- targets ---------------------------------------------------------------------------

def test_another_weekday_in_the_call_or_only_in_the_outcome_is_a_miss():
    asked = "book the spin class for wednesday at 7"
    assert vote(tool(asked, call("book_class", day="Friday", time="07:00"), "Booked: Spin, Friday 07:00.")) == -1
    assert tool(asked, call("book_class", day="Wednesday", time="07:00"), "Booked: Spin, Wed 07:00.") is None
    assert vote(tool(asked, call("book_class", slot=17), "Booked: Spin, Sat 07:00.")) == -1
    assert vote(tool("reserva la pista para el jueves", call("reserve", dia="viernes"), "Reserva hecha.")) == -1
    assert tool("I'm off on friday, what will the weather be like in oslo", call("forecast", city="Oslo"),
                "Sat: sun, 18°C\nSun: rain, 14°C") is None  # a listing, not a confirmation


def test_a_name_like_argument_the_request_does_not_name_is_a_miss():
    assert vote(tool("call Anneke about the invoice", call("start_call", contact="Annika"),
                     "Calling Annika...")) == -1
    assert tool("call Anneke about the invoice", call("start_call", contact="Anneke"), "Calling Anneke") is None
    assert vote(tool("open the v5 spec", call("open_doc", title="Spec v4"), "Opened.")) == -1
    # a title the call makes up, and codes the request would not spell, are not compared
    assert tool("make a new doc for my garden plans", call("create_doc", title="Garden Plan 2025"),
                "Created.") is None
    assert tool("flights from lisbon to amsterdam on friday", call("search_flights", origin="LIS",
                                                                  destination="AMS", day="Friday"),
                "4 flights found") is None


def test_filters_and_formats_the_call_infers_are_not_compared_as_names():
    assert tool("find me wireless headphones under 100", call("search_products", query="wireless headphones",
                                                            category="Electronics", sort="Relevance"),
                "12 results") is None


@pytest.mark.parametrize("request_, calls, output, hint", [
    ("book the spin class for wednesday at 7", call("book_class", day="Friday", time="07:00"), "Booked.",
     "Use Wednesday, the day the request named, not Friday."),
    ("call Anneke about the invoice", call("start_call", contact="Annika"), "Calling Annika...",
     "Use Anneke, as the request says, not Annika."),
    ("log a 5 km run", call("log_run", distance=5, unit="mi"), "Logged 5 mi.",
     "Use km, the unit the request gave, not mi."),
    ("list the lines in app.log that mention timeout", call("bash", command="grep -c timeout app.log"), "12",
     "Print the lines themselves, not a count."),
    ("order four tickets", call("order", tickets=5), "Ordered 5 tickets.",
     "Use the values the request gave (4), not 5."),
])
def test_a_missed_target_gives_a_hint_naming_what_the_request_asked_for(request_, calls, output, hint):
    assert action_fix(material_from_parts(request_, "", calls, "tool", output)) == hint


def test_a_right_target_or_a_person_gives_no_target_hint():
    right = material_from_parts("call Anneke", "", call("start_call", contact="Anneke"), "tool", "ok")
    assert action_fix(right) is None
    assert action_fix(material_from_parts("call Anneke", "Calling.", [], "user", "no, Annika")) is None


def test_a_currency_code_is_grounded_by_its_name_or_symbol():
    asked = "how much is 50 pounds in euros"
    assert tool(asked, call("convert", amount=50, base="GBP", target="EUR"), "50 GBP = 58.10 EUR") is None
    assert tool("convert £50 to ¥", call("convert", amount=50, base="GBP", target="JPY"), "9,420 JPY") is None
    assert vote(tool(asked, call("convert", amount=50, base="GBP", to="USD"), "50 GBP = 63.20 USD")) == -1


def test_another_unit_of_the_asked_dimension_is_a_miss_but_a_conversion_is_not():
    assert vote(tool("log a 5 km run", call("log_run", distance=5, unit="mi"), "Logged 5 mi.")) == -1
    assert tool("log a 5 km run", call("log_run", distance=5, unit="km"), "Logged 5 km.") is None
    assert vote(tool("preheat the oven to 180 °C", call("set_oven", temperature=180), "Oven set to 180 °F.")) == -1
    assert tool("convert 10 miles to km", call("convert", value=10, source="mi", target="km"),
                "10 mi = 16.09 km") is None


def test_command_options_that_print_something_else_are_a_miss():
    lines = "list the lines in app.log that mention timeout"
    assert vote(tool(lines, call("bash", command="grep -c timeout app.log"), "12")) == -1
    assert vote(tool(lines, call("bash", command="grep -rl timeout logs/"), "logs/app.log")) == -1
    assert vote(tool(lines, call("bash", command="grep -v timeout app.log"), "ok\nok")) == -1
    assert tool("how many lines of app.log mention timeout", call("bash", command="grep -c timeout app.log"),
                "12") is None
    assert vote(tool("show the last 20 lines of build.log", call("bash", command="head -n 20 build.log"),
                     "step 1\nstep 2")) == -1
    assert vote(tool("sort scores.txt from highest to lowest", call("bash", command="sort -n scores.txt"),
                     "3\n9\n12")) == -1
    assert tool("sort scores.txt from highest to lowest", call("bash", command="sort -rn scores.txt"),
                "12\n9\n3") is None
    assert tool("show the latest 10 commits", call("bash", command="git log --oneline | head -10"),
                "a1b2c3 fix typo") is None  # the end of a pipe: git log shows the newest first
    assert tool("does app.log have any timeouts", call("bash", command="grep -c timeout app.log"), "0") is None


def test_the_test_file_of_the_asked_module_counts_when_tests_are_run_not_written():
    asked = "fix the bug in src/parser.py and run its tests"
    assert tool(asked, call("run_tests", path="tests/test_parser.py"), "5 passed in 0.1s") is None
    assert vote(tool(asked, call("write_file", path="tests/test_parser.py", content="def test(): pass"),
                     "Wrote 17 bytes")) == -1


def test_an_outcome_naming_another_size_of_the_asked_item_is_a_miss():
    page = ('Clicked [9] button "Add to bag".\n\nPage "Trail shoe"\nstatus "Added to bag: Trail shoe 1 l bottle '
            'holder"')
    assert vote(tool("add the 2 l bottle holder to my bag", call("click", element=9), page, "environment")) == -1


# -- GUI state and progress --------------------------------------------------------------

def test_a_switch_left_on_is_read_whatever_key_names_the_element():
    page = 'Clicked [3] switch "Notifications".\n\nPage "Settings"\n[3] switch "Notifications" checked=true'
    assert vote(tool("disable notifications", call("click", element=3), page, "environment")) == -1
    assert vote(tool("disable notifications", call("click", ref=3), page, "environment")) == -1
    done = page.replace("checked=true", "checked=false")
    assert vote(tool("disable notifications", call("click", element=3), done, "environment")) == 1  # done as asked


def test_element_numbers_and_a_year_month_are_no_parameters():
    typed = 'Typed "3" into [5] spinbutton "Copies".\n\nPage "Print"\n[5] spinbutton "Copies" value="3"'
    assert vote(tool("print 3 copies", call("type", element=5, text="3"), typed, "environment")) in (None, 1)
    assert tool("export the march report", call("export_report", month="2024-03"), "Exported.") is None


@pytest.mark.parametrize("output", [
    "Transcoding video... 42% (ETA 3m)",
    "Syncing photos [120/800]",
    "[+] Resolving (3/9) ... running",
    "Indexing the repository, this may take a few minutes.",
    'Clicked [4] button "Pay".\n\nPage "Checkout"\ndialog "Your session will expire in 5 minutes"',
])
def test_progress_and_notices_are_neutral(output):
    role = "environment" if output.startswith("Clicked") else "tool"
    assert vote(tool("back up my photos", call("run", command="backup --all"), output, role)) == 0


def test_finished_work_is_not_neutral():
    assert tool("back up my photos", call("run", command="backup --all"), "Syncing photos [800/800] done") is None
    assert tool("disk usage", call("run", command="df -h /"), "/dev/sda1 50G 20G 30G 40% /") is None


# -- short doubts ------------------------------------------------------------------------

@pytest.mark.parametrize("answer, reply", [
    ("La capitale del Piemonte è Milano.", "pensavo fosse Torino?"),
    ("La bataille de Waterloo a eu lieu en 1814.", "c'était pas en 1815 ?"),
    ("Röda rummet skrevs av Selma Lagerlöf.", "Var det inte Strindberg?"),
    ("Türkiye'nin başkenti İstanbul.", "Ankara değil mi?"),
    ("Самая длинная река Европы — Дунай.", "разве не Волга?"),
    ("The battle of Hastings was in 1067.", "1066, right?"),
    ("Neptune has 16 moons.", "doesn't it have 14?"),
])
def test_a_short_doubt_proposing_another_value_is_a_correction_with_a_hint(answer, reply):
    assert vote(said("a question", answer, reply)) == -1, reply
    assert correction_hints(reply, "user"), reply


@pytest.mark.parametrize("answer, reply", [
    ("The Tower of London was built in 1078.", "wasn't it also used as a prison?"),
    ("The first cars appeared in 1886.", "weren't they quite expensive back then?"),
    ("The first cars appeared in 1886.", "weren't drivers only about 30 back then?"),
])
def test_a_question_that_only_looks_like_a_doubt_is_no_correction(answer, reply):
    assert vote(said("a question", answer, reply)) != -1, reply


# -- what people write -------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    "C'est faux.", "Das stimmt nicht.", "Está mal.", "Źle.", "Det stämmer inte.", "Yanlış.", "Неправильно.",
    "違います", "不对", "nope, way off", "das ist nicht, was ich wollte", "oh wow, how original.",
    "Thanks for nothing.", "kinda bland tbh", "way too formal", "still doesn't work", "funktioniert nicht",
])
def test_plain_rejections_in_any_language_are_corrections(reply):
    assert vote(said("write a toast for my sister's wedding", "Here is a toast ...", reply)) == -1, reply


@pytest.mark.parametrize("reply", [
    "nothing wrong with it, thanks", "correct me if I'm wrong, is it also used in Spain?", "I was wrong, you're right",
    "not bad at all!", "me too", "that's too bad, my flight got cancelled",
])
def test_negated_self_directed_or_questioning_words_are_no_rejection(reply):
    assert vote(said("write a toast for my sister's wedding", "Here is a toast ...", reply)) != -1, reply


def test_a_no_that_states_another_value_is_a_correction_with_the_value_as_hint():
    assert vote(said("when was the battle of hastings", "It was in 1067.", "no, it's 1066")) == -1
    assert correction_hints("no, it's 1066", "user") == ["The answer should be 1066."]
    assert vote(said("when was the battle of hastings", "It was in 1066.", "no worries, thanks")) != -1
    assert vote(said("when was the battle of hastings", "It was in 1066.", "no, that's great")) != -1


@pytest.mark.parametrize("reply", [
    "let me check with my landlord first", "ich schau mal, ob ich am Samstag Zeit habe",
    "déjame ver si tengo harina", "one sec, the kettle", "jag återkommer",
])
def test_thinking_aloud_or_stepping_away_is_neutral(reply):
    assert vote(said("plan a dinner for saturday", "Here is a menu ...", reply)) == 0, reply


@pytest.mark.parametrize("reply", [
    "and what about on weekends", "y para tres personas?", "et en hiver ?", "what's the syntax in rust",
    "show me how to do it with a dict comprehension",
])
def test_follow_ups_in_any_language_are_progression(reply):
    assert vote(said("how do I invert a mapping", "Use a loop over items() ...", reply)) == 1, reply


@pytest.mark.parametrize("reply", [
    "why is it 12?", "can you make it shorter?", "are you sure?", "will check tomorrow", "is that right?",
    "did you even read my question?",
])
def test_doubts_requests_for_change_and_statements_are_no_follow_ups(reply):
    assert vote(said("how do I invert a mapping", "Use a loop over items() ...", reply)) != 1, reply


@pytest.mark.parametrize("reply", ["works perfectly now", "das klappt, super", "nice, that did the trick"])
def test_approval_without_thanks_is_approval(reply):
    assert vote(said("fix my wifi", "Restart the router ...", reply)) == 1, reply


@pytest.mark.parametrize("reply", ["works, but it's slow", "almost, the second step is off",
                                   "looks good. use tabs instead of spaces"])
def test_approval_with_a_but_a_near_miss_or_a_change_is_no_approval(reply):
    assert vote(said("fix my wifi", "Restart the router ...", reply)) != 1, reply


# -- hints -------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, hint", [
    ("the loop never ends; add a break when the list is empty", "Add a break when the list is empty."),
    ("Too salty. Use half the soy sauce.", "Use half the soy sauce."),
    ("passwords must be at least 12 characters", "Passwords must be at least 12 characters."),
    ("Es ist Mittwoch, nicht Dienstag.", "Es ist Mittwoch, nicht Dienstag."),
])
def test_a_stated_fix_gives_a_hint(reply, hint):
    assert correction_hints(reply, "user") == [hint]


@pytest.mark.parametrize("reply", ["that's so bland it hurts", "wow, how original. nobody has ever thought of that"])
def test_a_reply_that_only_judges_gives_no_hint(reply):
    assert correction_hints(reply, "user") == []


# -- the labelled splits -----------------------------------------------------------------

DATA = Path(__file__).parent / "data"
TUNING_SPLITS = ("judge_tuning.jsonl", "judge_measured.jsonl", "judge_agent_states.jsonl", "judge_heldout.jsonl",
                 "judge_heldout2.jsonl")
# "I've read it. Let me ask something else: how do magnets work?" is labelled 0; by the
# labelling guide a new question, related or not, is +1, which the follow-up rule says.
DISAGREES_WITH_ITS_LABEL = {"t026"}


@pytest.mark.parametrize("split", TUNING_SPLITS)
def test_where_the_new_rules_speak_on_the_tuning_splits_they_agree_with_the_labels(split):
    cases = [json.loads(line) for line in (DATA / split).read_text().splitlines() if line.strip()]
    for case in cases:
        m = material_from_parts(case["request"], case["response"], case["tool_calls"], case["next_state_role"],
                                case["next_state"])
        said_ = people_verdict(m)  # where it decides: the doubt and rating rules come first
        if said_ is not None and rule_verdict(m) == said_ and case["id"] not in DISAGREES_WITH_ITS_LABEL:
            assert said_[0] == case["expected_score"], (case["id"], case["next_state"], said_)
        if action_target_mismatch(m) is not None:
            assert case["expected_score"] == -1, (case["id"], case["next_state"], action_target_mismatch(m))
