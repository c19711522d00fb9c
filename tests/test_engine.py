"""The local engine: batched sampling keeps exact ids and log-probs; updates at a boundary."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
import torch

from conftest import LOGPROB_ATOL
from openclaw_rl.engine.base import ContextLengthError, Finished, Started, TokenIdError
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.sampling import sampling_logprobs
from openclaw_rl.types import SamplingParams, TokenStep


@pytest.fixture(scope="module", params=["auto", "hf"])
def engine(tiny_model_dir, request):
    """Each test on both decoders: the fused one (what Llama-family models get) and transformers' forward."""
    eng = LocalEngine(tiny_model_dir, max_batch_size=4, decoder=request.param)
    assert eng.decoder == ("FusedDecoder" if request.param == "auto" else "HFDecoder")
    yield eng
    asyncio.run(eng.aclose())


async def _run(eng, prompt, params):
    events = [e async for e in eng.stream(prompt, params)]
    steps = [e for e in events if isinstance(e, TokenStep)]
    return events, [s.token_id for s in steps], [s.logprob for s in steps]


def _reference_logprobs(model_dir, prompt, response, temperature, top_p):
    """A fresh forward pass of the same model, outside the engine."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    n = len(response)
    lp = sampling_logprobs(logits, torch.full((n,), temperature), torch.full((n,), top_p))
    return lp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()


def test_sampling_logprobs_top_p_by_hand():
    # probs 0.5, 0.3, 0.2: top_p 0.7 keeps the first two (0.5 < 0.7), renormalised 5/8 and 3/8.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    lp = sampling_logprobs(logits, torch.tensor([1.0]), torch.tensor([0.7]))
    assert torch.allclose(lp.exp(), torch.tensor([[0.625, 0.375, 0.0]]), atol=1e-6)
    # temperature 0.5 squares and renormalises: 25, 9, 4 over 38.
    lp = sampling_logprobs(logits, torch.tensor([0.5]), torch.tensor([1.0]))
    assert torch.allclose(lp.exp(), torch.tensor([[25 / 38, 9 / 38, 4 / 38]]), atol=1e-6)
    # greedy rows report the untempered distribution.
    lp = sampling_logprobs(logits, torch.tensor([0.0]), torch.tensor([0.1]))
    assert torch.allclose(lp.exp(), torch.tensor([[0.5, 0.3, 0.2]]), atol=1e-6)


def test_sampling_logprobs_computes_on_the_logits_device_whatever_the_parameters():
    """Scoring passes temperature and top-p from the host; on CUDA a host tensor beside the
    logits crashed the teacher (issue 42). Logits on the meta device catch any tensor made
    elsewhere, since meta and CPU tensors do not mix."""
    logits = torch.empty(3, 10, device="meta", dtype=torch.bfloat16)
    for temperature, top_p in ((0.7, 1.0), (0.7, 0.9), (0.0, 0.9)):
        lp = sampling_logprobs(logits, torch.full((3,), temperature), torch.full((3,), top_p))
        assert (lp.device.type, lp.dtype, tuple(lp.shape)) == ("meta", torch.float32, (3, 10))
    lp = sampling_logprobs(logits, torch.tensor([0.0, 0.5, 1.0]), torch.tensor([1.0, 0.8, 0.95]))  # a mixed batch
    assert lp.device.type == "meta"


def test_concurrent_requests_share_batches_and_keep_exact_logprobs(engine, tiny_model_dir):
    prompts = [[1, 100 + i, 200 + i, 300] * (i + 1) for i in range(6)]  # different lengths
    params = [SamplingParams(max_new_tokens=12, temperature=t, top_p=p, seed=i)
              for i, (t, p) in enumerate([(1.0, 1.0), (0.7, 0.9), (0.0, 1.0), (1.3, 0.5), (1.0, 0.95), (0.0, 1.0)])]

    async def staggered():
        async def one(i):
            await asyncio.sleep(0.01 * i)  # later ones join a running batch
            return await _run(engine, prompts[i], params[i])
        return await asyncio.gather(*(one(i) for i in range(6)))

    before = engine.stats()["decode_steps"]
    results = asyncio.run(staggered())
    steps = engine.stats()["decode_steps"] - before
    total = sum(len(ids) for _, ids, _ in results)
    assert steps < total, "requests were decoded one after another, not batched"
    for (events, ids, lps), prompt, p in zip(results, prompts, params):
        assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
        ref = _reference_logprobs(tiny_model_dir, prompt, ids, p.logprob_temperature, 1.0 if p.greedy else p.top_p)
        assert max(abs(a - b) for a, b in zip(lps, ref)) < LOGPROB_ATOL


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine):
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=1234)
    _, alone, _ = asyncio.run(_run(engine, [1, 5, 6, 7], params))

    async def crowded():
        others = [_run(engine, [1, 9, 9, i], SamplingParams(max_new_tokens=10, seed=i)) for i in range(3)]
        return await asyncio.gather(_run(engine, [1, 5, 6, 7], params), *others)

    assert asyncio.run(crowded())[0][1] == alone


def test_prompt_longer_than_context_is_refused(engine):
    async def go():
        async for _ in engine.stream([1] * engine.max_context, SamplingParams()):
            pass
    with pytest.raises(ContextLengthError, match="context"):
        asyncio.run(go())


def test_score_matches_reference_and_reports_top_k(engine, tiny_model_dir):
    prompt, response = [1, 2, 3, 4], [50, 60, 70]
    score = asyncio.run(engine.score(prompt, response, temperature=0.8, top_k=4))
    assert score.logprobs == pytest.approx(_reference_logprobs(tiny_model_dir, prompt, response, 0.8, 1.0), abs=LOGPROB_ATOL)
    assert len(score.top_ids) == 3 and all(len(t) == 4 for t in score.top_ids)
    assert all(a >= b for row in score.top_logprobs for a, b in zip(row, row[1:]))


def test_weight_update_waits_for_rows_in_flight(tiny_model_dir):
    eng = LocalEngine(tiny_model_dir, max_batch_size=4)
    try:
        new = {name: p.detach().clone() * 0.5 for name, p in eng.model.named_parameters()}

        async def go():
            first = asyncio.create_task(_run(eng, [1, 2, 3], SamplingParams(max_new_tokens=30, temperature=1.0, seed=1)))
            await asyncio.sleep(0.02)
            await eng.load_weights(new, policy_version=1)
            second = await _run(eng, [1, 2, 3], SamplingParams(max_new_tokens=3))
            return await first, second

        (events_a, ids_a, _), (events_b, _, _) = asyncio.run(go())
        assert events_a[0].policy_version == 0 and events_b[0].policy_version == 1
        assert len(ids_a) >= 1  # finished normally under the old weights
        assert eng.policy_version == 1
    finally:
        asyncio.run(eng.aclose())


def _cpu_only(eng: LocalEngine) -> None:
    """Core lending shares the CPU's cores between serving and training: off the CPU it is off (train/cores.py)."""
    if eng.device.type != "cpu":
        asyncio.run(eng.aclose())
        pytest.skip(f"core lending is a CPU matter and is off on {eng.device.type} (train/cores.py)")


