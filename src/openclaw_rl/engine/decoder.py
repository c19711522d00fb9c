"""The forward passes behind the local engine's decode loop: one batch of rows and its KV cache.

The engine (local.py) owns scheduling (who joins, sampling, who finishes); a decoder
owns the model's state for the rows in the batch. Both decoders give the same logits:

- `FusedDecoder`, for the Llama family (Llama, Mistral without a sliding window, Qwen2,
  Qwen3): the decoder layers written out over the model's own parameters, with a KV
  cache pre-allocated per row. Why: at batch 1 a 135M model's decode step is ~40 ms of
  weight reads, and transformers' generic forward adds as much again in per-layer
  Python (cache objects, masks, hooks); and with a cache per row, a request joins the
  running batch by writing its prefill into a free row instead of re-padding and copying
  everyone's cache. Rows are compact (row i of the cache is row i of the batch), each
  row's keys sit at its own positions 0..n-1 (no left padding), so a row's attention
  sees exactly its own tokens. The cache grows by doubling, in rows and in positions.
  It reads the parameters in place, so a weight swap (a copy into them) needs nothing but
  forgetting the kept prefixes: a finished row's cache is kept (prefixes.py), so a
  conversation's next turn, or the judge's teacher pass over a turn, copies the keys and
  values of what it shares with an earlier request and runs the model over the rest.
- `HFDecoder`, for everything else: transformers' forward over a left-padded
  DynamicCache, merged when requests join (continuous batching) when the cache is a
  plain key/value list, else dynamic batching (newcomers wait for the batch to drain).

(Over 400 lines: the two decoders are the two implementations of one protocol and
`make_decoder` chooses between them, so a reader compares them on one page.)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from openclaw_rl.engine import kernels
from openclaw_rl.engine.adapters import LoraPass, PersonalAdapter, lora_pass
from openclaw_rl.engine.prefixes import ANY, Prefix, PrefixCache

_FUSED_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_MIN_POSITIONS = 256
_PACK_TOKENS = 1024  # prompts prefilled as one sequence, up to this many tokens together
Adapters = list[PersonalAdapter | None] | None  # per prompt or row; None: no row has one


class Decoder(Protocol):
    can_join: bool  # rows may join a running batch
    reused_tokens: int  # prompt positions copied from kept prefixes instead of computed

    def prefill(self, prompts: list[list[int]], scopes: list[str | None] | None = None,
                adapters: Adapters = None) -> torch.Tensor:
        """Append one row per prompt to the batch; the logits of each prompt's last token (n, V).
        `scopes`: each prompt's prefix-cache scope (prefixes.py); None: no scope. `adapters`:
        each prompt's personal adapter (adapters.py), None for the shared model."""

    def park(self, row: int, tokens: list[int], scope: str | None, adapter: PersonalAdapter | None = None) -> None:
        """Keep the cache of a finished row (whose fed tokens are `tokens`) for later prompts of
        `scope` under the same `adapter` (None: the shared model)."""

    def forget(self) -> None:
        """Drop every kept prefix: the weights changed."""

    def score_logits(self, ids: list[int], last: int, adapter: PersonalAdapter | None = None) -> torch.Tensor:
        """The logits (last, V) of the last `last` positions of `ids`, outside the batch (a scoring pass)."""

    def step(self, tokens: list[int], positions: list[int], adapters: Adapters = None) -> torch.Tensor:
        """Feed each row its next token at its position; the logits (B, V). `adapters`: each row's."""

    def keep(self, rows: list[int]) -> None:
        """Keep these rows (ascending), in this order; drop the rest."""

    def reset(self) -> None:
        """Drop every row."""


def make_decoder(model, pad_token_id: int, kind: str = "auto", prefix_cache_bytes: int = 0) -> Decoder:
    """`kind`: auto (fused when the model is of the Llama family), fused, or hf;
    `prefix_cache_bytes`: the fused decoder's budget for finished rows' caches (prefixes.py)."""
    reason = fused_unsupported(model)
    if kind == "fused" and reason:
        raise ValueError(f"the fused decoder cannot run this model: {reason}")
    if kind == "hf" or reason:
        return HFDecoder(model, pad_token_id)
    return FusedDecoder(model, prefix_cache_bytes)


