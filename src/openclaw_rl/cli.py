"""`openclaw-rl`: parse arguments, set up logging, call one function.

Each command imports the stack it runs (torch, transformers, FastAPI, Ray) inside its own
function, marked `# per command`: `openclaw-rl --help`, a typo'd flag and the light
commands then answer at once instead of after seconds of imports; each such import's
comment names what it would load. Everything else is imported here.

(Over 400 lines: a parser and a short runner per command, the live tables of simulate and
agent among them; each is small, and `openclaw-rl --help` reads them all from here.)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from typing import Any

# RichHandler imports these two on first use (a traceback to render, a `:name:` in a message).
# Out of file descriptors that import fails, and raised from asyncio's accept() error handler it
# once ended `serve` with exit 1; imported at start, no log line needs a free descriptor.
import rich._emoji_codes  # noqa: F401
import rich.traceback  # noqa: F401
from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.progress import Progress
from rich.table import Table

from openclaw_rl import __version__
from openclaw_rl.config import (
    PRESETS,
    AgentConfig,
    ConfigError,
    HintsConfig,
    JudgeConfig,
    JudgeProcessConfig,
    PoolConfig,
    PromoteConfig,
    RayConfig,
    ServeConfig,
    SimulateConfig,
    TrainConfig,
    TrainProcessConfig,
    add_flags,
    build,
    driver_values,
    load_file,
    load_preset,
    render,
)
from openclaw_rl.allocator import tune_allocator
from openclaw_rl.envs.client import PoolError
from openclaw_rl.envs.registry import env_class
from openclaw_rl.store import StoreError
from openclaw_rl.users import UserError, Users

_FORMAT = argparse.HelpFormatter


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-rl", description="Train any agent simply by using it.")
    parser.add_argument("--version", action="version", version=f"openclaw-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve, judge and train the policy behind an OpenAI-compatible API",
                                formatter_class=_FORMAT)
    _common(serve)
    add_flags(serve, ServeConfig)
    add_flags(serve, JudgeConfig)
    add_flags(serve, TrainConfig)
    add_flags(serve, RayConfig)

    judge = commands.add_parser("judge", help="run the judge worker on its own against a store", formatter_class=_FORMAT)
    _common(judge)
    add_flags(judge, JudgeProcessConfig)
    # gone: the judge writes every signal once per turn and each trainer's method assembles its samples.
    # Still parsed, so a script of the old CLI hears why instead of "unrecognized arguments".
    judge.add_argument("--method", default=None, help=argparse.SUPPRESS)
    add_flags(judge, JudgeConfig)

    train = commands.add_parser("train", help="run the trainer on its own against a store", formatter_class=_FORMAT)
    _common(train)
    add_flags(train, TrainProcessConfig)
    add_flags(train, TrainConfig)

    promote = commands.add_parser("promote", help="train the shared model on chosen users' samples (a stopped "
                                                  "server's data dir); personal adapters then sit on it",
                                  formatter_class=_FORMAT)
    _common(promote)
    add_flags(promote, PromoteConfig)
    add_flags(promote, TrainConfig)

    _simulate_parsers(commands)

    hints = commands.add_parser("hints", help="would OPD help? the hinted model's own answers against the recorded "
                                              "responses (the hint go/no-go check)", formatter_class=_FORMAT)
    add_flags(hints, HintsConfig)
    hints.add_argument("-v", "--verbose", action="store_true", help="log debug messages")

    export = commands.add_parser("export", help="write the trained policy as a Hugging Face model directory",
                                 formatter_class=_FORMAT)
    export.add_argument("--data-dir", required=True, help="the data dir holding checkpoints")
    export.add_argument("--out", required=True, help="an empty or new directory to write")
    export.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    _envs_parser(commands)
    _agent_parser(commands)
    _users_parser(commands)
    return parser


def _users_parser(commands: argparse._SubParsersAction) -> None:
    """`users add|list|revoke|set`: the API keys of a data dir and each user's settings (users.py)."""
    users = commands.add_parser("users", help="add, list and revoke the users (API keys) of a data dir",
                                formatter_class=_FORMAT)
    actions = users.add_subparsers(dest="users_command", required=True)
    default_dir = ServeConfig.__dataclass_fields__["data_dir"].default
    for name, text in (("add", "create a user and print its API key once, on the last line"),
                       ("list", "list users (never their keys)"), ("revoke", "stop a user's key from working"),
                       ("set", "change a user's settings (their key stays)")):
        action = actions.add_parser(name, help=text, formatter_class=_FORMAT)
        if name != "list":
            action.add_argument("name", help="the user's name: lowercase letters, digits, '.', '_', '-'")
        if name == "add":
            action.add_argument("--admin", action="store_true", help="may see and delete every user's sessions")
        if name in ("add", "set"):
            action.add_argument("--experience", choices=("on", "off", "server"), default="server",
                                required=name == "set",
                                help="serve this user's experience (lessons from their corrections) in their "
                                     "prompts: on, off, or as the server's --experience says (server)")
        action.add_argument("--data-dir", default=default_dir, help=f"the server's data dir (default {default_dir})")


