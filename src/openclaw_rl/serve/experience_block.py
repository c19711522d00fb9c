"""The experience block a request is served with: whether its user gets one, and which.

Each chat, Responses and Messages request of a user is answered with that user's
experience (experience/: the lessons learned from their corrections) placed in the
prompt the engine is given (`experience.place`: in front of the first user message, or in
the system message, as `--experience-placement` says). The
pipeline renders the ids here, before any engine sees them, so every engine (local,
vLLM, SGLang) serves the same block. The client's own messages stay what is stored
(`Turn.prompt_messages`), hashed for pairing and judged; the turn records the block and
the experience version and placement beside the exact ids served.

Decisions and why:

- **Whose:** the user the request authenticated as (the local admin on a keyless server),
  whose corrections the judge learned the lessons from; lessons never cross users.
- **Whether:** the user's own setting in users.json (`openclaw-rl users add/set NAME
  --experience on|off`) when it has one, else the server's `--experience`; a budget of 0
  tokens is off too.
- **Cheap:** one primary-key read of the store per request, off the event loop. The block
  is a pure function of (experience, budget), so it is rendered once per version and
  cached; the lessons are tokenized only when a user's experience changes.
- **Raw completions get no block** (`/v1/completions`): the client rendered the prompt
  itself, template and all, and pairs its next request by those exact ids; text put into
  it would break both (the pipeline never calls this for token-in requests).
"""

from __future__ import annotations

import functools
from typing import Any

from openclaw_rl.config import ServeConfig
from openclaw_rl.experience import Experience, block_of, fitting
from openclaw_rl.store import Store
from openclaw_rl.users import User

__all__ = ["experience_block", "experience_on"]


def experience_on(config: ServeConfig, user: User) -> bool:
    """Whether `user`'s requests are served with their experience: their own setting, else the server's."""
    wanted = user.experience if user.experience is not None else config.experience == "on"
    return wanted and config.experience_budget_tokens > 0


def experience_block(store: Store, tokenizer: Any, config: ServeConfig, user: User
                     ) -> tuple[str, int | None, tuple[str, ...]]:
    """(the block to serve `user` with, the experience version it renders, the lessons it holds);
    ("", None, ()) for none.

    Blocking (a store read, maybe tokenizing): call it off the event loop."""
    if not experience_on(config, user):
        return "", None, ()
    experience = store.experience(user.name)
    if not experience.lessons:
        return "", None, ()
    block, lessons = _rendered(tokenizer, experience, config.experience_budget_tokens)
    return (block, experience.version, lessons) if lessons else ("", None, ())


@functools.lru_cache(maxsize=1024)
def _rendered(tokenizer: Any, experience: Experience, budget_tokens: int) -> tuple[str, tuple[str, ...]]:
    """The block and the lessons it holds (`fitting`, with the policy's tokenizer); cached, as an
    experience version never changes."""
    lessons = fitting(experience, budget_tokens, lambda text: len(tokenizer.encode(text, add_special_tokens=False)))
    return block_of(lessons), lessons