def fused_unsupported(model) -> str | None:
    """Why the fused decoder cannot run `model` (reading its parameters in place), or None."""
    if hasattr(model, "peft_config"):
        return "a LoRA adapter (its forward adds the adapter)"
    if any(isinstance(p, DTensor) for p in model.parameters()):
        return "sharded parameters (FSDP2)"
    config = model.config
    if config.model_type not in _FUSED_TYPES:
        return f"model type {config.model_type!r} (supported: {', '.join(_FUSED_TYPES)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "a sliding attention window"
    if getattr(config, "layer_types", None) and any(t != "full_attention" for t in config.layer_types):
        return "layers other than full attention"
    for name in ("attention_multiplier", "logits_scaling", "embedding_multiplier"):
        if getattr(config, name, None) not in (None, 1, 1.0):
            return f"{name} = {getattr(config, name)}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "no model.layers / model.rotary_emb"
    return None


class FusedDecoder:
    can_join = True

    def __init__(self, model, prefix_cache_bytes: int = 0):
        config = model.config
        self.model = model
        self.prefixes = PrefixCache(prefix_cache_bytes)
        self.reused_tokens = 0  # prompt positions copied from kept prefixes instead of computed
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm
        self.lm_head = model.lm_head.weight
        use_kernels = (self.embed.device.type == "cpu" and self.embed.dtype == torch.float32
                       and kernels.available())
        self.kernels = use_kernels
        self.layers = [_Layer(i, layer, use_kernels) for i, layer in enumerate(inner.layers)]
        self._step_lora: tuple[tuple, LoraPass | None] = ((), None)  # the batch's adapters, rebuilt when they change
        self._adapted = False  # a kept prefix may hold keys computed under an adapter
        # the norm that follows each layer's MLP: the next layer's input norm, the final one last
        self._next_norms = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        self._linear = _kernel_linear if use_kernels else _torch_linear
        self.n_heads = config.num_attention_heads
        self.n_kv = getattr(config, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.scale = self.head_dim ** -0.5
        self.max_positions = int(getattr(config, "max_position_embeddings", 2048))
        self._rotary = inner.rotary_emb
        self._cos = self._sin = None  # (positions, D), made as far as needed
        self._keys = self._values = None  # (L, rows, H_kv, positions, D)
        self.rows = 0
        self._lengths: list[int] = []

    # -- the cache --------------------------------------------------------------------

    def _reserve(self, rows: int, positions: int) -> None:
        positions = min(max(positions, 1), self.max_positions)
        have_rows, have_pos = (0, 0) if self._keys is None else (self._keys.shape[1], self._keys.shape[3])
        if rows <= have_rows and positions <= have_pos:
            return
        new_rows = max(rows, have_rows, 1) if rows <= have_rows else max(rows, 2 * have_rows)
        new_pos = have_pos if positions <= have_pos else min(max(positions, 2 * have_pos, _MIN_POSITIONS),
                                                              self.max_positions)
        ref = self.embed
        shape = (len(self.layers), new_rows, self.n_kv, new_pos, self.head_dim)
        # zeros, not empty: the torch path attends over whole cache rows under a mask, and masked
        # garbage that happens to be NaN would still poison the softmax (NaN + -inf)
        keys = torch.zeros(shape, dtype=ref.dtype, device=ref.device)
        values = torch.zeros(shape, dtype=ref.dtype, device=ref.device)
        if self._keys is not None and self.rows:
            used = max(self._lengths)
            keys[:, : self.rows, :, :used] = self._keys[:, : self.rows, :, :used]
            values[:, : self.rows, :, :used] = self._values[:, : self.rows, :, :used]
        self._keys, self._values = keys, values
        self._rope_table(new_pos)

    def _rope_table(self, positions: int) -> None:
        if self._cos is not None and self._cos.shape[0] >= positions:
            return
        ids = torch.arange(positions, device=self.embed.device)[None]
        probe = torch.zeros(1, dtype=self.embed.dtype, device=self.embed.device)
        cos, sin = self._rotary(probe, ids)  # honours the model's rope scaling
        self._cos, self._sin = cos[0].to(self.embed.dtype), sin[0].to(self.embed.dtype)

    def keep(self, rows: list[int]) -> None:
        if rows == list(range(self.rows)):
            return
        if rows:
            used = max(self._lengths[i] for i in rows)
            moved = [(new, old) for new, old in enumerate(rows) if new != old]
            if moved:
                dst = [n for n, _ in moved]
                src = torch.tensor([o for _, o in moved], device=self.embed.device)
                self._keys[:, dst[0] : dst[-1] + 1, :, :used] = self._keys[:, :, :, :used].index_select(1, src)
                self._values[:, dst[0] : dst[-1] + 1, :, :used] = self._values[:, :, :, :used].index_select(1, src)
        self._lengths = [self._lengths[i] for i in rows]
        self.rows = len(rows)

    def reset(self) -> None:
        self.rows, self._lengths = 0, []
        self._keys = self._values = None  # a long conversation's cache is not kept after it ends (parked copies are)

    def park(self, row: int, tokens: list[int], scope: str | None, adapter: PersonalAdapter | None = None) -> None:
        n = min(len(tokens), self._lengths[row])  # positions whose keys are written (the last sample is not fed)
        if self.prefixes.budget_bytes and n:  # keys computed under an adapter serve only that adapter version
            self.prefixes.add(_scoped(scope, adapter), tokens[:n], self._keys[:, row, :, :n].clone(),
                              self._values[:, row, :, :n].clone())

    def forget(self) -> None:
        self.prefixes.clear()
        self._adapted = False

    # -- the passes -------------------------------------------------------------------

    def prefill(self, prompts: list[list[int]], scopes: list[str | None] | None = None,
                adapters: Adapters = None) -> torch.Tensor:
        """Prompts that share a kept prefix of their scope copy its cache and run the model over
        the rest (`_prefill_suffix`); the others are packed (`_prefill_pack`). A prompt under an
        adapter is scoped to that adapter version too: keys computed under it serve no one else."""
        self._reserve(self.rows + len(prompts), max(len(p) for p in prompts) + 1)
        before = self.rows
        adapters = adapters or [None] * len(prompts)
        scopes = [_scoped(scope, adapter) for scope, adapter in zip(scopes or [None] * len(prompts), adapters)]
        self._adapted = self._adapted or any(a is not None for a in adapters)
        matches = [self.prefixes.match(scope, prompt) for scope, prompt in zip(scopes, prompts)]
        out: list[torch.Tensor | None] = [None] * len(prompts)
        fresh = [i for i, found in enumerate(matches) if found is None]
        for i, found in enumerate(matches):
            if found is not None:
                out[i] = self._prefill_suffix(prompts[i], before + i, *found, adapter=adapters[i])
                self.reused_tokens += found[1]
        for pack in _packs(fresh, _PACK_TOKENS, [len(p) for p in prompts]):
            for i, logits in zip(pack, self._prefill_pack([prompts[i] for i in pack], [before + i for i in pack],
                                                          [adapters[i] for i in pack])):
                out[i] = logits
        # rows are written only now: a failed prefill adds none (the engine retries the prompts one by one)
        self.rows += len(prompts)
        self._lengths.extend(len(p) for p in prompts)
        return torch.stack(out)  # type: ignore[arg-type]

    def score_logits(self, ids: list[int], last: int, adapter: PersonalAdapter | None = None) -> torch.Tensor:
        """The logits (last, V) of the last `last` positions of `ids`, from a kept prefix of any
        scope where one matches: a scoring pass (the judge's teacher) in a spare row, outside
        the batch, whose rows it leaves as they were. Once adapters served, kept prefixes may
        belong to other weights, so the pass computes every position (under `adapter`)."""
        self._reserve(self.rows + 1, len(ids) + 1)
        found = None if self._adapted or adapter is not None else self.prefixes.match(ANY, ids, keep_last=last)
        if found is not None:
            self.reused_tokens += found[1]
        return self._prefill_suffix(ids, self.rows, *(found or (None, 0)), last=last, adapter=adapter)

    def _prefill_suffix(self, prompt: list[int], row: int, prefix: Prefix | None, shared: int,
                        last: int = 1, adapter: PersonalAdapter | None = None) -> torch.Tensor:
        """`prompt` into `row` from a kept prefix: its first `shared` positions' keys and values
        copied, the model run over the rest, each new position attending to the whole row. The
        logits of the last position, or (last, V) of the last `last` ones when `last` > 1."""
        device, n = self.embed.device, len(prompt)
        if prefix is not None:
            self._keys[:, row, :, :shared] = prefix.keys[:, :, :shared]
            self._values[:, row, :, :shared] = prefix.values[:, :, :shared]
        positions = torch.arange(shared, n, device=device)
        x = F.embedding(torch.tensor(prompt[shared:], device=device), self.embed)[None]  # (1, S, hidden)
        cos, sin = self._cos[positions][None], self._sin[positions][None]  # (1, S, D)
        mask = positions[:, None] >= torch.arange(n, device=device)[None]  # (S, n) causal over the row
        lora = lora_pass([adapter], [n - shared])
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x, cos, sin, self.n_heads, self.n_kv, self.head_dim, lora)  # (1, H, S, D)
            self._keys[i, row, :, shared:n] = k[0]
            self._values[i, row, :, shared:n] = v[0]
            attn = F.scaled_dot_product_attention(q, self._keys[i, row : row + 1, :, :n],
                                                  self._values[i, row : row + 1, :, :n], attn_mask=mask,
                                                  scale=self.scale, enable_gqa=self.n_kv != self.n_heads)
            x = layer.finish(x, attn.transpose(1, 2).reshape(1, n - shared, -1), lora)
        hidden = x[0, -1] if last == 1 else x[0, -last:]
        return self._linear(_norm(self.norm, hidden), self.lm_head, None)  # (V,) or (last, V)

    def _prefill_pack(self, prompts: list[list[int]], rows: list[int],
                      adapters: list[PersonalAdapter | None]) -> torch.Tensor:
        """Several prompts as one sequence (one pass over the weights), each attending only to
        itself (a block-diagonal causal mask) at its own positions 0..n-1, under its own adapter;
        each prompt's keys and values go to its own row of the cache (`rows`)."""
        device = self.embed.device
        lengths = [len(p) for p in prompts]
        lora = lora_pass(adapters, lengths)
        starts = [sum(lengths[:i]) for i in range(len(lengths))]  # on the host: no read from the device
        ends = torch.tensor([start + n for start, n in zip(starts, lengths)], device=device)
        positions = torch.cat([torch.arange(n, device=device) for n in lengths])
        x = F.embedding(torch.tensor([t for p in prompts for t in p], device=device), self.embed)[None]  # (1, T, hidden)
        cos, sin = self._cos[positions][None], self._sin[positions][None]  # (1, T, D)
        mask = None
        if len(prompts) > 1:
            segment = torch.tensor([i for i, n in enumerate(lengths) for _ in range(n)], device=device)
            mask = (segment[:, None] == segment[None, :]) & (positions[:, None] >= positions[None, :])
        total = x.shape[1]
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x, cos, sin, self.n_heads, self.n_kv, self.head_dim, lora)  # (1, H, T, D)
            for row, start, n in zip(rows, starts, lengths):
                self._keys[i, row, :, :n] = k[0, :, start : start + n]
                self._values[i, row, :, :n] = v[0, :, start : start + n]
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale,
                                                  enable_gqa=self.n_kv != self.n_heads)
            x = layer.finish(x, attn.transpose(1, 2).reshape(1, total, -1), lora)
        return self._linear(_norm(self.norm, x[0, ends - 1]), self.lm_head, None)  # (n, V)

    def step(self, tokens: list[int], positions: list[int], adapters: Adapters = None) -> torch.Tensor:
        b = self.rows
        self._reserve(b, max(positions) + 1)
        lora = self._batch_lora(adapters)
        if self.kernels and b <= kernels.MAX_ROWS:
            logits = self._step_kernels(tokens, positions, lora)
            self._lengths = [p + 1 for p in positions]
            return logits
        device = self.embed.device
        pos = torch.tensor(positions, device=device)
        length = max(positions) + 1
        x = F.embedding(torch.tensor(tokens, device=device), self.embed)[:, None]  # (B, 1, hidden)
        cos, sin = self._cos[pos][:, None], self._sin[pos][:, None]  # (B, 1, D)
        rows = torch.arange(b, device=device)
        # keys beyond a row's own length are another row's padding: masked out
        beyond = torch.arange(length, device=device)[None] > pos[:, None]  # (B, S)
        bias = torch.zeros(b, 1, 1, length, dtype=x.dtype, device=device).masked_fill(beyond[:, None, None], float("-inf"))
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(x, cos, sin, self.n_heads, self.n_kv, self.head_dim, lora)  # (B, H, 1, D)
            keys, values = self._keys[i], self._values[i]
            keys[rows, :, pos] = k[:, :, 0]
            values[rows, :, pos] = v[:, :, 0]
            attn = _decode_attention(q, keys[:b, :, :length], values[:b, :, :length], bias, self.scale)
            x = layer.finish(x, attn, lora)
        self._lengths = [p + 1 for p in positions]
        return self._linear(_norm(self.norm, x[:, 0]), self.lm_head, None)

    def _batch_lora(self, adapters: Adapters) -> LoraPass | None:
        """The rows' adapters (adapters.py), looked up again only when a row's adapter changed."""
        key = tuple(adapters or ())
        if key != self._step_lora[0]:  # identity: adapters compare as objects
            self._step_lora = (key, lora_pass(key, [1] * len(key)) if key else None)
        return self._step_lora[1]

    def _step_kernels(self, tokens: list[int], positions: list[int], lora: LoraPass | None = None) -> torch.Tensor:
        """The same step, each layer as eight calls into the compiled kernels (kernels.py)."""
        ops, device = kernels.ops(), self.embed.device
        pos = torch.tensor(positions, device=device)
        x = F.embedding(torch.tensor(tokens, device=device), self.embed)  # (B, hidden), the residual stream
        h = ops.rms_norm(x, self.layers[0].input_norm.weight, self.layers[0].input_norm.variance_epsilon)
        for i, (layer, next_norm) in enumerate(zip(self.layers, self._next_norms)):
            proj = layer.kernel_proj(lora)
            q, k, v = (proj(h, target) for target in ("q_proj", "k_proj", "v_proj"))
            if layer.q_norm is not None:
                q = _norm(layer.q_norm, q.view(q.shape[0], -1, self.head_dim)).reshape(q.shape)
                k = _norm(layer.k_norm, k.view(k.shape[0], -1, self.head_dim)).reshape(k.shape)
            attn = ops.decode_attention(q, k, v, self._cos, self._sin, self._keys[i], self._values[i], pos, self.scale)
            h = ops.add_rms_norm(x, proj(attn, "o_proj"), layer.post_norm.weight, layer.post_norm.variance_epsilon)
            up = ops.silu_mul(proj(h, "gate_proj"), proj(h, "up_proj"))
            h = ops.add_rms_norm(x, proj(up, "down_proj"), next_norm.weight, next_norm.variance_epsilon)
        return ops.gemv(h, self.lm_head)


