"""Loss and advantage functions against numbers worked out by hand, and gradients
against a float64 reference written here independently (explicit loops, no shared code).
"""

from __future__ import annotations

import math

import pytest
import torch

from openclaw_rl.train.losses import (
    LossParams,
    binary_advantages,
    combined_advantages,
    k3_kl,
    opd_advantages,
    ppo_clip_loss,
    stepwise_advantages,
    topk_reverse_kl,
)
from openclaw_rl.train.methods import get_method

LN2 = math.log(2.0)
NAN, INF = float("nan"), float("inf")


def f32(data: object) -> torch.Tensor:
    return torch.tensor(data, dtype=torch.float32)


def f64(data: object) -> torch.Tensor:
    return torch.tensor(data, dtype=torch.float64)


def mask(data: object) -> torch.Tensor:
    return torch.tensor(data, dtype=torch.bool)


def assert_values(actual: torch.Tensor, expected: object) -> None:
    torch.testing.assert_close(actual.double(), f64(expected), rtol=1e-6, atol=1e-7)


# --- clipped surrogate -------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, advantage, expected_loss, clipped",
    [
        (2.0, +1.0, -1.28, True),  # above 1 + eps_high: capped at 1.28 A
        (0.5, -1.0, 0.8, True),  # below 1 - eps_low with A < 0: min picks 0.8 A = -0.8
        (0.5, +1.0, -0.5, False),  # the pessimistic min keeps the unclipped 0.5 A
        (2.0, -1.0, 2.0, False),  # and here the unclipped -2 A
        (1.1, +2.0, -2.2, False),  # inside the trust region: plain rho A
    ],
)
def test_ppo_single_token_by_hand(ratio: float, advantage: float, expected_loss: float, clipped: bool) -> None:
    logprobs = f64([[math.log(ratio) - 0.7]])
    behaviour = f64([[-0.7]])
    loss, stats = ppo_clip_loss(logprobs, behaviour, f64([[advantage]]), mask([[1]]))
    assert loss.item() == pytest.approx(expected_loss, abs=1e-9)
    assert stats["clip_fraction"] == (1.0 if clipped else 0.0)
    assert stats["ratio_mean"] == pytest.approx(ratio)
    assert stats["approx_kl"] == pytest.approx(ratio - 1 - math.log(ratio))  # k3 of KL(behaviour || current)


def test_ppo_clip_gives_zero_gradient_and_unclipped_gives_rho_times_a() -> None:
    # token 0: ratio 2, A +1 -> clipped, no gradient; token 1: ratio 1, A +3 -> d(-rho A)/dlp = -3.
    logprobs = f32([[LN2, 0.0]]).requires_grad_()
    loss, _ = ppo_clip_loss(logprobs, f32([[0.0, 0.0]]), f32([[1.0, 3.0]]), mask([[1, 1]]))
    loss.backward()
    assert loss.item() == pytest.approx((-1.28 - 3.0) / 2)
    assert_values(logprobs.grad, [[0.0, -1.5]])  # token mean over 2 tokens


