"""The trainer: batches from exact ids, every method x {full, LoRA}, publishing, the loop.

A tiny Llama (vocab 64, 2 layers) is built from a config into a temporary directory.
Behaviour log-probs of the test samples come from the model itself, computed here one
sample at a time, so the first PPO ratio is 1 exactly as in real serving.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import LOGPROB_ATOL
from openclaw_rl.config import ConfigError, TrainConfig
from openclaw_rl.train.batch import collate, split_micro_batches
from openclaw_rl.train.methods import METHODS
from openclaw_rl.train.trainer import ADAPTER, MICRO_BATCH, Trainer, adamw_options
from openclaw_rl.types import Sample, TurnRecord

TEST_LR = {False: 1e-3, True: 1e-2}  # large enough to see a tiny model move in a few steps
# (reward, has a teacher) per sample; the last one carries no signal for any method. The reward
# doubles as the step advantage, so the stepwise method has the same signal to learn from.
SIGNALS = [(1.0, True), (-1.0, False), (0.0, True), (1.0, False), (None, True), (0.0, False)]


def build_tiny_llama(target: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(target)
    return target


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: ops on a model this small are dominated by thread hand-offs,
    which on a busy two-core machine cost 5x the whole computation."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def reference_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> list[float]:
    """log pi(response | prompt) at a temperature, one sample, no padding: how serving measures it."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]  # (T, V)
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()


def served_logprobs(model, samples: list[Sample]) -> torch.Tensor:
    """Every response token's log-prob under `model`, sample by sample, flattened."""
    return torch.tensor([
        lp for s in samples
        for lp in reference_logprobs(model, s.prompt_token_ids, s.response_token_ids, s.temperature)
    ])


