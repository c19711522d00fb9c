"""A LoRA base held in 4-bit NF4 (`lora_4bit`, bitsandbytes): it trains, and publishes full weights.

bitsandbytes 0.50 runs 4-bit weights on CPUs, so this is the real path, on the tiny model at hidden
size 64: on CPUs with AVX-512, bitsandbytes 0.50.2 dequantizes rows shorter than its 64-weight
block wrong (relative error 0.37 instead of 0.09 at 32 x 32), which no real model has."""

from __future__ import annotations

import pytest
import torch

from openclaw_rl.config import ConfigError, TrainConfig
from openclaw_rl.train.trainer import Trainer
from test_trainer import make_samples

bnb = pytest.importorskip("bitsandbytes", reason="the qlora extra: pip install 'openclaw-rl[qlora]'")


def test_a_4bit_base_trains_its_adapter_and_publishes_weights_close_to_the_full_precision_base(wide_tiny_model_dir):
    tiny_model_dir = wide_tiny_model_dir
    samples = make_samples(tiny_model_dir)
    quantized = Trainer(tiny_model_dir, TrainConfig(method="binary", lora=True, lora_4bit=True, lr=1e-3),
                        device="cpu")
    full = Trainer(tiny_model_dir, TrainConfig(method="binary", lora=True, lr=1e-3), device="cpu")
    packed = [m for m in quantized.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(packed) == 2 * 7  # every projection of the 2 layers, in 4 bits: half a byte per weight
    assert all(m.weight.dtype == torch.uint8 and m.weight.numel() * 2 == m.in_features * m.out_features
               for m in packed)
    assert all(p.dtype == torch.float32 for p in quantized.trainable)  # the adapter trains in float32
    before = quantized.policy_state_dict()

    losses = [quantized.step(samples)["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 1e-3, losses

    published, base = quantized.policy_state_dict(), full.policy_state_dict()  # `full`: no step, so the base
    assert published.keys() == base.keys()
    assert all(published[k].shape == base[k].shape and published[k].dtype == torch.float32 for k in base)
    projections = [k for k in base if k.endswith("proj.weight")]
    for name in projections:  # dequantized NF4 against the float32 base: within 4-bit rounding
        error = float((before[name] - base[name]).norm() / base[name].norm())
        assert 0 < error < 0.15, (name, error)
    assert any(not torch.equal(published[k], before[k]) for k in projections)  # the trained adapter, merged


def test_a_4bit_base_needs_lora():
    with pytest.raises(ConfigError, match="lora_4bit"):
        TrainConfig(lora_4bit=True)