def test_ppo_aggregates_per_sample_token_mean_then_mean_over_samples_with_tokens() -> None:
    # Ratio 1 everywhere so each token's loss is -A.
    advantages = f32([[1.0, 3.0, 100.0], [5.0, 100.0, 100.0], [100.0, 100.0, 100.0]])
    loss_mask = mask([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    # Masked positions hold garbage that must not leak into value or gradient.
    logprobs = f32([[-1.0, -2.0, NAN], [-1.0, -INF, NAN], [NAN, NAN, -INF]]).requires_grad_()
    behaviour = f32([[-1.0, -2.0, -INF], [-1.0, NAN, 0.0], [0.0, NAN, NAN]])
    loss, stats = ppo_clip_loss(logprobs, behaviour, advantages, loss_mask)
    # sample 0: mean(-1, -3) = -2; sample 1: -5; sample 2 has no tokens and is left out.
    # (A token mean would give -3, a mean over all 3 samples -7/3.)
    assert loss.item() == pytest.approx(-3.5)
    assert stats["samples"] == 2.0
    loss.backward()
    expected_grad = [[-1 / 2 / 2, -3 / 2 / 2, 0.0], [-5 / 1 / 2, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert_values(logprobs.grad, expected_grad)


def test_ppo_with_every_token_masked_is_zero_and_backward_works() -> None:
    logprobs = f32([[-1.0, NAN]]).requires_grad_()
    loss, stats = ppo_clip_loss(logprobs, f32([[-2.0, 0.0]]), f32([[1.0, 1.0]]), mask([[0, 0]]))
    loss.backward()
    assert loss.item() == 0.0
    assert stats["samples"] == 0.0
    assert logprobs.grad.tolist() == [[0.0, 0.0]]


def test_ppo_rejects_a_clip_range_that_is_not_one() -> None:
    with pytest.raises(ValueError, match="eps_low"):
        ppo_clip_loss(f32([[0.0]]), f32([[0.0]]), f32([[1.0]]), mask([[1]]), eps_low=1.5)


def test_ppo_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"advantages has shape \(1, 2\)"):
        ppo_clip_loss(f32([[0.0]]), f32([[0.0]]), f32([[1.0, 1.0]]), mask([[1]]))


# --- k3 KL -------------------------------------------------------------------------


def test_k3_by_hand_with_aggregation() -> None:
    # ref - lp = ln 2 gives 2 - ln 2 - 1; ref == lp gives 0; ref - lp = -ln 2 gives 0.5 + ln 2 - 1.
    logprobs = f32([[-1.0, -1.0, NAN], [-1.0, -INF, NAN]]).requires_grad_()
    ref = f32([[-1.0 + LN2, -1.0, 0.0], [-1.0 - LN2, NAN, 0.0]])
    kl = k3_kl(logprobs, ref, mask([[1, 1, 0], [1, 0, 0]]))
    sample0 = ((1 - LN2) + 0.0) / 2
    sample1 = 0.5 + LN2 - 1
    assert kl.item() == pytest.approx((sample0 + sample1) / 2)
    # d/dlp = 1 - exp(ref - lp), scaled by 1 / (tokens in the sample) / (2 samples).
    kl.backward()
    assert_values(logprobs.grad, [[(1 - 2) / 4, 0.0, 0.0], [(1 - 0.5) / 2, 0.0, 0.0]])


# --- advantages --------------------------------------------------------------------


def test_opd_advantage_is_clipped_gap_and_zero_without_teacher() -> None:
    behaviour = f32([[-1.0, -1.0, -1.0, -1.0, -1.0]])
    teacher = f32([[-0.5, 2.0, -3.0, NAN, -0.2]])  # the 4th and 5th have no teacher
    teacher_mask = mask([[1, 1, 1, 0, 0]])
    assert_values(opd_advantages(teacher, behaviour, teacher_mask, clip_c=1.0), [[0.5, 1.0, -1.0, 0.0, 0.0]])
    assert_values(opd_advantages(teacher, behaviour, teacher_mask, clip_c=0.25), [[0.25, 0.25, -0.25, 0.0, 0.0]])


def test_opd_mean_baseline_centres_each_sample_on_its_teacher_tokens() -> None:
    behaviour = f32([[-1.0, -1.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0, -1.0]])
    teacher = f32([[-0.5, 2.0, -3.0, NAN, -0.2], [NAN, NAN, NAN, NAN, NAN]])  # row 2: no teacher at all
    teacher_mask = mask([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    centred = opd_advantages(teacher, behaviour, teacher_mask, clip_c=1.0, baseline="mean")
    mean = (0.5 + 1.0 - 1.0) / 3  # of the clipped gaps, over the 3 teacher tokens
    assert_values(centred, [[0.5 - mean, 1.0 - mean, -1.0 - mean, 0.0, 0.0], [0.0] * 5])
    assert float(centred[0, :3].sum()) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="unknown OPD baseline 'median'"):
        opd_advantages(teacher, behaviour, teacher_mask, baseline="median")


def test_opd_advantage_carries_no_gradient() -> None:
    teacher = f32([[-0.5]]).requires_grad_()
    assert not opd_advantages(teacher, f32([[-1.0]]), mask([[1]])).requires_grad


def test_combined_advantages_by_hand() -> None:
    reward = f32([1.0, -1.0, 1.0, 0.0, 0.0, 0.0])
    has_reward = mask([1, 1, 0, 0, 1, 1])
    # samples: r=+1 & teacher | r=-1, no teacher | no verdict (r=+1 ignored) & teacher
    #        | neither | r=0 verdict, no teacher | r=0 verdict & teacher
    opd = f32([[0.5, -0.25, 0.0], [0.0] * 3, [0.3, 0.3, 0.0], [0.0] * 3, [0.0] * 3, [-0.5, 1.0, 0.0]])
    has_teacher = mask([1, 0, 1, 0, 0, 1])
    loss_mask = mask([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
    adv, keep = combined_advantages(reward, has_reward, opd, has_teacher, loss_mask, w_rl=2.0, w_opd=0.5)
    assert_values(
        adv, [[2.25, 1.875, 0.0], [-2.0, -2.0, -2.0], [0.15, 0.15, 0.0], [0.0] * 3, [0.0] * 3, [-0.25, 0.5, 0.0]]
    )
    assert keep.tolist() == [
        [True, True, False],  # padding stays masked
        [True, True, True],
        [True, True, False],
        [False, False, False],  # neither signal
        [False, False, False],  # reward 0 moves nothing
        [True, True, False],
    ]


def test_combined_with_token_level_teacher_mask_keeps_only_taught_tokens() -> None:
    adv, keep = combined_advantages(f32([0.0]), mask([0]), f32([[0.5, 0.7]]), mask([[1, 0]]), mask([[1, 1]]))
    assert_values(adv, [[0.5, 0.0]])
    assert keep.tolist() == [[True, False]]


def test_binary_advantages_mask_zero_reward_and_missing_verdict() -> None:
    reward = f32([1.0, -1.0, 0.0, 1.0])
    has_reward = mask([1, 1, 1, 0])  # the last has no verdict: its 1.0 is stale
    loss_mask = mask([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]])
    adv, keep = binary_advantages(reward, has_reward, loss_mask)
    assert adv.tolist() == [[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0], [0.0] * 3, [0.0] * 3]
    assert keep.tolist() == [[True, True, False], [True, True, True], [False] * 3, [False] * 3]


def test_stepwise_standardizes_within_task_and_step_and_drops_flat_groups() -> None:
    # (task, step): outcome + mean(votes) = r
    records = [
        ("a", 0, 1.0, [1.0, 1.0]),  # r = 2
        ("b", 1, -1.0, [1.0, 1.0]),  # r = 0: the votes are averaged, not summed
        ("a", 1, 1.0, [0.0]),  # r = 1
        ("a", 0, 0.0, [1.0, -1.0]),  # r = 0
        ("b", 0, 0.0, [1.0, 1.0, 0.0, 0.0]),  # r = 0.5, alone in its group
        ("b", 1, 3.0, []),  # r = 3: no votes -> process term 0
        ("a", 1, 1.0, []),  # r = 1
        ("b", 1, 0.0, [0.0, 0.0]),  # r = 0
    ]
    tasks, steps, outcomes, votes = (list(column) for column in zip(*records))
    adv, keep = stepwise_advantages(tasks, steps, outcomes, votes)
    # (a, 0): r = [2, 0], mean 1, population std 1 -> [+1, -1].
    # (b, 1): r = [0, 3, 0], mean 1, population var (1 + 4 + 1) / 3 = 2 -> [-1, 2, -1] / sqrt 2.
    # (a, 1): r = [1, 1] has zero variance and (b, 0) one member: both dropped.
    s2 = math.sqrt(2.0)
    assert adv.tolist() == pytest.approx([1.0, -1 / s2, 0.0, -1.0, 0.0, 2 / s2, 0.0, -1 / s2])
    assert keep.tolist() == [True, True, False, True, False, True, False, True]
    assert adv.dtype == torch.float32


def test_stepwise_accepts_tensors() -> None:
    tasks, steps = torch.tensor([7, 7, 7]), torch.tensor([0, 0, 0])
    adv, keep = stepwise_advantages(tasks, steps, f32([1.0, 0.0, 0.0]), f32([[1.0], [1.0], [-1.0]]))
    # r = [2, 1, -1], mean 2/3, population var (16 + 1 + 25) / 27 = 42 / 27.
    std = math.sqrt(42 / 27)
    assert adv.tolist() == pytest.approx([(4 / 3) / std, (1 / 3) / std, (-5 / 3) / std], rel=1e-6)
    assert keep.all()


def test_stepwise_rejects_ragged_inputs() -> None:
    with pytest.raises(ValueError, match="one entry per step"):
        stepwise_advantages(["a", "a"], [0], [1.0, 0.0], [[1.0], [0.0]])


# --- top-k reverse KL --------------------------------------------------------------


def _logits(*probs: float) -> list[float]:
    return [math.log(p) + 3.0 for p in probs]  # a shift: logits, not log-probs


def test_topk_reverse_kl_by_hand() -> None:
    student = f32([[_logits(0.5, 0.25, 0.125, 0.125)]])  # (1, 1, 4)
    ids = torch.tensor([[[1, 0]]])
    teacher = f32([[[math.log(0.5), math.log(0.25)]]])
    # student bins (0.25, 0.5, tail 0.25), teacher bins (0.5, 0.25, tail 0.25):
    # 0.25 ln(0.25/0.5) + 0.5 ln(0.5/0.25) + 0 = 0.25 ln 2.
    kl = topk_reverse_kl(student, ids, teacher, mask([[1]]))
    assert kl.item() == pytest.approx(0.25 * LN2, rel=1e-6)
    # Log-probs instead of logits give the same number.
    as_logprobs = torch.log_softmax(student, -1)
    assert topk_reverse_kl(as_logprobs, ids, teacher, mask([[1]])).item() == pytest.approx(0.25 * LN2, rel=1e-6)


def test_topk_reverse_kl_floors_an_empty_teacher_tail() -> None:
    student = f32([[_logits(0.5, 0.25, 0.125, 0.125)]])
    ids = torch.tensor([[[0, 1]]])
    teacher = f32([[[math.log(0.6), math.log(0.4)]]])  # teacher tail = 0 -> floor 1e-8
    expected = 0.5 * math.log(0.5 / 0.6) + 0.25 * math.log(0.25 / 0.4) + 0.25 * math.log(0.25 / 1e-8)
    kl = topk_reverse_kl(student, ids, teacher, mask([[1]]))
    assert kl.item() == pytest.approx(expected, rel=1e-5)


def test_topk_reverse_kl_floors_bins_that_top_p_cut_on_either_side() -> None:
    # After top-p the student keeps tokens 0 and 1 (2/3, 1/3) and the teacher keeps 0 only;
    # the teacher's top-2 lists token 1 at -inf, vLLM would say -9999.
    student = f32([[[math.log(2 / 3), math.log(1 / 3), -INF, -INF]]]).requires_grad_()
    ids = torch.tensor([[[0, 1]]])
    for cut in (-INF, -9999.0):
        teacher = f32([[[0.0, cut]]])
        # bins (2/3, 1/3, tail floored) against (1, floored, tail floored)
        expected = 2 / 3 * math.log(2 / 3) + 1 / 3 * math.log((1 / 3) / 1e-8)
        kl = topk_reverse_kl(student, ids, teacher, mask([[1]]))
        assert kl.item() == pytest.approx(expected, rel=1e-5)
    kl.backward()
    assert torch.isfinite(student.grad).all()
    flipped = topk_reverse_kl(f32([[[0.0, -INF, -INF, -INF]]]), ids, f32([[[math.log(0.5), math.log(0.5)]]]),
                              mask([[1]]))  # a student whose nucleus holds one token
    assert flipped.item() == pytest.approx(math.log(2), abs=1e-6)  # 1 ln(1 / 0.5), the floored bins ~1e-7


def test_method_loss_measures_the_reference_kl_with_its_own_logprobs() -> None:
    batch = _method_batch()
    truncated = batch["behaviour_logprobs"].clone()
    truncated[0, 0] = -INF  # the current nucleus cuts a sampled token: finite ratio clip, but no finite KL
    ref = batch["behaviour_logprobs"] + LN2
    params = LossParams(kl_beta=0.02)
    loss, stats = get_method("binary").loss(batch, truncated, ref_logprobs=ref, params=params,
                              kl_logprobs=batch["behaviour_logprobs"].clone())
    assert stats["ref_kl"] == pytest.approx(1 - LN2) and math.isfinite(loss.item())


def test_topk_reverse_kl_aggregates_and_ignores_padding() -> None:
    same = _logits(0.5, 0.25, 0.125, 0.125)
    student = f32([[same, same], [same, same]]).requires_grad_()  # (2, 2, 4)
    ids = torch.tensor([[[1, 0], [-1, -1]], [[0, 1], [-1, -1]]])  # -1: padding ids
    top = [math.log(0.5), math.log(0.25)]
    teacher = f32([[top, [NAN, NAN]], [top, [NAN, NAN]]])
    kl = topk_reverse_kl(student, ids, teacher, mask([[1, 0], [1, 0]]))
    # sample 0 as in the hand test (0.25 ln 2); sample 1 matches the teacher exactly (0).
    assert kl.item() == pytest.approx(0.25 * LN2 / 2, rel=1e-6)
    kl.backward()
    assert torch.isfinite(student.grad).all()
    assert student.grad[:, 1].abs().max().item() == 0.0


# --- gradients against a float64 reference ----------------------------------------


def _ref_aggregate(per_token: list[list[torch.Tensor | None]]) -> torch.Tensor:
    sample_means = []
    for row in per_token:
        kept = [x for x in row if x is not None]
        if kept:
            sample_means.append(sum(kept) / len(kept))
    return sum(sample_means) / len(sample_means)


def _ref_ppo(lp, blp, adv, m, eps_low=0.2, eps_high=0.28):  # float64, one token at a time
    rows = []
    for b in range(lp.shape[0]):
        row = []
        for i in range(lp.shape[1]):
            if not m[b, i]:
                row.append(None)
                continue
            ratio = torch.exp(lp[b, i] - blp[b, i])
            row.append(-torch.minimum(ratio * adv[b, i], torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv[b, i]))
        rows.append(row)
    return _ref_aggregate(rows)


def _ref_k3(lp, ref, m):
    rows = []
    for b in range(lp.shape[0]):
        row = []
        for i in range(lp.shape[1]):
            d = ref[b, i] - lp[b, i]
            row.append(torch.exp(d) - d - 1 if m[b, i] else None)
        rows.append(row)
    return _ref_aggregate(rows)


def _ref_topk(logits, ids, teacher, m, floor=1e-8):
    rows = []
    for b in range(logits.shape[0]):
        row = []
        for i in range(logits.shape[1]):
            if not m[b, i]:
                row.append(None)
                continue
            p = torch.softmax(logits[b, i], -1)
            p_bins = torch.cat([p[ids[b, i]], (1 - p[ids[b, i]].sum()).clamp(min=floor).reshape(1)])
            q_top = torch.exp(teacher[b, i])
            q_bins = torch.cat([q_top, (1 - q_top.sum()).clamp(min=floor).reshape(1)])
            row.append((p_bins * (torch.log(p_bins) - torch.log(q_bins))).sum())
        rows.append(row)
    return _ref_aggregate(rows)


def _random_batch(seed: int, batch: int = 3, tokens: int = 5):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(batch, tokens, generator=g, dtype=torch.float64) * 3
    blp = lp + (torch.rand(batch, tokens, generator=g, dtype=torch.float64) - 0.5) * 1.2  # ratios ~0.55..1.8
    adv = torch.randn(batch, tokens, generator=g, dtype=torch.float64)
    m = torch.rand(batch, tokens, generator=g) > 0.3
    m[-1] = False  # one sample with no tokens
    m[0, 0] = True
    return lp, blp, adv, m


def _grad(fn, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    value = fn(x)
    (grad,) = torch.autograd.grad(value, x)
    return value.item(), grad.double()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_value_and_gradient_match_float64_reference(seed: int) -> None:
    lp, blp, adv, m = _random_batch(seed)
    value, grad = _grad(lambda x: ppo_clip_loss(x, blp.float(), adv.float(), m)[0], lp.float())
    ref_value, ref_grad = _grad(lambda x: _ref_ppo(x, blp, adv, m), lp)
    assert value == pytest.approx(ref_value, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-6)
    assert ref_grad.abs().sum() > 0  # the comparison is not between two zeros


@pytest.mark.parametrize("seed", [0, 1])
def test_k3_value_and_gradient_match_float64_reference(seed: int) -> None:
    lp, ref, _, m = _random_batch(seed)
    value, grad = _grad(lambda x: k3_kl(x, ref.float(), m), lp.float())
    ref_value, ref_grad = _grad(lambda x: _ref_k3(x, ref, m), lp)
    assert value == pytest.approx(ref_value, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-6)
    assert ref_grad.abs().sum() > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_topk_value_and_gradient_match_float64_reference(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    batch, tokens, vocab, k = 3, 4, 11, 3
    logits = torch.randn(batch, tokens, vocab, generator=g, dtype=torch.float64) * 2
    teacher_logits = torch.randn(batch, tokens, vocab, generator=g, dtype=torch.float64) * 2
    teacher_top, ids = torch.log_softmax(teacher_logits, -1).topk(k, dim=-1)
    m = torch.rand(batch, tokens, generator=g) > 0.3
    m[-1], m[0, 0] = False, True
    value, grad = _grad(lambda x: topk_reverse_kl(x, ids, teacher_top.float(), m), logits.float())
    ref_value, ref_grad = _grad(lambda x: _ref_topk(x, ids, teacher_top, m), logits)
    assert value == pytest.approx(ref_value, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-6)
    assert ref_grad.abs().sum() > 0


# --- a method's loss: the terms it names (train/methods.py) ---------------------------------------------------------------


def _method_batch() -> dict[str, torch.Tensor]:
    # sample 0: reward +1 and a teacher; sample 1: reward +1, no teacher;
    # sample 2: no verdict, a teacher. Behaviour == current, so every ratio is 1.
    return {
        "loss_mask": mask([[1, 1], [1, 1], [1, 0]]),
        "behaviour_logprobs": f32([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]]),
        "reward": f32([1.0, 1.0, 0.0]),
        "has_reward": mask([1, 1, 0]),
        # gaps: +0.5 and -2 (clipped to -1); none; +0.2
        "teacher_logprobs": f32([[-0.5, -3.0], [NAN, NAN], [-0.8, NAN]]),
        "teacher_mask": mask([[1, 1], [0, 0], [1, 0]]),
        # an agent step's standardized advantage: +0.5, -1.5, none
        "step_advantage": f32([0.5, -1.5, 0.0]),
        "has_step_advantage": mask([1, 1, 0]),
    }


@pytest.mark.parametrize(
    "method, expected",
    [
        # -A averaged per sample, then over kept samples.
        ("binary", (-1.0 + -1.0) / 2),  # sample 2 has no verdict
        ("opd", (-(0.5 - 1.0) / 2 + -0.2) / 2),  # sample 1 has no teacher: masked, not zero-filled
        ("combined", (-(1.5 + 0.0) / 2 + -1.0 + -0.2) / 3),
        ("stepwise", (-0.5 + 1.5) / 2),  # A_t = the step advantage; sample 2 has none
    ],
)
def test_method_loss_trains_the_terms_its_method_names(method: str, expected: float) -> None:
    batch = _method_batch()
    loss, stats = get_method(method).loss(batch, batch["behaviour_logprobs"].clone())
    assert loss.item() == pytest.approx(expected)
    assert stats["loss"] == pytest.approx(expected)


def test_method_loss_adds_the_k3_penalty_over_trained_tokens() -> None:
    batch = _method_batch()
    ref = batch["behaviour_logprobs"] + LN2  # k3 = 2 - ln 2 - 1 on every token
    params = LossParams(kl_beta=0.02)
    loss, stats = get_method("binary").loss(batch, batch["behaviour_logprobs"].clone(), ref_logprobs=ref, params=params)
    assert stats["ref_kl"] == pytest.approx(1 - LN2)
    assert loss.item() == pytest.approx(-1.0 + 0.02 * (1 - LN2))


def test_method_loss_topk_uses_only_positions_with_a_teacher() -> None:
    same = _logits(0.5, 0.25, 0.125, 0.125)
    batch = {
        "loss_mask": mask([[1, 1], [1, 1]]),
        "teacher_mask": mask([[1, 0], [0, 0]]),  # one taught position in the whole batch
        "teacher_top_ids": torch.tensor([[[1, 0], [0, 1]], [[0, 1], [0, 1]]]),
        "teacher_top_logprobs": f32([[[math.log(0.5), math.log(0.25)]] * 2, [[0.0, 0.0]] * 2]),
    }
    loss, _ = get_method("topk").loss(batch, torch.zeros(2, 2), logits=f32([[same, same], [same, same]]))
    assert loss.item() == pytest.approx(0.25 * LN2, rel=1e-6)


def test_method_loss_raises_on_a_missing_batch_key_instead_of_training_less() -> None:
    batch = _method_batch()
    del batch["teacher_logprobs"]
    with pytest.raises(ValueError, match="teacher_logprobs"):
        get_method("combined").loss(batch, batch["behaviour_logprobs"])


def test_method_loss_needs_ref_logprobs_when_kl_is_on_and_logits_for_topk() -> None:
    batch = _method_batch()
    with pytest.raises(ValueError, match="ref_logprobs"):
        get_method("binary").loss(batch, batch["behaviour_logprobs"], params=LossParams(kl_beta=0.02))
    batch |= {"teacher_top_ids": torch.zeros(3, 2, 1, dtype=torch.long), "teacher_top_logprobs": torch.zeros(3, 2, 1)}
    with pytest.raises(ValueError, match="logits"):
        get_method("topk").loss(batch, batch["behaviour_logprobs"])
