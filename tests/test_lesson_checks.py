"""experience/checks.py: which lessons can be checked on an answer, and how well answers keep them."""

from __future__ import annotations

import pytest

from openclaw_rl.experience.checks import checks, consensus, count_steps, pick, scores, sentences, warmth
from openclaw_rl.experience.rewriting import to_rewrite

READ = [
    ("Answer in one sentence.", [("at_most", "sentence", 1), ("shorter", "", 0)]),
    ("Keep it under 50 words.", [("at_most", "word", 50), ("shorter", "", 0)]),
    ("No more than three lines.", [("at_most", "line", 3), ("shorter", "", 0)]),
    ("Keep it short.", [("shorter", "", 0)]),
    ("Don't make it long.", [("shorter", "", 0)]),
    ("Write a longer, more detailed answer.", [("longer", "", 0)]),
    ("Do not answer in one sentence.", []),
    ("Don't show the working.", [("less_working", "", 0)]),
    ("Skip the calculations and just tell me the answer.", [("less_working", "", 0)]),
    ("Leave out the steps.", [("less_working", "", 0)]),
    ("Show every step.", [("more_working", "", 0)]),
    ("Explain each step of the calculation.", [("more_working", "", 0)]),
    ("No intro and no formatting, just the answer.", [("without", "markdown", 0)]),  # both "no"s negate
    ("Write plain text without bullet points or bold.", [("without", "list", 0), ("without", "markdown", 0)]),
    ("Use bullet points.", [("with", "list", 0)]),
    ("Never use emojis.", [("without", "emoji", 0)]),
    ("Make it much shorter, a few words will do.", [("at_most", "word", 10), ("shorter", "", 0)]),  # brief, not 3
    ("Keep it short, a few sentences is enough.", [("at_most", "sentence", 3), ("shorter", "", 0)]),
    # "a few" not said short is several, not at most three: the teacher's "write a real comment of a few
    # sentences" read as a limit on the short side served her bare one-line answers
    ("Write a real comment of a few sentences for the student.", [("between", "sentence", 4)]),
    ("No more than a few lines.", [("at_most", "line", 3), ("shorter", "", 0)]),
    ("Remove the # titles.", [("without", "markdown", 0)]),
    ("Show every step of the working, one sentence per step.", [("more_working", "", 0)]),  # a rate, no limit
    ("Two lines for each step.", [("more_working", "", 0)]),  # a rate: no line limit
    ("Write it without Step 1, Step 2 labels.", [("without", "label", 0)]),  # the labels, not the working
    ("Do not label things Step 1, Step 2, just explain it in sentences.", [("without", "label", 0)]),
    ("Do not say \u201cAbsolutely\u201d.", [("without", "phrase", 0)]),
    ("Drop the \u201cTo solve this problem\u201d part, it sounds like a chatbot.", [("without", "phrase", 0)]),
    ("Skip phrases like 'great question' and just answer.", [("without", "phrase", 0)]),
    ('Start with "Dear".', [("with", "phrase", 0)]),  # a phrase asked for, in the first sentence
    ("Start with 'Hi Sam'.", [("with", "greeting", 0), ("with", "phrase", 0)]),
    ("Greet me first.", [("with", "greeting", 0)]),
    ("Don't say hi, just answer.", [("without", "greeting", 0)]),
    ("Always sign off with 'Cheers, Bob'.", [("with", "phrase", 0)]),
    ('Call me "Captain".', [("with", "phrase", 0)]),
    ('Don\'t say "Certainly", say "Sure".', [("without", "phrase", 0), ("with", "phrase", 0)]),
    ('The "total" means the sum.', []),  # a quote neither asked for nor against
    # a closing question, apologies, examples, tables, code; plainer or more technical wording; the answer first
    ("End with a question to check I understood.", [("with", "question", 0)]),
    ("Ask me a follow-up question at the end.", [("with", "question", 0)]),
    ("Don't ask me questions, just answer.", [("without", "question", 0)]),
    ("Answer the question directly.", []),  # the request's question, not one asked back
    ("Include the original question at the top.", []),
    ("Stop apologizing.", [("without", "apology", 0)]),
    ("Don't say sorry all the time.", [("without", "apology", 0)]),
    ("Give an example.", [("with", "example", 0)]),
    ("Use plain numbers, for example 3 times 4.", []),  # "for example": the lesson's own aside
    ("Use a table.", [("with", "table", 0)]),
    ("No code blocks.", [("without", "code", 0)]),
    ("Use simple words, no jargon.", [("plainer", "", 0)]),
    ("Explain it like I'm five.", [("plainer", "", 0)]),
    ("Less technical, please.", [("plainer", "", 0)]),
    ("Be more technical.", [("technical", "", 0)]),
    ("Keep it simple.", []),  # simple what: not read
    ("Give the answer first, then explain.", [("answer_first", "", 0)]),
    ("Start with the answer.", [("answer_first", "", 0)]),
    ("Put the result up front.", [("answer_first", "", 0)]),
    ("First show the steps, then the answer.", [("more_working", "", 0)]),  # "first" is not the answer's place
    ("Don't give the answer first.", []),
    ("Be friendly and encouraging.", [("warmer", "", 0)]),  # a tone: kinds of praise and encouragement
    ("Less praise, please.", [("cooler", "", 0)]),
    ("What kind of answer is that? Keep it short.", [("shorter", "", 0)]),  # "kind of" is no tone
    # "more" asks for length at the end of its clause or before "than" or a word for content, and
    # a range ("two or three sentences") is kept from its lower end, not read as "short"
    ("Write a bit more, two or three sentences.", [("between", "sentence", 3), ("longer", "", 0)]),
    ("Say a little more than that.", [("longer", "", 0)]),
    ("Give me more detail.", [("longer", "", 0)]),
    ("Make it more concise.", [("shorter", "", 0)]),
    ("Keep it shorter, three or four sentences is enough.", [("between", "sentence", 4), ("shorter", "", 0)]),
    ("Answer in 2-3 sentences.", [("between", "sentence", 3)]),
    ("Be more friendly.", [("warmer", "", 0)]),  # "more" before a tone word: not length
    ("Be specific and use the numbers from the problem.", [("more_numbers", "", 0)]),
    ("Don't repeat the numbers from the question.", [("fewer_numbers", "", 0)]),
    ("Write the math with plain numbers, not LaTeX code.", [("more_working", "", 0), ("without", "code", 0)]),
    # the user's own working: its mistake corrected, what it got right named (experience/arithmetic.py)
    ("Mention the actual mistake.", [("corrects", "", 0)]),
    ("Say what is wrong and what it should be.", [("corrects", "", 0)]),
    ("Start with something they got right.", [("confirms", "", 0)]),
    ("Mention what they did well, and the error.", [("corrects", "", 0), ("confirms", "", 0)]),
    ("Don't dwell on mistakes.", []),
    ("Give me the right answer.", []),  # "right" after no "did"/"got": not what they got right
    ("Réponds en une seule phrase.", []),  # the rules are English
]