def make_samples(model_dir: Path, signals=SIGNALS, *, policy_version: int = 0, turn_ids=None) -> list[Sample]:
    """Samples of varied lengths and temperatures; behaviour log-probs from the model itself.

    The teacher is synthetic: log-probs shifted from the behaviour ones by up to +-1.5
    (so the OPD clip binds on some tokens) and a sharp top-4 distribution.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(1)
    samples = []
    for i, (reward, has_teacher) in enumerate(signals):
        prompt = torch.randint(1, 64, (2 + i % 3,), generator=g).tolist()
        response = torch.randint(1, 64, (2 + i % 4,), generator=g).tolist()
        temperature = (1.0, 0.7)[i % 2]
        behaviour = reference_logprobs(model, prompt, response, temperature)
        teacher = top_ids = top_logprobs = None
        if has_teacher:
            shift = (torch.rand(len(response), generator=g) * 3 - 1.5).tolist()
            teacher = [b + s for b, s in zip(behaviour, shift)]
            top_ids = [torch.randperm(64, generator=g)[:4].tolist() for _ in response]
            top_logprobs = [[math.log(p) for p in (0.5, 0.2, 0.1, 0.05)] for _ in response]
        samples.append(Sample(
            turn_id=turn_ids[i] if turn_ids else i, session_id="s", policy_version=policy_version,
            prompt_token_ids=prompt, response_token_ids=response, behaviour_logprobs=behaviour,
            temperature=temperature, reward=reward, teacher_logprobs=teacher,
            teacher_top_ids=top_ids, teacher_top_logprobs=top_logprobs, step_advantage=reward,
        ))
    return samples


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


# -- batch ------------------------------------------------------------------------------


def assert_values(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype))


def _sample(turn_id, prompt, response, behaviour, temperature=1.0, **signals) -> Sample:
    return Sample(turn_id=turn_id, session_id="s", policy_version=0, prompt_token_ids=prompt,
                  response_token_ids=response, behaviour_logprobs=behaviour, temperature=temperature, **signals)


def test_collate_pads_the_exact_ids_with_exact_masks() -> None:
    a = _sample(1, [5, 6, 7], [8, 9], [-0.1, -0.2], 0.7, reward=1.0, teacher_logprobs=[-0.3, -0.4])
    b = _sample(2, [10], [11, 12, 13], [-0.5, -0.6, -0.7], reward=0.0)
    c = _sample(3, [14, 15], [16], [-0.8])  # no verdict, no teacher
    batch = collate([a, b, c])

    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [10, 11, 12, 13, 0], [14, 15, 16, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]
    assert batch["response_positions"].tolist() == [[3, 4, 3], [1, 2, 3], [2, 2, 2]]
    assert batch["response_ids"].tolist() == [[8, 9, 0], [11, 12, 13], [16, 0, 0]]
    assert batch["loss_mask"].tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    assert_values(batch["behaviour_logprobs"], [[-0.1, -0.2, 0], [-0.5, -0.6, -0.7], [-0.8, 0, 0]])
    assert batch["reward"].tolist() == [1.0, 0.0, 0.0]
    assert batch["has_reward"].tolist() == [True, True, False]  # a verdict of 0 is a verdict
    assert_values(batch["teacher_logprobs"], [[-0.3, -0.4, 0], [0, 0, 0], [0, 0, 0]])
    assert batch["teacher_mask"].tolist() == [[True, True, False], [False] * 3, [False] * 3]
    assert batch["temperatures"].tolist() == pytest.approx([0.7, 1.0, 1.0])
    assert "teacher_top_ids" not in batch
    # every response id sits where response_positions says
    for row in range(3):
        mask = batch["loss_mask"][row]
        columns = batch["response_positions"][row][mask]
        assert torch.equal(batch["input_ids"][row, columns], batch["response_ids"][row][mask])


def test_micro_batches_group_samples_of_about_one_length_and_keep_every_sample() -> None:
    # (prompt, response) lengths of a multi-turn stream as they arrive: first and third turns mixed
    lengths = [(77, 65), (543, 40), (79, 72), (525, 200), (71, 200), (304, 116), (64, 200), (82, 200)]
    samples = [_sample(i, [1] * p, [2] * t, [0.0] * t) for i, (p, t) in enumerate(lengths)]
    groups = split_micro_batches(samples, 4)
    assert [[s.turn_id for s in g] for g in groups] == [[0, 2, 6, 4], [7, 5, 1, 3]]
    padded = sum(len(g) * max(len(s.prompt_token_ids) + len(s.response_token_ids) for s in g) for g in groups)
    in_order = sum(4 * max(p + t for p, t in lengths[i : i + 4]) for i in (0, 4))
    assert (padded, in_order) == (4 * 271 + 4 * 725, 4 * 725 + 4 * 420)
    assert [len(g) for g in split_micro_batches(samples, 3)] == [3, 3, 2]
    assert [s.turn_id for g in split_micro_batches(samples, 1) for s in g] == [0, 2, 6, 4, 7, 5, 1, 3]


def test_collate_top_k_cuts_to_the_shortest_list_and_pads_ids_with_minus_one() -> None:
    a = _sample(1, [1], [2, 3], [-1.0, -1.0], teacher_logprobs=[-1.0, -2.0],
                teacher_top_ids=[[4, 5, 6], [7, 8, 9]], teacher_top_logprobs=[[-1, -2, -3], [-4, -5, -6]])
    b = _sample(2, [1], [2], [-1.0], teacher_logprobs=[-1.0],
                teacher_top_ids=[[10, 11]], teacher_top_logprobs=[[-0.5, -1.5]])
    c = _sample(3, [1], [2], [-1.0], teacher_logprobs=[-1.0])  # a teacher without top-k
    batch = collate([a, b, c], top_k=16)

    assert batch["teacher_top_ids"].tolist() == [
        [[4, 5], [7, 8]],
        [[10, 11], [-1, -1]],
        [[-1, -1], [-1, -1]],
    ]
    assert_values(batch["teacher_top_logprobs"], [[[-1, -2], [-4, -5]], [[-0.5, -1.5], [0, 0]], [[0, 0], [0, 0]]])
    assert batch["teacher_mask"].tolist() == [[True, True], [True, False], [False, False]]
    assert collate([a], top_k=1)["teacher_top_ids"].tolist() == [[[4], [7]]]


def test_a_sample_payload_from_before_top_p_reads_as_no_truncation() -> None:
    old = {"turn_id": 1, "session_id": "s", "policy_version": 0, "prompt_token_ids": [1], "response_token_ids": [2],
           "behaviour_logprobs": [-0.5], "temperature": 0.7, "reward": 1.0}  # as stores of older versions hold it
    sample = Sample.from_dict(old)
    assert (sample.temperature, sample.top_p) == (0.7, 1.0)
    assert Sample.from_dict(_sample(2, [1], [2], [-0.5], top_p=0.9).to_dict()).top_p == 0.9
    assert collate([sample, _sample(2, [1], [2], [-0.5], top_p=0.9)])["top_ps"].tolist() == pytest.approx([1.0, 0.9])


@pytest.mark.parametrize("field, value, message", [
    ("top_p", 0.0, "top_p 0.0; it must be in \\(0, 1\\]"),
    ("behaviour_logprobs", [-1.0], "2 response tokens but 1 behaviour"),
    ("teacher_logprobs", [-1.0, -1.0, -1.0], "2 response tokens but 3 teacher"),
    ("response_token_ids", [], "at least one of each"),
])
def test_collate_rejects_a_sample_whose_lengths_disagree(field, value, message) -> None:
    fields = dict(turn_id=9, session_id="s", policy_version=0, prompt_token_ids=[1], response_token_ids=[2, 3],
                  behaviour_logprobs=[-1.0, -1.0], temperature=1.0)
    fields[field] = value
    with pytest.raises(ValueError, match=message):
        collate([Sample(**fields)])


# -- config -----------------------------------------------------------------------------


def test_train_config_defaults_are_the_papers() -> None:
    config = TrainConfig()
    assert (config.method, config.batch_size, config.grad_clip, config.learning_rate) == ("combined", 16, 1.0, 1e-5)
    assert TrainConfig(lora=True).learning_rate == 1e-4
    assert TrainConfig(lora=True, lr=3e-4).learning_rate == 3e-4


@pytest.mark.parametrize("overrides, name", [
    ({"method": ""}, "method"), ({"lora_rank": 0}, "lora_rank"), ({"lr": 0.0}, "lr"),
    ({"micro_batch_size": 0}, "micro_batch_size"), ({"eps_low": 1.0}, "eps_low"),
    ({"w_rl": -1.0}, "w_rl"), ({"kl_beta": -0.1}, "kl_beta"),
    ({"train_poll_interval_s": 0.0}, "train_poll_interval_s"),
    ({"gradient_checkpointing": "yes"}, "gradient_checkpointing"),
])
def test_train_config_names_the_bad_field(overrides, name) -> None:
    with pytest.raises(ConfigError, match=f"^{name}"):
        TrainConfig(**overrides)


# -- trainer ----------------------------------------------------------------------------


def test_trainer_logprobs_equal_the_behaviour_logprobs_of_unpadded_scoring(tiny_llama) -> None:
    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(), device="cpu")
    batch = collate(samples)
    with torch.no_grad():
        logprobs, _ = trainer.logprobs(batch)
    mask = batch["loss_mask"]
    torch.testing.assert_close(logprobs[mask], batch["behaviour_logprobs"][mask], atol=1e-5, rtol=0)


def test_a_turn_sampled_with_top_p_has_ratio_one_at_the_first_step(tiny_model_dir, tmp_path) -> None:
    """Sampled by the real engine at T = 1, top-p 0.8: the trainer measures the same distribution,
    so the first ratio is 1, not the kept mass (about 0.8 on this near-uniform tiny model)."""
    from openclaw_rl.engine.local import LocalEngine
    from openclaw_rl.judge.samples import turn_sample
    from openclaw_rl.chat import render_prompt
    from openclaw_rl.store import Store
    from openclaw_rl.types import SamplingParams, TokenStep, Verdict

    engine = LocalEngine(tiny_model_dir, threads=1)
    messages = [{"role": "user", "content": "Name a colour."}]
    prompt = render_prompt(engine.tokenizer, messages, None, None)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.8, seed=3)

    async def sample() -> list[TokenStep]:
        try:
            return [e async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)]
        finally:
            await engine.aclose()

    steps = asyncio.run(sample())
    store = Store(tmp_path)
    store.ensure_session("s", "header")
    turn = store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=messages, prompt_token_ids=prompt,
        response_token_ids=[s.token_id for s in steps], behaviour_logprobs=[s.logprob for s in steps],
        response_text="", tool_calls=[], sampling=params.to_dict(), finish_reason="length"))
    verdict = Verdict(turn_id=turn.id, status="ok", reward=1, votes=[1], raw=[], hints=[], selected_hint=None,
                      overlap_scores=[], judge="test", latency_s=0.0)
    sample = METHODS["combined"].assemble(turn_sample(turn, verdict, None))
    assert (sample.temperature, sample.top_p) == (1.0, 0.8)

    trainer = Trainer(tiny_model_dir, TrainConfig(method="combined", lr=1e-3, kl_beta=0.02), device="cpu")
    with torch.no_grad():
        logprobs, _ = trainer.logprobs(collate([sample]))
    assert logprobs[0].tolist() == pytest.approx(sample.behaviour_logprobs, abs=LOGPROB_ATOL)  # the engine's device
    stats = trainer.step([sample])  # the backward pass runs through the top-p truncation
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=LOGPROB_ATOL)
    assert stats["ref_kl"] == pytest.approx(0.0, abs=1e-6) and math.isfinite(stats["loss"])
    assert trainer.policy_version == 1


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_loss_falls_on_a_repeated_batch_and_the_right_weights_move(tiny_llama, method, lora) -> None:
    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(method=method, lora=lora, lr=TEST_LR[lora]), device="cpu")
    before = snapshot(trainer.model)

    history = [trainer.step(samples) for _ in range(4)]

    losses = [s["loss"] for s in history]
    assert losses[-1] < losses[0] - 1e-3, losses
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the samples came from this very policy
    if method != "topk":
        assert history[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert (trainer.train_step, trainer.policy_version) == (4, 4)
    after = snapshot(trainer.model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    if lora:
        adapter = {name for name in before if "lora_" in name}
        assert len(adapter) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
        assert changed == adapter
        assert {n for n, p in trainer.model.named_parameters() if p.requires_grad} == adapter
    else:
        assert changed == set(before)


def test_micro_batches_give_the_full_batch_loss_and_gradient(tiny_llama) -> None:
    samples = make_samples(tiny_llama)  # includes a sample no term trains on
    stats = {}
    for size in (1, 4, len(samples)):
        config = TrainConfig(method="combined", micro_batch_size=size, grad_clip=1e9)
        trainer = Trainer(tiny_llama, config, device="cpu")
        stats[size] = trainer.step(samples)
    for size in (1, 4):
        assert stats[size]["loss"] == pytest.approx(stats[len(samples)]["loss"], rel=1e-5, abs=1e-7)
        assert stats[size]["grad_norm"] == pytest.approx(stats[len(samples)]["grad_norm"], rel=1e-4)
    assert stats[1]["trained_samples"] == len(samples) - 1


def test_a_cpu_trainer_passes_one_sample_at_a_time_unless_told() -> None:
    assert TrainConfig().micro_batch_size is None  # the device decides
    assert MICRO_BATCH == {False: 1, True: 4}  # CPU: no padding at all; CUDA: wider products


def test_the_trainer_resolves_its_micro_batch_from_the_device(tiny_llama) -> None:
    assert Trainer(tiny_llama, TrainConfig(), device="cpu").micro_batch_size == 1
    assert Trainer(tiny_llama, TrainConfig(micro_batch_size=3), device="cpu").micro_batch_size == 3


def test_the_trainer_asks_for_its_threads_before_every_micro_batch(tiny_llama) -> None:
    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(method="combined", micro_batch_size=2, train_threads=1), device="cpu")
    asked, seen = iter([2, 1, 2, 1, 2, 1]), []
    original = torch.set_num_threads

    def threads() -> int:
        seen.append(torch.get_num_threads())  # what the previous micro-batch ran with
        return next(asked)

    trainer.threads = threads
    try:
        trainer.step(samples)
        after = torch.get_num_threads()
    finally:
        original(1)
    batches = -(-len(samples) // 2)
    assert len(seen) == batches and seen[:3] == [1, 2, 1]  # train_threads first, then each answer in turn
    assert after == [2, 1, 2, 1, 2, 1][batches - 1]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_recomputes_the_layers_and_gives_the_same_step(tiny_llama, lora) -> None:
    samples = make_samples(tiny_llama)
    stats, grads, recomputed = {}, {}, {}
    for mode in ("off", "on", "auto"):
        torch.manual_seed(0)  # the same LoRA A matrices for every mode
        trainer = Trainer(tiny_llama, TrainConfig(method="combined", lora=lora, gradient_checkpointing=mode,
                                                  grad_clip=1e9, micro_batch_size=4), device="cpu")
        calls = []
        for layer in trainer._checkpointed:  # count the layers' trips through torch.utils.checkpoint
            func = layer._gradient_checkpointing_func
            layer._gradient_checkpointing_func = lambda *a, _f=func, **k: calls.append(1) or _f(*a, **k)
        trainer._accumulate([collate(samples)])
        grads[mode] = [p.grad.clone() for p in trainer.trainable]
        stats[mode], recomputed[mode] = trainer.step(samples), len(calls)
    # 2 layers x 3 micro-batches (one here, two in step's batches of 4); auto: far under 2048 tokens
    assert recomputed == {"off": 0, "on": 2 * 3, "auto": 0}
    assert stats["on"]["loss"] == pytest.approx(stats["off"]["loss"], rel=1e-6)
    assert stats["on"]["grad_norm"] == pytest.approx(stats["off"]["grad_norm"], rel=1e-5)
    for on, off in zip(grads["on"], grads["off"]):
        torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-7)


def test_a_batch_without_any_signal_takes_no_step_and_keeps_the_version(tiny_llama) -> None:
    samples = make_samples(tiny_llama, [(0.0, False), (None, False)])
    trainer = Trainer(tiny_llama, TrainConfig(method="combined", lr=1e-2), initial_version=7, device="cpu")
    before = snapshot(trainer.model)
    stats = trainer.step(samples)
    assert (stats["optimizer_steps"], stats["trained_samples"]) == (0, 0)
    assert (trainer.train_step, trainer.policy_version) == (1, 7)
    assert math.isnan(stats["opd_adv_abs_mean"])
    assert all(torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_kl_penalty_measures_distance_from_the_initial_policy(tiny_llama, lora) -> None:
    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(method="binary", lora=lora, lr=TEST_LR[lora], kl_beta=0.02),
                      device="cpu")
    assert (trainer.reference is None) == lora  # LoRA uses the adapter-disabled model instead of a copy
    history = [trainer.step(samples) for _ in range(3)]
    assert history[0]["ref_kl"] == pytest.approx(0.0, abs=1e-7)
    assert history[-1]["ref_kl"] > 1e-6
    if not lora:
        assert all(not p.requires_grad for p in trainer.reference.parameters())


def test_adamw_is_fused_exactly_when_every_trainable_parameter_is_floating_point_on_cuda() -> None:
    # the decision reads each parameter's device type and dtype; stand-ins carry a CUDA device here
    def param(device: str, dtype: torch.dtype = torch.float32) -> SimpleNamespace:
        return SimpleNamespace(device=torch.device(device), dtype=dtype)

    assert adamw_options([param("cuda"), param("cuda:1", torch.bfloat16)]) == {"fused": True}
    assert adamw_options([param("cuda"), param("cpu")]) == {}  # mixed: torch's default
    assert adamw_options([param("cuda", torch.int64)]) == {}  # fused AdamW takes floating point only
    assert adamw_options([torch.zeros(2), torch.zeros(2, device="meta")]) == {}
    assert adamw_options([]) == {}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_cpu_trainer_uses_torch_s_default_adamw_and_lora_trains_the_adapter_alone(tiny_llama, lora) -> None:
    trainer = Trainer(tiny_llama, TrainConfig(method="binary", lora=lora), device="cpu")
    assert not trainer.optimizer.defaults["fused"]
    if not lora:
        return
    names = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert names and all("lora_" in name for name in names)  # the base is frozen
    dropouts = [m for name, m in trainer.model.named_modules() if name.endswith("lora_dropout." + ADAPTER)]
    assert dropouts and all(isinstance(m, torch.nn.Identity) for m in dropouts)  # lora_dropout 0: no dropout


def test_lora_policy_state_dict_loads_into_a_fresh_base_model_and_reproduces_the_trainer(tiny_llama) -> None:
    from transformers import AutoModelForCausalLM

    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(method="combined", lora=True, lr=1e-2), device="cpu")
    for _ in range(3):
        trainer.step(samples)
    batch = collate(samples)
    with torch.no_grad():
        trained, _ = trainer.logprobs(batch)
    training_weights = snapshot(trainer.model)

    state_dict = trainer.policy_state_dict()

    fresh = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    params = dict(fresh.named_parameters())
    assert set(state_dict) == set(params)
    with torch.no_grad():
        base_logprobs = served_logprobs(fresh, samples)
        for name, tensor in state_dict.items():
            params[name].copy_(tensor)
    served = served_logprobs(fresh, samples)
    torch.testing.assert_close(served, trained[batch["loss_mask"]], atol=1e-5, rtol=0)
    assert not torch.allclose(served, base_logprobs, atol=1e-4)  # the adapter did change the policy
    after = snapshot(trainer.model)
    assert all(torch.equal(training_weights[n], after[n]) for n in after)  # merging did not touch the model


# -- the loop ---------------------------------------------------------------------------


def test_run_trainer_claims_steps_publishes_and_checkpoints_against_a_real_store(tiny_llama, store, tmp_path) -> None:
    from openclaw_rl.train import checkpoint
    from openclaw_rl.train.runner import run_trainer
    from openclaw_rl.train.weights import CallbackChannel, Publisher

    store.ensure_session("s", "header")
    turn_ids = [
        store.record_turn(TurnRecord(
            session_id="s", kind="main", policy_version=5, prompt_messages=[], prompt_token_ids=[1],
            response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="", tool_calls=[], sampling={},
            finish_reason="stop")).id
        for _ in range(5)
    ]
    stale, *fresh = make_samples(tiny_llama, SIGNALS[:5], policy_version=5, turn_ids=turn_ids)
    store.add_sample(Sample(**{**stale.to_dict(), "policy_version": 2}))  # 3 behind v5
    for sample in fresh:
        store.add_sample(sample)

    config = TrainConfig(method="combined", batch_size=2, catch_up=1, train_poll_interval_s=0.05, lr=1e-3)
    trainer = Trainer(tiny_llama, config, initial_version=5, device="cpu")
    published: list[tuple[int, set[str]]] = []
    steps: list[dict] = []
    stop = asyncio.Event()

    publisher = Publisher.for_trainer(trainer, [CallbackChannel(lambda version, weights: published.append(
        (version, set(weights))))])

    def on_step(stats: dict) -> None:
        steps.append(stats)
        if len(steps) == 2:
            stop.set()

    asyncio.run(asyncio.wait_for(run_trainer(store, trainer, config, publisher, stop, on_step), 120))

    names = {name for name, _ in trainer.model.named_parameters()}
    assert published == [(6, names), (7, names)]
    assert store.policy_version() == 7
    assert store.sample_counts("combined") == {"ready": 0, "used": 4, "dropped": 1, "rejected": 0}
    assert [s["dropped_stale"] for s in steps] == [1.0, 0.0]
    saved = checkpoint.load_latest(tmp_path)  # written on stop (checkpoint_every is 10)
    assert (saved.train_step, saved.policy_version) == (2, 7)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    store.close()


@pytest.mark.parametrize("catch_up, steps", [(1, [2, 2, 2]), (2, [4, 2]), (4, [6])])
def test_a_trainer_that_fell_behind_takes_up_to_catch_up_batches_at_once(tiny_llama, store, catch_up, steps) -> None:
    from openclaw_rl.train.runner import run_trainer
    from openclaw_rl.train.weights import CallbackChannel, Publisher
    from test_checkpoint import _ready_samples

    _ready_samples(store, tiny_llama, 6)
    config = TrainConfig(method="combined", batch_size=2, catch_up=catch_up, train_poll_interval_s=0.05, lr=1e-3)
    trainer = Trainer(tiny_llama, config, device="cpu")
    publisher = Publisher.for_trainer(trainer, [CallbackChannel(lambda version, weights: None)])
    stop, sizes = asyncio.Event(), []

    def on_step(stats: dict) -> None:
        sizes.append(int(stats["samples"]))
        if len(sizes) == len(steps):
            stop.set()

    asyncio.run(asyncio.wait_for(run_trainer(store, trainer, config, publisher, stop, on_step), 120))
    used = store._db.execute("SELECT train_step, COUNT(*) FROM claims WHERE status = 'used' GROUP BY train_step "
                             "ORDER BY train_step").fetchall()
    assert [count for _, count in used] == sizes == steps  # every sample trained; none waited to go stale
    assert store.policy_version() == len(steps)


def test_a_trainer_says_while_it_is_in_a_step(tiny_llama) -> None:
    samples = make_samples(tiny_llama)
    trainer = Trainer(tiny_llama, TrainConfig(method="combined", batch_size=2, lr=1e-3), device="cpu")
    during = []
    trainer.threads = lambda: during.append(trainer.stepping) or 1  # asked before each micro-batch
    assert not trainer.stepping
    trainer.step(samples)
    assert during and all(during) and not trainer.stepping
    with pytest.raises(ValueError):
        trainer.step([])
    assert not trainer.stepping


def test_the_work_around_a_step_runs_below_servings_cpu_priority_and_the_step_at_it(tiny_llama, store) -> None:
    from openclaw_rl.train.runner import TRAINER_NICE, run_trainer
    from openclaw_rl.train.weights import CallbackChannel, Publisher
    from test_checkpoint import _ready_samples

    _ready_samples(store, tiny_llama, 4)
    config = TrainConfig(method="combined", batch_size=2, catch_up=1, train_poll_interval_s=0.05, lr=1e-3)
    trainer = Trainer(tiny_llama, config, device="cpu")
    publisher = Publisher.for_trainer(trainer, [CallbackChannel(lambda version, weights: None)])
    nice: dict[str, list[int]] = {"step": [], "export": [], "serving": []}

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def watched(name: str, fn):
        def call(*args):
            nice[name].append(niceness())
            return fn(*args)
        return call

    trainer.step = watched("step", trainer.step)  # type: ignore[method-assign]
    publisher.export = watched("export", publisher.export)  # type: ignore[method-assign]
    stop = asyncio.Event()

    def on_step(stats: dict) -> None:  # called on the event loop, where serving runs
        nice["serving"].append(niceness())
        if len(nice["serving"]) == 2:
            stop.set()

    asyncio.run(asyncio.wait_for(run_trainer(store, trainer, config, publisher, stop, on_step), 120))
    assert len(nice["step"]) == len(nice["export"]) == 2
    assert min(nice["export"]) >= TRAINER_NICE > max(nice["step"] + nice["serving"])


def test_the_trainer_steps_on_while_serving_swaps_and_the_store_learns_the_version_after(tiny_llama, store) -> None:
    from openclaw_rl.train.runner import run_trainer
    from openclaw_rl.train.weights import Publisher
    from test_checkpoint import _ready_samples

    _ready_samples(store, tiny_llama, 4)
    config = TrainConfig(method="combined", batch_size=2, catch_up=1, train_poll_interval_s=0.05, lr=1e-3)
    trainer = Trainer(tiny_llama, config, device="cpu")
    received: dict[int, dict] = {}
    store_said: list[tuple[int, int]] = []  # (version being delivered, the store's version then)
    stop = asyncio.Event()

    class SlowEngine:  # a receiver that swaps late, as an engine with rows in flight does
        takes_lora_adapters = False

        async def publish(self, version, weights, *, parent=None):
            store_said.append((version, store.policy_version()))
            if version == 1:
                while trainer.train_step < 2:  # step 2 runs while v1 is still on its way
                    await asyncio.sleep(0.01)
                store_said.append((version, store.policy_version()))
            received[version] = weights

        async def latest(self):
            return max(received, default=None)

    def on_step(stats: dict) -> None:
        if trainer.train_step == 2:
            stop.set()

    publisher = Publisher.for_trainer(trainer, [SlowEngine()])
    asyncio.run(asyncio.wait_for(run_trainer(store, trainer, config, publisher, stop, on_step), 120))
    assert sorted(received) == [1, 2]
    assert store_said == [(1, 0), (1, 0), (2, 1)]  # v1 not announced before its receiver had it; v2 after v1
    assert store.policy_version() == 2 and [v["version"] for v in store.versions()][:2] == [2, 1]
    # what v1's receiver got was copied before step 2 changed the weights
    assert not torch.equal(received[1]["model.embed_tokens.weight"], received[2]["model.embed_tokens.weight"])
