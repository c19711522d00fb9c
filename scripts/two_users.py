"""Two (or more) simulated users with different preferences on ONE server: does each adapt to their own?

    python scripts/two_users.py --personas parent=0.75,student=0.775 --out runs/two-s0 -- --seed 0 --method off
    python scripts/two_users.py --personas parent=0.75,student=0.775 --out runs/two-pa-s0 --personal-adapters on \\
        -- --seed 0 --method combined
    python scripts/two_users.py --summarize runs/two-s0 runs/two-s1 ...
    python scripts/two_users.py --compare runs/two-pa-s0 runs/two-pa-s1 ... --against runs/two-s0 runs/two-s1 ...

Everything after `--` is `openclaw-rl demo`'s flags (its presets apply: the embedding
judge, 8 held-out problems, lr 5e-5...); `--sessions` is the sessions *each* user plays.
One server (the real stack: engine, store, judge, trainer when `--method` trains) with an
API key per persona, and one more for an **observer** who never gives feedback and has
the experience off: the observer's answers are the weights' own (the shared model's; with
`--personal-adapters on`, the base's, as the observer has no adapter).

The users play in rounds: each round every user plays one session of their own problem
stream, concurrently (their requests share the engine's decode batches). Every
`--eval-every` rounds, and at the end, each user's greedy first answers to the held-out
problems are requested **through that user's own key** as main turns of an evaluator's server
(the same engine, so the user's adapter; a store of its own, to which the user's experience is
lent for the evaluation, and which nothing judges or trains): they are answered as the user's
own requests are (the block, the checks, the answer without the block, the rewrite), and scored
by that user's rubric (before, they were side turns: the block's own
greedy answer); the observer's answers are scored by every persona's rubric (the weights
alone). At the end the script checks from the store that no turn of one user was served
with another user's lesson.

Written: `metrics.jsonl` (sessions and evaluations), `summary.json` (per user: acceptance,
sessions to adaptation, held-out curve served and for the weights alone, lessons, the
observer's answers identical to the base's). `--summarize` pools runs: per user, the
median sessions to adaptation, acceptance with a Wilson interval, and the served held-out
score minus the base's at each evaluation with a 95 % bootstrap interval over runs.

`--compare A... --against B...` pairs two arms' runs by seed (personal adapters against the
shared model, say) and prints, per user, the served held-out score at the last evaluation of
each pair, A minus B, with the median and mean difference, a 95 % bootstrap interval of the
mean over seeds, how many seeds A served better, and the two-sided sign test's p.

With `--personal-adapters on` the observer's answers are the base's, so they cannot say
what a user's adapter learned: each evaluation then also scores each user's **adapter
alone** (their adapter, no lessons in the prompt: their experience is switched off for
those requests, as `openclaw-rl users set NAME --experience off` does, then back on),
recorded as `adapter_alone`. `--rescore RUN_DIR...` measures that for runs made
before it existed: a serve-only server (no training, no judge) on a copy of the run's data
serves each user's last adapter, and `adapter_alone.json` is written beside `summary.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import openai

from openclaw_rl import cli
from openclaw_rl.compose import StackSpec, build_stack, open_store
from openclaw_rl.config import ServeConfig, SimulateConfig
from openclaw_rl.drivers.simulate import CONTROL, LentExperience, _judged_all, evaluator_server
from openclaw_rl.eval.metrics import acceptance, bootstrap_mean_ci, first_answers
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems, train_problems
from openclaw_rl.eval.users import SimulatedUser
from openclaw_rl.judge.hint_check import wilson
from openclaw_rl.serve.app import create_app
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.train.runner import Flush
from openclaw_rl.users import Users

OBSERVER = "observer"  # gives no feedback, experience off: the weights' own answers


def parse_personas(text: str) -> dict[str, float | None]:
    """"parent=0.75,student" -> {"parent": 0.75, "student": None} (None: the persona's own level)."""
    personas: dict[str, float | None] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, level = part.partition("=")
        personas[name] = float(level) if level else None
    if len(personas) < 2:
        raise SystemExit(f"--personas needs at least two personas, got {text!r}")
    if OBSERVER in personas:
        raise SystemExit(f"{OBSERVER!r} is the script's own user; pick another persona name")
    return personas


class Run:
    """One server, its users' keys and clients, and what the run records."""

    def __init__(self, config: SimulateConfig, personas: dict[str, float | None], out: Path,
                 personal_adapters: str) -> None:
        self.config, self.out = config, out
        self.personas = {name: (replace(get_persona(name), approve_threshold=level) if level is not None
                                else get_persona(name)) for name, level in personas.items()}
        data = out / "data"
        self.users = users = Users(data)
        keys = {name: users.add(name) for name in self.personas}
        keys[OBSERVER] = users.add(OBSERVER, experience=False)
        self.adapters = personal_adapters == "on"
        self.training = config.method != CONTROL
        port = free_port()
        serve = ServeConfig(model=config.model, data_dir=str(data), port=port, status_interval_s=0.0,
                            train=self.training, experience=config.experience,
                            experience_placement=config.experience_placement, personal_adapters=personal_adapters,
                            default_temperature=config.default_temperature, default_top_p=config.default_top_p,
                            lesson_samples=config.lesson_samples, lesson_rewrites=config.lesson_rewrites,
                            lesson_plain=config.lesson_plain)
        # no probe file and no rubric scorer: one persona's rubric cannot judge a model two users share
        train = replace(config.train, method=config.method if self.training else "binary")
        self.flush = Flush()
        self.stack = build_stack(serve, config.judge, train, StackSpec(
            flush=self.flush, write_samples=self.training, training=None if self.training else "off"))
        self.server = self.stack.server
        self.thread = ServerThread(self.stack.app(), port)
        self.clients = {name: openai.OpenAI(base_url=f"{self.thread.base_url}/v1", api_key=key, max_retries=2,
                                            timeout=1200) for name, key in keys.items()}
        # the evaluator: a server over the same engine (so each user's adapter too) with a store of its own
        # and a copy of the users file (the same keys), to which each user's experience is lent while
        # their held-out answers are asked as main turns: answered as that user's own requests are
        evaluating = out / "eval-data"
        evaluating.mkdir(parents=True, exist_ok=True)
        shutil.copy(data / "users.json", evaluating / "users.json")
        self.eval_store = LentExperience(open_store(serve.store, evaluating))
        evaluator = evaluator_server(self.server.engine, self.eval_store,
                                     replace(serve, data_dir=str(evaluating), train=False))
        self.eval_thread = ServerThread(create_app(evaluator, owns_engine=False), free_port())
        self.eval_clients = {name: openai.OpenAI(base_url=f"{self.eval_thread.base_url}/v1", api_key=keys[name],
                                                 max_retries=2, timeout=1200) for name in self.personas}
        self.heldout = heldout_problems(config.heldout)
        self.metrics = open(out / "metrics.jsonl", "a", encoding="utf-8")
        self.base_observer: list[str] | None = None

    def write(self, **event) -> None:
        self.metrics.write(json.dumps({"t": round(time.time(), 3), **event}) + "\n")
        self.metrics.flush()

    def evaluate(self, rounds: int) -> dict:
        """Each user's held-out score as served to them, and the observer's under every rubric."""
        found: dict = {"rounds": rounds, "served": {}, "weights": {}}
        for name, persona in self.personas.items():
            with self.eval_store.lent(self.server.store.experience(name)):
                answers = first_answers(self.eval_clients[name], self.server.model_name, persona, self.heldout,
                                        max_tokens=self.config.eval_max_tokens, concurrency=len(self.heldout),
                                        kind="main")
            found["served"][name] = statistics.mean(a.score for a in answers)
        if self.adapters:
            alone = adapters_alone(self.users, self.clients, self.server.model_name, self.personas, self.heldout,
                                   self.config.eval_max_tokens)
            found["adapter_alone"] = {name: _mean_score(answers) for name, answers in alone.items()}
        texts = []  # the observer asks each persona's questions in that persona's words
        for name, persona in self.personas.items():
            plain = first_answers(self.clients[OBSERVER], self.server.model_name, persona, self.heldout,
                                  max_tokens=self.config.eval_max_tokens, concurrency=len(self.heldout))
            found["weights"][name] = statistics.mean(a.score for a in plain)
            texts += [a.response for a in plain]
        if self.base_observer is None:
            self.base_observer = texts
        found["observer_same_as_base"] = sum(a == b for a, b in zip(texts, self.base_observer))
        found["observer_answers"] = len(texts)
        found["policy_version"] = self.server.engine.policy_version
        self.write(event="eval", **found)
        return found

    def play(self) -> dict:
        config, names = self.config, list(self.personas)
        streams = {name: train_problems(config.seed * 1000 + k, config.sessions) for k, name in enumerate(names)}
        accepted: dict[str, list[bool]] = {name: [] for name in names}
        curve = [self.evaluate(0)]

        def session(name: str, index: int) -> None:
            user = SimulatedUser(self.personas[name], self.clients[name], self.server.model_name, config.max_turns,
                                 random.Random(f"{config.seed}:{name}:{index}"),
                                 max_tokens=config.response_max_tokens)
            log = user.play_session(streams[name][index])
            ok = bool(log.turns) and log.turns[0].reply_kind == "approve"
            accepted[name].append(ok)
            self.write(event="session", user=name, index=index + 1, accepted=ok, first_score=log.first_score,
                       replies=[t.reply_kind for t in log.turns], error=log.error,
                       policy_version=self.server.engine.policy_version)
            print(f"round {index + 1:>3} {name:>10}: first answer {log.first_score:.2f} "
                  f"{'accepted' if ok else '-'}", flush=True)

        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for index in range(config.sessions):
                for future in [pool.submit(session, name, index) for name in names]:
                    future.result()
                self.server.check_loops()
                if (index + 1) % config.eval_every_sessions == 0 and index + 1 < config.sessions:
                    _judged_all(self.server, config.drain_timeout_s)  # every lesson of the round is in
                    curve.append(self.evaluate(index + 1))
        if self.training:
            self.flush.requested.set()
            self.server.wait_for(self.flush.done, config.drain_timeout_s)
        _judged_all(self.server, config.drain_timeout_s)
        curve.append(self.evaluate(config.sessions))
        return {"accepted": accepted, "curve": curve}

    def crossings(self) -> int:
        """Turns of one user served with a block that holds another user's lesson text."""
        store = self.server.store
        lessons = {name: [lesson.text for lesson in store.experience(name).lessons] for name in self.personas}
        crossed = 0
        for name in self.personas:
            others = [text for other, texts in lessons.items() if other != name for text in texts]
            for session in store.list_sessions(limit=10**6, owner=name):
                for turn in store.turns(session.id):
                    crossed += any(text in turn.experience_block for text in others)
        return crossed

    def close(self) -> None:
        self.eval_thread.stop()
        self.thread.stop()
        self.metrics.close()


def run(args: argparse.Namespace, demo_flags: list[str]) -> None:
    parsed = cli._parser().parse_args(["demo", *demo_flags])
    config = cli._driver_config(SimulateConfig, "simulate", parsed)
    out = Path(args.out)
    if (out / "summary.json").exists():
        raise SystemExit(f"{out} already holds a finished run (summary.json); pick another --out")
    out.mkdir(parents=True, exist_ok=True)
    run = Run(config, parse_personas(args.personas), out, args.personal_adapters)
    started = time.monotonic()
    try:
        played = run.play()
        crossed = run.crossings()
        lessons = {name: [lesson.text for lesson in run.server.store.experience(name).lessons]
                   for name in run.personas}
    finally:
        run.close()
    summary = {
        "personas": {name: p.approve_threshold for name, p in run.personas.items()},
        "method": config.method, "experience": config.experience, "placement": config.experience_placement,
        "personal_adapters": args.personal_adapters, "seed": config.seed, "sessions_per_user": config.sessions,
        "users": {name: {**acceptance(flags), "accepted": flags,
                         "served": [[c["rounds"], c["served"][name]] for c in played["curve"]],
                         "weights": [[c["rounds"], c["weights"][name]] for c in played["curve"]],
                         **({"adapter_alone": [[c["rounds"], c["adapter_alone"][name]] for c in played["curve"]]}
                            if run.adapters else {}),
                         "lessons": lessons[name]}
                  for name, flags in played["accepted"].items()},
        "observer_same_as_base": [[c["rounds"], c["observer_same_as_base"]] for c in played["curve"]],
        "heldout": config.heldout,
        "turns_with_another_users_lesson": crossed,
        "wall_time_s": round(time.monotonic() - started, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    for name, user in summary["users"].items():
        print(f"{name}: accepted {sum(user['accepted'])}/{len(user['accepted'])}, adaptation at "
              f"{user['sessions_to_adaptation']}, served held-out {user['served'][0][1]:.3f} -> "
              f"{user['served'][-1][1]:.3f}, weights alone {user['weights'][-1][1]:.3f}")
    print(f"turns served with another user's lesson: {crossed}")


def adapters_alone(users: Users, clients: dict, model_name: str, personas: dict, heldout: list,
                   max_tokens: int) -> dict[str, list]:
    """Each user's greedy held-out answers under their own adapter with no lessons in the prompt:
    their experience switched off for these requests (the server reads the users file per request), then back."""
    answers = {}
    for name, persona in personas.items():
        users.set_experience(name, False)
        try:
            answers[name] = first_answers(clients[name], model_name, persona, heldout, max_tokens=max_tokens,
                                          concurrency=len(heldout))
        finally:
            users.set_experience(name, None)
    return answers


def _mean_score(answers: list) -> float:
    return statistics.mean(a.score for a in answers)


def _finished(path: str) -> dict:
    summary = Path(path) / "summary.json"
    if not summary.is_file():
        raise SystemExit(f"{path} is not a finished run of this script (no {summary}); pass run directories")
    return json.loads(summary.read_text(encoding="utf-8"))


def rescore(paths: list[str]) -> None:
    """The adapter-alone score of each user's last adapter in finished `--personal-adapters on` runs,
    served by a serve-only server on a copy of the run's data (the run itself is not touched)."""
    config = cli._driver_config(SimulateConfig, "simulate", cli._parser().parse_args(["demo"]))
    for path in paths:
        summary = _finished(path)
        if summary["personal_adapters"] != "on":
            raise SystemExit(f"{path} ran with --personal-adapters {summary['personal_adapters']}: its users have "
                             "no adapter to score alone")
        personas = {name: replace(get_persona(name), approve_threshold=level)
                    for name, level in summary["personas"].items()}
        with tempfile.TemporaryDirectory(prefix="two-users-rescore-") as scratch:
            data = Path(scratch) / "data"
            shutil.copytree(Path(path) / "data", data)
            users = Users(data)
            for name in [*personas, OBSERVER]:  # the run's keys are kept only as hashes: new ones, on the copy
                users.revoke(name)
            keys = {name: users.add(name) for name in personas} | {OBSERVER: users.add(OBSERVER, experience=False)}
            port = free_port()
            serve = ServeConfig(model=config.model, data_dir=str(data), port=port, status_interval_s=0.0,
                                train=False, personal_adapters="on")
            stack = build_stack(serve, replace(config.judge, judge="off"), config.train,
                                StackSpec(write_samples=False))  # follows the adapters on disk
            thread = ServerThread(stack.app(), port)
            try:
                clients = {name: openai.OpenAI(base_url=f"{thread.base_url}/v1", api_key=key, max_retries=2,
                                               timeout=1200) for name, key in keys.items()}
                heldout = heldout_problems(summary["heldout"])
                alone = adapters_alone(users, clients, stack.server.model_name, personas, heldout,
                                       config.eval_max_tokens)
                base = {name: first_answers(clients[OBSERVER], stack.server.model_name, persona, heldout,
                                            max_tokens=config.eval_max_tokens, concurrency=len(heldout))
                        for name, persona in personas.items()}  # the observer has no adapter: the base
                versions = {name: stack.server.personal.current(name) for name in personas}
            finally:
                thread.stop()
        found = {"sessions": summary["sessions_per_user"], "adapter_versions": versions,
                 "adapter_alone": {name: _mean_score(answers) for name, answers in alone.items()},
                 "base": {name: _mean_score(answers) for name, answers in base.items()},
                 "answers_unlike_the_base": {name: sum(a.response != b.response for a, b in zip(alone[name], base[name]))
                                             for name in personas},
                 "answers": len(heldout)}
        (Path(path) / "adapter_alone.json").write_text(json.dumps(found, indent=2), encoding="utf-8")
        print(f"{path}: " + ", ".join(
            f"{name} adapter alone {found['adapter_alone'][name]:.3f} (v{versions[name]}; base "
            f"{found['base'][name]:.3f}; {found['answers_unlike_the_base'][name]}/{len(heldout)} answers unlike "
            f"the base's)" for name in personas))


def summarize(paths: list[str]) -> None:
    runs = [_finished(p) for p in paths]
    first = runs[0]
    print(f"{len(runs)} runs: method {first['method']}, experience {first['experience']} ({first['placement']}), "
          f"personal adapters {first['personal_adapters']}, {first['sessions_per_user']} sessions per user")
    for name in first["users"]:
        users = [r["users"][name] for r in runs]
        flags = [ok for u in users for ok in u["accepted"]]
        low, high = wilson(sum(flags), len(flags))
        reached = [u["sessions_to_adaptation"] for u in users]
        never = sum(r is None for r in reached)
        median = statistics.median([r if r is not None else len(u["accepted"]) + 1 for r, u in zip(reached, users)])
        print(f"\n{name} (approval {first['personas'][name]}): adaptation median {median} "
              f"(never: {never} of {len(runs)}); acceptance {sum(flags)}/{len(flags)} = "
              f"{sum(flags) / len(flags):.2f} [{low:.2f}, {high:.2f}]")
        for i, (rounds, _) in enumerate(users[0]["served"]):
            served = [u["served"][i][1] for u in users]
            gains = [u["served"][i][1] - u["served"][0][1] for u in users]
            weights = [u["weights"][i][1] for u in users]
            low, high = bootstrap_mean_ci(gains) if len(gains) > 1 else (gains[0], gains[0])
            alone = [u["adapter_alone"][i][1] for u in users if "adapter_alone" in u]
            print(f"  after {rounds:>3} sessions: served {statistics.mean(served):.3f} (minus base "
                  f"{statistics.mean(gains):+.3f} [{low:+.3f}, {high:+.3f}]), weights alone "
                  f"{statistics.mean(weights):.3f}"
                  + (f", adapter alone {statistics.mean(alone):.3f}" if len(alone) == len(users) else ""))
    same = [r["observer_same_as_base"][-1][1] for r in runs]
    print(f"\nobserver's held-out answers identical to the base's at the end: {same} of "
          f"{first['heldout'] * len(first['users'])} (per run)")
    print(f"turns served with another user's lesson: {sum(r['turns_with_another_users_lesson'] for r in runs)}")


def compare(paths: list[str], against: list[str]) -> dict[str, dict]:
    """Arm A (`paths`) against arm B (`against`), runs paired by seed: per user, the served held-out
    score at the last evaluation, A minus B. Returns what it prints, per user."""
    def by_seed(group: list[str], arm: str) -> dict[int, dict]:
        runs: dict[int, dict] = {}
        for path in group:
            summary = _finished(path)
            if summary["seed"] in runs:
                raise SystemExit(f"two runs of seed {summary['seed']} in {arm}: {path} and another; one per seed")
            runs[summary["seed"]] = summary
        return runs
    a, b = by_seed(paths, "--compare"), by_seed(against, "--against")
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise SystemExit(f"no seed is in both arms (--compare: {sorted(a)}, --against: {sorted(b)})")
    if set(a) != set(b):
        print(f"paired on seeds {seeds}; unpaired runs left out: {sorted(set(a) ^ set(b))}")
    users = [name for name in a[seeds[0]]["users"] if all(name in b[s]["users"] for s in seeds)]
    found = {}
    for name in users:
        pairs = [(a[s]["users"][name]["served"][-1][1], b[s]["users"][name]["served"][-1][1]) for s in seeds]
        diffs = [x - y for x, y in pairs]
        low, high = bootstrap_mean_ci(diffs) if len(diffs) > 1 else (diffs[0], diffs[0])
        better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        found[name] = {"seeds": seeds, "a": [x for x, _ in pairs], "b": [y for _, y in pairs], "diff": diffs,
                       "median": statistics.median(diffs), "mean": statistics.mean(diffs), "ci": [low, high],
                       "better": better, "sign_p": sign_test(better, worse)}
        print(f"{name}: " + ", ".join(f"s{s} {x:.3f} - {y:.3f} = {x - y:+.3f}" for s, (x, y) in zip(seeds, pairs)))
        print(f"  median {found[name]['median']:+.3f}, mean {found[name]['mean']:+.3f} [{low:+.3f}, {high:+.3f}], "
              f"A better in {better} of {len(seeds)}, sign test p {found[name]['sign_p']:.3f}")
    return found


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test of `better` against `worse` (ties left out)."""
    n = better + worse
    if not n:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(max(better, worse), n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main() -> None:
    argv = sys.argv[1:]
    demo_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--personas", default="parent=0.75,student=0.775")
    parser.add_argument("--out")
    parser.add_argument("--personal-adapters", choices=("on", "off"), default="off")
    parser.add_argument("--summarize", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--compare", nargs="+", metavar="RUN_DIR", help="arm A's runs, paired by seed with --against")
    parser.add_argument("--against", nargs="+", metavar="RUN_DIR", help="arm B's runs (with --compare)")
    parser.add_argument("--rescore", nargs="+", metavar="RUN_DIR",
                        help="score each user's last adapter alone in finished --personal-adapters on runs")
    args = parser.parse_args(own)
    if bool(args.compare) != bool(args.against):
        parser.error("--compare and --against go together: arm A's runs, then arm B's")
    if args.compare:
        compare(args.compare, args.against)
    elif args.summarize:
        summarize(args.summarize)
    elif args.rescore:
        rescore(args.rescore)
    elif not args.out:
        parser.error("--out is required to run (or --summarize RUN_DIR...)")
    else:
        run(args, demo_flags)


if __name__ == "__main__":
    main()
