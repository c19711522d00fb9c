"""Finished requests' keys and values, kept so that a request starting with the same tokens
runs the model over the rest only (the fused decoder's prefix cache, decoder.py).

Why: each turn of a conversation sends the whole conversation so far as its prompt (the
system prompt, every earlier message and answer), and the cache of the previous turn's
request already holds the keys and values of all of it but the new message. Copying them
into the new request's row is one memory copy; prefilling them again was a fifth of the
serving engine's time in the demo (docs/experiments.md, "Where the cores go").

Rules, and why:

- **Scoped.** An entry is reused only by a request of the same scope: the user the server
  authenticated (`SamplingParams.cache_scope`), None for the engine's own requests.
  Shared across users, how fast an answer starts would tell one user what another sent.
  The engine's own scoring passes (the judge's teacher) read any scope (`ANY`): nobody
  times them, and they give the same numbers from a copied prefix or a computed one.
- **Exact to the token.** The match is the longest common prefix of token ids, of at least
  `MIN_TOKENS`, and at least one token short of the prompt: the model must run on the
  prompt's last token to give the logits the first new token is sampled from.
- **Only for the weights that made them.** The engine forgets every entry when it swaps
  weights, so a response never reads keys computed by another policy version.
- **Bounded.** Up to `budget_bytes`, the least recently used entry goes first; an entry
  that is a prefix of a newer one of the same scope is dropped as the newer one arrives.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

MIN_TOKENS = 16  # shorter shared prefixes (a chat template's opening) are not worth a copy
ANY = object()  # match()'s scope for the engine's own passes: an entry of any scope will do


@dataclass(eq=False)
class Prefix:
    tokens: tuple[int, ...]
    keys: torch.Tensor  # (layers, H_kv, n, D)
    values: torch.Tensor  # (layers, H_kv, n, D)
    scope: str | None

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


class PrefixCache:
    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[int, Prefix] = OrderedDict()  # least recently used first
        self._next = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, scope: str | None, tokens: list[int], keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keep the keys and values (layers, H_kv, n, D) of `tokens` (n of them) for `scope`."""
        entry = Prefix(tuple(tokens), keys, values, scope)
        if len(entry.tokens) < MIN_TOKENS or entry.nbytes > self.budget_bytes:
            return
        for key, old in list(self._entries.items()):  # a prefix of the new entry says nothing more
            if old.scope == scope and entry.tokens[: len(old.tokens)] == old.tokens:
                self._drop(key)
        self._entries[self._next] = entry
        self._next += 1
        self.bytes += entry.nbytes
        while self.bytes > self.budget_bytes:
            self._drop(next(iter(self._entries)))

    def match(self, scope: str | None | object, prompt: list[int], keep_last: int = 1) -> tuple[Prefix, int] | None:
        """The entry of `scope` (or any, with `ANY`) sharing the longest prefix with `prompt`, and
        that length (at least MIN_TOKENS, and at least `keep_last` tokens short of the prompt, whose
        positions the model must run for their logits); None if there is none."""
        best: tuple[int, int] | None = None  # (key, shared)
        for key, entry in self._entries.items():
            if scope is not ANY and entry.scope != scope:
                continue
            shared = _common_prefix(entry.tokens, prompt, len(prompt) - keep_last)
            if shared >= MIN_TOKENS and (best is None or shared > best[1]):
                best = (key, shared)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        return self._entries[best[0]], best[1]

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