@pytest.mark.parametrize("lesson, expected", READ)
def test_each_lesson_is_read_as_the_checks_it_states(lesson, expected):
    assert [(c.kind, c.unit, c.limit) for c in checks([lesson])] == expected


def test_answers_are_scored_by_the_checks_and_the_first_best_is_the_pick():
    parent = checks(["Answer in one sentence.", "Don't show the working."])
    answers = ["To find the total, multiply: 3 x 4 = 12. Then add 2: 12 + 2 = 14. So the answer is 14.",
               "The answer is 14 apples.",
               "",
               "It is 14. That is all."]
    kept = scores(answers, parent)
    assert kept[1] == max(kept) and kept[1] > kept[3] > kept[0]
    assert kept[2] == 0.0  # an empty answer keeps nothing
    student = checks(["Show every step."])
    assert scores(answers, student)[0] == 1.0 and scores(answers, student)[1] == 0.0
    assert scores(answers, []) == [0.5] * 4  # no check: every answer alike, the first stays the pick


def test_counts_read_sentences_lines_and_written_out_steps():
    assert sentences("The answer is 14. It took 3.5 hours.") == 2
    assert sentences("- 3 apples\n- 4 pears") == 2
    assert count_steps("Step 1: 3 x 4 = 12\nStep 2: 12 + 2 = 14\nSo 14.") == 2
    assert count_steps("The answer is 14.") == 0