def test_serving_borrows_the_trainers_core_between_its_steps(tiny_model_dir):
    from openclaw_rl.train.cores import trainer_core_lender

    class Trainer:
        stepping = False
        device = torch.device("cpu")

    trainer, seen = Trainer(), []
    eng = LocalEngine(tiny_model_dir, max_batch_size=4, threads=1)
    _cpu_only(eng)
    try:
        eng.threads_now = trainer_core_lender(trainer, eng)

        async def go():
            for stepping in (False, True, False):
                trainer.stepping = stepping
                await eng._call(lambda: seen.append(torch.get_num_threads()))  # runs on the model thread
            events, ids, _ = await _run(eng, [1, 2, 3], SamplingParams(max_new_tokens=4))
            return ids

        assert len(asyncio.run(go())) == 4
        assert seen == [2, 1, 2]
        assert trainer_core_lender(trainer, object()) is None  # an engine without a thread budget to change
    finally:
        asyncio.run(eng.aclose())


def test_the_in_process_trainer_borrows_servings_core_only_once_no_request_came_for_a_while(tiny_model_dir):
    from openclaw_rl.train.cores import idle_core_lender

    eng = LocalEngine(tiny_model_dir, max_batch_size=4)
    _cpu_only(eng)
    try:
        threads = idle_core_lender([eng, None], quiet_s=0.3)
        time.sleep(0.3)
        assert eng.idle_s >= 0.3 and threads() == 2

        async def go():
            task = asyncio.create_task(_run(eng, [1, 2, 3], SamplingParams(max_new_tokens=200, temperature=1.0)))
            await asyncio.sleep(0.05)
            during = eng.idle_s, threads()
            await task
            return during

        assert asyncio.run(go()) == (0.0, 1)
        assert threads() == 1  # just after a request: not yet
        time.sleep(0.4)
        assert threads() == 2
        assert idle_core_lender([object()], quiet_s=0.0)() == 1  # an engine that cannot tell is never idle
    finally:
        asyncio.run(eng.aclose())


def test_core_lending_is_off_off_the_cpu():
    from openclaw_rl.train.cores import idle_core_lender, trainer_core_lender

    class Trainer:
        stepping = False
        device = torch.device("cuda", 0)

    class Engine:
        threads_now = None
        idle_s = 100.0

    assert trainer_core_lender(Trainer(), Engine()) is None
    assert idle_core_lender([Engine()], quiet_s=0.0, device="cuda:0") is None
    assert idle_core_lender([Engine()], quiet_s=0.0, device="cpu")() == 2  # the same engines on the CPU: lent
    Trainer.device = torch.device("cpu")
    assert trainer_core_lender(Trainer(), Engine())() == 2


