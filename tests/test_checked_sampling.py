"""--lesson-samples: a sampled request of a user whose lessons can be checked on the answer is
answered K times and served the answer that keeps the lessons best (serve/pipeline.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from conftest import LiveServer
from test_experience_serving import chat, keyed, stored_turns, teach

WORKED = "Step 1: 12 x 7 = 84. Step 2: check 84 / 7 = 12. So the answer is 84."
SHORT = "The answer is 84."
TWO = "It is 84. That is all."
QUESTION = [{"role": "user", "content": "What is 12 times 7?"}]


def _stream(server, key: str, **body) -> str:
    text = ""
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "m", "messages": QUESTION, "max_tokens": 64, "stream": True, **body}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
    return text


def test_the_answer_that_keeps_the_users_lessons_is_served_streamed_and_recorded(scripted_server):
    server = scripted_server([WORKED, SHORT, TWO], lesson_plain="off", lesson_samples=3)
    keys = keyed(server, "parent", "student", "carol")
    teach(server.server.store, "parent", ("Answer in one sentence.", "Don't show the working."))
    teach(server.server.store, "student", ("Show every step.",))

    r = chat(server, keys["parent"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == SHORT and len(server.engine.prompts) == 3
    (turn,) = stored_turns(server, r)
    assert turn.response_text == SHORT
    assert turn.response_token_ids == server.server.tokenizer.encode(SHORT, add_special_tokens=False)
    assert len(turn.behaviour_logprobs) == len(turn.response_token_ids)
    selected = turn.sampling["selected"]
    assert (selected["of"], selected["by"], selected["picked"]) == (3, "lesson_checks", 1)
    assert selected["scores"][1] == max(selected["scores"]) > selected["scores"][0]
    assert selected["checks"] == ["at_most sentence", "less_working", "shorter"]
    assert all(p == server.engine.prompts[-1] for p in server.engine.prompts[-3:])  # one prompt, K samples

    assert _stream(server, keys["student"]) == WORKED  # streamed: the picked answer, whole
    (turn,) = server.server.store.turns(server.server.store.list_sessions(1, 0, "student")[0].id)
    assert turn.response_text == WORKED and turn.sampling["selected"]["picked"] == 0


@pytest.mark.parametrize("why, body, lessons, samples, rewrites", [
    ("greedy, rewrites off", {"temperature": 0}, ("Answer in one sentence.",), 3, 0),
    ("n choices", {"n": 2}, ("Answer in one sentence.",), 3, 4),
    ("a lesson with nothing to check", {}, ("Answer in French.",), 3, 4),
    ("no lessons", {}, (), 3, 4),
    ("off", {}, ("Answer in one sentence.",), 1, 0),
])
def test_otherwise_each_choice_is_sampled_once(scripted_server, why, body, lessons, samples, rewrites):
    server = scripted_server([WORKED, SHORT, TWO], lesson_plain="off", lesson_samples=samples,
                             lesson_rewrites=rewrites)
    keys = keyed(server, "parent")
    if lessons:
        teach(server.server.store, "parent", lessons)
    r = chat(server, keys["parent"], QUESTION, max_tokens=64, **body)
    assert len(server.engine.prompts) == body.get("n", 1), why
    assert all("selected" not in t.sampling for t in stored_turns(server, r))
    assert r.json()["choices"][0]["message"]["content"] == WORKED  # the first sample, as always


@pytest.mark.parametrize("why, body, samples", [("greedy", {"temperature": 0}, 3),
                                              ("one sample", {"temperature": 1.0}, 1)])
def test_a_single_answer_that_breaks_a_lesson_is_rewritten_once_when_greedy(scripted_server, why, body, samples):
    """A greedy request (or --lesson-samples 1) decodes one answer; one that breaks a checkable
    lesson is rewritten (once when greedy: R greedy rewrites would be R copies)."""
    server = scripted_server([WORKED, SHORT, TWO, TWO, TWO], lesson_plain="off", lesson_samples=samples,
                             lesson_rewrites=4)
    keys = keyed(server, "parent")
    teach(server.server.store, "parent", ("Answer in one sentence.",))
    r = chat(server, keys["parent"], QUESTION, max_tokens=64, **body)
    assert r.json()["choices"][0]["message"]["content"] == SHORT, why
    assert len(server.engine.prompts) == (2 if why == "greedy" else 5)
    selected = stored_turns(server, r)[0].sampling["selected"]
    assert selected["of"] == 1 and selected["rewrite"]["picked"] == 0


def test_lesson_samples_is_checked():
    from openclaw_rl.config import ConfigError, ServeConfig

    with pytest.raises(ConfigError, match="lesson_samples"):
        ServeConfig(lesson_samples=0)


def test_on_the_real_engine_the_picked_answer_records_its_own_tokens_and_logprobs(tiny_model_dir, tmp_path):
    """The replayed answer is stored with the tokens and log-probs the engine sampled it with:
    scoring the stored response under the same sampling settings gives them back."""
    server = LiveServer(tiny_model_dir, tmp_path, lesson_samples=4)
    try:
        keys = keyed(server, "parent")
        teach(server.server.store, "parent", ("Answer in one sentence.",))
        r = chat(server, keys["parent"], QUESTION, max_tokens=24, temperature=1.0, seed=3)
        (turn,) = stored_turns(server, r)
        selected = turn.sampling["selected"]  # 4 with the block, and one without it (--lesson-plain on)
        assert selected["of"] == 5 and len(selected["scores"]) == 5 and selected["plain"] == 4
        assert selected["scores"][selected["picked"]] == max(selected["scores"])
        assert turn.sampling["seed"] == 3 + selected["picked"]  # candidate i is sampled with seed + i
        assert r.json()["choices"][0]["message"]["content"] == turn.response_text
        scored = asyncio.run(server.server.engine.score(turn.prompt_token_ids, turn.response_token_ids,
                                                        temperature=1.0))
        assert scored.logprobs == pytest.approx(turn.behaviour_logprobs, abs=1e-4)
    finally:
        server.stop()


# -- rewriting the picked answer to the lessons (--lesson-rewrites) ---------------------------------

LONG = "Well, 12 x 7 = 84 because 10 x 7 = 70 and 2 x 7 = 14. So it is 84. Hope that helps with the homework."
WORDY = "Let us see. Twelve sevens make eighty-four, so the answer is 84, I think."


def test_a_picked_answer_that_breaks_a_condensing_lesson_is_rewritten_and_the_rewrite_served(scripted_server):
    """Two drafts that break "one sentence", then two rewrites: the one that keeps the lessons is
    served (streamed too), stored under the served prompt with log-probs re-scored there."""
    server = scripted_server([LONG, WORDY, TWO, SHORT], lesson_plain="off", lesson_samples=2, lesson_rewrites=2)
    keys = keyed(server, "parent")
    teach(server.server.store, "parent", ("Answer in one sentence.", "Don't show the working."))

    r = chat(server, keys["parent"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == SHORT
    engine = server.engine
    served, rewrite_prompt = engine.prompts[0], engine.prompts[2]
    assert engine.prompts[1] == served and engine.prompts[3] == rewrite_prompt != served
    asked = server.server.tokenizer.decode(rewrite_prompt)
    request = asked.rsplit("Rewrite your answer.", 1)[1].split("<|im_end|>")[0]  # in the block's order
    assert sorted(request.strip().rstrip(".").split(". ")) == ["Answer in one sentence", "Don't show the working"]
    assert WORDY in asked  # the picked draft (shorter, no working) is what is rewritten
    (turn,) = stored_turns(server, r)
    assert turn.prompt_token_ids == served and turn.response_text == SHORT
    assert engine.scored == [(served, turn.response_token_ids)]
    assert turn.behaviour_logprobs == [-0.25] * len(turn.response_token_ids)  # re-scored, not the rewrite's -0.5
    selected = turn.sampling["selected"]
    assert selected["picked"] == 1 and selected["rewrite"]["of"] == 2 and selected["rewrite"]["picked"] == 1
    assert selected["rewrite"]["scores"][1] > selected["rewrite"]["draft_score"]

    assert _stream(server, keys["parent"]) == SHORT  # the same four replies again, streamed


LISTED = "Twelve sevens:\n- 10 x 7 = 70\n- 2 x 7 = 14\n- 70 + 14 = 84"
PLAIN = "First 10 x 7 = 70. Then 2 x 7 = 14. And 70 + 14 = 84."
TERSE = "It is 84."


def test_beside_a_lesson_asking_for_more_the_pick_is_rewritten_to_what_it_breaks(scripted_server):
    """"Show every step." asks for more, "No bullet points." for less: a listed pick is asked to
    drop the list only; the rewrite that keeps the steps is served, the one that drops them is not."""
    server = scripted_server([LISTED, LISTED, TERSE, PLAIN], lesson_plain="off", lesson_samples=2, lesson_rewrites=2)
    keys = keyed(server, "student")
    teach(server.server.store, "student", ("Show every step.", "No bullet points."))
    r = chat(server, keys["student"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == PLAIN
    request = server.server.tokenizer.decode(server.engine.prompts[2]).rsplit("Rewrite your answer.", 1)[1]
    assert request.split("<|im_end|>")[0].strip() == "No bullet points."
    selected = stored_turns(server, r)[0].sampling["selected"]
    assert selected["rewrite"]["picked"] == 1


FULLER = "You asked for 12 times 7. Ten sevens are 70 and two more are 14, so 12 x 7 = 84."


def test_a_pick_too_short_for_a_range_is_rewritten_and_the_requests_numbers_count(scripted_server):
    """"Write a bit more, two or three sentences." and "Use the numbers from the question.": a
    one-sentence pick breaks the range and is rewritten; of the rewrites, the one of two sentences
    that carries the question's numbers (12 and 7, read from the user's message) is served."""
    server = scripted_server([TERSE, TERSE, SHORT, FULLER], lesson_plain="off", lesson_samples=2, lesson_rewrites=2)
    keys = keyed(server, "teacher")
    teach(server.server.store, "teacher", ("Write a bit more, two or three sentences.",
                                           "Use the numbers from the question."))
    r = chat(server, keys["teacher"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == FULLER
    request = server.server.tokenizer.decode(server.engine.prompts[2]).rsplit("Rewrite your answer.", 1)[1]
    assert request.split("<|im_end|>")[0].strip() == "Write a bit more, two or three sentences."
    selected = stored_turns(server, r)[0].sampling["selected"]
    assert selected["checks"] == ["between sentence", "longer", "more_numbers"]
    assert selected["rewrite"]["picked"] == 1


def test_the_answer_that_corrects_the_users_own_working_is_served(scripted_server):
    """"Mention the actual mistake.": of two comments on a student's working (8 x 8 = 54 does not
    hold), the one that gives 64 is served; the request's equations are read from the user's message."""
    vague = "Great effort! Please check your multiplication again, there are not 45 left."  # a number: no consensus edge
    exact = "Great effort! 8 x 8 is 64, not 54, so there are 55 crayons left."
    server = scripted_server([vague, exact], lesson_plain="off", lesson_samples=2)
    keys = keyed(server, "teacher")
    teach(server.server.store, "teacher", ("Mention the actual mistake.",))
    working = [{"role": "user", "content": "Write a comment for my student. Tomas has 8 packs of 8 crayons and "
                                           "gives away 9. Student's answer: 8 x 8 = 54, and 54 - 9 = 45."}]
    r = chat(server, keys["teacher"], working, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == exact
    selected = stored_turns(server, r)[0].sampling["selected"]
    assert (selected["checks"], selected["picked"]) == (["corrects"], 1)
    note = "Checked arithmetic of the message: 8 x 8 = 54 is wrong, 8 x 8 = 64."  # what the block told the model
    assert note in server.server.tokenizer.decode(server.engine.prompts[-1])
    assert stored_turns(server, r)[0].experience_block.endswith(note)
    r = chat(server, keys["teacher"], QUESTION, max_tokens=64, temperature=1.0)  # no working: nothing checked
    assert "Checked arithmetic" not in server.server.tokenizer.decode(server.engine.prompts[-1])


def test_a_greeting_and_a_closing_question_asked_for_are_served_or_written_in(scripted_server):
    """"Start with “Hi Sam”." and "End with a question.": the sample that has both is served; when
    neither has them, the pick is rewritten to both, and the rewrite that adds them is served."""
    plain, both = "It is 84. Ten sevens and two more.", "Hi Sam! It is 84. Does that make sense?"
    server = scripted_server([plain, both], lesson_plain="off", lesson_samples=2)
    keys = keyed(server, "sam")
    teach(server.server.store, "sam", ("Start with \u201cHi Sam\u201d.", "End with a question."))
    r = chat(server, keys["sam"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == both
    assert stored_turns(server, r)[0].sampling["selected"]["checks"] == ["with greeting", "with phrase", "with question"]

    server = scripted_server([plain, plain, plain, both], lesson_plain="off", lesson_samples=2, lesson_rewrites=2)
    keys = keyed(server, "sam")
    teach(server.server.store, "sam", ("Start with \u201cHi Sam\u201d.", "End with a question."))
    r = chat(server, keys["sam"], QUESTION, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == both
    request = server.server.tokenizer.decode(server.engine.prompts[2]).rsplit("Rewrite your answer.", 1)[1]
    assert sorted(request.split("<|im_end|>")[0].strip().rstrip(".").split(". ")) == [
        "End with a question", "Start with \u201cHi Sam\u201d"]
    assert stored_turns(server, r)[0].sampling["selected"]["rewrite"]["picked"] == 1


def test_a_comment_that_misses_the_mistake_is_rewritten_with_its_right_result(scripted_server):
    """Neither sample gives the right result of the student's slip: the pick is rewritten, the
    rewrite request carries what was checked, and the rewrite that gives 64 is served."""
    vague = "Great effort! Please check your multiplication again, there are not 45 left."
    exact = "Great effort! 8 x 8 is 64, not 54, so there are 55 crayons left."
    server = scripted_server([vague, vague, exact], lesson_plain="off", lesson_samples=2, lesson_rewrites=1)
    keys = keyed(server, "teacher")
    teach(server.server.store, "teacher", ("Mention the actual mistake.",))
    working = [{"role": "user", "content": "Student's answer: 8 x 8 = 54, and 54 - 9 = 45."}]
    r = chat(server, keys["teacher"], working, max_tokens=64, temperature=1.0)
    assert r.json()["choices"][0]["message"]["content"] == exact
    asked = server.server.tokenizer.decode(server.engine.prompts[2]).rsplit("Rewrite your answer.", 1)[1]
    assert asked.split("<|im_end|>")[0].strip() == (
        "Mention the actual mistake. Checked arithmetic of the message: 8 x 8 = 54 is wrong, 8 x 8 = 64.")
    assert stored_turns(server, r)[0].sampling["selected"]["rewrite"]["picked"] == 0


@pytest.mark.parametrize("why, replies, lessons, rewrites", [
    ("the draft keeps the lessons", [SHORT, LONG], ("Answer in one sentence.",), 2),
    ("a lesson asks for more, the pick breaks none by itself", [LONG, WORDY], ("Keep it short.", "Show every step."), 2),
    ("rewrites off", [LONG, WORDY], ("Answer in one sentence.",), 0),
])
def test_no_rewrite_is_asked_for(scripted_server, why, replies, lessons, rewrites):
    server = scripted_server(replies, lesson_plain="off", lesson_samples=2, lesson_rewrites=rewrites)
    keys = keyed(server, "parent")
    teach(server.server.store, "parent", lessons)
    r = chat(server, keys["parent"], QUESTION, max_tokens=64, temperature=1.0)
    assert len(server.engine.prompts) == 2 and not server.engine.scored, why
    assert "rewrite" not in stored_turns(server, r)[0].sampling["selected"]


def test_a_rewrite_no_better_than_the_draft_leaves_the_draft(scripted_server):
    server = scripted_server([LONG, WORDY, LONG, WORDY], lesson_plain="off", lesson_samples=2, lesson_rewrites=2)
    keys = keyed(server, "parent")
    teach(server.server.store, "parent", ("Answer in one sentence.",))
    r = chat(server, keys["parent"], QUESTION, max_tokens=64, temperature=1.0)
    assert len(server.engine.prompts) == 4 and not server.engine.scored
    (turn,) = stored_turns(server, r)
    assert turn.response_text == WORDY and turn.behaviour_logprobs == [-0.5] * len(turn.response_token_ids)


def test_lesson_rewrites_is_checked():
    from openclaw_rl.config import ConfigError, ServeConfig

    with pytest.raises(ConfigError, match="lesson_rewrites"):
        ServeConfig(lesson_rewrites=17)


def test_on_the_real_engine_a_served_rewrite_records_the_served_prompts_logprobs(tiny_model_dir, tmp_path):
    """A rewrite is sampled after another prompt (the draft and the request to rewrite it); what is
    stored is the served prompt, the rewrite's tokens, and their log-probs under the served prompt."""
    server = LiveServer(tiny_model_dir, tmp_path, lesson_samples=2, lesson_rewrites=4)
    try:
        keys = keyed(server, "parent")
        teach(server.server.store, "parent", ("Keep it short.",))
        rewritten = []
        for seed in range(8):  # the random tiny model's answers carry no number: each is rewritten
            r = chat(server, keys["parent"], QUESTION, max_tokens=24, temperature=1.0, seed=seed)
            rewritten += [t for t in stored_turns(server, r) if "rewrite" in t.sampling["selected"]]
            if rewritten:
                break
        assert rewritten, "no rewrite was shorter than its draft in 8 requests"
        turn = rewritten[0]
        scored = asyncio.run(server.server.engine.score(turn.prompt_token_ids, turn.response_token_ids,
                                                        temperature=1.0))
        assert scored.logprobs == pytest.approx(turn.behaviour_logprobs, abs=1e-4)
        assert "Rewrite your answer" not in server.server.tokenizer.decode(turn.prompt_token_ids)
    finally:
        server.stop()


