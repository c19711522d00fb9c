"""The CLI against its documentation: every command and flag the README's brief CLI block and
docs/cli.md's full reference show exists, every command is in both, and settings declared
once reach the flags and --help."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest

from openclaw_rl import config as config_module
from openclaw_rl.cli import _parser, main
from openclaw_rl.config import (PRESETS, AgentConfig, ConfigError, JudgeConfig, JudgeProcessConfig, PoolConfig,
                                PromoteConfig, ServeConfig, SimulateConfig, TrainConfig, TrainProcessConfig, build,
                                driver_values, flag_of, load_preset, sections_of, set_by_driver, settings_of)

ROOT = Path(__file__).resolve().parent.parent
CLI_BLOCKS = {"README.md": "## CLI", "docs/cli.md": "## Commands"}  # page: the heading over its CLI block


def _documented_commands(page: str) -> dict[str, set[str]]:
    """{"serve": {"--model", ...}, "envs serve": {...}} from the first code block under `page`'s CLI heading."""
    section = (ROOT / page).read_text().split(CLI_BLOCKS[page], 1)[1]
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


@pytest.mark.parametrize("page", CLI_BLOCKS)
def test_every_command_and_flag_documented_exists(page):
    parsers = _subparsers(_parser())
    documented = _documented_commands(page)
    assert documented, f"{page} has no CLI block under {CLI_BLOCKS[page]!r}"
    for command, flags in documented.items():
        assert command in parsers, f"{page} shows `openclaw-rl {command}`, which the CLI does not have"
        unknown = flags - _flags(parsers[command])
        assert not unknown, f"{page} shows {sorted(unknown)} for `openclaw-rl {command}`, which it does not take"


@pytest.mark.parametrize("page", CLI_BLOCKS)
def test_every_command_is_documented(page):
    documented = _documented_commands(page)
    leaves = {name for name, sub in _subparsers(_parser()).items()
              if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)}
    assert leaves - documented.keys() == set(), f"commands missing from {page}'s CLI block"


@pytest.mark.parametrize("command, config", [
    ("serve", ServeConfig), ("serve", TrainConfig), ("agent", AgentConfig), ("envs serve", PoolConfig),
    ("simulate", SimulateConfig), ("demo", SimulateConfig), ("judge", JudgeProcessConfig),
    ("train", TrainProcessConfig), ("train", TrainConfig), ("promote", PromoteConfig), ("promote", TrainConfig),
])
def test_a_setting_declared_once_is_a_flag_with_its_help_in_a_group(command, config):
    parser = _subparsers(_parser())[command]
    titles = [group.title for group in parser._action_groups]
    assert config.__doc__.strip().splitlines()[0].rstrip(".") in titles
    flags = {action.dest: action for action in parser._actions}
    for f in settings_of(config):
        assert flag_of(f) in flags[f.name].option_strings, f"{config.__name__}.{f.name} has no flag"
    for name, section in sections_of(config).items():  # a driver's sections: a group each, every setting a flag
        assert any(title.endswith(f"([{name}])") for title in titles)
        for f in settings_of(section):
            if f.name in set_by_driver(config, name):
                assert f"{name}.{f.name}" not in flags, f"[{name}] {f.name} is set by {config.__name__}, not a flag"
            else:
                assert flag_of(f) in flags[f"{name}.{f.name}"].option_strings, f"[{name}] {f.name} has no flag"


@pytest.mark.parametrize("config", [SimulateConfig, AgentConfig])
def test_a_driver_declares_no_setting_of_its_sections_again(config):
    """Only a setting the driver sets itself from one of its own may share a name with it
    (simulate's --hint-check rubric sets the judge's hint_check on); no copies."""
    own = {f.name for f in settings_of(config)}
    for name, section in sections_of(config).items():
        shared = own & {f.name for f in settings_of(section)}
        assert shared <= set(set_by_driver(config, name)), f"{config.__name__} copies {sorted(shared)} of [{name}]"


PRESET_DRIVERS = {"simulate": (SimulateConfig, "simulate"), "demo": (SimulateConfig, "simulate"),
                  "agent": (AgentConfig, "agent")}


def test_every_preset_key_names_a_setting_of_its_section():
    files = {path.stem for path in (Path(config_module.__file__).parent / "presets").glob("*.toml")}
    assert files == {name for names in PRESETS.values() for name in names} == PRESET_DRIVERS.keys()
    for name, (config, table) in PRESET_DRIVERS.items():
        preset = load_preset(name)
        assert preset, f"presets/{name}.toml is empty"
        sections = sections_of(config)
        for key, entries in preset.items():
            cls = config if key == table else sections.get(key)
            assert cls is not None, f"presets/{name}.toml: [{key}] is not a table of {config.__name__}"
            known = {f.name for f in settings_of(cls)} - set(set_by_driver(config, key))
            assert set(entries) <= known, f"presets/{name}.toml [{key}]: {sorted(set(entries) - known)} not settings"
        required = {"env": "toolcall"} if config is AgentConfig else {}  # a setting no preset can hold
        build(config, {**driver_values(config, table, name), **required})  # and their values are valid


def test_the_demo_preset_holds_the_demo_settings():
    demo = build(SimulateConfig, driver_values(SimulateConfig, "simulate", "demo"))
    assert (demo.sessions, demo.heldout, demo.eval_every, demo.approve_threshold, demo.out) == (
        24, 8, 2, 0.7, "./openclaw-demo")
    assert (demo.train.batch_size, demo.train.lr, demo.train.gate, demo.judge.max_hints) == (2, 5e-5, "on", 1)


