"""The engine's accelerator path waits for the device once per decode step (issue 42).

On a GPU every value read back to the host (`item`, `tolist`, `bool` of a tensor) stalls
the launch queue until the device catches up; the decode step and sampling should read
exactly once, at the end of a step. Tensors on the `meta` device have no values, so any
read raises: running the fused decoder's torch path (the one a GPU takes) and the
sampling helpers on `meta` proves they read nothing back. The sampling draw itself is
checked against the distribution it should follow.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from openclaw_rl.engine.decoder import FusedDecoder, _decode_attention
from openclaw_rl.engine.sampling import sample_tokens, sampling_logprobs


def test_sampling_reads_nothing_back_from_the_device():
    """Greedy, drawn, top-p and plain rows in one batch, on logits that hold no values."""
    logits = torch.empty(4, 50, device="meta")
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.3])  # the engine's parameters live on the host
    top_p = torch.tensor([1.0, 0.9, 1.0, 0.5])
    logprobs = sampling_logprobs(logits, temperature, top_p)
    generators = [None] + [torch.Generator().manual_seed(i) for i in range(3)]
    tokens = sample_tokens(logprobs, generators)
    chosen = logprobs.gather(-1, tokens[:, None])[:, 0]
    assert (tokens.device.type, tuple(tokens.shape), chosen.device.type) == ("meta", (4,), "meta")


def test_the_decode_step_reads_nothing_back_from_the_device(tiny_model_dir):
    """The fused decoder's torch path (not the CPU kernels) over a model with no values:
    prompts of different lengths prefilled together, then steps of the padded batch."""
    config = AutoConfig.from_pretrained(tiny_model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    decoder = FusedDecoder(model)
    assert not decoder.kernels
    logits = decoder.prefill([[1, 5, 9, 13, 2], [1, 7, 3]])
    assert tuple(logits.shape) == (2, config.vocab_size)
    positions = [5, 3]
    for _ in range(3):
        logits = decoder.step([11, 12], positions)
        positions = [p + 1 for p in positions]
    assert (logits.device.type, tuple(logits.shape)) == ("meta", (2, config.vocab_size))


def test_grouped_decode_attention_matches_attention_with_repeated_heads():
    """Query heads grouped onto their key head, with a padded row masked, against the
    textbook attention over keys repeated per query head."""
    g = torch.Generator().manual_seed(0)
    b, h, n_kv, s, d = 3, 6, 2, 7, 8
    q = torch.randn(b, h, 1, d, generator=g)
    keys, values = torch.randn(b, n_kv, s, d, generator=g), torch.randn(b, n_kv, s, d, generator=g)
    lengths = torch.tensor([7, 4, 1])
    beyond = torch.arange(s)[None] >= lengths[:, None]
    bias = torch.zeros(b, 1, 1, s).masked_fill(beyond[:, None, None], float("-inf"))
    out = _decode_attention(q, keys, values, bias, d ** -0.5)
    k, v = keys.repeat_interleave(h // n_kv, dim=1), values.repeat_interleave(h // n_kv, dim=1)
    scores = (q @ k.transpose(-1, -2)) * d ** -0.5 + bias
    expected = (scores.softmax(-1) @ v).reshape(b, 1, h * d)
    assert torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_drawn_tokens_follow_the_distribution_and_never_a_cut_token(top_p):
    """8,000 seeded draws of one row: each token's frequency within 4.5 standard errors of
    its probability under the distribution sampled from, and no token that top-p cut."""
    probs = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    logprobs = sampling_logprobs(probs.log()[None], torch.tensor([1.0]), torch.tensor([top_p]))
    generator = torch.Generator().manual_seed(7)
    draws = 8000
    counts = torch.zeros(6)
    for _ in range(draws // 100):  # 100 rows at a time, one generator, as rows of one request
        batch = logprobs.expand(100, -1)
        counts += torch.bincount(sample_tokens(batch, [generator] * 100), minlength=6).float()
    expected = logprobs[0].exp()
    for token in range(6):
        p = float(expected[token])
        if p == 0.0:
            assert counts[token] == 0, f"token {token} was cut by top-p {top_p} but drawn"
            continue
        error = math.sqrt(p * (1 - p) / draws)
        assert abs(float(counts[token]) / draws - p) < 4.5 * error, (token, float(counts[token]) / draws, p)


def test_greedy_rows_take_the_argmax_beside_drawn_rows():
    logprobs = torch.log_softmax(torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]]), dim=-1)
    tokens = sample_tokens(logprobs, [None, torch.Generator().manual_seed(0)])
    assert int(tokens[0]) == 1 and 0 <= int(tokens[1]) < 3
