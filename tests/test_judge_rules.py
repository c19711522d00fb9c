"""Rule-based hint extraction on hand-written next states."""

from __future__ import annotations

import pytest

from openclaw_rl.judge.rules import extract_hints

TRACEBACK = """\
Traceback (most recent call last):
  File "solve.py", line 3, in <module>
    raise ValueError("you should not see this")
ValueError: invalid literal for int() with base 10: 'abc'"""

PYTEST_OUTPUT = """\
============ 4 failed, 2 passed in 0.31s ============
FAILED tests/test_math.py::test_add - AssertionError: assert 3 == 4
FAILED tests/test_math.py::test_sub - AssertionError: assert 1 == 0
FAILED tests/test_io.py::test_read - FileNotFoundError: data.csv
FAILED tests/test_io.py::test_write - PermissionError: out.csv"""


@pytest.mark.parametrize(
    ("next_state", "role", "expected"),
    [
        # corrections: greetings and fillers dropped, adjacent sentences joined
        (
            "Hmm, no. Don't use markdown headings. Just write plain sentences. Thanks!",
            "user",
            ["Do not use markdown headings; write plain sentences."],
        ),
        ("Could you please use Python instead of bash?", "user", ["Use Python instead of bash."]),
        (
            "No more emojis please. Also the answer should be shorter.",
            "user",
            ["No more emojis; the answer should be shorter."],
        ),
        (
            "Please stop apologizing, thanks. Write plain sentences instead of bullet points.",
            "feedback",
            ["Stop apologizing; write plain sentences instead of bullet points."],
        ),
        ('"You shouldn\'t guess the units."', "user", ["Do not guess the units."]),
        # an interjection with no comma before "but": still a lead-in; "sign off" is a request
        ("ok but start with 'Hi Sam' next time", "user", ["Start with 'Hi Sam' next time."]),
        ("sign off with 'Cheers' like a friend would", "user", ["Sign off with 'Cheers' like a friend would."]),
        ("please start with 'Hi Sam'", "user", ["Start with 'Hi Sam'."]),  # the quote closed, not cut
        ('"Use plain text."', "user", ["Use plain text."]),
        # separate corrections stay separate hints
        (
            "Use metric units. That is not what I meant at all. You should cite the source.",
            "user",
            ["Use metric units.", "Cite the source."],
        ),
        # approvals, questions and statements are not corrections
        ("Perfect, thanks! That works without any problems.", "user", []),
        ("Great job, this is exactly what I needed.", "user", []),
        ("I don't know what you mean. What should I do next?", "user", []),
        ("Is it better to use tabs instead of spaces here?", "user", []),
        # tool and environment errors
        (
            TRACEBACK,
            "tool",
            ["Avoid the error the previous action caused: ValueError: invalid literal for int() with base 10: 'abc'"],
        ),
        (
            "$ pyhton solve.py\nbash: pyhton: command not found",
            "environment",
            ["Avoid the error the previous action caused: bash: pyhton: command not found"],
        ),
        ("exit code 0\nAll 5 tests passed in 0.3s\n    return total  # should be fine", "tool", []),
    ],
)
def test_extract_hints(next_state: str, role: str, expected: list[str]) -> None:
    assert extract_hints(next_state, role) == expected


def test_error_lines_are_only_read_from_tool_and_environment_output() -> None:
    assert extract_hints("bash: pyhton: command not found", "tool") != []
    assert extract_hints("bash: pyhton: command not found", "user") == []


def test_at_most_three_hints_in_order() -> None:
    hints = extract_hints(PYTEST_OUTPUT, "tool")
    assert [h.split("::")[1].split(" ")[0] for h in hints] == ["test_add", "test_sub", "test_read"]


def test_duplicates_and_short_hints_are_dropped() -> None:
    next_state = "Use tabs. Ok. That is wrong. Use plain text. Hmm. No, use plain text!"
    # "Use tabs." is 9 characters; the repeated correction appears once
    assert extract_hints(next_state, "user") == ["Use plain text."]


def test_tool_prose_is_read_but_code_is_not() -> None:
    output = "error: failed to push some refs\nhint: Use 'git pull' before pushing again.\n    return x"
    assert extract_hints(output, "tool") == [
        "Avoid the error the previous action caused: error: failed to push some refs",
        "Use 'git pull' before pushing again.",
    ]


def test_unknown_role_is_rejected() -> None:
    with pytest.raises(ValueError, match="'system'"):
        extract_hints("Use plain text.", "system")