def test_an_outline_of_step_labels_is_not_working():
    """Told to show every step, the 135M model writes "Step 1: Determine the total." outlines with
    no number worked out; their labels (or list numbers) are not steps, so checked sampling prefers
    the answer that works the numbers out."""
    outline = "Step 1: Determine the total.\nStep 2: Calculate what is left.\nStep 3: Give the answer."
    listed = "1. Read the question.\n2. Find the numbers.\n3. Answer it."
    worked = "He has 8 x 8 = 64 crayons. He gives away 64 - 10 = 54. So 54."
    assert count_steps(outline) == count_steps(listed) == 0 and count_steps(worked) == 2
    best, totals = pick([outline, outline, worked], checks(["Show every step."]))
    assert best == 2 and totals[0] == totals[1] < totals[2]
    assert consensus([outline, outline, listed, worked]) == [False, False, False, True]  # "Step 3" is no answer


def test_an_answer_last_on_every_relative_check_keeps_its_consensus():
    """Only "Show every step." (relative): the answer with the fewest steps ranks 0 on it, yet its
    agreement on the final number still counts (only an empty answer scores 0)."""
    answers = ["3 + 4 = 7, 7 x 2 = 14. So 14.", "It is 14.", "I cannot help with that.", ""]
    _, totals = pick(answers, checks(["Show every step."]))
    assert totals[1] == 0.5 and totals[2] == 0.0 + 0.0 and totals[3] == 0.0


def test_consensus_favours_the_final_number_most_answers_agree_on():
    answers = ["It is 14.", "The answer is 12.", "3 + 11 = 14, so 14.", "Yes."]
    assert consensus(answers) == [True, False, True, False]
    assert consensus(["Paris.", "Lyon."]) == [False, False]  # no numbers: no say
    assert consensus(["1,200 apples", "1200"]) == [True, True]


def test_pick_adds_consensus_to_the_checks_so_a_short_non_answer_loses():
    found = checks(["Keep it short."])
    answers = ["Yes.", "The answer is 14 apples.", "It is 14.", "The answer is 15."]
    best, totals = pick(answers, found)
    assert best == 2 and totals[0] < totals[2]  # "Yes." is shortest but agrees on no number
    assert pick(["", "It is 14."], found)[1][0] == 0.0  # an empty answer keeps nothing
    assert pick(["a", "b"], [])[0] == 0  # no checks: the first sample


def test_only_an_answer_that_breaks_lessons_asking_for_less_is_worth_rewriting():
    from openclaw_rl.experience.rewriting import rewrite_request, to_rewrite

    condensing = checks(["Answer in one sentence.", "Don't show the working."])
    answers = ["It is 84. Because 12 x 7 = 84.", "It is 84."]
    assert to_rewrite(answers, 0, condensing)  # two sentences, working shown
    assert not to_rewrite(answers, 1, condensing)  # keeps both
    assert to_rewrite(["Sure, happy to help."], 0, condensing)  # keeps them, but no number at all
    assert to_rewrite(answers, 0, condensing) == condensing  # every lesson asked for, in the user's words
    assert not to_rewrite(answers, 0, [])
    assert rewrite_request(condensing) == "Rewrite your answer. Answer in one sentence. Don't show the working."


