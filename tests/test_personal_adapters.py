"""Personal adapters on the local engine: each row of one decode batch under its own user's LoRA.

The reference for a user's row is a plain transformers forward of the base model with that
user's peft adapter merged into its weights (peft's own merge_and_unload)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import AutoModelForCausalLM

from openclaw_rl.engine import kernels
from openclaw_rl.engine.adapters import TARGETS, LoraPass, PersonalAdapter, model_shapes, prepare
from openclaw_rl.engine.base import EngineError, LoraAdapter, Started
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.types import SamplingParams, TokenStep

PROMPTS = {"alice": [1, 17, 230, 45, 9, 301, 12], "bob": [1, 88, 14, 601, 7], "carol": [1, 5, 5, 402, 33, 71]}


def _adapter(model_dir, seed: int, rank: int = 4, alpha: int = 8) -> tuple[LoraAdapter, torch.nn.Module]:
    """A peft adapter with random A and B (B is zero at peft's init: no effect to test) and the
    base model with it merged, the reference."""
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                           LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(TARGETS), lora_dropout=0.0))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
    return LoraAdapter(state, {"r": rank, "lora_alpha": alpha}), model.merge_and_unload().eval()


def _reference(model, prompt: list[int], response: list[int]) -> list[float]:
    """Untempered log-probs of `response` after `prompt` (what greedy turns record)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()


async def _collect(stream) -> tuple[Started, list[int], list[float]]:
    events = [event async for event in stream]
    steps = [e for e in events if isinstance(e, TokenStep)]
    return events[0], [s.token_id for s in steps], [s.logprob for s in steps]


@pytest.fixture(scope="module")
def adapters(tiny_model_dir):
    return {"alice": _adapter(tiny_model_dir, 1), "bob": _adapter(tiny_model_dir, 2), "alice2": _adapter(tiny_model_dir, 3)}


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _held(engine: LocalEngine) -> tuple[threading.Event, threading.Event]:
    """A gate before each of the model thread's ticks (the per-step thread budget hook): clear it
    and the thread stops at its next tick and sets `blocked`, so a test can line up work."""
    gate, blocked = threading.Event(), threading.Event()
    gate.set()

    def hook() -> int:
        if not gate.is_set():
            blocked.set()
            gate.wait()
        return 1

    engine.threads_now = hook
    return gate, blocked


@pytest.mark.parametrize("use_kernels", [True, False])
def test_one_batch_mixes_users_and_each_row_records_its_own_adapters_logprobs(tiny_model_dir, adapters, base,
                                                                            use_kernels, monkeypatch):
    if use_kernels and not kernels.available():
        pytest.skip("no compiled kernels here (no compiler or no AVX2)")
    if not use_kernels:  # the decode step's deltas with torch's products (batches over 16 rows, GPUs)
        monkeypatch.setattr(kernels, "available", lambda: False)

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            gate, blocked = _held(engine)
            await engine.load_adapter("alice", adapters["alice"][0], 1)
            await engine.load_adapter("bob", adapters["bob"][0], 1)
            gate.clear()
            await asyncio.to_thread(blocked.wait)  # the model thread is held: all three join one batch
            streams = [engine.stream(PROMPTS[user], SamplingParams(max_new_tokens=10, temperature=0, adapter=user))
                       for user in ("alice", "bob", "carol")]
            tasks = [asyncio.create_task(_collect(s)) for s in streams]
            while engine.stats()["waiting_requests"] < 3:
                await asyncio.sleep(0)  # the streams enqueue on their first step
            gate.set()
            results = dict(zip(("alice", "bob", "carol"), await asyncio.gather(*tasks)))
            assert engine.stats()["max_batch_seen"] == 3
            return results
        finally:
            await engine.aclose()

    results = asyncio.run(main())
    for user, model in (("alice", adapters["alice"][1]), ("bob", adapters["bob"][1]), ("carol", base)):
        started, tokens, logprobs = results[user]
        assert started.adapter_version == (None if user == "carol" else 1)
        expected = _reference(model, PROMPTS[user], tokens)
        assert torch.allclose(torch.tensor(logprobs), torch.tensor(expected), atol=1e-4), (user, logprobs, expected)
    # the adapters change what is sampled: alice's tokens under the base would score differently
    alice_tokens = results["alice"][1]
    assert not torch.allclose(torch.tensor(_reference(base, PROMPTS["alice"], alice_tokens)),
                              torch.tensor(results["alice"][2]), atol=1e-2)


def test_a_row_without_adapter_gets_exactly_zero_delta(tiny_model_dir, adapters, base):
    shapes = model_shapes(base)
    ready = prepare(adapters["alice"][0], "alice", 1, shapes, dtype=torch.float32, device="cpu")
    lora = LoraPass([ready, None, ready], [1, 1, 1])
    out_features, in_features = shapes[(0, "q_proj")]
    h, y = torch.randn(3, in_features), torch.randn(3, out_features)
    out = lora.add(0, "q_proj", h, y)
    assert torch.equal(out[1], y[1])  # bit for bit
    assert not torch.equal(out[0], y[0])


def test_each_row_adds_its_own_adapters_delta_with_the_kernel_and_with_torch():
    """Rows sharing an adapter, rows without one, ranks 8, 4 and 13, an adapter that does not
    train the projection: against a float64 product per row."""
    g = torch.Generator().manual_seed(0)

    def adapter(name: str, rank: int, key: tuple[int, str]) -> PersonalAdapter:
        return PersonalAdapter(name, 1, rank, {key: (torch.randn(rank, 96, generator=g),
                                                     torch.randn(rank, 200, generator=g))})

    q, k = (0, "q_proj"), (0, "k_proj")
    a, b, c, only_k = adapter("a", 8, q), adapter("b", 4, q), adapter("c", 13, q), adapter("d", 8, k)
    rows = [a, None, b, a, c, only_k, None, c, b]
    lora = LoraPass(rows, [1] * len(rows))
    h, y = torch.randn(len(rows), 96, generator=g), torch.randn(len(rows), 200, generator=g)
    expected = y.double().clone()
    for i, row in enumerate(rows):
        if row is not None and q in row.weights:
            down, up = row.weights[q]
            expected[i] += (h[i].double() @ down.double().T) @ up.double()
    ways = {"torch": lora.add(0, "q_proj", h, y.clone())}
    if kernels.available():
        ways["kernel"] = lora.add_rows(0, "q_proj", h, y.clone())
    for way, out in ways.items():
        assert torch.allclose(out.double(), expected, atol=1e-4), (way, (out.double() - expected).abs().max())
        for i in (1, 5, 6):  # no adapter, or one that does not train q_proj: the base's row, bit for bit
            assert torch.equal(out[i], y[i]), way


def test_a_new_adapter_version_pauses_nobody_and_rows_in_flight_keep_theirs(tiny_model_dir, adapters):
    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            gate, blocked = _held(engine)
            await engine.load_adapter("alice", adapters["alice"][0], 1)
            first = engine.stream(PROMPTS["alice"], SamplingParams(max_new_tokens=24, temperature=0, adapter="alice"))
            started = await anext(first)
            step = await anext(first)
            gate.clear()
            await asyncio.to_thread(blocked.wait)  # held between two steps, with alice's row in flight
            assert engine.stats()["active_rows"] == 1
            load = asyncio.create_task(engine.load_adapter("alice", adapters["alice2"][0], 2))
            while engine.stats()["jobs_waiting"] < 1:
                await asyncio.sleep(0)
            gate.set()
            await load  # ran between two steps: the row was not drained first
            second = await _collect(engine.stream(PROMPTS["alice"], SamplingParams(max_new_tokens=6, temperature=0,
                                                                                   adapter="alice")))
            rest = await _collect(first)
            return started, [step.token_id, *rest[1]], [step.logprob, *rest[2]], second
        finally:
            await engine.aclose()

    started, tokens, logprobs, second = asyncio.run(main())
    assert started.adapter_version == 1 and len(tokens) == 24
    assert torch.allclose(torch.tensor(logprobs), torch.tensor(_reference(adapters["alice"][1], PROMPTS["alice"],
                                                                          tokens)), atol=1e-4)
    assert second[0].adapter_version == 2
    assert torch.allclose(torch.tensor(second[2]), torch.tensor(_reference(adapters["alice2"][1], PROMPTS["alice"],
                                                                           second[1])), atol=1e-4)


def test_dropping_an_adapter_serves_the_shared_model_and_scoring_uses_the_users_adapter(tiny_model_dir, adapters,
                                                                                        base):
    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            await engine.load_adapter("alice", adapters["alice"][0], 1)
            scored = await engine.score(PROMPTS["alice"], [5, 6, 7], temperature=0, adapter="alice")
            assert engine.adapter_versions() == {"alice": 1}
            await engine.drop_adapter("alice")
            after = await _collect(engine.stream(PROMPTS["alice"], SamplingParams(max_new_tokens=4, temperature=0,
                                                                                  adapter="alice")))
            return scored, after, engine.adapter_versions()
        finally:
            await engine.aclose()

    scored, (started, tokens, logprobs), versions = asyncio.run(main())
    assert torch.allclose(torch.tensor(scored.logprobs), torch.tensor(_reference(adapters["alice"][1],
                                                                                 PROMPTS["alice"], [5, 6, 7])), atol=1e-4)
    assert versions == {} and started.adapter_version is None
    assert torch.allclose(torch.tensor(logprobs), torch.tensor(_reference(base, PROMPTS["alice"], tokens)), atol=1e-4)


def test_an_adapter_that_does_not_fit_the_model_is_refused_by_name(tiny_model_dir, adapters):
    state = dict(adapters["alice"][0].state_dict)
    name = next(k for k in state if "q_proj.lora_A" in k)
    state[name] = state[name][:, :-1]

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=2, threads=1)
        try:
            with pytest.raises(EngineError, match="q_proj has A"):
                await engine.load_adapter("alice", LoraAdapter(state, {"r": 4, "lora_alpha": 8}), 1)
            with pytest.raises(EngineError, match="r=0"):
                await engine.load_adapter("alice", LoraAdapter(state, {}), 1)
        finally:
            await engine.aclose()

    asyncio.run(main())


