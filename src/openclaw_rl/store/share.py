"""The per-user share of what a trainer trains: how `claim_samples` keeps one user's feedback
from steering a step on a server people share (issue 17; counted across steps since issue 36)."""

from __future__ import annotations

import collections
import math

__all__ = ["OwnerShare"]


class OwnerShare:
    """The per-user share of what a method trains, counted over a window of its latest samples.

    Rule: one user's samples fill at most `floor(share * window)` of a window of the
    `window` samples the method trained last, the batch being claimed included, where the
    window is the fewest whole batches holding at least one sample's worth of the share:
    `batch_size * ceil(1 / (share * batch_size))` (one batch of 4 or more at 0.25, two
    batches of 2, four batches of 1). So a batch of 2 at 0.25 takes one sample of a user
    at most every other step: a quarter of what is trained, carried across steps, never
    rounded up to a sample per step. The old cap, max(1, floor(share * batch)) per batch,
    let one user fill half of every batch of 2 (issue 36). Samples over the share stay
    ready for a later batch, so a shared server trains only while samples of at least
    1/share users wait (four at 0.25), as a batch of 4 or more needed before.
    """

    def __init__(self, share: float, batch_size: int, earlier_owners: list[str | None]):
        self.limit = math.floor(share * self.window(share, batch_size) + 1e-9)
        self.counts: collections.Counter[str | None] = collections.Counter(earlier_owners)

    @staticmethod
    def window(share: float, batch_size: int) -> int:
        return batch_size * max(1, math.ceil(1 / (share * batch_size) - 1e-9))

    @classmethod
    def earlier(cls, share: float, batch_size: int) -> int:
        """How many samples trained before the batch being claimed the window holds."""
        return cls.window(share, batch_size) - batch_size

    def admits(self, owner: str | None) -> bool:
        return self.counts[owner] < self.limit

    def add(self, owner: str | None) -> None:
        self.counts[owner] += 1