def test_beside_a_lesson_asking_for_more_only_what_the_answer_breaks_by_itself_is_rewritten():
    from openclaw_rl.experience.rewriting import rewrite_request, to_rewrite

    found = checks(["Show every step.", "No bullet points.", "Don't say \u201cTo solve this problem\u201d."])
    listed = "To solve this problem:\n- 12 x 7 = 84\n- so 84."
    asked = to_rewrite([listed], 0, found)
    assert [(c.kind, c.unit) for c in asked] == [("without", "list"), ("without", "phrase")]
    assert rewrite_request(asked) == "Rewrite your answer. No bullet points. Don't say \u201cTo solve this problem\u201d."
    # a rewrite cannot add the steps a small model left out: few steps alone is not worth a rewrite
    assert not to_rewrite(["It is 84.", "12 x 7 = 84, so it is 84."], 0, found)


def test_a_step_label_is_what_a_label_lesson_checks():
    (check,) = checks(["Don't label things Step 1, Step 2."])
    assert scores(["Step 1: 3 x 4 = 12. Step 2. So 12.", "**Step 1:** 12", "First 3 x 4 = 12, a step 2 times."],
                  [check]) == [0.0, 0.0, 1.0]


def test_a_quoted_phrase_to_leave_out_is_checked_in_any_case():
    (check,) = checks(["Drop the \u201cTo solve this problem\u201d part."])
    assert check.phrase == "to solve this problem"
    assert scores(["To solve this problem, add 3 and 4: 7.", "3 and 4 make 7."], [check]) == [0.0, 1.0]


def test_a_rewrite_replaces_the_draft_only_when_it_keeps_the_lessons_better_and_the_number():
    from openclaw_rl.experience.rewriting import choose_rewrite

    found = checks(["Answer in one sentence."])
    draft = "First 12 x 7 = 84. So it is 84."
    assert choose_rewrite(draft, ["Sure thing.", "It is 84.", "It is 84."], found)[0] == 1  # the first best
    assert choose_rewrite(draft, ["Sure thing."], found)[0] is None  # one sentence, but the number is gone
    assert choose_rewrite(draft, [draft], found)[0] is None  # no better: the draft
    best, totals = choose_rewrite("No idea, sorry. Really.", ["No idea."], found)
    assert best == 0 and len(totals) == 2  # a draft without a number: any rewrite may replace it


def test_a_rewrite_must_fix_what_it_was_asked_to_fix():
    """Asked to drop the list, a rewrite that keeps the list and repeats its lines wins nothing
    for its "more working" (a line said again is not another step)."""
    from openclaw_rl.experience.rewriting import choose_rewrite, to_rewrite

    found = checks(["Show every step.", "No bullet points."])
    draft = "- 21 - 4 = 17\n- 17 - 1 = 16\nSo 16."
    asked = to_rewrite([draft], 0, found)
    assert [c.unit for c in asked] == ["list"]
    repeated = "- 21 - 4 = 17\n- 17 - 1 = 16\n- 17 - 1 = 16\n- 17 - 1 = 16\nSo 16."
    assert count_steps(repeated) == count_steps(draft) == 2
    more = "- 21 - 4 = 17\n- 17 - 1 = 16\n- 16 x 1 = 16\nSo 16."
    assert choose_rewrite(draft, [repeated, more], found, asked)[0] is None  # neither dropped the list
    plain = "21 - 4 = 17. Then 17 - 1 = 16. So 16."
    assert choose_rewrite(draft, [more, plain], found, asked)[0] == 1
    fewer = "21 - 4 = 17, and 17 - 1 = 16. So 16."  # the list dropped, and a step with it: no better as a whole
    assert choose_rewrite(draft, [fewer], found, asked)[0] is None


