"""Which session a request belongs to, and what it tells us about the previous turn.

A request names its session with the `X-Session-Id` header, else the body's `user`
field. Stock clients send neither, so we infer: a chat client resends the whole history,
so a request whose messages begin with a recorded main turn's prompt followed by that
turn's response continues that turn's session. Each main turn stores a hash of
prompt + response (its *continuation hash*); a request is hashed at every assistant
message it contains and the longest recorded prefix wins. Two header-less users never
share a session: their histories differ at the latest at their first sampled response.
(Two users whose histories are identical, token for token, cannot be told apart by
anyone; the one still waiting for a next state is continued.)

The messages a main request adds after the previous main turn's prompt and response are
that turn's next state.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from openclaw_rl.serve.chat import content_text
from openclaw_rl.store import Store
from openclaw_rl.types import Message, NextState, Turn


@dataclass(frozen=True)
class SessionRef:
    id: str
    source: str  # header | user | inferred | new


def _canonical(message: Message) -> list[Any]:
    calls = [
        [c.get("function", {}).get("name"), _canonical_arguments(c.get("function", {}).get("arguments"))]
        for c in message.get("tool_calls") or []
    ]
    role = "system" if message.get("role") == "developer" else message.get("role")
    return [role, content_text(message).strip(), calls, message.get("tool_call_id")]


def _canonical_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def history_hash(messages: list[Message]) -> str:
    blob = json.dumps([_canonical(m) for m in messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def response_message(text: str | None, tool_calls: list[dict]) -> Message:
    """The assistant message a client will send back for this response."""
    message: Message = {"role": "assistant", "content": text or ""}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def continuation_hash(prompt_messages: list[Message], response: Message) -> str:
    return history_hash([*prompt_messages, response])


def resolve_session(store: Store, messages: list[Message], header_id: str | None, user: str | None) -> SessionRef:
    if header_id:
        return SessionRef(header_id, "header")
    if user:
        return SessionRef(user, "user")
    prefixes = [history_hash(messages[: k + 1]) for k, m in enumerate(messages) if m.get("role") == "assistant"]
    matches = store.sessions_continued_by(prefixes)
    if matches:
        rank = {h: i for i, h in enumerate(prefixes)}
        # Longest prefix first; then a turn still waiting for its next state; then newest.
        best = max(
            matches,
            key=lambda m: (rank[_hash_of(m[1])], m[1].next_state is None and not m[1].closed, m[1].id),
        )
        return SessionRef(best[0], "inferred")
    return SessionRef(f"sess-{uuid.uuid4().hex}", "new")


def _hash_of(turn: Turn) -> str:
    return continuation_hash(turn.prompt_messages, response_message(turn.response_text, turn.tool_calls))


def next_state_of(previous: Turn, messages: list[Message]) -> NextState | None:
    """What `messages` add after `previous`'s prompt and response, or None if nothing."""
    history = [*previous.prompt_messages, response_message(previous.response_text, previous.tool_calls)]
    n = len(history)
    if len(messages) > n and history_hash(messages[:n]) == history_hash(history):
        new = messages[n:]
    else:  # the client did not resend history (e.g. header sessions): after its last reply
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        new = messages[last_assistant + 1 :]
    new = [m for m in new if m.get("role") not in ("system", "developer")]
    if not new:
        return None
    content = "\n\n".join(content_text(m) for m in new)
    return NextState(role=new[0]["role"], content=content, messages=new, at=time.time())