# -- the answer without the block (--lesson-plain) ---------------------------------------------------

OUTLINE = "Step 1: Find the product.\nStep 2: Check it.\nStep 3: Give the answer."


def _student_asks(scripted_server, replies: list[str], lessons: tuple[str, ...], body: dict, **config):
    """A server whose model says `replies` in turn, the student taught `lessons`, and her question
    asked with `body`: the server and the response."""
    server = scripted_server(replies, **config)
    keys = keyed(server, "student")
    teach(server.server.store, "student", lessons)
    return server, chat(server, keys["student"], QUESTION, max_tokens=64, **body)


def test_an_answer_without_the_block_is_served_when_it_keeps_the_lessons_better(scripted_server):
    """The block derails the model into an outline with nothing worked out; the answer decoded to the
    conversation alone shows the working: it is served, and stored as what it was, the plain prompt's
    answer with the log-probs it was sampled with and no block."""
    server, r = _student_asks(scripted_server, [OUTLINE, OUTLINE, PLAIN], ("Show every step.", "No bullet points."),
                              {"temperature": 1.0}, lesson_samples=2, lesson_rewrites=0)
    assert r.json()["choices"][0]["message"]["content"] == PLAIN
    engine, tokenizer = server.engine, server.server.tokenizer
    assert engine.prompts[0] == engine.prompts[1] != engine.prompts[2]
    assert "Show every step." in tokenizer.decode(engine.prompts[0])
    assert "Show every step." not in tokenizer.decode(engine.prompts[2])
    (turn,) = stored_turns(server, r)
    assert turn.prompt_token_ids == engine.prompts[2] and turn.response_text == PLAIN
    assert turn.experience_block == "" and turn.experience_version is None
    assert turn.behaviour_logprobs == [-0.5] * len(turn.response_token_ids) and not engine.scored
    selected = turn.sampling["selected"]
    assert (selected["of"], selected["plain"], selected["picked"]) == (3, 2, 2)


