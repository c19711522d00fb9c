"""The decoders behind the local engine: the fused one gives transformers' logits, with and without kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from openclaw_rl.engine import kernels
from openclaw_rl.engine.decoder import FusedDecoder, HFDecoder, make_decoder


def _tiny(kind: str):
    """A randomly initialised tiny model of each supported family (GQA, biases, q/k norms)."""
    import transformers

    common = dict(vocab_size=300, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
                  num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=kind == "llama")
    if kind == "llama":
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif kind == "qwen2":  # q, k, v biases
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:  # qwen3: per-head q and k norms, head_dim not hidden / heads
        config, cls = transformers.Qwen3Config(**common, head_dim=16), transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = cls(config).eval().requires_grad_(False)
    with torch.no_grad():  # non-trivial norms and biases, so a forgotten one shows
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def _reference(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]  # (T, V)


def _run(decoder, prompts: list[list[int]], continuations: list[list[int]]) -> list[list[torch.Tensor]]:
    """Prefill the prompts together, then feed each row its continuation; logits per row per step."""
    with torch.inference_mode():
        first = decoder.prefill(prompts)
        out = [[first[i]] for i in range(len(prompts))]
        positions = [len(p) for p in prompts]
        for step in range(len(continuations[0])):
            logits = decoder.step([c[step] for c in continuations], positions)
            positions = [p + 1 for p in positions]
            for i in range(len(prompts)):
                out[i].append(logits[i])
    return out


def _check(model, decoder, prompts, continuations, atol=1e-4):
    got = _run(decoder, prompts, continuations)
    for prompt, cont, rows in zip(prompts, continuations, got):
        ref = _reference(model, prompt + cont)[len(prompt) - 1 :]
        assert torch.allclose(torch.stack(rows), ref, atol=atol), (torch.stack(rows) - ref).abs().max()


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("use_kernels", [True, False])
def test_fused_decoder_matches_the_full_forward(kind, use_kernels, monkeypatch):
    if use_kernels and not kernels.available():
        pytest.skip("no compiled kernels here (no compiler or no AVX2)")
    if not use_kernels:
        monkeypatch.setattr(kernels, "available", lambda: False)
    model = _tiny(kind)
    decoder = make_decoder(model, pad_token_id=0)
    assert isinstance(decoder, FusedDecoder) and decoder.kernels is use_kernels
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (5, 17, 9)]  # different lengths, one pack
    continuations = [torch.randint(0, 300, (6,), generator=g).tolist() for _ in prompts]
    _check(model, decoder, prompts, continuations)


def test_rows_join_leave_and_the_cache_grows():
    model = _tiny("llama")
    decoder = FusedDecoder(model)
    g = torch.Generator().manual_seed(2)
    a, b, c = (torch.randint(0, 300, (n,), generator=g).tolist() for n in (300, 4, 11))  # a: past the first 256 positions
    with torch.inference_mode():
        decoder.prefill([a])
        decoder.step([7], [len(a)])
        decoder.prefill([b, c])  # join a running batch
        logits = decoder.step([8, 9, 10], [len(a) + 1, len(b), len(c)])
        decoder.keep([0, 2])  # b leaves; c moves to row 1
        after = decoder.step([11, 12], [len(a) + 2, len(c) + 1])
    ref_a = _reference(model, a + [7, 8, 11])
    ref_b = _reference(model, b + [9])
    ref_c = _reference(model, c + [10, 12])
    assert torch.allclose(logits[0], ref_a[-2], atol=1e-4)
    assert torch.allclose(logits[1], ref_b[-1], atol=1e-4)
    assert torch.allclose(logits[2], ref_c[-2], atol=1e-4)
    assert torch.allclose(after[0], ref_a[-1], atol=1e-4) and torch.allclose(after[1], ref_c[-1], atol=1e-4)


def test_a_failed_prefill_adds_no_row():
    decoder = FusedDecoder(_tiny("llama"))
    with torch.inference_mode():
        decoder.prefill([[1, 2, 3]])
        with pytest.raises(IndexError):
            decoder.prefill([[4, 5], [10_000]])  # the second id is past the vocabulary
    assert decoder.rows == 1


def test_weight_swaps_are_seen_without_a_reload():
    model = _tiny("llama")
    decoder = FusedDecoder(model)
    with torch.inference_mode():
        before = decoder.prefill([[1, 2, 3]])
        decoder.reset()
        for p in model.parameters():
            p.mul_(0.5)  # how the engine loads weights: a copy into the same parameters
        after = decoder.prefill([[1, 2, 3]])
    assert not torch.allclose(before, after)
    assert torch.allclose(after[0], _reference(model, [1, 2, 3])[-1], atol=1e-4)


def test_other_models_use_transformers_forward_and_fused_is_refused_by_name():
    import transformers

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)).eval()
    assert isinstance(make_decoder(gpt2, pad_token_id=0), HFDecoder)
    with pytest.raises(ValueError, match="model type 'gpt2'"):
        make_decoder(gpt2, pad_token_id=0, kind="fused")
    llama = _tiny("llama")
    assert isinstance(make_decoder(llama, pad_token_id=0, kind="hf"), HFDecoder)


def test_hf_decoder_matches_the_full_forward():
    model = _tiny("llama")
    prompts, continuations = [[1, 2, 3, 4, 5], [6, 7]], [[8, 9, 10], [11, 12, 13]]
    _check(model, HFDecoder(model, pad_token_id=0), prompts, continuations)


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
@pytest.mark.parametrize("rows,outputs", [(1, 77), (3, 77), (8, 77), (13, 77), (4, 701), (20, 701)])
def test_gemv_kernel_equals_torch(rows, outputs):
    """K and N not multiples of 8; 701 outputs span several of the kernel's L2 chunks, and 20
    rows three blocks of x over each chunk."""
    g = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 203, generator=g), torch.randn(outputs, 203, generator=g)
    assert torch.allclose(kernels.ops().gemv(x, w), F.linear(x, w), atol=1e-4)


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
def test_the_attention_kernel_over_long_rows_gives_the_full_forwards_logits():
    """Hundreds of positions per row: the softmax's vectorised exp runs over whole blocks of 8
    and a tail, with scores far apart."""
    model = _tiny("llama")
    decoder = make_decoder(model, pad_token_id=0)
    assert decoder.kernels
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (150, 263)]
    continuations = [torch.randint(0, 300, (4,), generator=g).tolist() for _ in prompts]
    _check(model, decoder, prompts, continuations)


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
def test_norm_and_activation_kernels_equal_torch():
    ops = kernels.ops()
    g = torch.Generator().manual_seed(0)
    x, r, w = torch.randn(4, 50, generator=g), torch.randn(4, 50, generator=g), torch.randn(50, generator=g)
    assert torch.allclose(ops.rms_norm(x, w, 1e-5), F.rms_norm(x, (50,), w, 1e-5), atol=1e-5)
    expected = F.rms_norm(x + r, (50,), w, 1e-5)
    summed = x + r
    assert torch.allclose(ops.add_rms_norm(x, r, w, 1e-5), expected, atol=1e-5)
    assert torch.allclose(x, summed)  # the residual stream is updated in place
    assert torch.allclose(ops.silu_mul(x, r), F.silu(x) * r, atol=1e-5)


def test_a_process_with_a_local_model_switches_the_gil_often(tiny_model_dir, tmp_path):
    """A model thread takes the GIL back after every op; at 5 ms it waits behind every Python thread."""
    import asyncio
    import sys

    from openclaw_rl.compose import build_engine
    from openclaw_rl.train.cores import SWITCH_INTERVAL_S
    from openclaw_rl.config import ServeConfig

    previous = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        engine = build_engine(ServeConfig(data_dir=str(tmp_path)), tiny_model_dir, threads=1)
        assert sys.getswitchinterval() <= SWITCH_INTERVAL_S
        asyncio.run(engine.aclose())
    finally:
        sys.setswitchinterval(previous)


# -- the prefix cache (engine/prefixes.py) ---------------------------------------------------


def _turn(decoder, prompt: list[int], continuation: list[int], scope=None) -> tuple[list[torch.Tensor], list[int]]:
    """One request as the engine runs it, alone in the batch: prefill, feed the continuation,
    park the finished row. The logits of every step, and the tokens the row's cache holds."""
    with torch.inference_mode():
        logits = [decoder.prefill([prompt], [scope])[0]]
        fed = list(prompt)
        for token in continuation:
            logits.append(decoder.step([token], [len(fed)])[0])
            fed.append(token)
        decoder.park(0, fed, scope)
        decoder.keep([])
    return logits, fed


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
@pytest.mark.parametrize("use_kernels", [True, False])
def test_a_next_turn_copies_the_finished_turns_cache_and_gives_the_full_forwards_logits(kind, use_kernels,
                                                                                         monkeypatch):
    if use_kernels and not kernels.available():
        pytest.skip("no compiled kernels here (no compiler or no AVX2)")
    if not use_kernels:
        monkeypatch.setattr(kernels, "available", lambda: False)
    model = _tiny(kind)
    decoder = FusedDecoder(model, prefix_cache_bytes=1 << 24)
    g = torch.Generator().manual_seed(3)
    first, answer, reply = (torch.randint(0, 300, (n,), generator=g).tolist() for n in (40, 12, 9))
    _, fed = _turn(decoder, first, answer, scope="alice")
    assert fed == first + answer and len(decoder.prefixes) == 1
    # the next turn: the conversation so far, the model's last token (never fed: it was the one
    # that ended the answer) and the user's reply
    second = fed + [7] + reply
    logits, _ = _turn(decoder, second, [11, 12], scope="alice")
    assert decoder.reused_tokens == len(fed)
    ref = _reference(model, second + [11, 12])[len(second) - 1 :]
    assert torch.allclose(torch.stack(logits), ref, atol=1e-4), (torch.stack(logits) - ref).abs().max()


