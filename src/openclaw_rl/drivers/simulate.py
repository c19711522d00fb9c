"""`openclaw-rl simulate` and `demo`: simulated users teach a live server, and we watch.

For each method: start the server in-process (engine, judge, trainer, on a loopback
port) and play the sessions through the official OpenAI client, `parallel` users at a
time (the engine batches their requests), or with `--pace sequential` one at a time, each
once the judge has read every earlier turn (the user's lessons so far are in its block);
`--pace caught-up` also waits for the trainer to train every judged sample and the gate to
decide, so each session is served the weights all earlier sessions made.
The personalization score of the held-out problems (greedy first answers) is measured
before training and after every `eval_every`-th policy update. Outputs, in `--out`:

- `metrics.jsonl`: one line per evaluation and per session (method, sessions, updates,
  score, rewards, turns), so a run can be re-plotted or compared later;
- `summary.json`: method, judge, sessions, updates, score_before, score_after,
  score_by_update (one entry per method under `runs` when several are compared);
- `curve.png`: score against sessions and against updates, one line per method.

Decisions and why:

- The score of version v is exactly v's, and the answers go through the same HTTP path a
  client sees, from a second in-process app with a store of its own (its turns never mix
  with the users'). While the serving engine serves v, that app answers from it: the
  held-out answers join the users' decode batches, which on a memory-bound CPU costs
  little more than the users' own steps (issue 21: a separate engine spent a third of the
  demo's cores). Each answer names the version that produced it; if serving moved on
  before one started, or v is already behind when its turn comes, an engine of the
  evaluator's own (built on first need) loads v's snapshot and answers them all.
  summary.json says how many versions were scored each way. With the experience on, the
  held-out answers are what serving sends the user: main turns, with the user's experience as
  it was when the evaluation began lent to the evaluator's store, so they are checked against
  the lessons beside an answer without the block and maybe rewritten (serve/pipeline.py); the
  evaluator's store is never judged or trained. The weights' own score asks side turns
  without the block. The model threads get one
  core-thread each: a single-threaded torch pool time-slices, where two 2-thread pools on
  2 cores would spin against each other.
- "Sessions" on a curve point is the number of sessions finished when that version was
  published, which is what "sessions needed to reach a score" means.
- With `max_updates`, play stops starting sessions once that many updates happened
  (the run's length then is the number of updates, as in the paper's tables).

With `--judge oracle` the rewards come from the persona's rubric itself (to separate
learning from the judge's quality): every output then says ORACLE.

(Over 400 lines: the evaluator, one method's run and the process per method share one
run's config, state and output records, and read best in one place.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import queue
import random
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
from rich.logging import RichHandler
from transformers import AutoTokenizer

from openclaw_rl.compose import StackSpec, build_engine, build_stack, open_store
from openclaw_rl.config import JudgeConfig, ServeConfig, SimulateConfig
from openclaw_rl.engine.base import Weights
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.experience import Experience
from openclaw_rl.eval.metrics import FirstAnswer, acceptance, first_answers, plot_curves
from openclaw_rl.eval.oracle import ORACLE_LABEL, OracleJudge
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems, probe_problems, train_problems
from openclaw_rl.eval.users import SimulatedUser
from openclaw_rl.judge.hint_check import DROPPED_BY_CHECK, RubricComparer
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.serve.experience_block import experience_on
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.serve.server import LoopDied, Server
from openclaw_rl.train.gate import Scorer
from openclaw_rl.train.methods import get_method
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.weights import CallbackChannel
from openclaw_rl.users import LOCAL

log = logging.getLogger(__name__)

CONTROL = "off"  # the method name of the training-off control: the same stream, the base model throughout


class RunStopped(RuntimeError):
    """A background loop of the run's server (the trainer's, a judge's) died: the run stops
    rather than play on untrained and wait out the drain. What was played stays in
    metrics.jsonl."""


def persona_of(config: SimulateConfig):
    """The persona, with `approve_threshold` applied when one is set."""
    persona = get_persona(config.persona)
    if config.approve_threshold is None:
        return persona
    return replace(persona, approve_threshold=config.approve_threshold)


class _Recorder:
    def __init__(self, out: Path, fresh: bool = True):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "metrics.jsonl"
        if fresh:
            self.path.write_text("")

    def write(self, **record: Any) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"at": time.time(), **record}) + "\n")


class LentExperience:
    """An evaluator's store: its own turns, and the experience of users lent to it for the length
    of an evaluation (as the users' store held it when the evaluation began; none otherwise), so
    a server over it answers their main turns as their own requests are answered. It never
    learns a lesson of its own: nothing judges its turns."""

    def __init__(self, store):
        self._store, self._lent = store, {}

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def experience(self, owner: str) -> Experience:
        return self._lent.get(owner) or Experience(owner)

    @contextlib.contextmanager
    def lent(self, *experiences: Experience):
        self._lent = {experience.owner: experience for experience in experiences}
        try:
            yield
        finally:
            self._lent = {}


def evaluator_server(engine, store: LentExperience, config: ServeConfig) -> Server:
    """A server over a running `engine` (its adapters too) that records in the evaluator's `store`
    and answers as `config` serves (the experience, the lesson checks); start it with
    `create_app(server, owns_engine=False)`, so closing it leaves the engine to its owner."""
    return Server(engine=engine, tokenizer=engine.tokenizer, store=store, config=config,
                  model_name=engine.model_name, metrics=Metrics())


class _SnapshotEvaluator:
    """Scores policy versions, in version order, through the HTTP path a client sees (see the
    module docstring). Two ways to answer: the serving engine itself while it serves the version
    to score (the held-out answers then share its decode batches with the users', nearly free
    on a memory-bound CPU), else an engine of its own that loads that version's snapshot (built
    on first need). Every answer names the version that produced it: if serving moved on
    before an answer started, the snapshot engine answers them all again."""
    def __init__(self, config: SimulateConfig, persona, heldout, data_dir: Path, on_score: Callable[..., None],
                 serving: Server | None = None, experience: Callable[[], Experience] | None = None,
                 persona_now: Callable[[], Any] | None = None):
        # serves as the users' server does (the experience, its placement, the lesson checks), never trains
        self._serve = ServeConfig(model=config.model, data_dir=str(data_dir), train=False, status_interval_s=0.0,
                                  experience=config.experience, experience_placement=config.experience_placement,
                                  lesson_samples=config.lesson_samples, lesson_rewrites=config.lesson_rewrites,
                                  lesson_plain=config.lesson_plain)
        self._config, self._heldout, self._on_score = config, heldout, on_score
        self._serving, self._experience = serving, experience
        self._persona_now = persona_now or (lambda: persona)  # whose rubric scores now (a preference shift)
        # both ways record here, out of the users' store; it serves the user's experience as it was when
        # an evaluation began (lent by _run), so the held-out answers are main turns served as the user's
        self._store = LentExperience(open_store(self._serve.store, data_dir))
        self._shared: tuple[ServerThread, openai.OpenAI] | None = None
        if serving is not None:  # the serving engine behind an app of the evaluator's own
            self._shared = self._start(self._server(serving.engine))
        self._own: tuple[Server, ServerThread, openai.OpenAI] | None = None
        self._queue: queue.Queue[tuple[int, dict | None, int | None, threading.Event] | None] = queue.Queue()
        self._closing, self._closed = threading.Lock(), False
        self._worker = threading.Thread(target=self._run, name="openclaw-eval", daemon=True)
        self._worker.start()
        self.error: BaseException | None = None
        self.answered_by = {"serving": 0, "snapshot": 0}  # versions scored each way

    def _server(self, engine) -> Server:
        """A server over `engine` that records in the evaluator's store."""
        return evaluator_server(engine, self._store, self._serve)

    @staticmethod
    def _start(server: Server) -> tuple[ServerThread, openai.OpenAI]:
        http = ServerThread(create_app(server, owns_engine=False), free_port())
        return http, openai.OpenAI(base_url=f"{http.base_url}/v1", api_key="unused", max_retries=2, timeout=1200)

    def submit(self, version: int, state_dict: Weights | None, sessions: int | None = None) -> threading.Event:
        """Score `version` (its weights; None: the base model's, version 0); the event is set once
        it is scored. Waiting for it while serving holds `version` (in the weights channel, so
        the next version's delivery waits) keeps the answers on serving. `sessions`: the
        sessions played when scored (default: when `version` was published)."""
        scored = threading.Event()
        with self._closing:
            if self._closed:  # a version published while serving shuts down: nothing scores it now
                scored.set()
            else:
                self._queue.put((version, state_dict, sessions, scored))
        return scored

    def _answers(self, client: openai.OpenAI, model_name: str,
                 experience: Experience | None) -> tuple[list[FirstAnswer], list[FirstAnswer] | None]:
        """(the answers the user is served: main turns, with their `experience` in the store; the
        weights' own answers without it when there is one: the held-out score of the weights alone)."""
        persona = self._persona_now()
        weights = first_answers(client, model_name, persona, self._heldout,
                                max_tokens=self._config.eval_max_tokens, concurrency=len(self._heldout))
        if experience is None or not experience.lessons or not experience_on(self._serve, LOCAL):
            return weights, None
        with self._store.lent(experience):
            served = first_answers(client, model_name, persona, self._heldout, max_tokens=self._config.eval_max_tokens,
                                   concurrency=len(self._heldout), kind="main")
        return served, weights

    def _snapshot_answers(self, version: int, state_dict: Weights | None, experience: Experience | None):
        if self._own is None:
            server = self._server(build_engine(self._serve, resolve_model_dir(self._serve.model or None), threads=1))
            self._own = (server, *self._start(server))
        server, _, client = self._own
        if state_dict is not None and server.engine.policy_version != version:
            asyncio.run(server.engine.load_weights(state_dict, version))
        return self._answers(client, server.model_name, experience)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            version, state_dict, sessions, scored = item
            try:
                found, way = None, "serving"
                experience = self._experience() if self._experience else None
                persona = self._persona_now().name
                if self._shared is not None and self._serving.engine.policy_version == version:
                    found = self._answers(self._shared[1], self._serving.model_name, experience)
                    if any(a.policy_version != version for a in (found[1] or []) + found[0]):
                        log.info("serving moved past v%d during its evaluation: scored on a snapshot", version)
                        found = None
                if found is None:
                    found, way = self._snapshot_answers(version, state_dict, experience), "snapshot"
                self.answered_by[way] += 1
                del state_dict  # a full copy of the weights: let it go before the next one arrives
                answers, weights = found
                self._on_score(version, sum(a.score for a in answers) / len(answers), answers, sessions=sessions,
                               weights_score=sum(a.score for a in weights) / len(weights) if weights else None,
                               experience_version=experience.version if weights else None, persona=persona)
            except BaseException as error:  # reported by close(), never lost in a thread
                log.exception("evaluation of policy v%d failed", version)
                self.error = error
            finally:
                scored.set()

    def close(self) -> None:
        """Score everything submitted, then stop."""
        with self._closing:
            self._closed = True
            self._queue.put(None)
        self._worker.join()
        if self._shared is not None:
            self._shared[0].stop()
        if self._own is not None:
            self._own[1].stop()
        if self.error is not None:
            raise RuntimeError(f"evaluation failed: {self.error}") from self.error


