"""The dashboard: one page at `/dashboard` that shows what the agent is learning, from
whom, and whether it got better, live while the server runs.

Decisions and why:

- **Static files, vendored libraries, no build step.** The page is three files of ours
  (serve/static/dashboard/: index.html, dashboard.js, dashboard.css) over two vendored
  libraries: Preact with htm (`htm/preact/standalone`, 13 KB, one file: components and
  hooks written as tagged templates, so no JSX compiler) and uPlot (51 KB, time series on
  a canvas, fast enough to redraw every poll). Both are minified files from npm, committed
  with their licenses as package data: the server works offline and `pip install` needs
  no Node.
- **The page holds no data and needs no key**: it asks the same `/v1` routes a client
  would, with the key the browser was given (a form, kept in sessionStorage, sent as
  `Authorization: Bearer`; never in a URL). A user therefore sees on the page exactly what
  the API shows them: their own sessions, an admin everything.
- **User text is never markup.** Prompts, responses, hints and session ids reach the DOM
  only as text nodes (htm/Preact never parse strings as HTML and the page uses no
  `innerHTML`), and a Content-Security-Policy allows scripts from this server alone, so
  an injected tag would neither render nor run.
- **Two read routes of its own**, for what no other route says: `/v1/dashboard/now`
  (what this serving process knows this instant: the candidate the gate is deciding on,
  the judge's backlog, request totals, the engine's batch) and `/v1/dashboard/learning`
  (curves, computed here by `reward_curves` and `version_curves`, pure functions). The rest
  (sessions, versions, quarantine, rollback, pin, delete) are the API's own routes.
- **A run's own curve**: `simulate` serves from `--out/METHOD/data` and writes its
  evaluations to `--out/metrics.jsonl`; `agent` serves from `--out/data` and writes
  `--out/episodes.jsonl`. The learning route looks for those files beside the data dir
  (`run_curve`), so the page of a simulator's or an agent's server shows its score curve.
"""

from __future__ import annotations

import json
import time
from collections import deque
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from openclaw_rl.serve.schema import ApiError
from openclaw_rl.serve.server import Server, caller_of

PAGE = "/dashboard"
STATIC = "/dashboard/static/"

# Scripts and styles from this server only; user text is data, never code (see the docstring).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")

_FILES = {  # what /dashboard/static/ serves: these names and nothing else
    "dashboard.js": "text/javascript", "dashboard.css": "text/css",
    "htm-preact-standalone.umd.js": "text/javascript", "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
}

ROLLING = 20  # turns (or sessions) in a rolling mean
RUN_LINES = 20_000  # at most this many newest lines of a run's file are read


def keyless(path: str) -> bool:
    """Paths the guard lets through without a key: liveness, and the page with its files (which
    hold no data; the page asks /v1 with the browser's key)."""
    return path in ("/healthz", PAGE, PAGE + "/") or path.startswith(STATIC)