def test_a_prefix_kept_from_an_adapted_answer_serves_only_that_adapter_version(tiny_model_dir, adapters, base):
    """A finished row's keys are kept for its user's next turn (the prefix cache); keys computed under
    the user's adapter must not serve the same user once the adapter is gone (turned off, reset)."""
    prompt = [1, *range(40, 80)]  # long enough to be kept (prefixes.MIN_TOKENS)

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            await engine.load_adapter("alice", adapters["alice"][0], 1)
            params = dict(max_new_tokens=4, temperature=0, cache_scope="alice")
            adapted = await _collect(engine.stream(prompt, SamplingParams(**params, adapter="alice")))
            await engine.drop_adapter("alice")
            plain = await _collect(engine.stream(prompt + adapted[1], SamplingParams(**params, adapter="alice")))
            return adapted, plain, engine.stats()
        finally:
            await engine.aclose()

    adapted, (started, tokens, logprobs), _ = asyncio.run(main())
    assert started.adapter_version is None
    expected = _reference(base, prompt + adapted[1], tokens)
    assert torch.allclose(torch.tensor(logprobs), torch.tensor(expected), atol=1e-4)


def test_the_judges_teacher_scores_a_users_turn_under_that_users_adapter(tiny_model_dir, adapters, base):
    """The hint teacher and the experience pass score alice's turn under alice's adapter (what
    sampled it, what her trainer steps), and bob's, who has none, under the shared model."""
    from transformers import AutoTokenizer

    from openclaw_rl.chat import render_prompt
    from openclaw_rl.judge.teacher import HINT_PREFIX, score_experience, score_hints
    from openclaw_rl.types import Turn

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    block = "Lessons: answer in one sentence."
    served = render_prompt(tokenizer, [{"role": "system", "content": block}, *messages], None, None)
    response = [5, 6, 7, 8]

    def turn(owner: str) -> Turn:
        return Turn(id=1, session_id="s", index=0, kind="main", policy_version=0, prompt_messages=messages,
                    prompt_token_ids=served, response_token_ids=response, behaviour_logprobs=[-1.0] * 4,
                    response_text="", tool_calls=[], sampling={"temperature": 0.0}, finish_reason="stop",
                    created_at=0.0, owner=owner, experience_version=1, experience_block=block,
                    experience_placement="system")

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            await engine.load_adapter("alice", adapters["alice"][0], 3)
            found = {}
            for owner in ("alice", "bob"):
                hinted = await score_hints(engine, tokenizer, turn(owner), ["be brief"], strategy="first",
                                           select_k=1, teacher_k=1)
                found[owner] = hinted, await score_experience(engine, tokenizer, turn(owner))
            return found
        finally:
            await engine.aclose()

    found = asyncio.run(main())
    hinted_prompt = render_prompt(tokenizer, [{"role": "system", "content": block},
                                              {"role": "user", "content": f"What is 2 + 3?\n\n{HINT_PREFIX} be brief]"}],
                                  None, None)
    student_prompt = render_prompt(tokenizer, messages, None, None)
    for owner, model in (("alice", adapters["alice"][1]), ("bob", base)):
        hinted, experience = found[owner]
        assert torch.allclose(torch.tensor(hinted.logprobs), torch.tensor(_reference(model, hinted_prompt, response)),
                              atol=1e-4), owner
        assert torch.allclose(torch.tensor(experience.teacher_logprobs),
                              torch.tensor(_reference(model, served, response)), atol=1e-4), owner
        assert torch.allclose(torch.tensor(experience.student_logprobs),
                              torch.tensor(_reference(model, student_prompt, response)), atol=1e-4), owner
    # the adapter moved alice's numbers: scoring her turn under the base would not have passed
    assert not torch.allclose(torch.tensor(found["alice"][0].logprobs), torch.tensor(found["bob"][0].logprobs),
                              atol=1e-3)