def test_a_lesson_that_asks_for_more_picks_the_fuller_comment():
    """A teacher's "Write a bit more, two or three sentences." once read as "at most three
    sentences, shorter", so checked sampling served a bare "The answer is 41." over a comment;
    read as a range and "longer", the comment of two or three sentences is the pick."""
    found = checks(["Write a bit more, two or three sentences."])
    bare = "The answer is 41."
    comment = "Nice work on the first step, 6 x 4 = 24 is right. Then 24 + 17 is 41, not 39. Check that sum again."
    rambling = " ".join(f"Sentence {i} says 41." for i in range(6))
    best, totals = pick([bare, comment, rambling], found)
    assert best == 1 and totals[1] > totals[0] and totals[1] > totals[2]
    low, high = [c for c in found if c.kind == "between"][0].least, 3
    assert (low, high) == (2, 3)
    assert to_rewrite([bare, comment], 0, found)[0].kind == "between"  # the bare answer breaks the range


def test_warmth_and_the_requests_numbers_are_counted_relative_to_the_other_answers():
    assert warmth("Great job! Well done, keep it up. Great.") == 3 and warmth("The answer is 41.") == 0
    warm = checks(["Be kinder, say something encouraging."])
    assert scores(["It is wrong.", "Nice try, well done on step one. It is wrong."], warm) == [0.0, 1.0]
    request = "Problem: 6 boxes of 4 pens and 17 more. Student: 6 x 4 = 24, 24 + 17 = 39."
    numbers = checks(["Use the numbers from the student's work."])
    answers = ["Check your sum again.", "Your 6 x 4 = 24 is right, but 24 + 17 is 41, not 39."]
    assert scores(answers, numbers, request) == [0.0, 1.0]
    assert scores(answers, numbers) == [1.0, 1.0]  # no request: no number to count, every answer alike


def test_asking_for_less_praise_or_fewer_numbers_is_condensing():
    """A rewrite can take praise or repeated numbers out, as it can take words out: with only such
    lessons, a pick that keeps them worse than the best answer is rewritten to all of them."""
    found = checks(["Answer in one sentence.", "Less praise, please."])
    assert [c.kind for c in found] == ["at_most", "shorter", "cooler"]
    answers = ["Great job, well done! It is 84.", "It is 84."]
    assert [c.kind for c in to_rewrite(answers, 0, found)] == ["at_most", "shorter", "cooler"]
    assert to_rewrite(answers, 1, found) == []


def test_the_answer_that_corrects_the_users_slip_and_names_a_right_step_is_picked():
    request = "Grade this. Student's answer: 8 × 8 = 54 crayons, then 54 - 9 = 45 left. So the answer is 45."
    answers = ["Nice work! You got 54 - 9 = 45 right.",
               "Good effort! 54 - 9 = 45 is right, but 8 × 8 is 64, so it should be 55.",
               "Great try, please check your work."]
    found = checks(["Mention the actual mistake.", "Start with something they got right."])
    assert scores(answers, found, request) == [0.5, 1.0, 0.0]
    assert pick(answers, found, request)[0] == 1


def test_a_pick_that_misses_the_users_mistake_is_rewritten_and_told_its_right_result():
    from openclaw_rl.experience.rewriting import rewrite_request
    request = "Student's answer: 8 × 8 = 54 crayons, then 54 - 9 = 45 left."
    found = checks(["Mention the actual mistake.", "Be kinder."])  # warmer is relative: not condensing
    answers = ["Good try, check your work.", "Good try, 8 × 8 = 64."]
    assert [c.kind for c in to_rewrite(answers, 0, found, request)] == ["corrects"]
    assert to_rewrite(answers, 1, found, request) == []
    assert to_rewrite(answers, 0, found) == []  # no request, no working to correct
    assert rewrite_request(to_rewrite(answers, 0, found, request), request) == (
        "Rewrite your answer. Mention the actual mistake. "
        "Checked arithmetic of the message: 8 × 8 = 54 is wrong, 8 × 8 = 64.")
    assert rewrite_request(found[1:], request) == "Rewrite your answer. Be kinder."


