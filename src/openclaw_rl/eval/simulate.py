"""`openclaw-rl simulate` and `demo`: simulated users teach a live server, and we watch.

For each method: start the server in-process (engine, judge, trainer, on a loopback
port), measure the personalization score on the held-out problems (greedy first
answers, sent as side turns so evaluation is never trained on), then play the sessions
through the official OpenAI client, and measure again after every policy update.
Outputs, in `--out`:

- `metrics.jsonl`: one line per evaluation and per session (method, sessions, updates,
  score, rewards, turns), so a run can be re-plotted or compared later;
- `summary.json`: method, judge, sessions, updates, score_before, score_after,
  score_by_update (one entry per method under `runs` when several are compared);
- `curve.png`: score against sessions and against updates, one line per method.

With `--judge oracle` the rewards come from the persona's rubric itself (to separate
learning from the judge's quality): every output then says ORACLE.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.eval.metrics import personalization_score, plot_curves
from openclaw_rl.eval.oracle import ORACLE_LABEL, OracleJudge
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems, train_problems
from openclaw_rl.eval.users import SimulatedUser

log = logging.getLogger(__name__)


@dataclass
class SimulateConfig:
    persona: str = "student"
    sessions: int = 32
    methods: list[str] = field(default_factory=lambda: ["combined"])
    judge: str = "embedding"  # embedding | local | oracle | an OpenAI-compatible base URL
    judge_model: str = "default"  # model name at a judge URL
    seed: int = 0
    out: str = "./openclaw-sim"
    model: str = ""
    batch_size: int = 4
    lora: bool = False
    max_turns: int = 3
    heldout: int = 16
    eval_max_tokens: int = 200
    response_max_tokens: int = 200
    user_model: str = ""  # an OpenAI-compatible URL whose model plays the user
    drain_timeout_s: float = 600.0  # after the last session, wait this long for pending training

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ValueError(f"sessions = {self.sessions} is invalid: play at least 1 session")
        bad = [m for m in self.methods if m not in ("binary", "opd", "combined", "topk")]
        if bad or not self.methods:
            raise ValueError(f"unknown method(s) {bad or self.methods}; use binary, opd, combined or topk")
        if self.heldout < 1:
            raise ValueError(f"heldout = {self.heldout} is invalid: hold out at least 1 problem")


class _Recorder:
    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "metrics.jsonl"
        self.path.write_text("")

    def write(self, **record: Any) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"at": time.time(), **record}) + "\n")


def _judge_config(config: SimulateConfig) -> JudgeConfig:
    if config.judge == "oracle":
        return JudgeConfig(judge="off")
    if config.judge.startswith(("http://", "https://")):
        return JudgeConfig(judge="openai", openai_base_url=config.judge, openai_model=config.judge_model)
    return JudgeConfig(judge=config.judge)


def run_method(config: SimulateConfig, method: str, recorder: _Recorder, progress=None) -> dict[str, Any]:
    """Play every session of one method against a fresh server; return its summary."""
    import openai

    from openclaw_rl.loop import build_app
    from openclaw_rl.serve.background import ServerThread, free_port

    persona = get_persona(config.persona)
    heldout = heldout_problems(config.heldout)
    problems = train_problems(config.seed, config.sessions)
    oracle = OracleJudge(persona, problems) if config.judge == "oracle" else None
    data_dir = Path(config.out) / method / "data"
    port = free_port()
    serve = ServeConfig(model=config.model, data_dir=str(data_dir), port=port, status_interval_s=0.0)
    train = TrainConfig(method=method, batch_size=config.batch_size, lora=config.lora,
                        max_staleness=max(2, config.sessions))
    server, app = build_app(serve, _judge_config(config), train, judge_override=oracle)
    thread = ServerThread(app, port)
    client = openai.OpenAI(base_url=f"{thread.base_url}/v1", api_key="unused", max_retries=2, timeout=600)
    model = server.model_name
    user = SimulatedUser(persona, client, model, config.max_turns, random.Random(config.seed),
                         max_tokens=config.response_max_tokens, user_model_url=config.user_model or None)
    points: list[tuple[int, int, float]] = []
    rewards: list[float] = []

    def evaluate(sessions: int) -> float:
        version = server.engine.policy_version
        score = personalization_score(client, model, persona, heldout, max_tokens=config.eval_max_tokens)
        points.append((sessions, version, score))
        recorder.write(event="eval", method=method, sessions=sessions, updates=version, score=score)
        if progress:
            progress(method=method, sessions=sessions, updates=version, score=score)
        return score

    started = time.monotonic()
    try:
        score_before = evaluate(0)
        evaluated_version = server.engine.policy_version
        for played, problem in enumerate(problems, start=1):
            session = user.play_session(problem)
            first = session.turns[0].score if session.turns else None
            rewards += [t.score for t in session.turns]
            recorder.write(event="session", method=method, sessions=played, session_id=session.session_id,
                           problem=problem.id, turns=len(session.turns), first_score=first,
                           satisfied=session.satisfied, replies=[t.reply_kind for t in session.turns],
                           error=session.error, updates=server.engine.policy_version)
            if progress:
                progress(method=method, sessions=played, turns=len(session.turns), first_score=first,
                         updates=server.engine.policy_version)
            if server.engine.policy_version != evaluated_version:
                evaluated_version = server.engine.policy_version
                evaluate(played)
        deadline = time.monotonic() + config.drain_timeout_s  # let samples already judged be trained on
        while time.monotonic() < deadline and server.store.sample_counts(method)["ready"] >= config.batch_size:
            time.sleep(1.0)
        if server.engine.policy_version != evaluated_version:
            evaluate(config.sessions)
    finally:
        thread.stop()
    return {
        "method": method,
        "judge": "oracle" if oracle else config.judge,
        "judge_label": ORACLE_LABEL if oracle else config.judge,
        "persona": persona.name,
        "model": model,
        "sessions": config.sessions,
        "updates": points[-1][1],
        "batch_size": config.batch_size,
        "seed": config.seed,
        "score_before": score_before,
        "score_after": points[-1][2],
        "score_by_update": {str(u): s for _, u, s in points},
        "curve": [list(p) for p in points],
        "mean_rubric_of_all_responses": sum(rewards) / len(rewards) if rewards else None,
        "wall_time_s": round(time.monotonic() - started, 1),
    }


def simulate(config: SimulateConfig, progress=None) -> dict[str, Any]:
    out = Path(config.out)
    recorder = _Recorder(out)
    runs = {method: run_method(config, method, recorder, progress) for method in config.methods}
    plot_curves({m: [tuple(p) for p in r["curve"]] for m, r in runs.items()}, out / "curve.png",
                judge="oracle" if config.judge == "oracle" else config.judge, persona=config.persona)
    first = next(iter(runs.values()))
    single = len(runs) == 1
    summary = {
        "method": ",".join(runs),
        "judge": first["judge"],
        "judge_label": first["judge_label"],
        "persona": config.persona,
        "model": first["model"],
        "sessions": config.sessions,
        "seed": config.seed,
        "batch_size": config.batch_size,
        "updates": first["updates"] if single else {m: r["updates"] for m, r in runs.items()},
        "score_before": first["score_before"] if single else {m: r["score_before"] for m, r in runs.items()},
        "score_after": first["score_after"] if single else {m: r["score_after"] for m, r in runs.items()},
        "score_by_update": first["score_by_update"] if single else {m: r["score_by_update"] for m, r in runs.items()},
        "runs": runs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
