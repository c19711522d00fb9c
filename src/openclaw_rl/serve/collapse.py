"""Collapse detectors on served traffic (issue 40): what users were actually served, read from
the store's main turns, with no model pass.

Over a sliding window of the newest WINDOW main turns (everyone's, or one user's), against the
same numbers over the earliest WINDOW main turns of that scope stored (the base window: what
was served before training had changed much, on a store that started with the server):

    entropy_nats      mean -log p per token of the sampled tokens, from the behaviour log-probs
                      every turn records: an unbiased estimate of the sampling distribution's
                      entropy (E[-log p(x)] = H); a policy that grows sure of every token lowers it
    entropy_ratio     entropy_nats / the base window's; alarm below 0.6
    self_rouge_l      mean pairwise ROUGE-L F1 of the window's answers (token ids); alarm above
                      0.85, or above the base window's own when that is higher (a stream whose
                      answers were that alike from the start is compared with itself)
    mean_tokens       mean answer length in tokens, beside the base window's (no alarm)

The thresholds and the alarm rule are the gate's (openclaw_rl/collapse.py): CLaaS's values,
**not calibrated** here (docs/safe-updates.md#collapse-detectors says what run would). An
alarm is shown (GET /v1/collapse, the dashboard, /metrics); it changes nothing by itself.

Decisions and why:

- No model pass: the detector reads what serving records anyway, so it costs two store reads
  and the ROUGE-L pairs, and the pairs only when the window's turns changed (the numbers of a
  window are kept, keyed by its turns).
- WINDOW = 32 main turns: 496 pairs, each answer's first ROUGE_TOKENS = 256 tokens compared (a
  collapsed answer repeats itself early): 40-70 ms in Python at worst, per new window.
- While fewer than 2 × WINDOW main turns of the scope are stored the two windows would share
  turns: no ratio and no base self-ROUGE-L yet (None), and self-ROUGE-L alarms on its plain
  threshold. Deleted sessions leave both windows, so the base window moves on with them.
- The entropy estimate depends on the sampling settings clients choose per request
  (temperature, top-p; a greedy request records the plain model's log-probs): a stream whose
  clients changed them moves the ratio without any change of the model. A turn recorded
  without log-probs counts for ROUGE-L and length, not for the entropy.
- Who sees what: /metrics shows the overall numbers only (no user name in a label); GET
  /v1/collapse shows a user their own, an admin everyone's or, with ?user=, one user's.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool

from openclaw_rl.collapse import CollapseThresholds, collapse_alarms, self_rouge_l
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.server import caller_of, owner_for
from openclaw_rl.store import Store

log = logging.getLogger(__name__)

WINDOW = 32  # main turns in the sliding window (and in the base window)
ROUGE_TOKENS = 256  # of each answer, compared by ROUGE-L
_KEPT = 256  # windows whose numbers are kept


@dataclass(frozen=True)
class WindowStats:
    """The detectors' numbers over one window of served answers."""

    turns: int
    entropy_nats: float | None  # mean -log p per sampled token; None: no log-probs recorded
    self_rouge_l: float | None  # None: fewer than two non-empty answers
    mean_tokens: float | None  # None: no turn
    versions: tuple[int, ...]  # the policy versions that answered


def window_stats(answers: Sequence[dict[str, Any]]) -> WindowStats:
    """The numbers of one window of answers (Store.main_answers' records)."""
    logprobs = [lp for a in answers for lp in a["behaviour_logprobs"] if math.isfinite(lp)]
    lengths = [len(a["response_token_ids"]) for a in answers]
    return WindowStats(
        turns=len(answers),
        entropy_nats=-sum(logprobs) / len(logprobs) if logprobs else None,
        self_rouge_l=self_rouge_l([a["response_token_ids"][:ROUGE_TOKENS] for a in answers]),
        mean_tokens=sum(lengths) / len(lengths) if lengths else None,
        versions=tuple(sorted({a["policy_version"] for a in answers})))


