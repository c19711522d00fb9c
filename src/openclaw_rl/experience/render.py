"""The experience block that serving puts in a user's context, and where it goes.

One documented block, the same on every API and engine, one paragraph (one line; wrapped here):

    What this user has asked for in earlier conversations (follow it unless this request says
    otherwise): Show every step of the calculation. Answer in plain sentences, no bullet points.

Decisions and why:

- **One paragraph, not a list.** Each lesson is one sentence of it (a full stop added where
  a lesson has none). A 135M model copies the form of what it reads: with the lessons as a
  "- " list in front of the request, the parent's greedy held-out answers (only the result,
  in one sentence) scored 0.312, 0.450 and 0.405 on three runs' lessons, against 0.623,
  0.489 and 0.607 as a paragraph (16 problems each; no block: 0.223); the student's did not
  change (docs/experiments.md "The block as one paragraph", scripts/block_format.py).

- **Most supported first**, ties broken by the most recently backed, then the lowest id:
  a rule the user has repeated is the one a short budget should keep, and a fixed order
  makes the block (and so the prompt tokens a turn records) a pure function of the
  experience version.
- **Within the budget, greedily.** Lessons are taken in that order and one that would
  push the block over `budget_tokens` is skipped, not the end of the block: a long
  lesson should not shut out a short one behind it. When not even the header and one
  lesson fit, the block is empty and nothing is added to the prompt.
- **"Unless this request says otherwise"**: a standing preference yields to what the
  user asks now, the way a person applies one.
- **Where it goes** is the server's `--experience-placement` (`place`), recorded on every
  turn so that the teacher and the absorption check render the same messages again:
  - `user` (the default): **in front of the conversation's first user message**,
    followed by a blank line. Measured on SmolLM2-135M (docs/experiments.md, the parent
    persona, 3 runs' lessons, 16 held-out problems): the greedy rubric went 0.223 -> 0.431
    with the lessons there against 0.340 in the system message, and the sampled one
    0.242 -> 0.395 against 0.361; a small model reads a rule next to the request more
    than one in a system prompt. The *first* user message, not the last, so that every
    later turn of the conversation extends the same prefix (the session pairing and the
    engine's prefix reuse see the same ids) and the block is written once per conversation.
    A conversation with no user message gets the block in the system message.
  - `system`: **appended to the client's system message**, after its own text and a
    blank line, never in front of it: the client's instructions stay first and
    unchanged, and a client with no system message gets one holding only the block. Only
    a system (or developer) message at position 0 counts as the client's: chat templates
    expect the system message first, so a block is never put in the middle of a
    conversation.
  A message whose content is a list of parts gets one more text part, of the same type
  as its text parts (`input_text` for the Responses API), so no part is rewritten; its
  newline is placed so that, flattened, the prompt text is the same as for a string.
- The messages passed in are never modified; a new list is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from openclaw_rl.experience.lessons import Experience, Lesson
from openclaw_rl.types import Message

__all__ = ["HEADER", "PLACEMENTS", "block_of", "fitting", "merge_system", "ordered", "place", "prepend_first_user",
           "render"]

HEADER = "What this user has asked for in earlier conversations (follow it unless this request says otherwise):"
_SYSTEM_ROLES = ("system", "developer")
PLACEMENTS = ("user", "system")  # where `place` may put the block; the first is serving's default


def ordered(experience: Experience) -> list[Lesson]:
    """The lessons as the block lists them: most supported, then most recently backed, then oldest id."""
    return sorted(experience.lessons, key=lambda lesson: (-lesson.support, -lesson.updated_at, lesson.id))


def render(experience: Experience, budget_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The experience block within `budget_tokens`, or "" when there is nothing to add."""
    return block_of(fitting(experience, budget_tokens, count_tokens))


def fitting(experience: Experience, budget_tokens: int, count_tokens: Callable[[str], int]) -> tuple[str, ...]:
    """The lessons the block holds within `budget_tokens`, in its order (whole lessons, most
    supported first; one that does not fit is skipped, not the end of the block)."""
    texts: list[str] = []
    for lesson in ordered(experience):
        if count_tokens(block_of([*texts, lesson.text])) <= budget_tokens:
            texts.append(lesson.text)
    return tuple(texts)


def block_of(lessons: Sequence[str]) -> str:
    """The block that holds `lessons`: the header, then the lessons as sentences of one paragraph
    ("" for none)."""
    if not lessons:
        return ""
    return " ".join([HEADER, *(_sentence(text) for text in lessons)])


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text[-1:] in ".!?" else text + "."


def merge_system(messages: list[Message], block: str) -> list[Message]:
    """`messages` with `block` appended to the client's system message, or in a new one first."""
    if not block:
        return list(messages)
    if messages and messages[0].get("role") in _SYSTEM_ROLES:
        first = messages[0]
        return [{**first, "content": _joined(first.get("content"), block, front=False)}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def place(messages: list[Message], block: str, placement: str) -> list[Message]:
    """`messages` with `block` where `placement` ("user" or "system") puts it."""
    if placement == "user":
        return prepend_first_user(messages, block)
    if placement == "system":
        return merge_system(messages, block)
    raise ValueError(f"an experience placement is one of {', '.join(PLACEMENTS)}, got {placement!r}")


def prepend_first_user(messages: list[Message], block: str) -> list[Message]:
    """`messages` with `block` in front of the first user message's text (in the system
    message when there is no user message)."""
    if not block:
        return list(messages)
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            placed = {**message, "content": _joined(message.get("content"), block, front=True)}
            return [*messages[:i], placed, *messages[i + 1:]]
    return merge_system(messages, block)


def _joined(content: str | list | None, block: str, front: bool) -> str | list:
    """`content` with `block` in front of it (`front`) or after it, a blank line between."""
    if content is None or content == "":
        return block
    if isinstance(content, str):
        return f"{block}\n\n{content}" if front else f"{content}\n\n{block}"
    text_types = [part.get("type", "text") for part in content if isinstance(part, dict) and "text" in part]
    if not text_types:
        part = {"type": "text", "text": block}
        return [part, *content] if front else [*content, part]
    # Parts are joined by one newline when flattened (chat.content_text, vLLM), so the newline
    # on the block's side gives the same blank line as the string case: the same prompt text.
    if front:
        return [{"type": text_types[0], "text": f"{block}\n"}, *content]
    return [*content, {"type": text_types[-1], "text": f"\n{block}"}]
