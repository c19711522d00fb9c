"""Sampled token ids -> text deltas, honouring stop strings, exactly.

The text a client receives is always `decode(kept_ids)`: when a stop string appears,
the response is cut back to the last token that ends before it, and those kept ids (and
their log-probs) are what the store records. So the stored ids decode to the returned
text and nothing the client never saw is ever trained on.

While streaming, a tail that could still grow into a stop string (or into a tool-call
tag, when tools are on) is held back until it is decided, and text is only shown up to
the end of a whole token before that tail: a stop string that starts inside a token cuts
the response back to the token before it, so the part of that token in front of the stop
string must never have been streamed. Streamed text is therefore always a prefix of the
final text.
"""

from __future__ import annotations

import bisect


class TextAssembler:
    def __init__(self, tokenizer, stop: tuple[str, ...] = (), hold_from: str | None = None):
        self._tokenizer = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._hold_from = hold_from  # text from this marker on is not streamed (tool calls)
        self.ids: list[int] = []
        self.text = ""
        self.emitted = 0
        self.stop_at: int | None = None  # index of the stop string in self.text
        self._ends: list[int] = [0]  # text length at the end of each whole token, ascending

    @property
    def stopped(self) -> bool:
        return self.stop_at is not None

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        """Add a token; return the text that can be shown now."""
        self.ids.append(token_id)
        text = self._decode(self.ids)
        if text.endswith("\ufffd"):  # half a UTF-8 character: wait for the rest
            return ""
        self.text = text
        if len(text) > self._ends[-1]:
            self._ends.append(len(text))
        safe = len(text)
        for stop in self._stop:
            found = text.find(stop, max(0, self.emitted - len(stop) + 1))
            if found != -1 and (self.stop_at is None or found < self.stop_at):
                self.stop_at = found
        if self.stop_at is not None:
            safe = self.stop_at
        else:
            safe -= _longest_partial_suffix(text, self._stop + ((self._hold_from,) if self._hold_from else ()))
        if self._hold_from and (marker := text.find(self._hold_from)) != -1:
            safe = min(safe, marker)
        if safe < len(text):  # something is held back: show no part of the token it starts in
            safe = min(safe, self._ends[bisect.bisect_right(self._ends, safe) - 1])
        if safe <= self.emitted:
            return ""
        delta = text[self.emitted : safe]
        self.emitted = safe
        return delta

    def finish(self) -> tuple[str, int]:
        """(final text, number of ids kept). The final text is decode(ids[:kept])."""
        if self.stop_at is None:
            return self._decode(self.ids), len(self.ids)
        kept = len(self.ids)
        while kept > 0 and len(self._decode(self.ids[:kept])) > self.stop_at:
            kept -= 1
        return self._decode(self.ids[:kept]), kept

    def remaining(self, final_text: str) -> str:
        """What a stream still owes the client once the response is final."""
        end = len(final_text)
        if self._hold_from and (marker := final_text.find(self._hold_from)) != -1:
            end = marker
        return final_text[self.emitted : end] if end > self.emitted else ""


def _longest_partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper prefix of a marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-n:]):
                best = n
                break
    return best