def served_collapse(latest: WindowStats, base: WindowStats | None, thresholds: CollapseThresholds) -> dict[str, Any]:
    """The detectors of the newest window against the base window (None: not apart from it yet),
    with the alarms they raise."""
    ratio = None
    if base is not None and latest.entropy_nats is not None and base.entropy_nats:
        ratio = latest.entropy_nats / base.entropy_nats
    base_rouge = base.self_rouge_l if base is not None else None
    alarms = collapse_alarms({"entropy_ratio": ratio, "self_rouge_l": latest.self_rouge_l,
                              "base_self_rouge_l": base_rouge}, thresholds)
    return {"turns": latest.turns, "versions": list(latest.versions), "entropy_nats": latest.entropy_nats,
            "entropy_ratio": ratio, "self_rouge_l": latest.self_rouge_l, "mean_tokens": latest.mean_tokens,
            "base": None if base is None else {"turns": base.turns, "versions": list(base.versions),
                                               "entropy_nats": base.entropy_nats, "self_rouge_l": base_rouge,
                                               "mean_tokens": base.mean_tokens},
            "alarms": alarms}


class ServedCollapse:
    """The served-traffic detectors of one server's store; each window's numbers are kept, so
    they are computed again only when new main turns came (or some were deleted)."""

    def __init__(self, store: Store, window: int = WINDOW, thresholds: CollapseThresholds = CollapseThresholds()):
        if window < 2:
            raise ValueError(f"the served-traffic window must hold at least 2 turns to compare answers, got {window}")
        self.store, self.window, self.thresholds = store, window, thresholds
        self._kept: dict[tuple, WindowStats] = {}
        self._lock = threading.Lock()
        self._failing = False  # the last /metrics refresh failed (logged once)

    def of(self, owner: str | None = None) -> dict[str, Any]:
        """The detectors over everyone's main turns (`owner` None) or one user's."""
        latest = self.store.main_answers(self.window, owner)
        earliest = self.store.main_answers(self.window, owner, newest=False)
        apart = len(earliest) == self.window and bool(latest) and earliest[-1]["id"] < latest[0]["id"]
        found = served_collapse(self._stats(latest), self._stats(earliest) if apart else None, self.thresholds)
        return {"object": "collapse.served", "user": owner, "window": self.window, **found,
                "thresholds": asdict(self.thresholds), "calibrated": False}

    def show(self, metrics: Metrics) -> None:
        """Everyone's numbers on the /metrics gauges (NaN, and a warning logged once, while the
        store cannot be read: a scrape still answers)."""
        try:
            found = self.of(None)
        except Exception as error:  # a store outage must not take the other metrics down with it
            if not self._failing:
                log.warning("served-traffic collapse detectors not refreshed: %s: %s", type(error).__name__, error)
            self._failing = True
            found = {}
        else:
            self._failing = False
        metrics.record_served_collapse(found)

    def _stats(self, answers: list[dict[str, Any]]) -> WindowStats:
        key = tuple((a["id"], a["created_at"]) for a in answers)  # an id SQLite reuses comes with a new time
        with self._lock:
            kept = self._kept.get(key)
        if kept is None:
            kept = window_stats(answers)
            with self._lock:
                self._kept[key] = kept
                while len(self._kept) > _KEPT:
                    self._kept.pop(next(iter(self._kept)))
        return kept


def collapse_routes(app: FastAPI, served: ServedCollapse) -> None:
    """GET /v1/collapse: the served-traffic detectors the caller may see."""

    @app.get("/v1/collapse")
    async def collapse(request: Request, user: str | None = Query(None, max_length=256)) -> dict[str, Any]:
        """The collapse detectors on served traffic (serve/collapse.py): a user's own numbers; an
        admin's, everyone's, or one user's with `user`."""
        caller = caller_of(request)
        owner = None if caller.admin and user is None else owner_for(request, user)
        return await run_in_threadpool(served.of, owner)