def _users(args: argparse.Namespace) -> int:
    users = Users(args.data_dir)
    if args.users_command == "add":
        key = users.add(args.name, admin=args.admin, experience=_EXPERIENCE[args.experience])
        print(f"added {'admin ' if args.admin else ''}user {args.name!r} to {users.path}; a running server accepts "
              "the key from its next request. The key is shown this once (only its hash is kept):")
        print(key)
    elif args.users_command == "set":
        users.set_experience(args.name, _EXPERIENCE[args.experience])
        print(f"{args.name!r}: experience {args.experience}; a running server applies it from their next request")
    elif args.users_command == "revoke":
        users.revoke(args.name)
        print(f"revoked {args.name!r}: its key no longer works; its sessions stay until deleted "
              f"(DELETE /v1/users/{args.name}/data)")
    else:
        view = Table(title=f"users of {users.path}")
        for column in ("name", "admin", "experience", "created", "state"):
            view.add_column(column)
        for record in users.list():
            experience = {None: "server", True: "on", False: "off"}[record["experience"]]
            view.add_row(record["name"], "yes" if record["admin"] else "", experience, _when(record["created_at"]),
                         f"revoked {_when(record['revoked_at'])}" if record["revoked_at"] else "active")
        Console().print(view)
    return 0


_EXPERIENCE = {"on": True, "off": False, "server": None}  # `users --experience`: the users.json value


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-"


def _simulate_parsers(commands: argparse._SubParsersAction) -> None:
    """`simulate` and `demo`: SimulateConfig's flags and its sections'; each command's
    defaults where they differ are its presets (config.PRESETS), shown in --help."""
    demo = ", ".join(f"{key}={value}" for table in load_preset("demo").values() for key, value in table.items())
    for name, text in (("simulate", "simulated users teach a live server; measure the personalization score"),
                       ("demo", f"the student persona teaches the default model on screen (simulate, smaller; "
                                f"defaults: {demo})")):
        sim = commands.add_parser(name, help=text, formatter_class=_FORMAT)
        _common(sim, "simulate")
        add_flags(sim, SimulateConfig, defaults=driver_values(SimulateConfig, "simulate", name))