def test_prefixes_serve_only_their_scope_and_the_weights_that_made_them():
    model = _tiny("llama")
    decoder = FusedDecoder(model, prefix_cache_bytes=1 << 24)
    g = torch.Generator().manual_seed(4)
    first, answer, reply = (torch.randint(0, 300, (n,), generator=g).tolist() for n in (30, 8, 5))
    _, fed = _turn(decoder, first, answer, scope="alice")
    second = fed + reply
    logits, _ = _turn(decoder, second, [], scope="bob")  # another user: computed in full, never copied
    assert decoder.reused_tokens == 0
    assert torch.allclose(logits[0], _reference(model, second)[-1], atol=1e-4)
    decoder.forget()  # what the engine does when it swaps weights
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    logits, _ = _turn(decoder, second, [], scope="alice")
    assert decoder.reused_tokens == 0
    assert torch.allclose(logits[0], _reference(model, second)[-1], atol=1e-4)


def test_prompts_with_and_without_a_kept_prefix_prefill_together_in_their_own_rows():
    model = _tiny("llama")
    decoder = FusedDecoder(model, prefix_cache_bytes=1 << 24)
    g = torch.Generator().manual_seed(5)
    first, answer, other, third = (torch.randint(0, 300, (n,), generator=g).tolist() for n in (25, 6, 14, 19))
    _, fed = _turn(decoder, first, answer)
    again = fed + [3, 4, 5]
    with torch.inference_mode():
        logits = decoder.prefill([other, again, third])  # fresh, from the cache, fresh
        step = decoder.step([1, 2, 3], [len(other), len(again), len(third)])
    assert decoder.rows == 3 and decoder.reused_tokens == len(fed)
    for i, prompt in enumerate((other, again, third)):
        ref = _reference(model, prompt + [i + 1])
        assert torch.allclose(logits[i], ref[-2], atol=1e-4) and torch.allclose(step[i], ref[-1], atol=1e-4)


