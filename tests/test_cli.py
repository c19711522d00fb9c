"""The CLI against the README: every command and flag the README shows exists, every
command exists in the README, and settings declared once reach the flags and --help."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from openclaw_rl.cli import _parser
from openclaw_rl.config import (AgentConfig, JudgeProcessConfig, PoolConfig, ServeConfig, SimulateConfig, TrainConfig,
                                TrainProcessConfig)

README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_cli_commands() -> dict[str, set[str]]:
    """{"serve": {"--model", ...}, "envs serve": {...}} from the README's CLI block."""
    section = README.read_text().split("## CLI", 1)[1]
    block = section.split("```", 2)[1]
    commands: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        words = line.split()
        if words[:1] == ["openclaw-rl"]:
            current = " ".join(words[1:3]) if words[1:2] in (["envs"], ["users"]) else words[1]
            commands.setdefault(current, set())
        if current is not None:
            code = line.split("#", 1)[0]  # a trailing comment is prose
            commands[current].update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", code))
    return commands


def _subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_subparsers(sub, f"{prefix}{name} "))
    return found


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_command_and_flag_in_the_readme_exists():
    parsers = _subparsers(_parser())
    documented = _readme_cli_commands()
    assert documented, "the README has no CLI block"
    for command, flags in documented.items():
        assert command in parsers, f"the README shows `openclaw-rl {command}`, which the CLI does not have"
        unknown = flags - _flags(parsers[command])
        assert not unknown, f"the README shows {sorted(unknown)} for `openclaw-rl {command}`, which it does not take"


def test_every_command_is_in_the_readme():
    documented = _readme_cli_commands()
    leaves = {name for name, sub in _subparsers(_parser()).items()
              if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)}
    assert leaves - documented.keys() == set(), "commands missing from the README's CLI block"


@pytest.mark.parametrize("command, config", [
    ("serve", ServeConfig), ("serve", TrainConfig), ("agent", AgentConfig), ("envs serve", PoolConfig),
    ("simulate", SimulateConfig), ("demo", SimulateConfig), ("judge", JudgeProcessConfig),
    ("train", TrainProcessConfig), ("train", TrainConfig),
])
def test_a_setting_declared_once_is_a_flag_with_its_help_in_a_group(command, config):
    parser = _subparsers(_parser())[command]
    titles = [group.title for group in parser._action_groups]
    assert config.__doc__.strip().splitlines()[0].rstrip(".") in titles
    help_text = parser.format_help()
    for name in config.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in help_text, f"{config.__name__}.{name} has no flag"