def _packs(indices: list[int], limit: int, lengths: list[int]) -> list[list[int]]:
    """Consecutive prompts (by index; `lengths` of every prompt) grouped up to `limit` tokens (a
    longer prompt is a pack of its own)."""
    packs: list[list[int]] = []
    size = 0
    for i in indices:
        if packs and size + lengths[i] <= limit:
            packs[-1].append(i)
            size += lengths[i]
        else:
            packs.append([i])
            size = lengths[i]
    return packs


def _biased(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return y if bias is None else y + bias


class _Layer:
    """One decoder layer's parameters, read in place (a weight swap copies into them)."""

    def __init__(self, index: int, layer, use_kernels: bool):
        attn, mlp = layer.self_attn, layer.mlp
        self.index = index
        self.linear = _kernel_linear if use_kernels else _torch_linear
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.q, self.k, self.v, self.o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.q_norm, self.k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)  # Qwen3
        self.gate, self.up, self.down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        self.by_target = {"q_proj": self.q, "k_proj": self.k, "v_proj": self.v, "o_proj": self.o,
                          "gate_proj": self.gate, "up_proj": self.up, "down_proj": self.down}

    def proj(self, target: str, h: torch.Tensor, lora: LoraPass | None) -> torch.Tensor:
        """The projection `target` of `h`, plus each position's adapter delta."""
        module = self.by_target[target]
        y = self.linear(h, module.weight, module.bias)
        return y if lora is None else lora.add(self.index, target, h, y)

    def kernel_proj(self, lora: LoraPass | None) -> Callable[[torch.Tensor, str], torch.Tensor]:
        """`proj` for the kernel step: (B, in) rows through the compiled gemv."""
        ops = kernels.ops()

        def proj(h: torch.Tensor, target: str) -> torch.Tensor:
            module = self.by_target[target]
            y = _biased(ops.gemv(h, module.weight), module.bias)
            return y if lora is None else lora.add_rows(self.index, target, h, y)

        return proj

    def qkv(self, x, cos, sin, n_heads, n_kv, head_dim, lora: LoraPass | None = None):
        b, t, _ = x.shape
        h = _norm(self.input_norm, x)
        q = self.proj("q_proj", h, lora).view(b, t, n_heads, head_dim)
        k = self.proj("k_proj", h, lora).view(b, t, n_kv, head_dim)
        v = self.proj("v_proj", h, lora).view(b, t, n_kv, head_dim)
        if self.q_norm is not None:
            q, k = _norm(self.q_norm, q), _norm(self.k_norm, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
        cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def finish(self, x, attn, lora: LoraPass | None = None):
        x = x + self.proj("o_proj", attn, lora)
        h = _norm(self.post_norm, x)
        return x + self.proj("down_proj", F.silu(self.proj("gate_proj", h, lora)) * self.proj("up_proj", h, lora), lora)


def _decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """One new position per row against its cache: q (B, H, 1, D), keys and values (B, H_kv, S, D),
    `bias` (B, 1, 1, S) 0 or -inf; (B, 1, H * D). The H / H_kv query heads that share a key head are
    that head's rows of one batched product, so no key or value is copied per query head; SDPA with
    `enable_gqa` and a mask (which a padded batch needs) took a slow path instead, in bfloat16 5x
    slower at batch 8 on a CPU (bench/decode_step.py --torch-path). Softmax in float32."""
    b, h, _, d = q.shape
    grouped = q.view(b, keys.shape[1], h // keys.shape[1], d)  # (B, H_kv, H / H_kv, D)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scale + bias
    probs = torch.softmax(scores.float(), dim=-1).to(values.dtype)
    return torch.matmul(probs, values).reshape(b, 1, h * d)


def _scoped(scope: str | None, adapter: PersonalAdapter | None) -> str | None:
    """A prefix-cache scope that also names the adapter version its keys were computed under."""
    return scope if adapter is None else f"{scope}\x00adapter:{adapter.user}@{adapter.version}:{id(adapter)}"


def _torch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight, bias)


def _kernel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A few rows (a decode step): the streaming kernel; many (a prefill): torch's GEMM."""
    rows = x.numel() // x.shape[-1]
    if rows > kernels.MAX_ROWS:
        return F.linear(x, weight, bias)
    y = kernels.ops().gemv(x.reshape(rows, x.shape[-1]), weight).view(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


def _norm(module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op (same eps and weight)."""
    return F.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class HFDecoder:
    """transformers' forward over a left-padded DynamicCache (see the module docstring)."""

    reused_tokens = 0  # no prefix cache

    def __init__(self, model, pad_token_id: int):
        self.model, self.pad_token_id = model, pad_token_id
        forward_params = inspect.signature(model.forward).parameters
        # transformers renamed `past_key_values` to `cache` (5.x); speak whichever it knows.
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        self._accepts_logits_to_keep = "logits_to_keep" in forward_params
        self.can_join = True
        self.reset()

    @property
    def rows(self) -> int:
        return 0 if self._mask is None else self._mask.shape[0]

    def reset(self) -> None:
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # (B, S) 1 = real token, 0 = left padding
        self.can_join = True

    def park(self, row: int, tokens: list[int], scope: str | None, adapter: PersonalAdapter | None = None) -> None:
        """No prefix cache here: a left-padded cache row is not a prompt's own positions."""

    def forget(self) -> None:
        pass

    def score_logits(self, ids: list[int], last: int, adapter: PersonalAdapter | None = None) -> torch.Tensor:
        """A plain forward, the head over the last `last` positions only where the model allows."""
        _no_adapters([adapter])
        keep = {"logits_to_keep": last} if self._accepts_logits_to_keep else {}
        return self.model(input_ids=torch.tensor([ids], device=self.model.device), **keep).logits[0, -last:]

    def prefill(self, prompts: list[list[int]], scopes: list[str | None] | None = None,
                adapters: Adapters = None) -> torch.Tensor:
        _no_adapters(adapters or [])
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt):] = torch.tensor(prompt)
            mask[i, width - len(prompt):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self._forward(ids, mask, positions, cache)
        if self._mask is not None:
            self._cache, self._mask = _merge_caches(self._cache, self._mask, cache, mask)
        else:
            self._cache, self._mask = cache, mask
            self.can_join = _is_plain_cache(cache)
        return logits

    def step(self, tokens: list[int], positions: list[int], adapters: Adapters = None) -> torch.Tensor:
        _no_adapters(adapters or [])
        ids = torch.tensor([[t] for t in tokens], dtype=torch.long)
        self._mask = torch.cat([self._mask, torch.ones((len(tokens), 1), dtype=torch.long)], dim=-1)
        return self._forward(ids, self._mask, torch.tensor([[p] for p in positions]), self._cache)

    def keep(self, rows: list[int]) -> None:
        if rows == list(range(self.rows)):
            return
        if not rows:
            self.reset()
            return
        self._cache.batch_select_indices(torch.tensor(rows, device=self.model.device))
        self._mask = self._mask[rows]
        # Columns that are padding for every remaining row are dead weight: crop them.
        lead = int((self._mask.cumsum(-1) == 0).sum(-1).min())
        if lead and self.can_join:
            for layer in self._cache.layers:
                layer.keys = layer.keys[:, :, lead:, :]
                layer.values = layer.values[:, :, lead:, :]
            self._mask = self._mask[:, lead:]

    def _forward(self, ids, mask, positions, cache) -> torch.Tensor:
        device = self.model.device
        kwargs = dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                      use_cache=True)
        kwargs[self._cache_kwarg] = cache
        if self._accepts_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        return self.model(**kwargs).logits[:, -1, :]  # (B, V)


def _no_adapters(adapters: list[PersonalAdapter | None]) -> None:
    if any(adapter is not None for adapter in adapters):
        raise ValueError("personal adapters need the fused decoder (a Llama-family model, decoder = auto or fused); "
                         "this model runs on transformers' forward")


def _is_plain_cache(cache) -> bool:
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _merge_caches(cache_a, mask_a: torch.Tensor, cache_b, mask_b: torch.Tensor):
    """Stack two left-padded batches: pad the shorter on the left, concatenate rows."""
    width = max(mask_a.shape[1], mask_b.shape[1])

    def pad(t: torch.Tensor, dim_len: int) -> torch.Tensor:  # (B, H, S, D) -> (B, H, width, D)
        return F.pad(t, (0, 0, width - dim_len, 0))

    for layer_a, layer_b in zip(cache_a.layers, cache_b.layers):
        layer_a.keys = torch.cat([pad(layer_a.keys, mask_a.shape[1]), pad(layer_b.keys, mask_b.shape[1])])
        layer_a.values = torch.cat([pad(layer_a.values, mask_a.shape[1]), pad(layer_b.values, mask_b.shape[1])])
    mask = torch.cat([F.pad(mask_a, (width - mask_a.shape[1], 0)), F.pad(mask_b, (width - mask_b.shape[1], 0))])
    return cache_a, mask
