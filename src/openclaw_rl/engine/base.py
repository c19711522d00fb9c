"""The engine contract (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from openclaw_rl.types import SamplingParams, Score, TokenStep


class EngineError(RuntimeError):
    """The engine could not serve a request (it was stopped, or the request was invalid)."""


class ContextLengthError(EngineError):
    """The prompt does not fit in the model's context window."""


@dataclass(frozen=True)
class Started:
    """First event of a stream: the request is admitted and its policy version fixed."""

    policy_version: int
    prompt_token_count: int


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


class Engine(Protocol):
    policy_version: int
    max_context: int
    eos_token_ids: frozenset[int]

    def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        """Started, then one TokenStep per sampled token, then Finished.

        Closing the iterator early (stop string found, client gone) cancels the request.
        """
        ...

    async def score(
        self, prompt_ids: list[int], response_ids: list[int], *, temperature: float = 1.0, top_p: float = 1.0,
        top_k: int = 0,
    ) -> Score:
        """Log-probs of `response_ids` after `prompt_ids`, and the top-k at each position, under
        the distribution `stream` samples from with these parameters: logits / T, then top-p
        truncation and renormalisation (a token top-p cuts gets -inf). temperature <= 0 is the
        plain model (T = 1, no top-p), as greedy turns record it."""
        ...

    async def load_weights(self, state_dict: dict[str, Any], policy_version: int) -> None:
        """Serve `policy_version` from the next admitted request on. Engines whose
        `loads_lora_adapters` is true also take a `LoraAdapter`."""
        ...

    def stats(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