def test_a_phrase_asked_for_is_checked_where_the_lesson_puts_it():
    start, end, anywhere = (checks([lesson])[-1] for lesson in ('Start with "Hi Sam".', "Sign off with 'Cheers'.",
                                                               'Call me "Captain".'))
    assert (start.at, end.at, anywhere.at) == ("start", "end", "")
    answers = ["Hi  Sam! It is 12. Cheers", "It is 12, captain. Hi Sam. Cheers!", "Cheers. It is 12."]
    assert scores(answers, [start]) == [1.0, 0.0, 0.0]  # any case and spacing, in the first sentence only
    assert scores(answers, [end]) == [1.0, 1.0, 0.0]
    assert scores(answers, [anywhere]) == [0.0, 1.0, 0.0]


def test_new_features_are_read_off_the_answer():
    question, greeting, apology, example, table, code = (checks([lesson])[0] for lesson in (
        "End with a question.", "Greet me first.", "Stop apologizing.", "Give an example.", "Use a table.",
        "Show the code."))
    assert scores(["Hi Sam! 12.", "Good morning. 12", "It is 12. Hello!", "**Dear Sam**, 12"], [greeting]) == [
        1.0, 1.0, 0.0, 1.0]
    assert scores(["It is 12. Does that make sense? \U0001F642", "Is it 12? It is.", "It is 12."], [question]) == [
        1.0, 0.0, 0.0]
    assert scores(["Sorry, it is 12.", "My apologies: 12.", "It is 12."], [apology]) == [0.0, 0.0, 1.0]
    assert scores(["For example, 3 apples.", "Imagine 3 apples.", "Three apples."], [example]) == [1.0, 1.0, 0.0]
    assert scores(["| a | b |\n|---|---|\n| 1 | 2 |", "a | b"], [table]) == [1.0, 0.0]
    assert scores(["```\nprint(1)\n```", "print(1)"], [code]) == [1.0, 0.0]


def test_plainer_wording_ranks_answers_by_their_share_of_long_words():
    (plainer,) = checks(["Use simple words."])
    (technical,) = checks(["Be more technical."])
    answers = ["Multiplication approximately yields the calculated result.", "Three times four is twelve."]
    assert scores(answers, [plainer]) == [0.0, 1.0]
    assert scores(answers, [technical]) == [1.0, 0.0]


def test_the_answer_first_means_the_result_in_the_first_sentence():
    (first,) = checks(["Give the answer first."])
    request = "Tomas has 8 packs of 8 crayons and gives away 9. How many are left?"
    answers = ["It is 55. Eight packs of 8 are 64, minus 9.", "8 x 8 = 64, 64 - 9 = 55. So 55.",
               "Tomas has 8 packs and gives 9.", "Happy to help."]
    # the second works it out first; the third states only the request's numbers and the fourth none: no
    # result, so they lose to one that has
    assert scores(answers, [first], request) == [1.0, 0.0, 0.0, 0.0]
    assert scores(answers[2:], [first], request) == [1.0, 1.0]  # none has a result: nothing to read
    assert scores(["1. Let us see.\n2. Minus 9 is 55.", "It is 55."], [first], request) == [0.0, 1.0]  # "1. " is no result


def test_a_pick_missing_a_phrase_or_question_asked_for_is_rewritten_to_them():
    from openclaw_rl.experience.rewriting import to_rewrite

    found = checks(["Show every step.", 'Start with "Hi Sam".', "End with a question.", "Use a table."])
    asked = to_rewrite(["3 x 4 = 12, so 12."], 0, found)
    assert [(c.kind, c.unit) for c in asked] == [("with", "greeting"), ("with", "phrase"), ("with", "question")
                                                 ]  # a table is not added
    assert not to_rewrite(["Hi Sam, 3 x 4 = 12, so 12. Clear?"], 0, found[:3])