@pytest.mark.parametrize("why, body, replies, decoded", [
    ("a tie: the block's answer", {"temperature": 1.0}, [PLAIN, PLAIN, PLAIN], 3),
    ("greedy: one answer each way", {"temperature": 0}, [PLAIN, PLAIN], 2),
])
def test_the_answer_with_the_block_wins_a_tie(scripted_server, why, body, replies, decoded):
    server, r = _student_asks(scripted_server, replies, ("Show every step.",), body, lesson_samples=2,
                              lesson_rewrites=0)
    assert len(server.engine.prompts) == decoded, why
    (turn,) = stored_turns(server, r)
    selected = turn.sampling["selected"]
    assert selected["picked"] == 0 and selected["plain"] == decoded - 1, why
    assert turn.prompt_token_ids == server.engine.prompts[0] and turn.experience_version is not None


def test_a_plain_answer_that_breaks_a_lesson_is_rewritten_without_the_block(scripted_server):
    """The plain answer wins on the working but carries a list: it is rewritten, from the conversation
    without the block, and the rewrite is stored under the plain prompt, re-scored there."""
    server, r = _student_asks(scripted_server, [OUTLINE, LISTED, PLAIN], ("Show every step.", "No bullet points."),
                              {"temperature": 1.0}, lesson_samples=1, lesson_rewrites=1)
    assert r.json()["choices"][0]["message"]["content"] == PLAIN
    engine, tokenizer = server.engine, server.server.tokenizer
    rewrite_prompt = tokenizer.decode(engine.prompts[2])
    assert "Rewrite your answer. No bullet points." in rewrite_prompt and "Show every step." not in rewrite_prompt
    (turn,) = stored_turns(server, r)
    assert turn.prompt_token_ids == engine.prompts[1] and turn.experience_version is None
    assert engine.scored == [(engine.prompts[1], turn.response_token_ids)]
    assert turn.sampling["selected"]["picked"] == 1 and turn.sampling["selected"]["rewrite"]["picked"] == 0


def test_lesson_plain_is_checked():
    from openclaw_rl.config import ConfigError, ServeConfig

    with pytest.raises(ConfigError, match="lesson_plain"):
        ServeConfig(lesson_plain="sometimes")