def test_a_lessons_absorption_is_measured_under_its_users_adapter(tiny_model_dir, adapters, base):
    """POST /v1/experience/absorption's pass: alice's lesson scored with its block and without it
    under alice's adapter (her weights), recording the adapter version; bob's, who has none, on the base."""
    from transformers import AutoTokenizer

    from openclaw_rl.chat import render_prompt
    from openclaw_rl.experience import Lesson, place
    from openclaw_rl.judge.absorption import experience_absorption, lesson_block
    from openclaw_rl.types import Turn

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    response = [5, 6, 7, 8]

    def lesson(owner: str) -> Lesson:
        return Lesson(id=1, owner=owner, text="Answer in one sentence.", support=1, sources=("1",), created_at=0.0,
                      updated_at=0.0)

    def turn(owner: str) -> Turn:
        block = lesson_block(lesson(owner))
        return Turn(id=1, session_id="s", index=0, kind="main", policy_version=0, prompt_messages=messages,
                    prompt_token_ids=render_prompt(tokenizer, place(messages, block, "user"), None, None),
                    response_token_ids=response, behaviour_logprobs=[-1.0] * 4, response_text="", tool_calls=[],
                    sampling={"temperature": 0.0}, finish_reason="stop", created_at=0.0, owner=owner,
                    experience_version=1, experience_block=block, experience_placement="user")

    async def main():
        engine = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
        try:
            await engine.load_adapter("alice", adapters["alice"][0], 3)
            return {owner: await experience_absorption(engine, tokenizer, [lesson(owner)], [turn(owner)], 8)
                    for owner in ("alice", "bob")}
        finally:
            await engine.aclose()

    found = asyncio.run(main())
    taught = render_prompt(tokenizer, place(messages, lesson_block(lesson("alice")), "user"), None, None)
    plain = render_prompt(tokenizer, messages, None, None)
    for owner, model, adapter in (("alice", adapters["alice"][1], 3), ("bob", base, None)):
        (measured,) = found[owner]
        gaps = [t - s for t, s in zip(_reference(model, taught, response), _reference(model, plain, response))]
        assert (measured.lesson_id, measured.turns, measured.policy_version, measured.adapter_version) == \
            (1, 1, 0, adapter), owner
        assert measured.gap_per_token == pytest.approx(sum(gaps) / len(gaps), abs=1e-4), owner
    # the adapter moved alice's gap: measuring her lesson on the base would not have passed
    assert abs(found["alice"][0].gap_per_token - found["bob"][0].gap_per_token) > 1e-3
