"""The local engine: a transformers model driven by our own continuous-batching loop.

Why our own loop and not `model.generate`: fp32 decode of a small model on CPU is
memory-bound, so the only big win is to share each pass over the weights between many
requests. One worker thread owns the model and runs, forever:

    admit waiting requests -> prefill them into free rows -> one decode step for every row
    -> sample each row's next token (and its log-prob) -> drop finished rows

New requests join the running batch at the next step (continuous batching). The forward
passes and the KV cache belong to a decoder (decoder.py): a hand-written one over a
per-row cache for the Llama family, transformers' own forward for other models.

The same thread runs scoring jobs and weight updates between steps, so only one torch
computation touches the model at a time (two pools on two cores slow each other 5-10x).
A weight update waits for the rows in flight to finish, admits nothing meanwhile, then
swaps: every response comes from exactly one policy version and no request is refused.
A finished row's cache is kept for the request's user (`SamplingParams.cache_scope`) until
the next swap, up to `prefix_cache_mb` (engine/prefixes.py).

Personal adapters (`load_adapter`, docs/personal-adapters.md) need no pause at all: a
request of a user with an adapter is admitted under that user's current adapter version
and keeps it to its last token, in the same batch as everyone else (engine/adapters.py);
a new version is one dict assignment between steps, seen by the next admitted request.

(Over 400 lines: decoding, scoring and weight swaps run on one thread over one batch's
state, so they are one class.)
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.adapters import PersonalAdapter, model_shapes, prepare
from openclaw_rl.engine.base import (
    ContextLengthError, EngineError, Finished, LoraAdapter, Started, StoredWeights, StreamEvent, TokenIdError, Weights,
)
from openclaw_rl.engine.decoder import FusedDecoder, make_decoder
from openclaw_rl.engine.grammar import Grammars, model_eos_ids
from openclaw_rl.engine.precision import resolve_dtype
from openclaw_rl.engine.sampling import sample_tokens, sampling_logprobs, top_alternatives
from openclaw_rl.types import Constraint, SamplingParams, Score, TokenStep

log = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.5
PREFIX_CACHE_MB = 256  # finished rows' caches kept for a conversation's next turn (engine/prefixes.py); 0: none


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    emit: Callable[[StreamEvent | BaseException], None]
    cancelled: bool = False
    generator: torch.Generator | None = None  # set at admission
    grammar: Any = None  # the constraint's matcher (engine/grammar.py), set at admission; None: unconstrained


@dataclass(eq=False)
class _Row:
    request: _Request
    position: int  # rotary position of the next token fed
    generator: torch.Generator | None
    pending_token: int = -1  # sampled, not yet fed to the model
    generated: int = 0
    done: bool = False
    fed: list[int] = field(default_factory=list)  # the tokens whose keys the cache holds: what a parked row covers
    adapter: PersonalAdapter | None = None  # the user's adapter version at admission, kept to the last token


@dataclass(eq=False)
class _Job:
    """Work other than decoding that must run on the model's thread."""

    run: Callable[[], Any]
    done: Callable[[Any, BaseException | None], None]
    needs_idle: bool = False  # weight updates wait for the batch to drain


