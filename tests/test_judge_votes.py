"""Judge answer parsing: scores, corrections and hints, majority, hint deduplication."""

from __future__ import annotations

import pytest

from openclaw_rl.judge.votes import VoteParseError, dedupe_hints, majority, parse_directive, parse_score


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("The user thanked the assistant.\nSCORE: +1", 1),
        ("SCORE: 1", 1),
        ("SCORE: -1", -1),
        ("SCORE: 0", 0),
        ("score: +1", 1),  # case is presentation, not content
        ("  SCORE:   -1  ", -1),
        ("**SCORE: -1**", -1),
        ("**SCORE:** +1", 1),
        ("### SCORE: 0", 0),
        ("`SCORE: -1`", -1),
        ("- SCORE: +1", 1),
        ("SCORE: +1.", 1),
        ("SCORE: \u22121", -1),  # Unicode minus sign
        # the format restated while reasoning, then the verdict: the last line counts
        ("Format is SCORE: +1 or -1.\nSCORE: +1\nOn reflection the user was annoyed.\nSCORE: -1", -1),
        ("SCORE: -1\nSCORE: 0", 0),
    ],
)
def test_parse_score_reads_the_last_score_line(answer: str, expected: int) -> None:
    assert parse_score(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   \n  ",
        "The response was good.",
        "SCORE: 2",
        "SCORE: +2",
        "SCORE: 0.5",
        "SCORE: +1 or -1",
        "SCORE: positive",
        "SCORE:",
        "SCORE: +1\nSCORE: 3",  # a malformed final verdict is not replaced by a draft
        "My score is +1",  # not a SCORE line
        "FINAL SCORE +1",
    ],
)
def test_parse_score_rejects_answers_without_a_valid_final_score(answer: str) -> None:
    with pytest.raises(VoteParseError):
        parse_score(answer)


def test_vote_parse_error_names_the_bad_value() -> None:
    with pytest.raises(VoteParseError, match="'2'"):
        parse_score("SCORE: 2")


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([1, 1, -1], 1),
        ([-1, -1, 1], -1),
        ([1, 1, 1], 1),
        ([0, 0, 1], 0),
        ([1, -1, 0], 0),  # three-way tie
        ([1, -1], 0),  # a vote was dropped and the rest disagree
        ([1, 1, -1, -1, 0], 0),  # tie for the top
        ([1, 1, -1, 0], 1),  # plurality
        ([-1], -1),
        ([], 0),  # no parseable vote
    ],
)
def test_majority(votes: list[int], expected: int) -> None:
    assert majority(votes) == expected


def test_majority_rejects_votes_outside_the_score_set() -> None:
    with pytest.raises(ValueError, match="2"):
        majority([1, 2, 1])


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            "The user asked for plain text.\nCORRECTION: yes\n[HINT]Write plain sentences without markdown headings.[/HINT]",
            (True, "Write plain sentences without markdown headings."),
        ),
        ("**CORRECTION:** Yes\n[hint]  Answer in French, not English.  [/hint]", (True, "Answer in French, not English.")),
        ("[HINT]Use a numbered list for the steps.[/HINT]\nCORRECTION: yes", (True, "Use a numbered list for the steps.")),
        ("CORRECTION: no", (False, None)),
        ("CORRECTION: No.", (False, None)),
        # a hint after "no" is not kept
        ("CORRECTION: no\n[HINT]Use a numbered list for the steps.[/HINT]", (False, None)),
        ("CORRECTION: yes\n[HINT]Be nicer.[/HINT]", (True, None)),  # 9 characters: too short
        ("CORRECTION: yes\n[HINT]Be kinder![/HINT]", (True, None)),  # exactly 10: not longer than 10
        ("CORRECTION: yes\n[HINT] Be kinder!! [/HINT]", (True, "Be kinder!!")),  # 11 once stripped
        ("CORRECTION: yes\n[HINT]          [/HINT]", (True, None)),
        ("CORRECTION: yes\nUse a numbered list.", (True, None)),  # no markers
        ("CORRECTION: yes\n[HINT]Use a numbered list for the steps.", (True, None)),  # unclosed
        # the format restated, then the real hint: the last block counts
        (
            "I will answer as CORRECTION: yes [HINT]...[/HINT].\nCORRECTION: yes\n[HINT]Quote the exact error message.[/HINT]",
            (True, "Quote the exact error message."),
        ),
        ("CORRECTION: yes\nCORRECTION: no", (False, None)),
    ],
)
def test_parse_directive(answer: str, expected: tuple[bool, str | None]) -> None:
    assert parse_directive(answer) == expected


@pytest.mark.parametrize(
    "answer",
    ["", "There is a correction.", "CORRECTION: maybe", "CORRECTION:", "CORRECTION: yes\nCORRECTION: sure"],
)
def test_parse_directive_rejects_answers_without_yes_or_no(answer: str) -> None:
    with pytest.raises(VoteParseError):
        parse_directive(answer)


def test_dedupe_hints_drops_near_duplicates_in_first_seen_order() -> None:
    hints = [
        "Write plain sentences, not bullet points.",
        "write plain sentences   NOT bullet points!",  # same after normalising
        "Use Python instead of bash.",
        "Please use Python instead of bash for the script.",  # contains the previous one
        "Answer in French.",
        "Keep the answer under three sentences.",
    ]
    assert dedupe_hints(hints) == [
        "Write plain sentences, not bullet points.",
        "Use Python instead of bash.",
        "Answer in French.",
    ]


def test_dedupe_hints_uses_token_jaccard() -> None:
    # 10 shared words of 11 distinct (Jaccard 0.91), neither contained in the other
    a = "Do not start the answer with a greeting or a summary"
    b = "Do not start the answer with a greeting or summary lines"
    # 5 shared words of 13 distinct (0.38): a different hint
    c = "Start the answer with the result and skip the summary"
    assert dedupe_hints([a, b, c]) == [a, c]


def test_dedupe_hints_jaccard_threshold_is_inclusive_at_0_8() -> None:
    first = "keep replies short please"
    at_threshold = "please keep short replies always"  # 4 shared of 5 distinct: 0.8
    below = "short replies keep"  # 3 shared of 4 distinct: 0.75
    assert dedupe_hints([first, at_threshold]) == [first]
    assert dedupe_hints([first, below]) == [first, below]


def test_dedupe_hints_containment_is_on_word_boundaries() -> None:
    # "use tabs" is a substring of "reuse tabs" as characters, not as words
    assert dedupe_hints(["Use tabs.", "Reuse tabs from the old file."]) == ["Use tabs.", "Reuse tabs from the old file."]


def test_dedupe_hints_limits_the_count_and_skips_empty_hints() -> None:
    hints = ["!!!", "Use Python.", "Answer in French.", "Cite the source.", "Be brief."]
    assert dedupe_hints(hints) == ["Use Python.", "Answer in French.", "Cite the source."]
    assert dedupe_hints(hints, max_hints=1) == ["Use Python."]
    assert dedupe_hints(hints, max_hints=0) == []
    with pytest.raises(ValueError, match="-1"):
        dedupe_hints(hints, max_hints=-1)