def _judged_all(server: Server, timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until the judge has judged every paired turn: with training off
    nothing else waits for it, and a run that stops first closes the store under it. A turn's
    lessons are saved before its verdict, so an empty backlog means every lesson is in."""
    deadline = time.monotonic() + timeout_s
    while server.store.judge_backlog():
        server.check_loops()  # a judge that died: LoopDied now, not after timeout_s
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _trained_all(server: Server, flush: Flush, timeout_s: float) -> bool:
    """Ask the trainer to train every judged sample, the last batch even if short, and wait (at most
    `timeout_s`) until a claim finds nothing left: every step taken and its gate decided."""
    flush.done.clear()
    flush.requested.set()
    try:
        return server.wait_for(flush.done, timeout_s)
    finally:
        flush.requested.clear()


def run_method(config: SimulateConfig, method: str, recorder: _Recorder, progress=None) -> dict[str, Any]:
    """Play the sessions of one method against a fresh server; return its summary.

    (Over 60 lines: the server, the users' thread pool, the evaluator and the drain share
    one run's state and its clean-up, which read best in order, in one place.)"""
    persona = persona_of(config)
    shifted = persona_of(replace(config, persona=config.shift_to)) if config.shift_to else None
    heldout = heldout_problems(config.heldout)
    problems = train_problems(config.seed, config.sessions)
    training = method != CONTROL  # the control plays the same stream with training off
    judging = training or config.experience == "on"  # without either, nothing reads a verdict: no judge
    oracle = OracleJudge(persona, problems) if config.judge_spec == "oracle" and judging else None
    run_dir = Path(config.out) / method
    lock = threading.Lock()
    played = 0  # sessions finished
    sessions_at: dict[int, int] = {0: 0}  # policy version -> sessions finished when it was published
    points: list[tuple[int, int, float]] = []
    weights_points: list[tuple[int, int, float]] = []  # the weights alone, when the experience block was served

    def persona_at(sessions: int):
        """Who the user is at this session (0-based start order): after a preference shift, the new persona."""
        return shifted if shifted is not None and sessions >= config.shift_at else persona

    def on_score(version: int, score: float, answers: list[FirstAnswer], sessions: int | None = None,
                 weights_score: float | None = None, experience_version: int | None = None,
                 persona: str | None = None) -> None:
        with lock:
            sessions = sessions_at[version] if sessions is None else sessions
            points.append((sessions, version, score))
            if weights_score is not None:
                weights_points.append((sessions, version, weights_score))
        # score: as served (with the user's experience, when on); weights_score: the same weights without it
        recorder.write(event="eval", method=method, sessions=sessions, updates=version, score=score,
                       weights_score=weights_score, experience_version=experience_version, persona=persona,
                       answers=[{"problem": a.problem_id, "score": round(a.score, 4), "failed": a.failed_checks,
                                 "version": a.policy_version} for a in answers])
        if progress:
            progress(method=method, updates_scored=version, score=score)

    evaluated = [0]  # the last version submitted for evaluation

    def on_publish(version: int, state_dict: Weights) -> None:  # the evaluator's channel, after serving has v
        # Only served versions are published. With the gate on, a rejected candidate's number is
        # skipped, so the first version served at or past each multiple of eval_every is scored.
        with lock:
            sessions_at[version] = played
            due = (version // config.eval_every > evaluated[0] // config.eval_every
                   or bool(config.max_updates and version >= config.max_updates))
            if due:
                evaluated[0] = version
        if due:  # serving holds this version until it is scored (see _SnapshotEvaluator.submit)
            if not evaluator.submit(version, state_dict).wait(config.drain_timeout_s):
                log.warning("v%d was not scored in %.0fs; serving moves on", version, config.drain_timeout_s)
        if progress:
            progress(method=method, updates=version)

    probes = (probe_problems(config.seed, config.gate_probes, [*problems, *heldout]) if config.train.gate == "on"
              else [])
    probe_file = run_dir / "gate-probes.jsonl"
    if probes:
        probe_file.parent.mkdir(parents=True, exist_ok=True)
        probe_file.write_text("".join(json.dumps({"messages": [{"role": "user", "content": persona.first_message(p)}]})
                                      + "\n" for p in probes), encoding="utf-8")
    port = free_port()
    serve = ServeConfig(model=config.model, data_dir=str(run_dir / "data"), port=port, status_interval_s=0.0,
                        train=training, experience=config.experience,
                        experience_placement=config.experience_placement,
                        default_temperature=config.default_temperature, default_top_p=config.default_top_p,
                        lesson_samples=config.lesson_samples, lesson_rewrites=config.lesson_rewrites,
                        lesson_plain=config.lesson_plain)
    train = replace(config.train, method=method if training else "binary",
                    gate_max_new_tokens=config.eval_max_tokens,  # probe answers scored as held-out ones are
                    **({"gate_probe_file": str(probe_file), "gate_anchors": len(probes)} if probes else {}))
    scorer = (rubric_scorer(lambda: persona_at(played), [*problems, *heldout, *probes], tokenizer_of(config))
              if train.gate == "on" else None)
    flush = Flush()
    comparer = RubricComparer(persona, problems) if config.hint_check == "rubric" else None
    # training off with experience on: the judge learns lessons, writes no samples (nothing would train them)
    stack = build_stack(serve, config.judge if judging else JudgeConfig(judge="off"), train, StackSpec(
        judge=oracle, channels=(CallbackChannel(on_publish),), scorer=scorer, flush=flush, comparer=comparer,
        write_samples=training, training=None if training else "off"))
    server = stack.server
    evaluator = _SnapshotEvaluator(config, persona, heldout, run_dir / "eval-data", on_score, serving=server,
                                   experience=lambda: server.store.experience(LOCAL.name),  # the keyless server's user
                                   persona_now=lambda: persona_at(played))
    thread = ServerThread(stack.app(), port)
    client = openai.OpenAI(base_url=f"{thread.base_url}/v1", api_key="unused", max_retries=2, timeout=1200)
    rewards: list[float] = []
    accepted: dict[int, bool] = {}  # by start order: the first answer approved without a correction

    def play(index: int, problem) -> None:
        nonlocal played
        user = SimulatedUser(persona_at(index), client, server.model_name, config.max_turns,
                             random.Random(f"{config.seed}:{index}"), max_tokens=config.response_max_tokens,
                             user_model_url=config.user_model or None)
        session = user.play_session(problem)
        with lock:
            played += 1
            rewards.extend(t.score for t in session.turns)
            count = played
        accepted[index] = bool(session.turns) and session.turns[0].reply_kind == "approve"
        if not training and judging and config.eval_every_sessions and (
                count % config.eval_every_sessions == 0 or (shifted is not None and count == config.shift_at)):
            evaluator.submit(0, None, sessions=count)  # the weights stay; the experience served moved on
        recorder.write(event="session", method=method, sessions=count, index=index + 1, accepted=accepted[index],
                       persona=user.persona.name,
                       session_id=session.session_id,
                       problem=problem.id, turns=len(session.turns), first_score=session.first_score,
                       satisfied=session.satisfied, replies=[t.reply_kind for t in session.turns],
                       error=session.error, updates=server.engine.policy_version)
        if progress:
            progress(method=method, sessions=count, turns=len(session.turns), first_score=session.first_score)

    def done_training() -> bool:
        # numbers count updates, served or rejected by the gate (a rejected one is never served)
        return bool(config.max_updates) and max(server.engine.policy_version,
                                                server.store.highest_policy_version()) >= config.max_updates

    started = time.monotonic()
    try:
        evaluator.submit(0, None)
        with ThreadPoolExecutor(max_workers=config.parallel) as pool:
            running: set[Future] = set()
            for index, problem in enumerate(problems):
                while len(running) >= config.parallel:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        future.result()
                server.check_loops()
                if config.pace != "concurrent" and judging and not _judged_all(server, config.drain_timeout_s):
                    log.warning("session %d starts before the judge caught up (%.0fs): its block may miss the "
                                "last session's lessons", index + 1, config.drain_timeout_s)
                if config.pace == "caught-up" and training and index and not _trained_all(server, flush,
                                                                                        config.drain_timeout_s):
                    log.warning("session %d starts before the trainer caught up (%.0fs)", index + 1,
                                config.drain_timeout_s)
                if done_training():  # (after the waits: a caught-up step may have been the last)
                    break
                running.add(pool.submit(play, index, problem))
            for future in running:
                future.result()
        if training and not done_training():  # train every sample already judged, the last batch even if short
            if not _trained_all(server, flush, config.drain_timeout_s):
                log.warning("training did not drain in %.0fs", config.drain_timeout_s)
        elif judging and not _judged_all(server, config.drain_timeout_s):  # the lessons of the last sessions too
            log.warning("the judge did not catch up in %.0fs: the last sessions' lessons may be missing",
                        config.drain_timeout_s)
        final = server.engine.policy_version
        history = server.store.versions(limit=10**6)
        samples = server.store.sample_counts(get_method(train.method).name)
        in_order = [accepted[i] for i in sorted(accepted)]
        steps = list(server.metrics.train_history)
        dropped_by_check = server.store.verdicts_noting(DROPPED_BY_CHECK)
        engine_stats = server.engine.stats()
    except LoopDied as died:
        raise RunStopped(f"the {method} run stopped after {played} sessions: its server's background loop died "
                         f"({died}); the sessions played so far are in metrics.jsonl") from None
    finally:
        try:
            evaluator.close()  # while serving still runs: it may answer the last evaluations
        finally:
            thread.stop()
    for record in reversed(history):  # what the gate decided on each version, served or not
        recorder.write(event="version", method=method, version=record["version"], parent=record["parent"],
                       gate=record["gate"], reason=record["reason"], checks=record["checks"])
    if final % config.eval_every and not any(v == final for _, v, _ in points):
        log.info("the last version (v%d) falls between evaluations (every %d)", final, config.eval_every)
    points.sort(key=lambda p: p[1])
    return {
        "method": method,
        "judge": "oracle" if oracle else config.judge_spec if judging else "off",
        "experience": config.experience,
        "experience_placement": config.experience_placement,
        "judge_label": ORACLE_LABEL if oracle else config.judge_spec if judging else "off (training-off control)",
        "persona": persona.name,
        "model": server.model_name,
        "sessions": played,
        "updates": final,
        "batch_size": train.batch_size,
        "catch_up": train.catch_up,
        "lora": train.lora,
        "lr": train.learning_rate,  # the rate used, also when --lr was left unset
        "approve_threshold": persona.approve_threshold,
        "max_staleness": train.max_staleness,
        "opd_baseline": train.opd_baseline,
        "parallel": config.parallel,
        "pace": config.pace,
        "seed": config.seed,
        "gate": train.gate,
        "gate_max_length_ratio": train.gate_max_length_ratio,
        "gate_max_repetition_increase": train.gate_max_repetition_increase,
        "settle_after": train.settle_after,
        "kl_beta": train.kl_beta,
        "w_opd": train.w_opd,  # what the trainer was given
        "kl_reference": train.kl_reference,
        "teacher": config.judge.teacher,
        "hint_check": config.hint_check,
        "turns_with_hints_dropped_by_check": dropped_by_check,
        "rejected_versions": sum(record["gate"] == "rejected" for record in history),
        "score_before": points[0][2],
        "score_after": points[-1][2],
        "score_by_update": {str(u): s for _, u, s in points},
        "curve": [list(p) for p in points],
        # the held-out score of the same weights without the experience block (served with it: "curve")
        "weights_curve": [list(p) for p in sorted(weights_points, key=lambda p: p[1])],
        "mean_rubric_of_all_responses": sum(rewards) / len(rewards) if rewards else None,
        "wall_time_s": round(time.monotonic() - started, 1),
        # what became of the judged samples: trained on, dropped as stale, rejected, still waiting
        "samples": samples,
        # the paper's adaptation metric, over the sessions in start order (eval/metrics.py)
        "accepted": in_order,
        **acceptance(in_order),
        # a preference shift: the same user wants what `to` wants from session `at` on; how long re-adapting took
        "shift": ({"to": shifted.name, "at": config.shift_at, "approve_threshold": shifted.approve_threshold,
                   "before": acceptance(in_order[:config.shift_at]), "after": acceptance(in_order[config.shift_at:])}
                  if shifted is not None else None),
        "stale_share": round(samples["dropped"] / max(1, sum(samples.values())), 3),
        "train_tokens_per_s_median": (round(statistics.median(s["tokens_per_s"] for s in steps), 1)
                                      if steps else None),
        "samples_per_step": [int(s.get("samples", 0)) for s in steps],
        "evaluations_answered_by": dict(evaluator.answered_by),
        # the serving engine's counters: prompt and scored positions, and how many were copied from
        # kept prefixes (engine/prefixes.py) instead of computed
        "engine": {k: engine_stats[k] for k in ("prompt_tokens", "scored_tokens", "prefix_tokens_reused",
                                                "tokens_generated", "decode_steps") if k in engine_stats},
    }


def rubric_scorer(persona, problems: list, tokenizer) -> Scorer:
    """The update gate's score check in simulation: the persona's rubric of each probe answer,
    for probes that ask one of the known problems (NaN for any other prompt). Simulation only,
    like the oracle judge: a real deployment has no rubric. `persona` may be a function that
    returns the persona of the moment (a preference shift)."""
    def score(prompts: list[list[int]], answers: list[str]) -> list[float]:
        now = persona() if callable(persona) and not hasattr(persona, "rubric") else persona
        scores = []
        for ids, answer in zip(prompts, answers):
            text = tokenizer.decode(ids, skip_special_tokens=True)
            problem = next((p for p in problems if p.question in text), None)
            scores.append(now.rubric(problem, answer) if problem is not None else float("nan"))
        return scores
    return score


def tokenizer_of(config: SimulateConfig):
    return AutoTokenizer.from_pretrained(resolve_model_dir(config.model or None))


def _child_run(config: SimulateConfig, method: str, messages) -> None:
    """One method in a process of its own (see `simulate`); reports through `messages`."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(show_path=False)])
    for noisy in ("httpx", "httpx2", "openai", "urllib3", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        result = run_method(config, method, _Recorder(Path(config.out), fresh=False),
                            lambda **update: messages.put(("progress", update)))
        messages.put(("done", result))
    except RunStopped as error:
        messages.put(("stopped", str(error)))
    except BaseException as error:
        messages.put(("error", f"{type(error).__name__}: {error}"))
        raise


def _run_in_child(config: SimulateConfig, method: str, progress=None) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    child = context.Process(target=_child_run, args=(config, method, messages), name=f"simulate-{method}")
    child.start()
    try:
        while True:
            try:
                kind, payload = messages.get(timeout=5.0)
            except queue.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the {method} run died (exit code {child.exitcode}); "
                                       f"out of memory? see the log above") from None
                continue
            if kind == "progress" and progress:
                progress(**payload)
            elif kind == "done":
                return payload
            elif kind == "stopped":
                raise RunStopped(payload)
            elif kind == "error":
                raise RuntimeError(f"the {method} run failed: {payload}")
    finally:
        child.join(timeout=120)
        if child.is_alive():
            child.kill()


def simulate(config: SimulateConfig, progress=None) -> dict[str, Any]:
    """Run every method and write the outputs. With several methods each runs in a fresh
    process: a run holds a serving engine, an evaluating engine and a trainer with its
    optimizer state (about 5 GB for the default model), and a process gives all of it back
    to the system when it ends, where freeing it inside one process left the resident
    size growing run after run (three methods reached 15 GB).

    (Over 60 lines: most of it is summary.json's one dict, key by key.)"""
    for method in config.methods:  # before any run starts: a bad name last in the list fails now, not hours in
        if method != CONTROL:
            get_method(method)
    out = Path(config.out)
    recorder = _Recorder(out)
    if len(config.methods) == 1:
        runs = {config.methods[0]: run_method(config, config.methods[0], recorder, progress)}
    else:
        runs = {method: _run_in_child(config, method, progress) for method in config.methods}
    plot_curves({m: [tuple(p) for p in r["curve"]] for m, r in runs.items()}, out / "curve.png",
                judge=config.judge_spec, persona=config.persona,
                accepted={m: r.get("accepted", []) for m, r in runs.items()})
    first = next(iter(runs.values()))
    single = len(runs) == 1
    summary = {
        "method": ",".join(runs),
        "judge": first["judge"],
        "judge_label": first["judge_label"],
        "persona": config.persona,
        "model": first["model"],
        "sessions": first["sessions"] if single else {m: r["sessions"] for m, r in runs.items()},
        "seed": config.seed,
        "batch_size": config.train.batch_size,
        "catch_up": config.train.catch_up,
        "parallel": config.parallel,
        "pace": config.pace,
        "eval_every": config.eval_every,
        "max_updates": config.max_updates,
        "heldout": config.heldout,
        "lr": first["lr"],
        "approve_threshold": first["approve_threshold"],
        "max_staleness": config.train.max_staleness,
        "opd_baseline": config.train.opd_baseline,
        "gate": config.train.gate,
        "gate_max_length_ratio": config.train.gate_max_length_ratio,
        "gate_max_repetition_increase": config.train.gate_max_repetition_increase,
        "settle_after": config.train.settle_after,
        "kl_beta": config.train.kl_beta,
        "w_opd": config.train.w_opd,
        "kl_reference": config.train.kl_reference,
        "teacher": config.judge.teacher,
        "hint_check": config.hint_check,
        "rejected_versions": first["rejected_versions"] if single else {m: r["rejected_versions"]
                                                                         for m, r in runs.items()},
        "wall_time_s": round(sum(r["wall_time_s"] for r in runs.values()), 1),
        **({k: first[k] for k in ("sessions_to_adaptation", "accept_rate", "accept_rate_last_10")} if single else
           {k: {m: r[k] for m, r in runs.items()} for k in ("sessions_to_adaptation", "accept_rate",
                                                           "accept_rate_last_10")}),
        "stale_share": first["stale_share"] if single else {m: r["stale_share"] for m, r in runs.items()},
        "train_tokens_per_s_median": (first["train_tokens_per_s_median"] if single
                                      else {m: r["train_tokens_per_s_median"] for m, r in runs.items()}),
        "updates": first["updates"] if single else {m: r["updates"] for m, r in runs.items()},
        "score_before": first["score_before"] if single else {m: r["score_before"] for m, r in runs.items()},
        "score_after": first["score_after"] if single else {m: r["score_after"] for m, r in runs.items()},
        "score_by_update": first["score_by_update"] if single else {m: r["score_by_update"] for m, r in runs.items()},
        "runs": runs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
