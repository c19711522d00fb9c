"""Which session a request belongs to, and which earlier turn it continues.

A session is named by the `X-Session-Id` header, by a Responses `previous_response_id`
(the pipeline resolves that one), or inferred. Stock clients send no header, so we
infer: a chat client resends the whole history, so a request whose messages begin with
a recorded main turn's prompt followed by that turn's response continues that turn.
Each main turn stores a hash of prompt + response *as the client saw it* (content and
parsed tool calls, never the raw markup; its *continuation hash*); a request is hashed
at every assistant message it contains and the longest recorded prefix wins. Two
header-less users never share a session: their histories differ at the latest at their
first sampled response. (Two conversations whose histories are identical, token for
token, cannot be told apart by anyone; the one still waiting for a next state is
continued.)

The OpenAI `user` field is an end user, not a conversation: one person has many. It
only *scopes* the inference (it is hashed in, so two users' identical histories never
match each other); a request with no recorded prefix always starts a new session.
The user a request authenticated as (users.py) scopes it absolutely: only that user's
own turns are ever candidates, so no history, however identical, continues another
user's session.

An `X-Session-Id` another user chose first is not refused (that answer told anyone which
ids exist): the caller's conversation goes to a session of their own stored under
`private_session_id(id, caller)`, and every answer (the header, the body's `session_id`,
the session routes) names it by the id the caller chose, exactly as for an id nobody had.
The other user's session is never read or touched.

The continued turn, not merely the session's last turn, receives the next state: with
`n > 1` several choices of one request wait in the same session, and the one the client
resent is the one it continued (its siblings are then closed unjudged). The messages a
request adds after that turn's prompt and response are its next state.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from openclaw_rl.chat import content_text
from openclaw_rl.store import Store
from openclaw_rl.types import Message, NextState, Turn

@dataclass(frozen=True)
class SessionRef:
    id: str  # as stored
    source: str  # header | response | inferred | new
    continues: Turn | None = None  # the main turn this request continues, when known
    named: str | None = None  # the id the client chose, when it is stored under its private id

    @property
    def shown_id(self) -> str:
        """The id the client knows the session by."""
        return self.named or self.id


def private_session_id(session_id: str, owner: str) -> str:
    """Where `owner`'s session named `session_id` is stored when another user holds that id."""
    digest = hashlib.sha256(f"{owner}\0{session_id}".encode()).hexdigest()[:16]
    return f"{session_id}~{digest}"


def shown_session_id(stored_id: str, owner: str | None) -> str:
    """The id a client chose for a session stored under `stored_id` (see `private_session_id`)."""
    named = stored_id.rpartition("~")[0]
    return named if named and owner is not None and private_session_id(named, owner) == stored_id else stored_id


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


def history_hash(messages: list[Message], scope: str = "") -> str:
    """A hash of a conversation as a client resends it; `scope` (the end user) is mixed in."""
    blob = json.dumps([scope, [_canonical(m) for m in messages]], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def response_message(text: str | None, tool_calls: list[dict]) -> Message:
    """The assistant message a client will send back for this response."""
    message: Message = {"role": "assistant", "content": text or ""}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def continuation_hash(prompt_messages: list[Message], response: Message, scope: str = "") -> str:
    return history_hash([*prompt_messages, response], scope)


def resolve_session(store: Store, messages: list[Message], header_id: str | None, end_user: str | None,
                    owner: str) -> SessionRef:
    """The session of a request and the main turn it continues (longest resent prefix among
    `owner`'s own turns: inference never crosses users, admins included)."""
    scope = end_user or ""
    prefixes = [history_hash(messages[: k + 1], scope) for k, m in enumerate(messages) if m.get("role") == "assistant"]
    rank = {h: i for i, h in enumerate(prefixes)}
    matches = [t for _, t in store.sessions_continued_by(prefixes, owner) if t.continuation_hash in rank]
    if header_id:  # the caller's own session of that name, wherever it is stored
        matches = [t for t in matches if t.session_id in (header_id, private_session_id(header_id, owner))]
    # Longest prefix first; then a turn still waiting for its next state; then newest.
    best = max(matches, key=lambda t: (rank[t.continuation_hash], t.next_state is None and not t.closed, t.id),
               default=None)
    if header_id:
        return SessionRef(header_id, "header", best)
    if best is not None:
        return SessionRef(best.session_id, "inferred", best)
    return SessionRef(f"sess-{uuid.uuid4().hex}", "new")


def turn_to_pair(store: Store, ref: SessionRef) -> tuple[Turn | None, list[Turn]]:
    """(the open main turn this request is the next state of, open siblings to close).

    A request that resent a recorded prefix continues that turn. A header session whose
    client does not resend history continues the session's last main turn, unless that
    turn is one of several choices (n > 1): then nobody can tell which one the client
    kept, and the whole group closes unjudged rather than pairing a guess."""
    turn = ref.continues
    if turn is None:
        turn = store.last_main_turn(ref.id)
        if turn is not None and turn.sampling.get("n", 1) > 1:
            return None, _open_group(store, turn)
    if turn is None or turn.next_state is not None or turn.closed:
        return None, []
    siblings = [t for t in _open_group(store, turn) if t.id != turn.id] if turn.sampling.get("n", 1) > 1 else []
    return turn, siblings


def _open_group(store: Store, turn: Turn) -> list[Turn]:
    group = turn.sampling.get("group")
    return [t for t in store.turns(turn.session_id)
            if t.kind == "main" and t.sampling.get("group") == group and t.next_state is None and not t.closed]


def next_state_of(previous: Turn, messages: list[Message], scope: str = "") -> NextState | None:
    """What `messages` add after `previous`'s prompt and response, or None if nothing."""
    n = len(previous.prompt_messages) + 1
    if len(messages) >= n and previous.continuation_hash == history_hash(messages[:n], scope):
        new = messages[n:]
    else:  # the client did not resend history (e.g. header sessions): after its last reply
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        new = messages[last_assistant + 1 :]
    new = [m for m in new if m.get("role") not in ("system", "developer")]
    if not new:
        return None
    content = "\n\n".join(content_text(m) for m in new)
    return NextState(role=new[0]["role"], content=content, messages=new, at=time.time())
