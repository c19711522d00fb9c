"""The SGLang engine: the `Engine` contract over SGLang's native HTTP API.

UNTESTED HERE: SGLang has no CPU build (its wheels need CUDA), so this module was
written against SGLang's documented endpoints and has never met a server. The vLLM
engine (engine/vllm.py) is the tested remote backend. The mapping:

    stream         POST /generate {input_ids, sampling_params, return_logprob,
                   top_logprobs_num, stream, lora_path}; meta_info.output_token_logprobs
                   holds [logprob, token_id, text] per token, output_top_logprobs the
                   alternatives, finish_reason {"type": "stop" | "length" | "abort"}
    score          POST /generate {input_ids: prompt + response, max_new_tokens 0,
                   return_logprob, logprob_start_len: len(prompt), top_logprobs_num};
                   meta_info.input_token_logprobs / input_top_logprobs
    full weights   POST /pause_generation, /update_weights_from_disk {model_path,
                   weight_version}, /continue_generation
    LoRA adapter   POST /pause_generation, /unload_lora_adapter + /load_lora_adapter
                   {lora_name, lora_path}, /continue_generation; requests then send
                   `lora_path: lora_name`

The update gate (engine/remote.py) holds new requests and drains those in flight before
the pause, exactly as for vLLM. Open points a GPU run must settle: whether SGLang's
output log-probs are taken after temperature and top-p (recent versions scale by
temperature, and return the T = 1 values only with SGLANG_RETURN_ORIGINAL_LOGPROB), and
whether its prompt log-probs honour a temperature; until then `score` serves T = 1 only
and refuses other temperatures rather than return numbers of unknown meaning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from transformers import AutoConfig, AutoTokenizer

from openclaw_rl.engine.base import (
    ContextLengthError, EngineError, Finished, Started, StoredWeights, StreamEvent, Weights,
)
from openclaw_rl.engine.grammar import closed_objects, grammar_text
from openclaw_rl.engine.remote import RemoteWeights, UpdateGate, sse_chunks
from openclaw_rl.engine.vllm import UNMASKED_SCORING
from openclaw_rl.types import Constraint, SamplingParams, Score, TokenStep

log = logging.getLogger(__name__)

ADAPTER_NAME = "openclaw-policy"


class SGLangEngine:
    loads_lora_adapters = True  # peft adapters, hot-loaded with /load_lora_adapter

    def __init__(self, url: str, model_dir: str | Path, *, policy_version: int = 0,
                 weights_dir: str | Path | None = None, request_timeout_s: float = 600.0):
        self.url = url.rstrip("/")
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model_name = self.model_dir.name
        self.policy_version = policy_version
        self.request_timeout_s = request_timeout_s
        self.weights_dir = Path(weights_dir) if weights_dir else Path(tempfile.mkdtemp(prefix="openclaw-sglang-"))
        self._weights = RemoteWeights(self.weights_dir)
        try:
            info = httpx.get(f"{self.url}/get_server_info", timeout=10.0).raise_for_status().json()
        except httpx.HTTPError as error:
            raise EngineError(f"the SGLang server is not reachable at {self.url}/get_server_info ({error!r}); "
                              "start it with `python -m sglang.launch_server --model-path ...` (docs/deployment.md)"
                              ) from error
        config = AutoConfig.from_pretrained(self.model_dir)
        self.max_context = int(info.get("context_length") or getattr(config, "max_position_embeddings", 2048))
        eos = config.eos_token_id if config.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_token_ids = frozenset([eos] if isinstance(eos, int) else eos or [])
        self.adapter: str | None = None
        self._gate = UpdateGate()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None

    async def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        if len(prompt_ids) >= self.max_context:
            raise ContextLengthError(f"the prompt has {len(prompt_ids)} tokens but the context is {self.max_context}")
        client, gate = self._bound()
        async with gate.request():
            version = self.policy_version
            body: dict[str, Any] = {
                "input_ids": list(prompt_ids), "stream": True, "return_logprob": True,
                "top_logprobs_num": params.top_logprobs,
                "sampling_params": {"max_new_tokens": params.max_new_tokens, "temperature": max(params.temperature, 0.0),
                                    "top_p": params.top_p, "top_k": -1, "min_p": 0.0,
                                    "stop_token_ids": sorted(self.eos_token_ids), "skip_special_tokens": False},
            }
            if self.adapter:
                body["lora_path"] = self.adapter
            if params.constraint is not None:
                body["sampling_params"].update(structured_fields(params.constraint))
            try:
                async with client.stream("POST", f"{self.url}/generate", json=body) as response:
                    if response.status_code != 200:
                        raise EngineError(f"SGLang answered {response.status_code}: "
                                          f"{(await response.aread()).decode(errors='replace')[:500]}")
                    yield Started(version, len(prompt_ids))
                    emitted = 0
                    async for chunk in sse_chunks(response):
                        steps, reason = parse_generate_chunk(chunk, emitted, params.top_logprobs)
                        emitted += len(steps)
                        for step in steps:
                            yield step
                        if reason is not None:
                            yield Finished(reason)
                            return
            except httpx.HTTPError as error:
                raise EngineError(f"SGLang at {self.url} failed during generation: {error!r}") from error
            raise EngineError(f"SGLang at {self.url} ended the stream without a finish reason")

    async def score(self, prompt_ids: list[int], response_ids: list[int], *, temperature: float = 1.0,
                    top_p: float = 1.0, top_k: int = 0, constraint: Constraint | None = None) -> Score:
        if constraint is not None:
            raise EngineError(UNMASKED_SCORING.format(engine="SGLang"))
        if temperature > 0 and (temperature != 1.0 or top_p < 1.0):
            raise EngineError(f"the SGLang engine scores at T = 1 only (asked T = {temperature}, top-p {top_p}): "
                              "whether SGLang tempers prompt log-probs is not verified (docs/deployment.md)")
        client, gate = self._bound()
        async with gate.request():
            body: dict[str, Any] = {
                "input_ids": list(prompt_ids) + list(response_ids), "return_logprob": True,
                "logprob_start_len": len(prompt_ids), "top_logprobs_num": top_k,
                "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
            }
            if self.adapter:
                body["lora_path"] = self.adapter
            response = await client.post(f"{self.url}/generate", json=body)
            if response.status_code != 200:
                raise EngineError(f"SGLang answered {response.status_code}: {response.text[:500]}")
            return parse_input_logprobs(response.json()["meta_info"], response_ids, top_k)

    async def load_weights(self, weights: Weights | StoredWeights, policy_version: int) -> None:
        _, gate = self._bound()
        placed = await self._weights.place(weights, policy_version)
        adapter, path = placed.is_adapter, placed.path
        async with gate.exclusive():
            await self._post("/pause_generation", {"mode": "retract"})  # retract: the KV cache may be flushed
            try:
                if adapter:
                    if self.adapter:
                        await self._post("/unload_lora_adapter", {"lora_name": ADAPTER_NAME})
                    await self._post("/load_lora_adapter", {"lora_name": ADAPTER_NAME, "lora_path": str(path)})
                    self.adapter = ADAPTER_NAME
                else:
                    await self._post("/update_weights_from_disk", {"model_path": str(path),
                                                                   "weight_version": str(policy_version)})
                    self.adapter = None
                self.policy_version = policy_version
            finally:
                await self._post("/continue_generation", {})

    def stats(self) -> dict[str, Any]:
        return {"backend": "sglang", "url": self.url, "policy_version": self.policy_version, "adapter": self.adapter,
                "in_flight": self._gate.in_flight, "waiting_requests": self._gate.held}

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _bound(self) -> tuple[httpx.AsyncClient, UpdateGate]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.request_timeout_s, connect=10.0))
            self._gate = UpdateGate()
        assert self._client is not None
        return self._client, self._gate

    async def _post(self, path: str, body: dict) -> None:
        client, _ = self._bound()
        try:
            response = await client.post(f"{self.url}{path}", json=body)
        except httpx.HTTPError as error:
            raise EngineError(f"SGLang at {self.url} did not answer {path}: {error!r}") from error
        if response.status_code != 200:
            raise EngineError(f"SGLang at {self.url} refused {path} ({response.status_code}): {response.text[:500]}")
        data = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if isinstance(data, dict) and data.get("success") is False:
            raise EngineError(f"SGLang at {self.url} failed {path}: {data.get('message')}")


def structured_fields(constraint: Constraint) -> dict[str, Any]:
    """SGLang's own structured-output sampling parameters for `constraint` (engine/grammar.py): a
    bare schema as `json_schema` (objects closed, as the local engine closes them); a forced
    tool call as `ebnf` holding the local engine's Lark grammar, which SGLang's llguidance
    backend reads (`--grammar-backend llguidance`; xgrammar's EBNF cannot embed a schema)."""
    if not constraint.prefix and not constraint.suffix:
        return {"json_schema": json.dumps(closed_objects(constraint.schema))}
    return {"ebnf": grammar_text(constraint)}


def parse_generate_chunk(chunk: dict, emitted: int, top_logprobs: int) -> tuple[list[TokenStep], str | None]:
    """The tokens of one streamed /generate chunk not yet emitted, and its finish reason.

    Whether a server streams output log-probs cumulatively or as deltas, the last
    `completion_tokens - emitted` entries are the new ones.
    """
    meta = chunk.get("meta_info") or {}
    entries = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    new = max(int(meta.get("completion_tokens", emitted + len(entries))) - emitted, 0)
    steps = []
    for i in range(len(entries) - new, len(entries)):
        logprob, token_id = entries[i][0], entries[i][1]
        top: tuple[tuple[int, float], ...] = ()
        if top_logprobs and i < len(tops) and tops[i]:
            top = tuple((int(t[1]), float(t[0])) for t in tops[i][:top_logprobs])
        steps.append(TokenStep(int(token_id), float(logprob), top))
    reason = meta.get("finish_reason")
    if not reason:
        return steps, None
    kind = reason.get("type") if isinstance(reason, dict) else str(reason)
    if kind in ("stop", "length"):
        return steps, kind
    raise EngineError(f"SGLang ended the request: {reason!r}")


def parse_input_logprobs(meta: dict, response_ids: list[int], top_k: int) -> Score:
    """The response's log-probs from meta_info.input_token_logprobs, which start at
    logprob_start_len (entries [logprob, token_id, text]; the first may be None)."""
    entries = meta.get("input_token_logprobs") or []
    tops = meta.get("input_top_logprobs") or []
    entries, tops = entries[-len(response_ids):], (tops[-len(response_ids):] if tops else [])
    if len(entries) != len(response_ids) or any(e is None or e[0] is None for e in entries):
        raise EngineError(f"SGLang returned {len(entries)} usable prompt log-probs for {len(response_ids)} tokens")
    for e, token in zip(entries, response_ids):
        if int(e[1]) != token:
            raise EngineError(f"SGLang scored token {e[1]} where the response has {token}")
    top_ids = [[int(t[1]) for t in (row or [])[:top_k]] for row in tops] if top_k else [[] for _ in response_ids]
    top_lps = [[float(t[0]) for t in (row or [])[:top_k]] for row in tops] if top_k else [[] for _ in response_ids]
    return Score([float(e[0]) for e in entries], top_ids, top_lps)
