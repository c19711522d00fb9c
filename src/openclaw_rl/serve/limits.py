"""Per-user limits of one serving process: requests and feedback posts per minute, and
concurrent generations.

Each rate is a token bucket per user (capacity = the per-minute limit, refilled evenly), so
a burst up to the limit is fine and a sustained rate above it is refused with 429 and
`Retry-After` (seconds until the next request would be admitted). The defaults are far
above what one person typing ever sends; they stop a script, or a leaked key, from
crowding out everyone else. Limits are per process: with several serving replicas each
counts its own requests.

A server with no key configured has one user (the local admin) and applies none of them:
there is nobody to protect, and drivers such as `agent --parallel 8 --group-size 8` may
legitimately run more generations at once than any person would.

The share of a training batch one user's samples may fill is the trainer's
(`--max-user-share`, store.claim_samples), since only the trainer sees batches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class RateLimit:
    """`per_minute` requests per user, with bursts up to that many; 0 = no limit."""

    per_minute: int
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, user: str, now: float | None = None) -> float | None:
        """Take one request of `user`; None if admitted, else the seconds to wait."""
        if self.per_minute <= 0:
            return None
        now = time.monotonic() if now is None else now
        rate_per_s = self.per_minute / 60.0
        bucket = self._buckets.setdefault(user, _Bucket(float(self.per_minute), now))
        bucket.tokens = min(float(self.per_minute), bucket.tokens + (now - bucket.at) * rate_per_s)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate_per_s


@dataclass
class UserLimits:
    requests: RateLimit
    feedback: RateLimit
    max_streams: int  # concurrent generations per user; 0 = no limit
    streams: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, requests_per_minute: int, feedback_per_minute: int, max_streams: int) -> UserLimits:
        return cls(RateLimit(requests_per_minute), RateLimit(feedback_per_minute), max_streams)

    def refusal(self, user: str, feedback: bool, generation: bool) -> tuple[str, int] | None:
        """(message, Retry-After seconds) if this request of `user` must wait; else None,
        and a generation is counted open until `close_stream`."""
        wait = self.requests.admit(user)
        if wait is not None:
            return (f"user {user!r} sent more than {self.requests.per_minute} requests per minute "
                    "(user_requests_per_minute)"), math.ceil(wait)
        if feedback and (wait := self.feedback.admit(user)) is not None:
            return (f"user {user!r} posted more than {self.feedback.per_minute} feedbacks per minute "
                    "(user_feedback_per_minute)"), math.ceil(wait)
        if generation:
            if self.max_streams and self.streams.get(user, 0) >= self.max_streams:
                return (f"user {user!r} already has {self.max_streams} generations in progress (user_max_streams); "
                        "wait for one to finish"), 1
            self.streams[user] = self.streams.get(user, 0) + 1
        return None

    def close_stream(self, user: str) -> None:
        left = self.streams.get(user, 0) - 1
        if left > 0:
            self.streams[user] = left
        else:
            self.streams.pop(user, None)
