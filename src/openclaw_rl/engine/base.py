"""The engine contract (see the package docstring).

`Engine` declares everything a caller may use, so no caller probes an engine with
`getattr`: what it serves (`model_name`, `model_dir`, `tokenizer`, `max_context`,
`eos_token_ids`), the version it serves (`policy_version`, which only `load_weights`
changes), and what weights it takes (`loads_lora_adapters`). An engine that says
False there takes full weights only; the publisher (train/weights.py) reads it once
to choose what the trainer exports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Protocol, runtime_checkable

from openclaw_rl.types import Constraint, SamplingParams, Score, TokenStep


def scoring_adapter(engine, owner: str | None) -> dict[str, str]:
    """`adapter=` for `engine.score` when the engine serves `owner` a personal adapter now;
    nothing otherwise (the shared model, and engines without personal adapters)."""
    served = getattr(engine, "adapter_versions", None)
    return {"adapter": owner} if served is not None and owner and owner in served() else {}


def weights_in_use(engine, owner: str | None) -> tuple[int, int | None]:
    """The weights a request of `owner` runs on now: the engine's version, and `owner`'s adapter
    version (None: none)."""
    served = getattr(engine, "adapter_versions", None)
    return engine.policy_version, (served().get(owner) if served is not None and owner else None)


class EngineError(RuntimeError):
    """The engine could not serve a request (it was stopped, or the request was invalid)."""


class ContextLengthError(EngineError):
    """The prompt does not fit in the model's context window."""


class TokenIdError(EngineError, ValueError):
    """A prompt or response holds a token id outside the model's vocabulary (refused before any tensor op)."""


@dataclass(frozen=True)
class Started:
    """First event of a stream: the request is admitted and its policy version fixed."""

    policy_version: int
    prompt_token_count: int
    adapter_version: int | None = None  # the request's personal adapter version; None: the shared model


@dataclass(frozen=True)
class Finished:
    """Last event of a stream."""

    reason: str  # "stop" (end-of-sequence token) | "length"


StreamEvent = Started | TokenStep | Finished


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter as peft saves it: what a remote engine hot-loads instead of full weights.

    `state_dict` is keyed as in peft's `adapter_model.safetensors` (no adapter name);
    `config` is its `adapter_config.json`.
    """

    state_dict: dict[str, Any]
    config: dict[str, Any]


@dataclass(frozen=True)
class StoredWeights:
    """A policy version as the one writer left it on disk (engine/weight_files.py): a directory
    holding full weights (`model.safetensors`) or a LoRA adapter (peft's files).

    What a follower of the files channel hands an engine: a remote engine points its
    server at `path` as it is (no copy through memory and back to disk); the local engine
    reads the tensors."""

    path: Path
    policy_version: int
    is_adapter: bool


Weights = dict[str, Any] | LoraAdapter  # what a trainer publishes: full weights (by parameter name) or an adapter


@runtime_checkable
class Engine(Protocol):
    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (chat rendering and detokenisation happen outside)."""
        ...

    @property
    def model_name(self) -> str:
        """The name clients call the model by."""
        ...

    @property
    def model_dir(self) -> Path:
        """The base model's directory (config, tokenizer, initial weights)."""
        ...

    @property
    def max_context(self) -> int: ...

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def policy_version(self) -> int:
        """The version this engine serves now: the version of every request it admits next.
        Set by `load_weights` alone (see docs/architecture.md, "Publishing weights")."""
        ...

    @property
    def loads_lora_adapters(self) -> bool:
        """Whether `load_weights` takes a `LoraAdapter` (hot-loaded on top of the base model)."""
        ...

    def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        """Started, then one TokenStep per sampled token, then Finished.

        Closing the iterator early (stop string found, client gone) cancels the request.
        """
        ...

    async def score(
        self, prompt_ids: list[int], response_ids: list[int], *, temperature: float = 1.0, top_p: float = 1.0,
        top_k: int = 0, constraint: Constraint | None = None,
    ) -> Score:
        """Log-probs of `response_ids` after `prompt_ids`, and the top-k at each position, under
        the distribution `stream` samples from with these parameters: the grammar's mask when
        the response was sampled under a `constraint` (engine/grammar.py), logits / T, then
        top-p truncation and renormalisation (a token top-p cuts gets -inf). temperature <= 0
        is the plain model (T = 1, no top-p), as greedy turns record it. An engine that cannot
        mask its scoring raises EngineError for a constraint."""
        ...

    async def load_weights(self, weights: Weights | StoredWeights, policy_version: int) -> None:
        """Serve `policy_version` from the next admitted request on; requests in flight finish
        on the weights they started with. A `LoraAdapter` (in memory or stored) only where
        `loads_lora_adapters` is true."""
        ...

    def stats(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