def dashboard_routes(app: FastAPI, server: Server, generation: frozenset[str]) -> None:
    """The page, its files, and the two routes made for it; `generation`: the endpoints whose
    request rate and latency the Now view shows."""
    files = resources.files("openclaw_rl.serve") / "static" / "dashboard"

    @app.get(PAGE, include_in_schema=False)
    @app.get(PAGE + "/", include_in_schema=False)
    async def page() -> Response:
        return Response((files / "index.html").read_bytes(), media_type="text/html; charset=utf-8",
                        headers=_page_headers())

    @app.get(STATIC + "{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in _FILES:
            raise ApiError(404, f"no dashboard file {name[:80]!r} (the page's files: {sorted(_FILES)})",
                           code="not_found")
        return Response((files / name).read_bytes(), media_type=_FILES[name], headers=_page_headers())

    @app.get("/v1/dashboard/now")
    async def now(request: Request) -> dict[str, Any]:
        """What this serving process knows this instant."""
        user = caller_of(request)
        samples = await run_in_threadpool(server.store.sample_counts)
        backlog = await run_in_threadpool(server.store.judge_backlog)
        counts = await run_in_threadpool(server.store.counts, None if user.admin else user.name)  # own, or all
        policy = await run_in_threadpool(server.store.policy)
        return {"object": "dashboard.now", "at": time.time(), "user": {"name": user.name, "admin": user.admin},
                "model": server.model_name, "policy_version": server.engine.policy_version,
                "candidate": server.metrics.candidate, "train_steps": policy["train_steps"],
                "last_update_at": policy["last_update_at"], "last_train": server.metrics.last_train,
                "samples": samples, "queues": {"judge": backlog, "train": samples["ready"]}, **counts,
                "requests": server.metrics.totals(generation), "engine": server.engine.stats()}

    @app.get("/v1/dashboard/learning")
    async def learning(request: Request, limit: int = Query(5000, ge=1, le=100_000)) -> dict[str, Any]:
        """Curves: rewards over time and over sessions (the caller's own; an admin's: everyone's),
        KL, gate decisions and probe scores per version, and the run's own curve (admins)."""
        user = caller_of(request)
        judged = await run_in_threadpool(server.store.judged_turns, limit, None if user.admin else user.name)
        versions = await run_in_threadpool(server.store.versions, limit)
        run = await run_in_threadpool(run_curve, server.store.data_dir) if user.admin else None
        return {"object": "dashboard.learning", **reward_curves(judged), "versions": version_curves(versions),
                "run": run}


def _page_headers() -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache"}


# -- curves (pure) -----------------------------------------------------------------------


def reward_curves(judged: list[dict[str, Any]]) -> dict[str, Any]:
    """From judged turns, oldest first (Store.judged_turns): the reward of every turn with its
    rolling mean over the last ROLLING turns, and per session (in the order they started) the
    mean reward, whether the first judged answer was approved (reward +1: an accepted
    session) and the rolling rate of accepted sessions."""
    turns = {"at": [t["judged_at"] for t in judged], "reward": [t["reward"] for t in judged],
             "mean": _rolling([float(t["reward"]) for t in judged])}
    per_session: dict[str, list[dict[str, Any]]] = {}
    for turn in judged:
        per_session.setdefault(turn["session_id"], []).append(turn)
    ordered = sorted(per_session.items(), key=lambda item: (item[1][0]["session_created_at"], item[0]))
    accepted = [float(min(ts, key=lambda t: t["index"])["reward"] == 1) for _, ts in ordered]
    sessions = {"id": [sid for sid, _ in ordered], "started_at": [ts[0]["session_created_at"] for _, ts in ordered],
                "mean_reward": [sum(t["reward"] for t in ts) / len(ts) for _, ts in ordered],
                "accepted": accepted, "accepted_rate": _rolling(accepted)}
    return {"turns": turns, "sessions": sessions}


def version_curves(versions: list[dict[str, Any]]) -> dict[str, Any]:
    """From the version history (newest first, Store.versions): per version made by a training
    step, oldest first, its KL, the gate's decision, the cumulative count of rejections and
    the probe score's change (candidate minus served, where a scorer exists; else None) and
    the collapse detectors' values and alarms (train/collapse.py; None before they existed)."""
    made = sorted((v for v in versions if v["train_step"] and v["gate"] not in ("base", "rollback")),
                  key=lambda v: v["version"])
    rejected, cumulative = 0, []
    for record in made:
        rejected += record["gate"] == "rejected"
        cumulative.append(rejected)
    return {"version": [v["version"] for v in made], "train_step": [v["train_step"] for v in made],
            "kl": [(v["stats"] or {}).get("kl") for v in made], "gate": [v["gate"] for v in made],
            "rejections": cumulative, "score_delta": [(v["checks"] or {}).get("score_delta") for v in made],
            "collapse": [(v["checks"] or {}).get("collapse") for v in made]}


def _rolling(values: list[float], window: int = ROLLING) -> list[float]:
    total, kept, means = 0.0, deque[float](), []
    for value in values:
        kept.append(value)
        total += value
        if len(kept) > window:
            total -= kept.popleft()
        means.append(total / len(kept))
    return means


# -- a simulator's or agent's own curve -----------------------------------------------------


def run_curve(data_dir: Path) -> dict[str, Any] | None:
    """The curve of the run serving from `data_dir`, if one is in progress there (see the module
    docstring): `simulate`: the held-out score per update; `agent`: the rolling success rate of
    training episodes. None when the data dir is not a run's."""
    method_dir = data_dir.parent
    metrics = method_dir.parent / "metrics.jsonl"
    if data_dir.name == "data" and metrics.is_file():
        evals = [r for r in _read_jsonl(metrics) if r.get("event") == "eval" and r.get("method") == method_dir.name]
        return {"kind": "simulate", "method": method_dir.name, "x_label": "policy updates",
                "x": [r.get("updates") for r in evals], "y": [r.get("score") for r in evals],
                "y_label": "held-out score", "sessions": [r.get("sessions") for r in evals]}
    episodes = method_dir / "episodes.jsonl"
    if data_dir.name == "data" and episodes.is_file():
        played = [r for r in _read_jsonl(episodes) if r.get("trained")]
        return {"kind": "agent", "method": "stepwise", "x_label": "training episodes",
                "x": list(range(1, len(played) + 1)), "y": _rolling([float(bool(r.get("success"))) for r in played]),
                "y_label": f"success rate (last {ROLLING})", "sessions": None}
    return None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The newest RUN_LINES records of a run's file; a line being written (cut short) is skipped."""
    records = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in deque(f, RUN_LINES):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records