def test_presets_apply_to_a_driver_config_built_in_code_as_on_the_command_line():
    assert SimulateConfig().train == build(SimulateConfig, driver_values(SimulateConfig, "simulate", "simulate")).train
    agent = AgentConfig(env="toolcall")
    assert (agent.train.gate, agent.train.max_staleness, agent.train.train_threads) == ("off", 4, 1)
    assert TrainConfig().gate == "auto" and TrainConfig().lr is None  # the one default of each


def test_a_driver_config_file_fills_its_nested_sections_below_the_flags(tmp_path):
    path = tmp_path / "sim.toml"
    path.write_text('[simulate]\nsessions = 5\njudge_spec = "http://127.0.0.1:9/v1"\n'
                    '[train]\nlr = 0.001\nbatch_size = 8\n[judge]\nvotes = 5\n')
    args = _parser().parse_args(["demo", "--config", str(path), "--batch-size", "3", "--judge-model", "m"])
    config = build(SimulateConfig, driver_values(SimulateConfig, "simulate", "demo", str(path)), args)
    assert (config.sessions, config.train.lr, config.train.batch_size, config.judge.votes) == (5, 0.001, 3, 5)
    assert config.heldout == 8 and config.judge.max_hints == 1  # the demo preset, where neither file nor flag says
    assert (config.judge.judge, config.judge.openai_base_url, config.judge.openai_model) == (
        "openai", "http://127.0.0.1:9/v1", "m")
    for text, error in (('[judge]\njudge = "local"\n', "sets it from judge_spec"),
                        ('[simulate]\njudge = "oracle"\n', "the setting of --judge is judge_spec"),
                        ('[serve]\nport = 1\n', r"unknown section \[serve\]"),
                        ('[train]\nlearning_rate = 1.0\n', "unknown setting 'learning_rate' for TrainConfig")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=error):
            build(SimulateConfig, driver_values(SimulateConfig, "simulate", "simulate", str(path)))


def test_one_function_turns_a_judge_spec_into_a_judge_config():
    url = JudgeConfig.from_spec("https://judge.example/v1", "big", JudgeConfig(votes=5))
    assert (url.judge, url.openai_base_url, url.openai_model, url.votes) == ("openai", "https://judge.example/v1",
                                                                              "big", 5)
    assert JudgeConfig.from_spec("local", "ignored") == JudgeConfig(judge="local")
    with pytest.raises(ConfigError, match="judge = 'oracle' is invalid"):
        JudgeConfig.from_spec("oracle")  # the simulator's own: it replaces the judge
    oracle = SimulateConfig(judge_spec="oracle", hint_check="rubric")
    assert (oracle.judge.judge, oracle.judge.hint_check) == ("off", "on")
    assert AgentConfig(env="toolcall", judge_spec="http://h/v1").judge.openai_base_url == "http://h/v1"


def _printed_toml(out: str) -> dict:
    """The --print-config text at the start of a command's output."""
    lines = []
    for line in out.splitlines():
        if not re.fullmatch(r"\[[a-z_]+\]|#.*|[a-z0-9_]+ = .*|", line):
            break
        lines.append(line)
    return tomllib.loads("\n".join(lines))


def test_print_config_prints_the_resolved_sections_then_the_command_runs(tmp_path, monkeypatch, capsys):
    ran = {}
    from openclaw_rl import processes  # the real module (cli imports it per command), its serve replaced
    monkeypatch.setattr(processes, "serve", lambda serve, judge, train: ran.update(serve=serve, judge=judge, train=train))
    path = tmp_path / "serve.toml"
    path.write_text("[train]\nlr = 0.001\n[judge]\nvotes = 5\n")
    assert main(["serve", "--config", str(path), "--batch-size", "3", "--print-config"]) == 0
    printed = _printed_toml(capsys.readouterr().out)
    assert set(printed) == {"serve", "judge", "train", "ray"}
    assert (printed["train"]["lr"], printed["train"]["batch_size"], printed["judge"]["votes"]) == (0.001, 3, 5)
    assert ran["train"].batch_size == 3 and ran["judge"].votes == 5  # and then it served, with those

    summary = {"score_before": 0.1, "score_after": 0.2}
    monkeypatch.setitem(sys.modules, "openclaw_rl.drivers.simulate", types.SimpleNamespace(
        RunStopped=RuntimeError, simulate=lambda config, progress: ran.update(simulate=config) or summary))
    assert main(["demo", "--print-config", "--lr", "0.0001", "--judge", "oracle", "--out", str(tmp_path)]) == 0
    printed = _printed_toml(capsys.readouterr().out)
    assert set(printed) == {"simulate", "train", "judge"}
    assert (printed["simulate"]["sessions"], printed["simulate"]["judge_spec"]) == (24, "oracle")
    assert (printed["train"]["lr"], printed["train"]["gate"], printed["judge"]["max_hints"]) == (1e-4, "on", 1)
    assert "judge" not in printed["judge"]  # set from judge_spec: shown as a comment, so the text is a config file
    assert build(SimulateConfig, {**printed["simulate"], "train": printed["train"], "judge": printed["judge"]}) \
        == ran["simulate"]


def test_without_print_config_nothing_is_printed_before_the_run(tmp_path, monkeypatch, capsys):
    from openclaw_rl import processes  # the real module (cli imports it per command), its serve replaced
    monkeypatch.setattr(processes, "serve", lambda *parts: None)
    assert main(["serve"]) == 0
    assert "[serve]" not in capsys.readouterr().out