def _envs_parser(commands: argparse._SubParsersAction) -> None:
    """`envs serve`: PoolConfig's flags (config.py declares them, so every other command
    starts without importing the pool's web stack)."""
    envs = commands.add_parser("envs", help="agent environments: serve a pool of them over HTTP",
                               formatter_class=_FORMAT)
    serve = envs.add_subparsers(dest="envs_command", required=True).add_parser(
        "serve", help="serve K environments to rollout workers (leases, heartbeats, crash replacement)",
        formatter_class=_FORMAT)
    add_flags(serve, PoolConfig)
    serve.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword option for the env's constructor (VALUE read as JSON if it parses); repeatable")
    serve.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def _envs_serve(args: argparse.Namespace) -> int:
    from openclaw_rl.envs.pool import resolve_token, serve  # per command: FastAPI and uvicorn

    options = {}
    for item in args.option:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigError(f"--option {item!r} is invalid: use KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    config = build(PoolConfig, {}, args)
    env_class(config.env)  # an unknown name fails here, naming the choices
    token, generated = resolve_token(config.token)
    print(f"env pool: {config.size} x {config.env} on http://{config.host}:{config.port}", flush=True)
    if generated:
        print(f"token: {token}  (generated; set one with --token or $OPENCLAW_ENV_TOKEN)", flush=True)
    serve(config, token, options)
    return 0


def _agent_parser(commands: argparse._SubParsersAction) -> None:
    """`agent`: AgentConfig's flags and its sections' (defaults: presets/agent.toml over the built-in ones)."""
    agent = commands.add_parser("agent", help="play episodes of an environment through the policy and train on "
                                              "step-wise advantages", formatter_class=_FORMAT)
    _common(agent, "agent")
    add_flags(agent, AgentConfig, defaults=driver_values(AgentConfig, "agent", "agent"))


def _agent(args: argparse.Namespace) -> int:
    from openclaw_rl.drivers.agent import run_agent  # per command: the in-process server (torch)
    from openclaw_rl.drivers.rollout import PolicyError  # per command: FastAPI
    from openclaw_rl.serve.server import LoopDied  # per command: torch

    config = _driver_config(AgentConfig, "agent", args)

    def table(snapshot: dict) -> Table:
        version = snapshot.get("policy_version")
        view = Table(title=f"openclaw-rl agent: {config.env}, reward {config.reward}, G = {config.group_size}, "
                           f"K = {config.parallel}, policy v{version if version is not None else '-'}")
        for column in ("env", "split", "episodes", "success", "mean steps", "env errors", "samples"):
            view.add_column(column)
        for row in snapshot.get("rows", []):
            done = row["done"]
            samples = f"{row['samples_written']} kept / {row['samples_rejected']} dropped"
            view.add_row(row["env"], row["split"], f"{done}/{row['total']}", f"{row['success'] / max(done, 1):.2f}",
                         f"{row['steps'] / max(done, 1):.1f}", str(row["env_errors"]),
                         samples if snapshot.get("writes_samples") and row["split"] == "train" else "-")
        return view

    try:
        with Live(table({}), refresh_per_second=2, transient=False) as live:
            summary = run_agent(config, lambda snapshot: live.update(table(snapshot)))
    except (PolicyError, PoolError) as error:
        print(f"openclaw-rl: error: {error}", file=sys.stderr)
        return 1
    except LoopDied as died:
        print(f"openclaw-rl: error: the in-process server's background loop died ({died}); the episodes played "
              f"are in {config.out}/episodes.jsonl", file=sys.stderr)
        return 1
    print(f"success rate {summary['success_rate']:.2f} over {summary['episodes']} episodes, "
          f"{summary['updates']} policy updates; wrote {config.out}/episodes.jsonl and summary.json")
    return 0


def _common(parser: argparse.ArgumentParser, table: str | None = None) -> None:
    """--config, --print-config and -v; `table`: a driver's own table in its config file."""
    tables = (f"[{table}], [train] and [judge] tables" if table
              else "[serve], [judge] and [train] tables (and [ray] for serve)")
    command = parser.prog.split()[-1]
    preset = f" (over {' then '.join(f'presets/{p}.toml' for p in PRESETS[command])})" if command in PRESETS else ""
    parser.add_argument("--config", help=f"a TOML or YAML file with {tables}{preset}; a flag wins over it")
    parser.add_argument("--print-config", action="store_true",
                        help="print every setting as resolved (defaults, preset, --config, flags) as TOML at the "
                             "start, then run as usual")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def _parts(args: argparse.Namespace, file_values: dict[str, Any]) -> dict[str, Any]:
    """What serve, judge or train runs with, by config-file table, for --print-config; the
    [process] table of judge and train holds their flags-only settings (not read from --config)."""
    def part(cls: type, table: str) -> Any:
        return build(cls, file_values.get(table, {}), args)

    if args.command == "serve":
        return {"serve": part(ServeConfig, "serve"), "judge": part(JudgeConfig, "judge"),
                "train": part(TrainConfig, "train"), "ray": part(RayConfig, "ray")}
    if args.command == "judge":
        return {"process": build(JudgeProcessConfig, {}, args), "judge": part(JudgeConfig, "judge")}
    if args.command == "promote":
        return {"process": build(PromoteConfig, {}, args), "train": part(TrainConfig, "train")}
    return {"process": build(TrainProcessConfig, {}, args), "train": part(TrainConfig, "train")}


def _driver_config(cls: type, table: str, args: argparse.Namespace) -> Any:
    """A driver's config: its presets, then --config, then the flags; printed with --print-config."""
    config = build(cls, driver_values(cls, table, args.command, args.config), args)
    if args.print_config:
        print(render({table: config}), flush=True)
    return config


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(rich_tracebacks=True, show_path=False)],
    )
    for noisy in ("httpx", "httpx2", "openai", "urllib3", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _simulate(args: argparse.Namespace) -> int:
    from openclaw_rl.drivers.simulate import RunStopped, simulate  # per command: torch, transformers

    config = _driver_config(SimulateConfig, "simulate", args)
    state: dict[str, dict] = {}
    judge = "ORACLE (reads the persona rubric)" if config.judge_spec == "oracle" else config.judge_spec

    def table() -> Table:
        view = Table(title=f"openclaw-rl {args.command}: {config.persona} persona, judge {judge}")
        for column in ("method", "sessions", "turns", "last first-answer rubric", "updates", "held-out score"):
            view.add_column(column)
        for method, row in state.items():
            score = f"{row['score']:.3f} (v{row['updates_scored']})" if "score" in row else "-"
            view.add_row(method, f"{row.get('sessions', 0)}/{config.sessions}", str(row.get("turns_total", 0)),
                         f"{row['first_score']:.2f}" if row.get("first_score") is not None else "-",
                         str(row.get("updates", 0)), score)
        return view

    with Live(table(), refresh_per_second=2, transient=False) as live:
        lock = threading.Lock()  # users, the trainer and the evaluator report from their own threads

        def progress(method: str, **update) -> None:
            with lock:
                row = state.setdefault(method, {})
                row["turns_total"] = row.get("turns_total", 0) + update.pop("turns", 0)
                row.update(update)
                live.update(table())

        try:
            summary = simulate(config, progress)
        except RunStopped as error:
            print(f"openclaw-rl: error: {error}", file=sys.stderr)
            return 1
    print(f"score before {summary['score_before']}, after {summary['score_after']}; "
          f"wrote {config.out}/metrics.jsonl, summary.json, curve.png")
    return 0


def _hints(args: argparse.Namespace) -> int:
    from openclaw_rl.drivers.hints import check_store  # per command: the engine (torch)

    config = build(HintsConfig, {}, args)
    with Progress(transient=True) as bar:
        task = bar.add_task("hinted answers", total=None)
        report = check_store(config, lambda done, total: bar.update(task, completed=done, total=total))
    view = Table(title=f"hint check: {report['turns']} hinted turns of {report['data_dir']}, answered by "
                       f"{report['model']}, against the {report['against']} answer")
    for column in ("compared by", "better", "same", "worse", "unknown", "better share (95 % CI)", "call"):
        view.add_column(column)
    for name, found in report["by"].items():
        share = (f"{found['better_share']:.2f} ({found['better_share_ci95'][0]:.2f}-{found['better_share_ci95'][1]:.2f})"
                 if found["better_share"] is not None else "-")
        view.add_row(name, *(str(found[k]) for k in ("better", "same", "worse", "unknown")), share, found["call"])
    Console().print(view)
    for name, found in report["by"].items():
        print(f"{name}: {found['call']}: {found['why']}")
    if "agreement" in report and report["agreement"]["share"] is not None:
        print(f"the two comparers agree on {report['agreement']['share']:.0%} of "
              f"{report['agreement']['turns']} turns")
    print(f"wrote {report['written_to']} (every turn's hint, response and hinted answer)")
    return 0


def _print_promotion(done: Any) -> None:
    """`promote`'s summary (a processes.Promotion): each user's samples, the steps and versions."""
    for user, claims in done.claims.items():
        print(f"{user}: {claims['used']} samples trained" + "".join(
            f", {claims[status]} {status}" for status in ("dropped", "rejected") if claims[status])
            + (" (dropped: stale, more than --max-staleness versions behind)" if claims["dropped"] else ""))
    print(f"{done.steps} steps; versions accepted {done.accepted or 'none'}, rejected {done.rejected or 'none'}; "
          f"the shared model is policy v{done.policy_version}")
    if done.base is not None:
        print(f"personal adapters sit on it from the next `serve --personal-adapters on`: {done.base.path}")
    if done.adapters_reset:
        print(f"personal adapters reset: {', '.join(done.adapters_reset)}")


def main(argv: list[str] | None = None) -> int:
    """Parse, set up logging, run the command; an error a user can fix exits 2 with its message.

    (Over 60 lines: one branch per command, each a few lines, in one `try` that turns
    their errors into that message.)"""
    tune_allocator()  # big blocks from the heap, given back once per version (allocator.py)
    os.umask(0o077)  # what we write is people's conversations and the weights learnt from them: owner only
    args = _parser().parse_args(argv)
    _setup_logging(getattr(args, "verbose", False))
    try:
        if args.command == "users":
            return _users(args)
        if args.command == "export":
            from openclaw_rl.train.checkpoint import export  # per command: torch

            print(f"wrote {export(args.data_dir, args.out)}")
            return 0
        if args.command in ("simulate", "demo"):
            return _simulate(args)
        if args.command == "hints":
            return _hints(args)
        if args.command == "envs":
            return _envs_serve(args)
        if args.command == "agent":
            return _agent(args)
        file_values = load_file(args.config) if args.config else {}
        for section in file_values:
            if section not in ("serve", "judge", "train", "ray"):
                raise ConfigError(f"unknown section [{section}] in {args.config}; use [serve], [judge], [train] "
                                  "and [ray]")
        if args.print_config:
            print(render(_parts(args, file_values)), flush=True)
        from openclaw_rl import processes  # per command: the whole stack (torch, FastAPI)

        if args.command == "serve" and (cluster := build(RayConfig, file_values.get("ray", {}), args)).ray:
            from openclaw_rl.cluster.deploy import serve_on_ray  # per command: Ray

            serve_on_ray(build(ServeConfig, file_values.get("serve", {}), args),
                         build(JudgeConfig, file_values.get("judge", {}), args),
                         build(TrainConfig, file_values.get("train", {}), args), cluster)
        elif args.command == "serve":
            processes.serve(build(ServeConfig, file_values.get("serve", {}), args),
                            build(JudgeConfig, file_values.get("judge", {}), args),
                            build(TrainConfig, file_values.get("train", {}), args))
        elif args.command == "judge":
            if args.method is not None:
                raise ConfigError(
                    f"judge --method {args.method} is gone: the judge now writes every signal of a turn once "
                    "(reward, hints, teacher targets), for any method, and each trainer assembles its samples for "
                    "its own --method. Drop the flag here and give it to `openclaw-rl train` (or serve); add "
                    "--no-teacher-targets if no method that trains reads a teacher (binary, stepwise)")
            part = build(JudgeProcessConfig, {}, args)
            judged = processes.judge_process(part, build(JudgeConfig, file_values.get("judge", {}), args))
            print(f"judged {judged} turns")
        elif args.command == "promote":
            _print_promotion(processes.promote(build(PromoteConfig, {}, args),
                                               build(TrainConfig, file_values.get("train", {}), args)))
        elif args.command == "train":
            from openclaw_rl.train import sharded  # per command: torch

            part = build(TrainProcessConfig, {}, args)
            ranks = sharded.world_size()
            if part.nproc > 1 and ranks == 1:  # start the ranks; each runs this same command under torchrun
                return sharded.launch(part.nproc, sys.argv[1:] if argv is None else argv)
            if part.nproc not in (1, ranks):
                raise ConfigError(f"--nproc {part.nproc} under torchrun with WORLD_SIZE={ranks}: give torchrun "
                                  "--nproc-per-node the ranks, or drop --nproc")
            steps = processes.train_process(part.data_dir, part.model,
                                            build(TrainConfig, file_values.get("train", {}), args),
                                            part.resume, part.max_steps, store_url=part.store,
                                            personal_adapters=part.personal_adapters,
                                            personal_resident=part.personal_resident)
            if int(os.environ.get("RANK", "0")) == 0:  # a follower rank of a sharded trainer counts nothing
                print(f"trained {steps} steps")
            if ranks > 1:
                sharded.end_rank(0)
    except (ConfigError, ValueError, FileNotFoundError, StoreError, UserError) as error:
        print(f"openclaw-rl: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
