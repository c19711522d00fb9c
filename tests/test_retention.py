"""Retention probes (train/retention.py, eval/retention.py) and the update gate's use of them (issue 40)."""

from __future__ import annotations

import pytest
import torch

from openclaw_rl.config import TrainConfig
from openclaw_rl.eval.problems import check_answer, heldout_problems
from openclaw_rl.eval.retention import RetentionProbe, arithmetic_probe, retention_problems
from openclaw_rl.train.gate import Gate
from openclaw_rl.train.retention import retention_check, sign_test_p
from openclaw_rl.train.trainer import Trainer


def test_the_sign_test_by_hand():
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(7, 1) == pytest.approx(9 / 256)  # (C(8,7) + C(8,8)) / 2^8
    assert sign_test_p(4, 0) == pytest.approx(1 / 16)
    assert sign_test_p(0, 0) == 1.0


def test_a_loss_beyond_the_noise_of_the_paired_prompts_is_a_drop_and_a_smaller_one_is_not():
    held = [True] * 10 + [False] * 6
    five_lost = retention_check(held, [False] * 5 + [True] * 5 + [False] * 6)
    assert five_lost["dropped"] and five_lost["lost"] == 5 and five_lost["gained"] == 0
    assert five_lost["held_accuracy"] == pytest.approx(10 / 16) and five_lost["candidate_accuracy"] == pytest.approx(5 / 16)
    four_lost = retention_check(held, [False] * 4 + [True] * 6 + [False] * 6)
    assert not four_lost["dropped"] and four_lost["p_value"] == pytest.approx(1 / 16)
    swapped = retention_check(held, [False] * 5 + [True] * 5 + [True] * 5 + [False])  # 5 lost, 5 gained
    assert not swapped["dropped"]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="same non-empty prompts"):
        retention_check([True], [True, False])
    with pytest.raises(ValueError, match="alpha must be in"):
        retention_check([True], [True], alpha=0.0)
    with pytest.raises(ValueError, match="one check per prompt"):
        RetentionProbe("x", [[1]], [])
    with pytest.raises(ValueError, match="at least one problem"):
        retention_problems(0)


def test_arithmetic_problems_are_apart_from_the_held_out_set_and_checked_whatever_the_style(tokenizer):
    problems = retention_problems(16)
    assert not {p.question for p in problems} & {p.question for p in heldout_problems(64)}
    answer = problems[0].answer
    for text in (f"{answer}", f"**Answer:** {answer}", f"So the total is {answer} apples.", f"\\boxed{{{answer}}}"):
        assert check_answer(text, answer), text
    probe = arithmetic_probe(tokenizer, n=4)
    assert probe.correct([str(p.answer) for p in problems[:4]]) == [True] * 4
    assert probe.correct(["I don't know"] * 4) == [False] * 4


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _damage(trainer: Trainer, prompts: list[list[int]], token: int, steps: int = 8) -> None:
    """A deliberately damaging update: the weights trained to answer every prompt with one token."""
    optimizer = torch.optim.Adam([p for p in trainer.model.parameters() if p.requires_grad], lr=3e-2)
    for _ in range(steps):
        loss = 0.0
        for prompt in prompts:
            ids = torch.tensor([prompt + [token] * 8])
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1:-1]
            loss = loss + torch.nn.functional.cross_entropy(logits.float(), torch.full((8,), token))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_the_gate_rejects_a_damaging_update_by_retention_and_passes_an_unchanged_one(tiny_model_dir, tokenizer):
    """The tiny model cannot do arithmetic, so its retention task is to keep the base's own answers
    to 8 prompts (exact match): every one right before, and lost once the weights are damaged."""
    config = TrainConfig(gate="on", gate_max_new_tokens=8, gate_max_kl=1e9, gate_max_length_ratio=1e9,
                         gate_max_repetition_increase=1.0, gate_max_repetition=1.0, gate_anchors=0)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    prompts = [tokenizer.encode(f"Recite line {i} of the poem.") for i in range(8)]
    gate = Gate(trainer, config, tokenizer, lambda: prompts[:2])
    base = gate._answer(prompts).texts
    gate.retention = [RetentionProbe("recall", prompts, [lambda text, b=b: text == b for b in base])]
    same = gate.decide()
    assert same.accepted, same.reason
    assert same.checks["retention"]["recall"]["served"]["candidate_accuracy"] == 1.0
    gate.accept()

    trainer.return_to(1, 0)
    _damage(trainer, prompts, token=tokenizer.encode(" the")[-1])
    damaged = gate.decide()
    assert not damaged.accepted and "retention recall: 0.00 vs served 1.00 (8 lost, 0 gained" in damaged.reason
    assert damaged.checks["retention"]["recall"]["base"]["dropped"]


def test_the_setting_gives_the_gate_the_arithmetic_probe(tiny_model_dir, tokenizer, tmp_path):
    from openclaw_rl.compose import build_updates
    from openclaw_rl.store import Store

    config = TrainConfig(gate="on", gate_retention_problems=4, gate_retention_alpha=0.1)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    gate, _ = build_updates(trainer, config, Store(tmp_path), tokenizer)
    assert [p.name for p in gate.retention] == ["arithmetic"] and len(gate.retention[0].prompts) == 4
    assert gate.retention_alpha == 0.1
    off, _ = build_updates(trainer, TrainConfig(gate="on"), Store(tmp_path / "off"), tokenizer)
    assert off.retention == []
