"""`openclaw-rl`: parse arguments, set up logging, call one function."""

from __future__ import annotations

import argparse
import logging
import sys

from openclaw_rl import __version__
from openclaw_rl.config import ConfigError, JudgeConfig, ServeConfig, TrainConfig, add_flags, build, load_file

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

    judge = commands.add_parser("judge", help="run the judge worker on its own against a store", formatter_class=_FORMAT)
    _common(judge)
    judge.add_argument("--data-dir", required=True, help="the store to judge (a serve --data-dir)")
    judge.add_argument("--model", default="", help="model directory for teacher scoring (default: the bundled model)")
    judge.add_argument("--once", action="store_true", help="judge what is waiting now, then exit")
    judge.add_argument("--method", default=None, help="objective the samples are built for (default: combined)")
    add_flags(judge, JudgeConfig)

    train = commands.add_parser("train", help="run the trainer on its own against a store", formatter_class=_FORMAT)
    _common(train)
    train.add_argument("--data-dir", required=True, help="the store to train from (a serve --data-dir)")
    train.add_argument("--model", default="", help="base model directory (default: the bundled model)")
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    train.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0 = run until killed)")
    add_flags(train, TrainConfig)

    export = commands.add_parser("export", help="write the trained policy as a Hugging Face model directory",
                                 formatter_class=_FORMAT)
    export.add_argument("--data-dir", required=True, help="the data dir holding checkpoints")
    export.add_argument("--out", required=True, help="an empty or new directory to write")
    export.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="a TOML or YAML file with [serve], [judge] and [train] sections")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


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
    _setup_logging(args.verbose)
    try:
        if args.command == "export":
            from openclaw_rl.train.checkpoint import export

            print(f"wrote {export(args.data_dir, args.out)}")
            return 0
        file_values = load_file(args.config) if args.config else {}
        for section in file_values:
            if section not in ("serve", "judge", "train"):
                raise ConfigError(f"unknown section [{section}] in {args.config}; use [serve], [judge] and [train]")
        from openclaw_rl import loop

        if args.command == "serve":
            loop.serve(build(ServeConfig, file_values.get("serve", {}), args),
                       build(JudgeConfig, file_values.get("judge", {}), args),
                       build(TrainConfig, file_values.get("train", {}), args))
        elif args.command == "judge":
            method = args.method or file_values.get("train", {}).get("method", "combined")
            judged = loop.judge_process(args.data_dir, args.model, build(JudgeConfig, file_values.get("judge", {}), args),
                                        method, once=args.once)
            print(f"judged {judged} turns")
        elif args.command == "train":
            steps = loop.train_process(args.data_dir, args.model, build(TrainConfig, file_values.get("train", {}), args),
                                       args.resume, args.max_steps)
            print(f"trained {steps} steps")
    except (ConfigError, ValueError, FileNotFoundError) as error:
        print(f"openclaw-rl: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
