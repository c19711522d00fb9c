"""`openclaw-rl`: parse arguments, set up logging, call one function."""

from __future__ import annotations

import argparse
import logging
import sys

from openclaw_rl import __version__
from openclaw_rl.config import ConfigError, ServeConfig, add_flags, build, load_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-rl", description="Train any agent simply by using it.")
    parser.add_argument("--version", action="version", version=f"openclaw-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the policy behind an OpenAI-compatible API",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    serve.add_argument("--config", help="a TOML or YAML file of settings (flags override it)")
    serve.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_flags(serve, ServeConfig)
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
        if args.command == "serve":
            config = build(ServeConfig, file_values.get("serve", file_values), args)
            from openclaw_rl.loop import serve

            serve(config)
    except ConfigError as error:
        print(f"openclaw-rl: configuration error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