def test_the_prefix_cache_keeps_the_longest_match_within_its_budget():
    from openclaw_rl.engine.prefixes import MIN_TOKENS, PrefixCache

    def kv(n: int) -> torch.Tensor:
        return torch.zeros(2, 1, n, 4)  # 32 bytes a token for keys, as many for values

    cache = PrefixCache(budget_bytes=64 * 100)  # room for 100 tokens
    short, long = list(range(MIN_TOKENS - 1)), list(range(60))
    cache.add(None, short, kv(len(short)), kv(len(short)))
    assert len(cache) == 0  # below MIN_TOKENS: not worth a copy
    cache.add(None, long[:30], kv(30), kv(30))
    cache.add(None, long, kv(60), kv(60))
    assert len(cache) == 1 and cache.bytes == 64 * 60  # the 30-token prefix of the new entry says nothing more
    assert cache.match(None, long + [99])[1] == 60
    assert cache.match(None, long)[1] == 59  # the prompt's last token is always computed
    assert cache.match(None, long[:20] + [99] * 5)[1] == 20
    assert cache.match(None, [99] + long) is None and cache.match("alice", long + [1]) is None
    other = [1000 + i for i in range(50)]
    cache.add(None, other, kv(50), kv(50))  # 110 tokens > 100: the least recently used goes
    assert len(cache) == 1 and cache.match(None, long + [1]) is None and cache.match(None, other + [1])[1] == 50


def test_a_kernel_build_killed_midway_does_not_hang_the_next_one(tmp_path):
    """torch's builder waits forever for a `lock` file its killed builder left; the build lock clears it."""
    (tmp_path / "lock").touch()
    with kernels.build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_a_live_build_holds_the_others_until_it_ends(tmp_path):
    import threading

    entered, release = threading.Event(), threading.Event()
    (tmp_path / "lock").touch()

    def other_build():
        with kernels.build_lock(tmp_path):
            entered.set()

    with kernels.build_lock(tmp_path):
        (tmp_path / "lock").touch()  # the live build's own baton: not removed under it
        thread = threading.Thread(target=other_build)
        thread.start()
        assert not entered.wait(0.3)
        assert (tmp_path / "lock").exists()
    thread.join(30)
    assert entered.is_set()
