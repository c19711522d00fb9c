"""`openclaw-rl`: parse arguments, set up logging, call one function."""

from __future__ import annotations

import argparse
import logging
import sys

from openclaw_rl import __version__
from openclaw_rl.config import ConfigError, JudgeConfig, ServeConfig, add_flags, build, load_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-rl", description="Train any agent simply by using it.")
    parser.add_argument("--version", action="version", version=f"openclaw-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the policy behind an OpenAI-compatible API",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    serve.add_argument("--config", help="a TOML or YAML file of settings (flags override it)")
    serve.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_flags(serve, ServeConfig)
    add_flags(serve, JudgeConfig)
    serve.add_argument("--method", default=None, help="training objective: binary | opd | combined | topk")

    judge = commands.add_parser("judge", help="run the judge worker against an existing store",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    judge.add_argument("--data-dir", required=True, help="the store to judge (a serve --data-dir)")
    judge.add_argument("--model", default="", help="model directory for teacher scoring (default: the bundled model)")
    judge.add_argument("--once", action="store_true", help="judge what is waiting now, then exit")
    judge.add_argument("--config", help="a TOML or YAML file of settings (flags override it)")
    judge.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    judge.add_argument("--method", default=None, help="training objective the samples are built for")
    add_flags(judge, JudgeConfig)
    return parser


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(rich_tracebacks=True, show_path=False)],
    )
    for noisy in ("httpx", "urllib3", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(getattr(args, "verbose", False))
    try:
        file_values = load_file(args.config) if getattr(args, "config", None) else {}
        method = args.method or file_values.get("train", {}).get("method", "combined")
        judge_config = build(JudgeConfig, file_values.get("judge", {}), args)
        if args.command == "serve":
            config = build(ServeConfig, file_values.get("serve", {}), args)
            from openclaw_rl.loop import serve

            serve(config, judge_config, method)
        elif args.command == "judge":
            from openclaw_rl.loop import judge_process

            judged = judge_process(args.data_dir, args.model, judge_config, method, once=args.once)
            print(f"judged {judged} turns")
    except ConfigError as error:
        print(f"openclaw-rl: configuration error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