class LocalEngine:
    loads_lora_adapters = False  # full weights only: merging an adapter would need a second copy of the base

    def __init__(
        self,
        model_dir: str | Path,
        *,
        threads: int | None = None,
        max_batch_size: int = 16,
        max_context: int | None = None,
        policy_version: int = 0,
        device: str | None = None,
        dtype: str = "auto",
        decoder: str = "auto",
        prefix_cache_mb: int = PREFIX_CACHE_MB,
    ):
        self.threads = threads or min(2, os.cpu_count() or 1)
        # torch threads for the next step, asked before each one (None: `threads` throughout);
        # beside an in-process trainer, compose gives serving the trainer's core between its steps
        self.threads_now: Callable[[], int] | None = None
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = resolve_dtype(dtype, self.device)  # the weights and the compute; log-softmax stays float32
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=self.dtype).to(self.device)
        self.model.eval().requires_grad_(False)
        self.model_name = self.model_dir.name
        config = self.model.config
        self.max_context = max_context or int(getattr(config, "max_position_embeddings", 2048))
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)  # ids the engine admits: 0..vocab_size-1
        self.eos_token_ids = frozenset(model_eos_ids(self.model.generation_config, self.tokenizer))
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self.max_batch_size = max_batch_size
        self.policy_version = policy_version
        self._decoder = make_decoder(self.model, self.pad_token_id, decoder,  # auto | fused | hf
                                     prefix_cache_bytes=prefix_cache_mb << 20)
        self.decoder = type(self._decoder).__name__
        self._grammars = Grammars(self.tokenizer, int(config.vocab_size), sorted(self.eos_token_ids))

        self._lock = threading.Condition()
        self._waiting: collections.deque[_Request] = collections.deque()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._rows: list[_Row] = []
        self._adapters: dict[str, PersonalAdapter] = {}  # user -> adapter; changed on the model thread only
        self._stopping = False
        self._last_work = time.monotonic()
        self._counters = {"tokens_generated": 0, "decode_steps": 0, "prefills": 0, "max_batch_seen": 0,
                          "prompt_tokens": 0, "scored_tokens": 0}  # prefilled and scored positions, kept ones too
        self._thread = threading.Thread(target=self._run, name="openclaw-engine", daemon=True)
        self._thread.start()

    # -- the async face ---------------------------------------------------------------

    async def stream(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[StreamEvent]:
        if not prompt_ids:
            raise EngineError("empty prompt")
        self._check_ids(prompt_ids, "prompt")
        if len(prompt_ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(prompt_ids)} tokens but the model's context is {self.max_context}"
            )
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()

        def emit(event: StreamEvent | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the event loop is gone; nobody is listening
                request.cancelled = True

        request = _Request(list(prompt_ids), params, emit)
        with self._lock:
            if self._stopping:
                raise EngineError("the engine is shut down")
            self._waiting.append(request)
            self._lock.notify()
        try:
            while True:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise event
                yield event
                if isinstance(event, Finished):
                    return
        finally:
            request.cancelled = True

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        adapter: str | None = None,
        constraint: Constraint | None = None,
    ) -> Score:
        """`adapter`: score under this user's current personal adapter (None, or none loaded: the shared model).
        `constraint`: the grammar the response was sampled under; its mask is replayed (engine/grammar.py)."""
        if not prompt_ids or not response_ids:
            raise EngineError("score needs a non-empty prompt and response")
        self._check_ids(prompt_ids, "prompt")
        self._check_ids(response_ids, "response")
        return await self._call(lambda: self._score(prompt_ids, response_ids, temperature, top_p, top_k,
                                                    self._adapters.get(adapter) if adapter else None, constraint))

    def _check_ids(self, ids: list[int], what: str) -> None:
        """Refuse ids outside the embedding before any tensor sees them: on CUDA an
        out-of-range lookup is a device-side assert that poisons every later CUDA call in
        the process, not an exception one request can absorb (issue 42)."""
        vocab = self.vocab_size
        bad = next((i for i in ids if not 0 <= i < vocab), None)
        if bad is not None:
            raise TokenIdError(f"{what}: token id {bad} is outside the model's vocabulary (0..{vocab - 1}); "
                               f"encode with this model's tokenizer ({self.model_name})")

    async def load_weights(self, weights: Weights | StoredWeights, policy_version: int) -> None:
        """Swap in new weights once the rows in flight finish; admit nothing meanwhile."""
        if isinstance(weights, StoredWeights):
            weights = await asyncio.to_thread(weight_files.read, weights)
        if isinstance(weights, LoraAdapter):
            raise EngineError("the local engine takes full weights, not a LoRA adapter (loads_lora_adapters is "
                              "False): publish the trainer's merged policy_state_dict()")
        state_dict = weights
        await self._call(lambda: self._load(state_dict, policy_version), needs_idle=True)

    async def load_adapter(self, user: str, adapter: LoraAdapter | StoredWeights, version: int) -> None:
        """Serve `user`'s requests admitted from now on under `adapter` (peft's format) as its
        `version`; requests in flight, theirs and everyone else's, go on unpaused."""
        if not isinstance(self._decoder, FusedDecoder):
            raise EngineError(f"personal adapters need the fused decoder; this engine runs {self.decoder} "
                              "(a model outside the Llama family, or decoder = hf)")
        if isinstance(adapter, StoredWeights):
            adapter = await asyncio.to_thread(weight_files.read, adapter)
        if not isinstance(adapter, LoraAdapter):
            raise EngineError(f"load_adapter takes a LoRA adapter, not {type(adapter).__name__} (full weights go "
                              "to load_weights)")
        try:
            ready = await asyncio.to_thread(prepare, adapter, user, version, model_shapes(self.model),
                                            dtype=self.dtype, device=self.device)
        except ValueError as error:
            raise EngineError(str(error)) from error
        await self._call(lambda: self._adapters.__setitem__(user, ready))

    async def drop_adapter(self, user: str) -> None:
        """Serve `user` the shared model from the next admitted request on (an admin's off or
        reset, a deleted user); their requests in flight finish under the adapter they started with."""
        await self._call(lambda: self._adapters.pop(user, None))

    def adapter_versions(self) -> dict[str, int]:
        """The adapter version each user with one is served now."""
        return {user: adapter.version for user, adapter in dict(self._adapters).items()}

    @property
    def idle_s(self) -> float:
        """Seconds since the engine last had work (a request decoding or waiting, a job such
        as a weight swap or a teacher pass); 0 while it has some."""
        with self._lock:
            if self._rows or self._waiting or self._jobs:
                return 0.0
            return time.monotonic() - self._last_work

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "policy_version": self.policy_version,
                "active_rows": len(self._rows),
                "waiting_requests": len(self._waiting),
                "jobs_waiting": len(self._jobs),  # scoring passes, weight and adapter loads not yet run
                **self._counters,
                "prefix_tokens_reused": self._decoder.reused_tokens,
                "personal_adapters": len(self._adapters),
                "personal_adapter_bytes": sum(a.nbytes for a in self._adapters.values()),
            }

    async def aclose(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        await asyncio.to_thread(self._thread.join, 30)

    async def _call(self, fn: Callable[[], Any], *, needs_idle: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(result: Any, error: BaseException | None) -> None:
            def settle() -> None:
                if future.done():
                    return
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(result)

            loop.call_soon_threadsafe(settle)

        with self._lock:
            if self._stopping:
                raise EngineError("the engine is shut down")
            self._jobs.append(_Job(fn, done, needs_idle))
            self._lock.notify()
        return await future

    # -- the model thread -------------------------------------------------------------

    def _run(self) -> None:
        # Set on the model's own thread: each engine (serving, a frozen judge) keeps its budget.
        torch.set_num_threads(self.threads)
        self._threads_set = self.threads
        with torch.inference_mode():
            while True:
                try:
                    if not self._tick():
                        break
                except Exception as error:  # a failed step fails its rows, never the engine
                    log.exception("decode step failed; failing %d rows", len(self._rows))
                    for row in self._rows:
                        row.request.emit(EngineError(f"generation failed: {error}"))
                    self._reset_batch()
        for row in self._rows:
            row.request.emit(EngineError("the engine shut down"))
        for request in self._waiting:
            request.emit(EngineError("the engine shut down"))
        for job in self._jobs:
            job.done(None, EngineError("the engine shut down"))

    def _tick(self) -> bool:
        with self._lock:
            if not self._rows and not self._waiting and not self._jobs and not self._stopping:
                self._lock.wait(_IDLE_WAIT_S)
            if self._stopping:
                return False
            jobs = [j for j in self._jobs if not j.needs_idle or not self._rows]
            for job in jobs:
                self._jobs.remove(job)
            idle_job_waiting = any(j.needs_idle for j in self._jobs)
            admit: list[_Request] = []
            if not idle_job_waiting and (self._decoder.can_join or not self._rows):
                while self._waiting and len(self._rows) + len(admit) < self.max_batch_size:
                    request = self._waiting.popleft()
                    if not request.cancelled:
                        admit.append(request)
        self._budget_threads()
        for job in jobs:
            try:
                job.done(job.run(), None)
            except Exception as error:
                job.done(None, error)
        if admit:
            self._admit_isolated(admit)
        if self._rows:
            self._decode_step()
        if jobs or admit or self._rows:
            self._last_work = time.monotonic()  # one float store: read under the lock by idle_s
        return True

    def _budget_threads(self) -> None:
        """Before the next step: the threads `threads_now` says, set only when they change."""
        if self.threads_now is not None and (threads := self.threads_now()) != self._threads_set:
            torch.set_num_threads(threads)
            self._threads_set = threads

    def _admit_isolated(self, requests: list[_Request]) -> None:
        """Admit requests so that one bad request fails alone: each gets its generator
        first, and a prefill that fails for a group is retried one request at a time."""
        ready = []
        for request in requests:
            try:
                request.generator = self._generator(request.params)
                constraint = request.params.constraint
                request.grammar = self._grammars.matcher(constraint) if constraint else None
                ready.append(request)
            except Exception as error:
                request.emit(EngineError(f"the request's sampling parameters are invalid: {error}"))
        groups = [ready] if ready else []
        while groups:
            group = groups.pop()
            try:
                self._admit(group)
            except Exception as error:
                if len(group) > 1:
                    groups.extend([request] for request in group)
                    continue
                log.exception("prefill failed")
                group[0].emit(EngineError(f"prefill failed: {error}"))

    def _generator(self, params: SamplingParams) -> torch.Generator | None:
        if params.greedy:
            return None
        generator = torch.Generator()  # on the host: sampling draws one number per row from it (sampling.py)
        generator.manual_seed(params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        return generator

    def _admit(self, requests: list[_Request]) -> None:
        adapters = [self._adapters.get(request.params.adapter) if request.params.adapter else None
                    for request in requests]
        logits = self._decoder.prefill([request.prompt_ids for request in requests],
                                       [request.params.cache_scope for request in requests], adapters)
        self._counters["prefills"] += 1
        self._counters["prompt_tokens"] += sum(len(request.prompt_ids) for request in requests)
        rows = []
        for request, adapter in zip(requests, adapters):
            rows.append(_Row(request, position=len(request.prompt_ids), generator=request.generator,
                             fed=list(request.prompt_ids), adapter=adapter))
            request.emit(Started(self.policy_version, len(request.prompt_ids),
                                 None if adapter is None else adapter.version))
        self._rows.extend(rows)
        self._sample(rows, logits)
        self._counters["max_batch_seen"] = max(self._counters["max_batch_seen"], len(self._rows))
        self._prune()

    def _decode_step(self) -> None:
        logits = self._decoder.step([row.pending_token for row in self._rows], [row.position for row in self._rows],
                                    [row.adapter for row in self._rows])
        for row in self._rows:
            row.position += 1
            row.fed.append(row.pending_token)
        self._counters["decode_steps"] += 1
        self._sample(self._rows, logits)
        self._prune()

    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> None:
        """Sample every row's next token. The parameters stay on the host (so the top-p
        decision reads no device value) and the step's results come back in one transfer:
        on an accelerator that is the step's only wait for the device."""
        params = [row.request.params for row in rows]
        temperature = torch.tensor([p.temperature for p in params])
        top_p = torch.tensor([p.top_p for p in params])
        grammars = [row.request.grammar for row in rows]
        logits = self._grammars.mask_logits(logits, grammars)  # a constrained row samples from its grammar's tokens
        logprobs = sampling_logprobs(logits, temperature, top_p)  # (B, V)
        tokens = sample_tokens(logprobs, [row.generator for row in rows])
        chosen = logprobs.gather(-1, tokens[:, None])[:, 0]
        n_top = max(p.top_logprobs for p in params)
        top_ids = top_lps = None
        results = [tokens.double(), chosen.double()]  # ids are exact in float64 (< 2**53)
        if n_top:
            top_ids, top_lps = top_alternatives(logprobs, n_top)
            results += [top_ids.double().T, top_lps.double().T]
        host = torch.cat([r.reshape(-1, len(rows)) for r in results]).cpu()
        token_ids, chosen_lps = host[0].long().tolist(), host[1].tolist()
        if n_top:
            top_ids, top_lps = host[2 : 2 + n_top].long().T.tolist(), host[2 + n_top :].T.tolist()
        self._grammars.advance(grammars, token_ids)
        for i, (row, token, logprob) in enumerate(zip(rows, token_ids, chosen_lps)):
            want = row.request.params.top_logprobs
            top = tuple(zip(top_ids[i][:want], top_lps[i][:want])) if want else ()
            row.pending_token = token
            row.generated += 1
            row.request.emit(TokenStep(token, logprob, top))
            if token in self.eos_token_ids:
                row.done = True
                row.request.emit(Finished("stop"))
            elif row.generated >= row.request.params.max_new_tokens or row.position + 1 >= self.max_context:
                row.done = True
                row.request.emit(Finished("length"))
        self._counters["tokens_generated"] += len(rows)

    def _prune(self) -> None:
        keep = [i for i, row in enumerate(self._rows) if not row.done and not row.request.cancelled]
        if len(keep) == len(self._rows):
            return
        for i, row in enumerate(self._rows):  # a finished row's cache, for the conversation's next turn
            if row.done or row.request.cancelled:
                self._decoder.park(i, row.fed, row.request.params.cache_scope, row.adapter)
        if not keep:
            self._reset_batch()
            return
        self._rows = [self._rows[i] for i in keep]
        self._decoder.keep(keep)

    def _reset_batch(self) -> None:
        self._rows = []
        self._decoder.reset()

    def _score(self, prompt_ids, response_ids, temperature, top_p, top_k, adapter=None, constraint=None) -> Score:
        ids = list(prompt_ids) + list(response_ids)
        t = len(response_ids)
        self._counters["scored_tokens"] += len(ids)
        # the head only where it predicts a response token: a teacher pass's prompt (the hinted
        # request) is most of its positions, and the head is a fifth of a small model's work; the
        # fused decoder also copies the prompt's start from the turn's own kept cache
        logits = self._decoder.score_logits(ids, t + 1, adapter)[:-1]  # (T, V)
        if constraint is not None:
            allowed = self._grammars.replay_masks(constraint, list(response_ids)).to(logits.device)  # built on the host
            logits = logits.masked_fill(~allowed, float("-inf"))
        # the parameters stay on the host: sampling_logprobs moves what it computes with to the logits' device
        logprobs = sampling_logprobs(logits, torch.full((t,), float(temperature)), torch.full((t,), float(top_p)))
        chosen = logprobs.gather(-1, torch.tensor(response_ids, device=logits.device)[:, None])[:, 0]
        if not top_k:
            return Score(chosen.tolist(), [[] for _ in range(t)], [[] for _ in range(t)])
        ids_k, lps_k = top_alternatives(logprobs, top_k)
        host = torch.cat([chosen.double()[:, None], ids_k.double(), lps_k.double()], dim=1).cpu()  # one transfer
        return Score(host[:, 0].tolist(), host[:, 1 : 1 + top_k].long().tolist(), host[:, 1 + top_k :].tolist())

    def _load(self, state_dict: dict[str, torch.Tensor], policy_version: int) -> None:
        params = dict(self.model.named_parameters())
        unknown = sorted(set(state_dict) - set(params))
        if unknown:
            raise EngineError(f"weights for unknown parameters: {unknown[:5]}")
        for name, tensor in state_dict.items():
            params[name].copy_(tensor.to(params[name].dtype))
        self._decoder.forget()  # kept prefixes are of the old weights
        self.policy_version = policy_version
        log.info("serving policy version %d", policy_version)