def test_failed_prefill_fails_its_requests_instead_of_hanging(engine):
    from openclaw_rl.engine.base import EngineError

    admitted = engine.vocab_size

    async def go():
        async for _ in engine.stream([admitted + 5], SamplingParams(max_new_tokens=2)):
            pass

    engine.vocab_size += 10  # let a bad id past admission, so the embedding lookup fails during prefill
    try:
        with pytest.raises(EngineError, match="prefill failed"):
            asyncio.run(asyncio.wait_for(go(), 30))
    finally:
        engine.vocab_size = admitted
    events, ids, _ = asyncio.run(_run(engine, [1, 2, 3], SamplingParams(max_new_tokens=2, temperature=0.0)))
    assert len(ids) == 2  # the engine still serves


def test_out_of_vocabulary_ids_fail_only_their_request_before_any_tensor_op(engine):
    """On CUDA an out-of-range embedding lookup is a device-side assert that kills the process's
    context (issue 42), so the engine refuses such ids at admission, where no tensor has seen them."""
    vocab = engine.model.get_input_embeddings().num_embeddings
    assert engine.vocab_size == vocab
    before = engine.stats()

    async def go():
        good = asyncio.create_task(_run(engine, [1, 2, 3], SamplingParams(max_new_tokens=3, temperature=0.0)))
        errors = []
        for prompt in ([1, vocab, 2], [-1, 5]):
            with pytest.raises(TokenIdError) as caught:
                await _run(engine, prompt, SamplingParams(max_new_tokens=2))
            errors.append(str(caught.value))
        for prompt, response in (([1, 2], [3, vocab + 7]), ([vocab], [3])):
            with pytest.raises(TokenIdError) as caught:
                await engine.score(prompt, response, temperature=0.7)
            errors.append(str(caught.value))
        return errors, await good

    errors, (_, ids, _) = asyncio.run(asyncio.wait_for(go(), 60))
    assert errors == [
        f"prompt: token id {vocab} is outside the model's vocabulary (0..{vocab - 1}); "
        f"encode with this model's tokenizer ({engine.model_name})",
        f"prompt: token id -1 is outside the model's vocabulary (0..{vocab - 1}); "
        f"encode with this model's tokenizer ({engine.model_name})",
        f"response: token id {vocab + 7} is outside the model's vocabulary (0..{vocab - 1}); "
        f"encode with this model's tokenizer ({engine.model_name})",
        f"prompt: token id {vocab} is outside the model's vocabulary (0..{vocab - 1}); "
        f"encode with this model's tokenizer ({engine.model_name})",
    ]
    assert len(ids) == 3  # the request beside them was served
    after = engine.stats()
    assert after["prompt_tokens"] - before["prompt_tokens"] == 3  # only the good prompt was prefilled
    assert after["scored_tokens"] == before["scored_tokens"]  # no scoring pass ran
    assert len(asyncio.run(engine.score([1, 2], [vocab - 1], temperature=0.7)).logprobs) == 1  # the last id is in


def test_a_conversations_next_turn_reuses_its_cache_with_exact_logprobs(tiny_model_dir):
    """The fused decoder keeps a finished request's cache (engine/prefixes.py): a next turn that
    repeats the conversation prefills only its new tokens, and records the log-probs a full forward gives."""
    eng = LocalEngine(tiny_model_dir, max_batch_size=4, decoder="auto")
    try:
        first = [1] + list(range(100, 140))
        params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=5, cache_scope="alice")
        _, ids, _ = asyncio.run(_run(eng, first, params))
        second = first + ids + [7, 8, 9]
        _, ids2, lps2 = asyncio.run(_run(eng, second, params))
        reused = eng.stats()["prefix_tokens_reused"]
        assert reused >= len(first) + len(ids) - 1  # every fed token of the first turn
        ref = _reference_logprobs(tiny_model_dir, second, ids2, 1.0, 1.0)
        assert max(abs(a - b) for a, b in zip(lps2, ref)) < 1e-4
        asyncio.run(_run(eng, second, replace(params, cache_scope="bob")))  # another user's request: no reuse
        assert eng.stats()["prefix_tokens_reused"] == reused
        hinted = second + [42, 43, 44]  # a teacher pass: the turn's prompt, a hint, then the response scored
        score = asyncio.run(eng.score(hinted, ids2, temperature=1.0, top_p=1.0))
        assert eng.stats()["prefix_tokens_reused"] >= reused + len(second)  # the engine's own passes read any scope
        ref = _reference_logprobs(tiny_model_dir, hinted, ids2, 1.0, 1.0)
        assert max(abs(a - b) for a, b in zip(score.logprobs, ref)) < 1e-4
        reused = eng.stats()["prefix_tokens_reused"]
        weights = {n: p.detach().clone() for n, p in eng.model.named_parameters()}
        asyncio.run(eng.load_weights(weights, 1))  # a new version forgets every kept prefix
        asyncio.run(_run(eng, second, params))
        assert eng.stats()["prefix_tokens_reused"] == reused
    finally:
        asyncio.run(eng.aclose())
