"""Safe updates: the gate's checks, its decisions on a real model, the version history, rollback."""

from __future__ import annotations

import asyncio
import math
import shutil
import threading
import time

import httpx
import pytest
import torch

from conftest import LiveServer
from openclaw_rl.config import ConfigError, TrainConfig
from openclaw_rl.store import Store
from openclaw_rl.train import gate as gate_module
from openclaw_rl.train.gate import Gate, compare, grouped_kl, is_non_answer, repetition_rate, score_chunks
from openclaw_rl.train.runner import run_trainer
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.versions import VersionArchive
from openclaw_rl.train.weights import CallbackChannel, Publisher
from openclaw_rl.types import NextState, Sample, TurnRecord, Verdict
from openclaw_rl.users import Users

# -- the checks, by hand -------------------------------------------------------------------


def test_repetition_counts_repeated_ngrams():
    assert repetition_rate([1, 2, 3, 4, 5, 6]) == 0.0
    # 1 2 3 4 1 2 3 4 1 2 3 4: nine 4-grams, four distinct -> 5/9 repeat an earlier one
    assert repetition_rate([1, 2, 3, 4] * 3) == pytest.approx(5 / 9)
    assert repetition_rate([7, 7]) == 0.0  # too short to repeat a 4-gram


@pytest.mark.parametrize("text", ["", "  ", "I'm sorry, but I can't help with that.", "As an AI, I cannot",
                                  "Hello! I'm SmolLM, your assistant.", "I am an AI assistant created by"])
def test_non_answers(text):
    assert is_non_answer(text)


@pytest.mark.parametrize("text", ["4 + 4 = 8.", "Sorry state of affairs in Rome: the empire fell in 476.",
                                  "I think the answer is 12."])
def test_answers(text):
    assert not is_non_answer(text)


def test_grouped_kl_is_exact_with_the_whole_vocabulary_and_a_lower_bound_with_less():
    g = torch.Generator().manual_seed(0)
    served = torch.log_softmax(torch.randn(5, 10, generator=g), 1)
    candidate = torch.log_softmax(torch.randn(5, 10, generator=g), 1)
    exact = (served.exp() * (served - candidate)).sum(1)
    whole = served.topk(10, 1)
    torch.testing.assert_close(grouped_kl(whole.values, whole.indices, candidate), exact)
    three = served.topk(3, 1)
    assert bool((grouped_kl(three.values, three.indices, candidate) <= exact + 1e-6).all())
    same = grouped_kl(three.values, three.indices, served)
    torch.testing.assert_close(same, torch.zeros(5), atol=1e-6, rtol=0)


def _summary(tokens=20.0, repetition=0.1, non_answers=0.0):
    return {"mean_tokens": tokens, "repetition": repetition, "non_answers": non_answers}


@pytest.mark.parametrize("candidate, kl, delta, reason", [
    (_summary(repetition=0.8), 0.0, None, "repetition 0.80 > 0.25"),
    (_summary(tokens=64.0), 0.0, None, "3.20x as long"),
    (_summary(tokens=5.0), 0.0, None, "0.25x as long"),
    (_summary(non_answers=0.5), 0.0, None, "non-answers 0.50"),
    (_summary(), 2.5, None, "KL from the served version 2.500"),
    (_summary(), 0.0, -0.1, "score -0.100"),
])
def test_each_check_rejects_and_names_its_setting(candidate, kl, delta, reason):
    decision = compare(_summary(), candidate, kl, TrainConfig(), delta)
    assert not decision.accepted and reason in decision.reason and "gate_" in decision.reason


def test_a_version_like_the_served_one_passes():
    decision = compare(_summary(), _summary(tokens=24, repetition=0.15), 0.05, TrainConfig(), 0.01)
    assert decision.accepted and decision.checks["length_ratio"] == pytest.approx(1.2)


def test_a_served_version_that_already_repeats_is_compared_with_itself():
    assert compare(_summary(repetition=0.6), _summary(repetition=0.6), 0.0, TrainConfig()).accepted
    assert compare(_summary(repetition=0.45), _summary(repetition=0.5), 0.0, TrainConfig()).accepted
    # above the ceiling (0.5) a candidate may not repeat more than what serves
    assert not compare(_summary(repetition=0.6), _summary(repetition=0.7), 0.0, TrainConfig()).accepted


def test_repetition_creeping_up_as_in_the_measured_collapse_is_rejected():
    # docs/experiments.md, OPD alone at lr 1e-4: greedy answers repeated 0.24 of their 4-grams at v0,
    # 0.41 at v4 (score 0.633 -> 0.324) and 0.74 at v8 (0.066)
    first = compare(_summary(repetition=0.24), _summary(repetition=0.41), 0.0, TrainConfig())
    assert not first.accepted and "gate_max_repetition_increase" in first.reason
    assert compare(_summary(repetition=0.24), _summary(repetition=0.35), 0.0, TrainConfig()).accepted


def test_small_score_drops_that_add_up_below_the_first_version_are_rejected():
    assert compare(_summary(), _summary(), 0.0, TrainConfig(), -0.02, -0.02).accepted
    summed = compare(_summary(), _summary(), 0.0, TrainConfig(), -0.02, -0.05)
    assert not summed.accepted and "below the first version's" in summed.reason
    assert summed.checks["score_vs_first"] == -0.05


# -- the gate on a real (tiny) model --------------------------------------------------------


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(f"Question {i}: what is {i} plus {i}?") for i in range(3)]


def _forced(trainer: Trainer, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """The reference: log-probs (T, V) at the answer's positions from one unpadded forward of the pair."""
    with torch.no_grad():
        logits = trainer.model(input_ids=torch.tensor([prompt + answer]), use_cache=False).logits
    return torch.log_softmax(logits[0, len(prompt) - 1:-1].float(), dim=-1)


def _sharpen(trainer: Trainer, factor: float) -> None:
    """A policy far from the served one: the (tied) output embedding scaled, so every
    distribution turns peaked, as an update with a huge learning rate does."""
    with torch.no_grad():
        trainer.model.get_output_embeddings().weight.mul_(factor)


def test_the_gate_accepts_unchanged_weights_rejects_a_collapse_and_restores(tiny_model_dir, tokenizer):
    config = TrainConfig(lr=1e-3, gate="on", gate_max_new_tokens=12)
    trainer = Trainer(tiny_model_dir, config, initial_version=3, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: _prompts(tokenizer))
    same = gate.decide()
    assert same.accepted and same.checks["kl_per_token"] == pytest.approx(0.0, abs=1e-5), same.reason
    before = {k: v.clone() for k, v in trainer.trainable_state_dict().items()}

    trainer.optimizer.state[trainer.trainable[0]]["step"] = torch.tensor(7.0)  # as if it had trained
    trainer.return_to(4, 3)
    _sharpen(trainer, 40.0)
    broken = gate.decide()
    assert not broken.accepted and "KL from the served version" in broken.reason, broken.reason
    assert broken.checks["kl_per_token"] > config.gate_max_kl

    gate.restore()
    after = trainer.trainable_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.policy_version == 3 and len(trainer.optimizer.state) == 0  # the snapshot's state: none yet


def test_the_fused_decoder_gives_the_probes_the_answers_of_transformers_generate(tiny_model_dir, tokenizer):
    """The gate decodes its probes with the serving engine's fused decoder over the trainer's own
    parameters (rows of different lengths, some ending early); generate is the reference."""
    config = TrainConfig(lr=1e-3, gate="on", gate_max_new_tokens=16)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: [])
    assert gate.fused_unsupported is None
    prompts = [tokenizer.encode("Hi"), *_prompts(tokenizer), tokenizer.encode("Tell me a long story " * 5)]
    for factor in (1.0, 3.0):  # the weights now are what is decoded: a change shows in both
        _sharpen(trainer, factor)
        eos = set(gate.trainer_eos())
        (fused, tops), generated = gate._greedy_fused(prompts, eos, keep_top=True), gate._generate(prompts, eos)
        assert fused == generated
        assert all(0 < len(a) <= 16 for a in fused)
        for prompt, answer, (values, ids) in zip(prompts, fused, tops):  # the top-k read off decoding
            forced = _forced(trainer, prompt, answer)  # (T, V): a teacher-forced pass
            assert values.shape == ids.shape == (len(answer), 32)
            assert torch.allclose(forced.gather(1, ids), values, atol=1e-4)
            assert torch.allclose(forced.topk(32, dim=1).values, values, atol=1e-4)
    stop = fused[-1][-1]  # a token the last answer emits: answers end at its first occurrence
    ended, _ = gate._greedy_fused(prompts, {stop})
    assert ended[-1] == fused[-1][:fused[-1].index(stop)] and ended == gate._generate(prompts, {stop})


def test_pairs_are_scored_longest_first_in_chunks_of_rows_and_padded_tokens():
    assert score_chunks([10, 8, 5, 3, 1], rows=2, tokens=100) == [[0, 1], [2, 3], [4]]
    # 2 x 8 = 16 padded tokens > 15: 8 alone; 2 x 5 = 10 fits
    assert score_chunks([10, 8, 5, 3, 1], rows=8, tokens=15) == [[0], [1], [2, 3, 4]]
    assert score_chunks([20], rows=8, tokens=15) == [[0]]  # a pair longer than the budget still gets a pass
    assert score_chunks([], rows=8) == []


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_batched_scoring_gives_each_answer_the_log_probs_of_its_own_pass(tiny_model_dir, tokenizer, lora):
    """Right-padded, masked pairs of different lengths in one forward: the same (T, V) log-probs
    as one unpadded forward per pair, and the KL and drift of the per-probe computation."""
    config = TrainConfig(lr=1e-3, gate="on", gate_max_new_tokens=12, lora=lora)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: [])
    prompts = [tokenizer.encode("Hi"), *_prompts(tokenizer), tokenizer.encode("Tell me a long story " * 5)]
    served = gate._answer(prompts, keep_top=True)
    answers = [served.ids[0][:3], [], served.ids[2], served.ids[3][:5], served.ids[4]]  # one empty, two cut short
    assert len({len(p) + len(a) for p, a in zip(prompts, answers) if a}) == 4  # each pair padded to another width
    for rows in (8, 2):
        batched = gate._score(prompts, answers, rows=rows)
        for prompt, answer, scored in zip(prompts, answers, batched):
            if answer:
                torch.testing.assert_close(scored, _forced(trainer, prompt, answer), atol=1e-5, rtol=0)
            else:
                assert scored.shape[0] == 0
    _sharpen(trainer, 20.0)  # a candidate apart from the served answers: KL and drift above 0
    kl, drift = gate._kl(prompts, served)
    forced = [_forced(trainer, p, a) for p, a in zip(prompts, served.ids)]
    total = sum(float(grouped_kl(top, ids, f).sum())
                for top, ids, f in zip(served.top_logprobs, served.top_ids, forced))
    tokens = sum(len(a) for a in served.ids)
    lost = sum(float((top[:, 0] - f.gather(1, torch.tensor(a)[:, None])[:, 0]).sum())
               for top, f, a in zip(served.top_logprobs, forced, served.ids))
    assert kl > 0.01 and kl == pytest.approx(total / tokens, abs=1e-5)
    assert drift == pytest.approx(lost / tokens, abs=1e-5)


class _Counted(torch.Tensor):
    """A tensor that records each move of its values to the host (a sync on CUDA)."""

    moves: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("tolist", "item", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__") or (
                name == "to" and "cpu" in map(str, [*args[1:], *(kwargs or {}).values()])):
            cls.moves.append(name)
        return super().__torch_function__(func, types, args, kwargs or {})


class _ScriptedDecoder:
    """The fused decoder's calls, with logits that make prompt p answer LENGTHS[p] tokens then end."""

    LENGTHS, VOCAB, EOS = (3, 0, 5, 1), 50, 2

    def __init__(self, model) -> None:
        self.rows: list[int] = []
        self.step_count = 0

    def prefill(self, prompts):
        self.rows = list(range(len(prompts)))
        return self._logits()

    def keep(self, rows):
        self.rows = [self.rows[r] for r in rows]

    def step(self, tokens, positions):
        self.step_count += 1
        return self._logits()

    def _logits(self) -> torch.Tensor:
        logits = torch.zeros(len(self.rows), self.VOCAB)  # (rows, V)
        for row, prompt in enumerate(self.rows):
            done = self.step_count >= self.LENGTHS[prompt]
            logits[row, self.EOS if done else 10 + prompt + self.step_count] = 5.0
        return logits.as_subclass(_Counted)


def test_greedy_decoding_moves_every_row_s_token_to_the_host_in_one_transfer_a_step(tiny_model_dir, tokenizer,
                                                                                    monkeypatch):
    """On CUDA each move to the host waits for the device: one a step for all rows, and the top-k
    log-probs of every step in one move each (values, ids) when the answers end."""
    config = TrainConfig(gate="on", gate_max_new_tokens=16)
    gate = Gate(Trainer(tiny_model_dir, config, device="cpu"), config, tokenizer, lambda: [])
    monkeypatch.setattr(gate_module, "FusedDecoder", _ScriptedDecoder)
    _Counted.moves = []
    prompts = [[5 + p] for p in range(len(_ScriptedDecoder.LENGTHS))]
    answers, tops = gate._greedy_fused(prompts, {_ScriptedDecoder.EOS}, keep_top=True)
    assert answers == [[10 + p + t for t in range(n)] for p, n in enumerate(_ScriptedDecoder.LENGTHS)]
    steps = max(_ScriptedDecoder.LENGTHS) + 1  # the last step reads the longest answer's end
    assert _Counted.moves == ["tolist"] * steps + ["cpu", "cpu"]
    for answer, (values, ids) in zip(answers, tops):
        assert values.shape == ids.shape == (len(answer), 32)
        assert ids[:, 0].tolist() == answer  # greedy: the top log-prob is the chosen token's


def test_a_lora_trainer_s_gate_decodes_with_generate(tiny_model_dir, tokenizer):
    trainer = Trainer(tiny_model_dir, TrainConfig(lora=True, gate="on", gate_max_new_tokens=8), device="cpu")
    gate = Gate(trainer, trainer.config, tokenizer, lambda: _prompts(tokenizer))
    assert "LoRA" in gate.fused_unsupported
    assert len(gate._answer(_prompts(tokenizer)).ids) == 3


def _paired_turns(store: Store, count: int) -> list[int]:
    store.ensure_session("s", "new")
    ids = []
    for i in range(count):
        turn = store.record_turn(TurnRecord(
            session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1, 5 + i, 9],
            response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="", tool_calls=[], sampling={},
            finish_reason="stop"))
        store.set_next_state(turn.id, NextState("user", "ok"))
        ids.append(turn.id)
    return ids


def test_served_answers_are_made_once_per_probe_and_an_accepted_candidate_s_are_reused(tiny_model_dir, tokenizer):
    config = TrainConfig(lr=1e-3, gate="on", gate_max_new_tokens=12, gate_anchors=0)  # anchors: their own test
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    prompts = _prompts(tokenizer)
    probes = [prompts[:2]]
    gate = Gate(trainer, config, tokenizer, lambda: probes[0])
    decoded: list[int] = []
    answer = gate._answer
    gate._answer = lambda ps, keep_top=False: (decoded.append(len(ps)), answer(ps, keep_top))[1]
    gate.decide()
    assert decoded == [2, 2]  # the served answers, then the candidate's
    trainer.return_to(1, 0)
    _sharpen(trainer, 1.5)
    first = gate.decide()
    assert decoded == [2, 2, 2]  # the served answers came from the cache
    gate.accept()
    probes[0] = prompts[:3]  # one new probe
    decoded.clear()
    second = gate.decide()
    assert decoded == [1, 3]  # served: the new probe only (v1's answers were its candidate answers)
    assert second.checks["kl_per_token"] == pytest.approx(0.0, abs=1e-5)  # v1 against itself
    assert second.checks["served"]["mean_tokens"] == pytest.approx(second.checks["candidate"]["mean_tokens"])
    assert first.checks["candidate"]["mean_tokens"] >= 0


def test_a_rejected_version_is_recorded_never_published_and_the_trainer_goes_back(tiny_model_dir, tokenizer,
                                                                                   tmp_path):
    store = Store(tmp_path)
    turn_ids = _paired_turns(store, 9)
    for turn_id in turn_ids:
        store.add_sample(Sample(turn_id=turn_id, session_id="s", policy_version=0, prompt_token_ids=[1, 5],
                                response_token_ids=[2, 3], behaviour_logprobs=[-1.0, -1.0], temperature=1.0,
                                reward=1.0))
    # lr 1: any step is a collapse, so every candidate must be turned away
    config = TrainConfig(method="binary", batch_size=2, catch_up=1, lr=1.0, train_poll_interval_s=0.05, gate="on",
                         gate_max_new_tokens=8, gate_max_kl=0.05, gate_probe_every=2)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    published: list[int] = []
    publisher = Publisher.for_trainer(trainer, [CallbackChannel(lambda v, w: published.append(v))])
    gate = Gate(trainer, config, tokenizer, lambda: _prompts(tokenizer))
    archive = VersionArchive(tmp_path, keep=2, protected=store.protected_versions)
    stop, steps = asyncio.Event(), []

    def on_step(stats):
        steps.append(stats)
        if len(steps) == 2:
            stop.set()

    asyncio.run(asyncio.wait_for(run_trainer(store, trainer, config, publisher, stop, on_step, gate=gate,
                                             archive=archive), 120))
    history = {v["version"]: v for v in store.versions()}
    assert published == [] and store.policy_version() == 0 and trainer.policy_version == 0
    assert [history[v]["gate"] for v in (1, 2)] == ["rejected", "rejected"]  # numbers are never reused
    assert "gate_max" in history[1]["reason"] and history[1]["weights"] is None  # the check that failed, named
    assert history[1]["samples"]["count"] == 2 and history[1]["samples"]["by_user"] == {"local": 2}
    assert archive.versions() == [0]  # the start is kept, the rejected ones are not
    probes = [t for t in turn_ids if t % config.gate_probe_every == 0]
    claims = dict(store._db.execute("SELECT turn_id, status FROM claims").fetchall())
    assert all(claims.get(t) != "used" for t in probes) and claims[2] == "rejected"  # probes are never trained on
    assert [t for t, status in sorted(claims.items()) if status == "used"] == [1, 3, 5, 7]
    store.close()


# -- history, retention, rollback through the API ------------------------------------------


def test_retention_keeps_the_newest_the_pinned_and_the_served(tiny_model_dir, tmp_path):
    store = Store(tmp_path)
    trainer = Trainer(tiny_model_dir, TrainConfig(lr=1e-3), device="cpu")
    archive = VersionArchive(tmp_path, keep=2, protected=store.protected_versions)
    for version in range(1, 6):
        store.record_version(version, parent=version - 1, train_step=version, gate="accepted")
        if version == 2:
            store.pin_version(2)
        archive.write(version, trainer, version - 1)
    assert archive.versions() == [2, 4, 5]
    with pytest.raises(Exception, match="no version 9"):
        store.pin_version(9)
    store.close()


def test_rollback_under_traffic_fails_no_request_and_serves_the_old_weights(tiny_model_dir, tmp_path):
    from openclaw_rl.config import JudgeConfig

    train = TrainConfig(method="binary", batch_size=2, catch_up=1, lr=1e-3, train_poll_interval_s=0.05, gate="off")
    server = LiveServer(tiny_model_dir, tmp_path, judge=JudgeConfig(judge="off"), train=train)
    store, base = server.server.store, server.base_url
    try:
        for i in range(4):  # two steps: v1, v2 (the judge is off: samples come from the store directly)
            r = httpx.post(f"{base}/v1/chat/completions", json={"messages": [{"role": "user", "content": f"q{i}"}],
                                                                "max_tokens": 4}, timeout=60)
            turn = store.turns(r.headers["x-session-id"])[0]
            store.add_sample(Sample(turn_id=turn.id, session_id=turn.session_id, policy_version=turn.policy_version,
                                    prompt_token_ids=turn.prompt_token_ids, response_token_ids=turn.response_token_ids,
                                    behaviour_logprobs=turn.behaviour_logprobs, temperature=1.0, reward=1.0))
        # the store records a version after every channel has it (the engine first): wait for the record
        deadline = time.monotonic() + 60
        while (server.server.engine.policy_version < 2 or store.policy_version() < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.server.engine.policy_version == 2
        history = httpx.get(f"{base}/v1/policy/versions").json()
        assert [v["version"] for v in history["data"]] == [2, 1, 0] and history["served"] == 2
        assert history["data"][0]["serving"] and history["data"][0]["samples"]["count"] == 2

        results, stop = [], threading.Event()

        def client():
            while not stop.is_set():
                r = httpx.post(f"{base}/v1/chat/completions",
                               json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}, timeout=60)
                results.append((r.status_code, int(r.headers["x-policy-version"])))

        thread = threading.Thread(target=client)
        thread.start()
        time.sleep(0.5)
        rolled = httpx.post(f"{base}/v1/policy/rollback", json={"to": 1}, timeout=120)
        time.sleep(0.5)
        stop.set()
        thread.join(30)
        assert rolled.status_code == 200, rolled.text
        new = rolled.json()["version"]
        assert new == 3 and rolled.json()["weights_of"] == 1
        assert {status for status, _ in results} == {200}
        versions = [version for _, version in results]
        assert versions == sorted(versions) and set(versions) <= {2, 3}  # each answer names the weights that made it
        after = httpx.post(f"{base}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                 "max_tokens": 4}, timeout=60)
        assert after.headers["x-policy-version"] == "3"
        archived = VersionArchive(tmp_path, 5).read(1)
        served = dict(server.server.engine.model.named_parameters())
        assert all(torch.equal(served[name].detach(), tensor) for name, tensor in archived.items())
        record = store.version(3)
        assert (record["gate"], record["parent"], record["weights"] is not None) == ("rollback", 1, True)
        missing = httpx.post(f"{base}/v1/policy/rollback", json={"to": 42}, timeout=30)
        assert missing.status_code == 404 and "no kept weights" in missing.json()["error"]["message"]
        assert httpx.post(f"{base}/v1/policy/pin", json={"version": 1}).json()["pinned"] is True
    finally:
        server.stop()


def _alice_and_root(scripted_server, turns: int):
    """A server with the user alice, the admin root, and `turns` main turns of alice's session "s"."""
    server = scripted_server(["ok"])
    users = Users(server.server.store.data_dir)
    keys = users.add("alice"), users.add("root", admin=True)
    store = server.server.store
    store.ensure_session("s", "new", "alice")
    made = [store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1],
        response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="", tool_calls=[], sampling={},
        finish_reason="stop", owner="alice")) for _ in range(turns)]
    return server, store, keys, made


def test_only_admins_roll_back_or_pin_and_only_admins_see_who_taught_a_version(scripted_server):
    server, store, (alice, root), (turn,) = _alice_and_root(scripted_server, 1)
    store.record_version(1, parent=0, train_step=1, gate="accepted", turn_ids=[turn.id], weights="somewhere")
    as_alice, as_root = {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {root}"}
    for path, body in (("/v1/policy/rollback", {"to": 1}), ("/v1/policy/pin", {"version": 1})):
        refused = httpx.post(f"{server.base_url}{path}", json=body, headers=as_alice)
        assert refused.status_code == 403 and "admin" in refused.json()["error"]["message"]
    seen = httpx.get(f"{server.base_url}/v1/policy/versions", headers=as_alice).json()["data"][0]["samples"]
    assert seen == {"count": 1}
    full = httpx.get(f"{server.base_url}/v1/policy/versions", headers=as_root).json()["data"][0]["samples"]
    assert full["by_user"] == {"alice": 1} and full["by_session"] == {"s": 1}
    assert math.isfinite(httpx.get(f"{server.base_url}/v1/policy/versions", headers=as_root).json()["served"])


def test_the_kl_reference_can_follow_the_accepted_version(tiny_model_dir):
    trainer = Trainer(tiny_model_dir, TrainConfig(lr=1e-3, kl_beta=0.02, kl_reference="accepted"), device="cpu")
    _sharpen(trainer, 2.0)
    reference = dict(trainer.reference.named_parameters())
    name, moved = next((n, p) for n, p in trainer.model.named_parameters() if not torch.equal(p, reference[n]))
    trainer.anchor_reference()
    assert torch.equal(reference[name], moved)
    with pytest.raises(Exception, match="kl_reference"):
        TrainConfig(lora=True, kl_reference="accepted")


def test_admins_release_or_drop_quarantined_hints(scripted_server):
    server, store, (alice, root), turns = _alice_and_root(scripted_server, 2)
    for turn in turns:
        store.set_next_state(turn.id, NextState("user", "no. visit evil.example.com"))
        store.write_verdict(Verdict(turn_id=turn.id, status="ok", reward=-1, votes=[-1], raw=["-1"], hints=[],
                                    selected_hint=None, overlap_scores=[], judge="test", latency_s=0.0))
        store.add_sample(Sample(turn_id=turn.id, session_id="s", policy_version=0, prompt_token_ids=[1],
                                response_token_ids=[2], behaviour_logprobs=[-1.0], temperature=1.0, reward=-1.0))
        assert store.quarantine_hint(turn.id, "Visit evil.example.com", "introduces a URL")
    base, as_root = server.base_url, {"Authorization": f"Bearer {root}"}
    assert httpx.get(f"{base}/v1/quarantine", headers={"Authorization": f"Bearer {alice}"}).status_code == 403
    held = httpx.get(f"{base}/v1/quarantine", headers=as_root).json()["data"]
    assert [(q["owner"], q["status"]) for q in held] == [("alice", "held"), ("alice", "held")]
    released = httpx.post(f"{base}/v1/quarantine/{held[1]['id']}/release", headers=as_root).json()
    assert released["status"] == "released" and released["decided_by"] == "root"
    assert store.released_hints(turns[0].id) == {"Visit evil.example.com"}
    assert [t.id for t in store.turns_awaiting_verdict()] == [turns[0].id]  # judged again, the hint now allowed
    dropped = httpx.post(f"{base}/v1/quarantine/{held[0]['id']}/drop", headers=as_root).json()
    assert dropped["status"] == "dropped" and store.sample_counts()["ready"] == 1
    again = httpx.post(f"{base}/v1/quarantine/{held[0]['id']}/drop", headers=as_root)
    assert again.status_code == 404 and "was dropped" in again.json()["error"]["message"]
    assert httpx.post(f"{base}/v1/quarantine/{held[0]['id']}/eat", headers=as_root).status_code == 404


def test_in_simulation_the_gate_scores_probe_answers_with_the_persona_rubric(tokenizer):
    from openclaw_rl.drivers.simulate import rubric_scorer
    from openclaw_rl.eval.personas import get_persona
    from openclaw_rl.eval.problems import train_problems

    persona, problems = get_persona("student"), train_problems(0, 2)
    scorer = rubric_scorer(persona, problems, tokenizer)
    asks = tokenizer.encode(f"Please help: {problems[0].question}")
    scores = scorer([asks, tokenizer.encode("What is the capital of France?")], ["answer", "Paris."])
    assert scores[0] == pytest.approx(persona.rubric(problems[0], "answer")) and math.isnan(scores[1])


# -- after adaptation -------------------------------------------------------------------------


def _judged(store: Store, turn_id: int, reward: int) -> None:
    store.write_verdict(Verdict(turn_id=turn_id, status="ok", reward=reward, votes=[reward] * 3, raw=[], hints=[],
                                selected_hint=None, overlap_scores=[], judge="test", latency_s=0.0))


def test_the_newest_verdicts_come_first(tmp_path):
    store = Store(tmp_path)
    turn_ids = _paired_turns(store, 4)
    for turn_id, reward in zip(turn_ids, [-1, 1, 0, 1]):
        _judged(store, turn_id, reward)
    assert store.recent_rewards(3) == [1, 0, 1] and store.recent_rewards(10) == [1, 0, 1, -1]
    store.close()


@pytest.mark.parametrize("scale", [0.0, 0.1])
def test_after_n_approvals_training_pauses_or_slows_until_a_correction(tiny_model_dir, tmp_path, scale):
    store = Store(tmp_path)
    turn_ids = _paired_turns(store, 8)
    for turn_id in turn_ids[:3]:
        _judged(store, turn_id, 1)  # three approvals in a row: settled
    for turn_id in turn_ids[:4]:
        store.add_sample(Sample(turn_id=turn_id, session_id="s", policy_version=0, prompt_token_ids=[1, 5],
                                response_token_ids=[2, 3], behaviour_logprobs=[-1.0, -1.0], temperature=1.0,
                                reward=1.0))
    config = TrainConfig(method="binary", batch_size=2, catch_up=1, lr=1e-3, train_poll_interval_s=0.05, settle_after=3,
                         settle_lr_scale=scale, max_staleness=100)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    publisher = Publisher.for_trainer(trainer, [CallbackChannel(lambda v, w: None)])
    stop, rates = asyncio.Event(), []

    def on_step(stats):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        if len(rates) == 1 and scale:
            _judged(store, turn_ids[3], -1)  # a correction: back to the full rate
        if len(rates) == 2:
            stop.set()

    async def run():
        task = asyncio.create_task(run_trainer(store, trainer, config, publisher, stop, on_step))
        await asyncio.sleep(1.0)
        if not scale:
            assert rates == [] and trainer.policy_version == 0  # paused: the ready samples wait
            _judged(store, turn_ids[3], -1)
        await asyncio.wait_for(task, 120)

    asyncio.run(run())
    assert rates == ([1e-3, 1e-3] if not scale else [1e-4, 1e-3])
    store.close()


def test_the_gate_sums_the_score_deltas_of_accepted_versions(tiny_model_dir, tokenizer):
    calls = []

    def scorer(prompts, answers):  # called for the candidate's answers, then the served ones'
        calls.append(1)
        return [-0.02 if len(calls) % 2 else 0.0] * len(answers)

    config = TrainConfig(gate="on", gate_max_new_tokens=4, gate_anchors=0)  # the scorer counts its calls
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: _prompts(tokenizer), scorer=scorer)
    trainer.return_to(1, 0)
    first = gate.decide()
    assert first.accepted and first.checks["score_vs_first"] == pytest.approx(-0.02)
    gate.accept()
    trainer.return_to(2, 1)
    second = gate.decide()  # -0.02 again: each step is within 0.03, the two together are not
    assert not second.accepted and second.checks["score_vs_first"] == pytest.approx(-0.04), second.reason
    gate.restore()
    assert trainer.policy_version == 1


# -- anchors: the first probes, held fixed with the first version's answers -------------------


def test_a_check_against_the_anchors_names_them():
    decision = compare(_summary(), _summary(repetition=0.8), None, TrainConfig(), -0.1, against="anchors (v0)")
    assert not decision.accepted and decision.checks["kl_per_token"] is None
    assert decision.reason.startswith("anchors (v0): repetition 0.80 > 0.25 (theirs 0.10;"), decision.reason
    assert "anchors (v0): score -0.100 below theirs" in decision.reason


def test_anchors_hold_a_drift_that_each_step_against_the_served_version_passes(tiny_model_dir, tokenizer, tmp_path):
    """The served version moves with every accepted candidate; the anchors stay with v0's answers,
    so a candidate that scores like its predecessor but below v0 is turned away, and the anchors
    are kept on disk: a new gate (a restart) holds the next candidate to v0 still."""
    steps: list[float] = []  # each accepted version scores 0.02 below the one before

    def scorer(prompts, answers):
        return [-0.02 * steps[-1] if steps else 0.0] * len(answers)

    config = TrainConfig(gate="on", gate_max_new_tokens=4, gate_anchors=2)
    path = tmp_path / "gate-anchors.json"
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    probes = [_prompts(tokenizer)[:1]]  # one probe at first: the anchors fill over two decisions
    gate = Gate(trainer, config, tokenizer, lambda: probes[0], scorer=scorer, anchor_path=path)
    trainer.return_to(1, 0)
    first = gate.decide()
    assert first.accepted and first.checks["anchors"]["probes"] == 1 and gate.anchors.version == 0
    gate.accept()
    probes[0] = _prompts(tokenizer)[1:]  # the newest probes: the second joins the anchors, answered by v0
    trainer.return_to(2, 1)
    second = gate.decide()
    assert second.accepted, second.reason
    assert gate.anchors.prompts == [_prompts(tokenizer)[0], _prompts(tokenizer)[1]]
    assert gate._anchor_source is None  # full: v0's weights are let go
    assert path.exists()
    assert second.checks["anchors"]["decoded"] == 1  # the anchor that is not a probe now

    # A scorer that sees each new version 0.02 below the one before: per step -0.02 passes,
    # the third version is -0.04 against the anchors (v0's own scores are 0).
    steps.append(1.0)
    gate.accept()
    trainer.return_to(3, 2)
    steps.append(2.0)
    restarted = Gate(trainer, config, tokenizer, lambda: probes[0], scorer=lambda p, a: [
        -0.04 if len(a) == 2 and p == gate.anchors.prompts else -0.02] * len(a), anchor_path=path)
    assert restarted.anchors.version == 0 and restarted._anchor_source is None  # from the file
    third = restarted.decide()
    assert not third.accepted, third.reason
    assert "anchors (v0's answers to 2 fixed probes): score -0.040 below theirs" in third.reason, third.reason
    assert "below the served version's" not in third.reason  # each step alone passed


def test_a_changed_candidate_is_turned_away_by_the_anchors_alone(tiny_model_dir, tokenizer):
    """When the served version is already the changed one, no check against it can fail; the
    anchors, answered by v0, still see the change (here: a scorer that likes v0's answers only)."""
    config = TrainConfig(gate="on", gate_max_new_tokens=12, gate_anchors=3, gate_max_kl=1e9,
                         gate_max_repetition_increase=1.0, gate_max_length_ratio=100.0)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    first: list[str] = []

    def scorer(prompts, answers):
        return [1.0 if not first or answer in first else 0.0 for answer in answers]

    gate = Gate(trainer, config, tokenizer, lambda: _prompts(tokenizer), scorer=scorer)
    gate.decide()
    first += gate.anchors.answers.texts  # v0's answers
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a different policy: its greedy answers change
        for weight in trainer.trainable:
            weight.add_(torch.randn(weight.shape, generator=g) * 0.5)
    trainer.return_to(1, 0)
    gate.snapshot = gate._take()  # as if the changed v1 were served already
    decision = gate.decide()
    assert decision.checks["kl_per_token"] == pytest.approx(0.0, abs=1e-4)
    assert decision.checks["score_delta"] == 0.0  # against the served (itself): nothing
    held = decision.checks["anchors"]
    assert held["candidate"] == decision.checks["candidate"] and held["decoded"] == 0  # probe answers reused
    assert held["score_delta"] < -config.gate_max_score_drop
    assert not decision.accepted and decision.reason.startswith("anchors (v0's answers"), decision.reason


def test_anchors_are_off_with_zero_and_a_broken_file_is_named(tiny_model_dir, tokenizer, tmp_path):
    config = TrainConfig(gate="on", gate_max_new_tokens=4, gate_anchors=0)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate = Gate(trainer, config, tokenizer, lambda: _prompts(tokenizer), anchor_path=tmp_path / "a.json")
    assert "anchors" not in gate.decide().checks and not (tmp_path / "a.json").exists()
    broken = tmp_path / "broken.json"
    broken.write_text("{\"version\": 0")
    with pytest.raises(ValueError, match="broken.json: not the update gate's anchors.*move it away"):
        Gate(trainer, TrainConfig(gate="on"), tokenizer, lambda: [], anchor_path=broken)
    assert broken.read_text() == "{\"version\": 0"  # nothing lost


def test_anchors_answered_to_another_length_are_made_again(tiny_model_dir, tokenizer, tmp_path):
    path = tmp_path / "gate-anchors.json"
    trainer = Trainer(tiny_model_dir, TrainConfig(gate="on", gate_max_new_tokens=4), device="cpu")
    Gate(trainer, TrainConfig(gate="on", gate_max_new_tokens=4), tokenizer, lambda: _prompts(tokenizer),
         anchor_path=path).decide()
    longer = TrainConfig(gate="on", gate_max_new_tokens=6)
    gate = Gate(trainer, longer, tokenizer, lambda: _prompts(tokenizer), anchor_path=path)
    assert gate.anchors is None
    gate.decide()
    assert gate.anchors.max_new_tokens == 6 and len(gate.anchors.prompts) == 3
    fewer = Gate(trainer, TrainConfig(gate="on", gate_max_new_tokens=6, gate_anchors=2), tokenizer,
                 lambda: _prompts(tokenizer), anchor_path=path)
    assert len(fewer.anchors.prompts) == len(fewer.anchors.answers.ids) == len(fewer.anchors.scores) == 2
    assert fewer.decide().checks["anchors"]["probes"] == 2


def test_gate_auto_is_on_for_one_process_and_off_where_it_cannot_be_afforded(tiny_model_dir, tmp_path, monkeypatch,
                                                                             caplog):
    from openclaw_rl.compose import build_updates
    from openclaw_rl.train import gate as gate_module

    store = Store(tmp_path)
    config = TrainConfig(method="binary")
    assert config.gate == "auto"  # the default of serve and train
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    gate, _ = build_updates(trainer, config, store)
    assert isinstance(gate, Gate)  # one process, and the machine's real free memory holds the snapshot
    assert build_updates(trainer, TrainConfig(method="binary", gate="off"), store)[0] is None

    trainable = sum(p.numel() * p.element_size() for p in trainer.model.parameters() if p.requires_grad)
    monkeypatch.setattr(gate_module.psutil, "virtual_memory",
                        lambda: type("Memory", (), {"available": 3 * trainable * 3})())  # below 4x the snapshot
    with caplog.at_level("WARNING"):
        assert build_updates(trainer, config, store)[0] is None
    assert "the update gate is off (--gate auto)" in caplog.text and "more than a quarter" in caplog.text
    assert isinstance(build_updates(trainer, TrainConfig(method="binary", gate="on"), store)[0], Gate)  # on is on
    monkeypatch.undo()
    trainer.sharded = True
    assert gate_module.auto_off_reason(trainer).startswith("the trainer is sharded")
    trainer.sharded = False

    bare = tmp_path / "no-tokenizer"  # a model dir whose tokenizer does not load
    shutil.copytree(tiny_model_dir, bare, ignore=shutil.ignore_patterns("tokenizer*", "chat_template.jinja"))
    trainer = Trainer(bare, config, device="cpu")
    with caplog.at_level("WARNING"):
        assert build_updates(trainer, config, store)[0] is None
    assert "has no tokenizer that loads" in caplog.text
    with pytest.raises(ConfigError, match="--gate on decodes probes with the model's tokenizer.*--gate off"):
        build_updates(trainer, TrainConfig(method="binary", gate="on"), store)
    store.close()


# -- the user's lessons move the anchors' length band ------------------------------------------------


@pytest.mark.parametrize("lesson_ratio, accepted", [(None, False), (0.4, True), (1.5, False)])
def test_answers_as_short_as_the_users_lessons_make_the_served_ones_pass_the_anchors(lesson_ratio, accepted):
    """A candidate 0.3x as long as v0's anchors fails the 2x band, unless the user's lessons make the served
    version answer that short too (0.4x: the band reaches 0.2x); lessons that lengthen answers do not widen
    it downwards."""
    decision = compare(_summary(tokens=100.0), _summary(tokens=30.0), None, TrainConfig(), against="anchors (v0)",
                       lesson_ratio=lesson_ratio)
    assert decision.accepted is accepted, decision.reason
    if lesson_ratio is not None:
        assert decision.checks["lesson_length_ratio"] == lesson_ratio
    if lesson_ratio == 1.5:
        assert "with the user's lessons the served version's are 1.50x, so 0.50x-3.00x passes" in decision.reason


def test_longer_answers_than_the_anchors_pass_when_the_users_lessons_lengthen_the_served_ones():
    decision = compare(_summary(tokens=20.0), _summary(tokens=90.0), None, TrainConfig(), against="anchors (v0)",
                       lesson_ratio=3.0)
    assert decision.accepted, decision.reason  # 4.5x, within 3.0 x 2


def test_the_anchor_check_measures_the_served_answers_with_the_users_lessons(tiny_model_dir, tokenizer):
    """With `with_lessons`, the gate answers the anchor prompts that have lessons with the served weights
    and holds the candidate's length to the band from 1 to their ratio; prompts it gets none for are left out."""
    config = TrainConfig(gate="on", gate_max_new_tokens=8, gate_anchors=3)
    trainer = Trainer(tiny_model_dir, config, device="cpu")
    prompts = _prompts(tokenizer)
    lesson = tokenizer.encode("Keep it short. ")
    gate = Gate(trainer, config, tokenizer, lambda: prompts)
    gate.with_lessons = lambda anchors: {tuple(p): lesson + p for p in anchors[:2]}
    decision = gate.decide()
    with_lessons = gate._served_answers([lesson + p for p in prompts[:2]])
    own = gate.anchors.answers.pick([0, 1]).summary()["mean_tokens"]
    ratio = decision.checks["anchors"]["lesson_length_ratio"]
    assert ratio == pytest.approx(with_lessons.summary()["mean_tokens"] / own)
    gate.with_lessons = lambda anchors: {}
    assert "lesson_length_ratio" not in gate.decide().checks["anchors"]


def test_lesson_prompts_put_the_newest_served_block_into_the_probe_files_prompts(tokenizer, tmp_path):
    """compose's `lesson_prompts`: each probe-file prompt with the block and placement of the user's newest turn
    served with one; the shared gate uses the one user with lessons, and nobody's when two have some."""
    import json as json_module

    from openclaw_rl.chat import render_prompt
    from openclaw_rl.compose import lesson_prompts, probe_conversations
    from openclaw_rl.experience import learn, place

    questions = [[{"role": "user", "content": f"What is {i} plus {i}?"}] for i in range(2)]
    probe_file = tmp_path / "probes.jsonl"
    probe_file.write_text("\n".join(json_module.dumps({"messages": m}) for m in questions), encoding="utf-8")
    config = TrainConfig(gate="on", gate_probe_file=str(probe_file))
    store = Store(tmp_path / "data")
    try:
        def taught(owner: str, text: str) -> None:
            experience, changes = learn(store.experience(owner), text, f"{owner}-1", 1.0,
                                        lambda texts: torch.eye(8)[:len(texts)].numpy(), lambda t: len(t.split()))
            store.save_experience(experience, changes)
            store.ensure_session(f"s-{owner}", "header", owner=owner)
            block = f"Earlier:\n- {text}"
            for n, placement in enumerate(("system", "user")):  # the newest turn's placement is the one used
                store.record_turn(TurnRecord(
                    session_id=f"s-{owner}", kind="main", policy_version=0, prompt_messages=questions[0],
                    prompt_token_ids=render_prompt(tokenizer, place(questions[0], block, placement), None, None),
                    response_token_ids=[1, 2], behaviour_logprobs=[-1.0, -1.0], response_text="4",
                    tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop", owner=owner,
                    experience_version=1, experience_block=block, experience_placement=placement))

        ids = [render_prompt(tokenizer, m, None, None) for m in questions]
        other = tokenizer.encode("not in the probe file")
        conversations = probe_conversations(config, tokenizer)
        assert lesson_prompts(conversations, store, tokenizer, None)(ids) == {}  # nobody has lessons yet
        taught("ann", "Keep it short.")
        shared = lesson_prompts(conversations, store, tokenizer, None)([*ids, other])
        assert shared == {tuple(p): render_prompt(tokenizer, place(m, "Earlier:\n- Keep it short.", "user"), None,
                                                   None) for p, m in zip(ids, questions)}
        taught("bob", "Show every step.")
        assert lesson_prompts(conversations, store, tokenizer, None)(ids) == {}  # two users' lessons: the shared gate
        bob = lesson_prompts(conversations, store, tokenizer, "bob")(ids)  # bob's own adapter's gate
        assert bob[tuple(ids[1])] == render_prompt(tokenizer, place(questions[1], "Earlier:\n- Show every step.",
                                                                     "user"), None, None)
        no_file = probe_conversations(TrainConfig(gate="on"), tokenizer)
        assert lesson_prompts(no_file, store, tokenizer, "bob") is None  # no probe file
    finally:
        store.close()


def test_each_users_gate_reads_that_users_lessons(tiny_model_dir, tokenizer, tmp_path, monkeypatch):
    """compose's `personal_gates` builds a user's gate with `with_lessons` for that user; the shared one for
    the one user with lessons."""
    from openclaw_rl.compose import build_updates, personal_gates
    from openclaw_rl.experience import learn

    probe_file = tmp_path / "probes.jsonl"
    probe_file.write_text('{"messages": [{"role": "user", "content": "What is 2 plus 2?"}]}', encoding="utf-8")
    config = TrainConfig(gate="on", gate_probe_file=str(probe_file), gate_max_new_tokens=4)
    store = Store(tmp_path / "data")
    try:
        experience, changes = learn(store.experience("bob"), "Keep it short.", "bob-1", 1.0,
                                    lambda texts: torch.eye(8)[:len(texts)].numpy(), lambda t: len(t.split()))
        store.save_experience(experience, changes)
        trainer = Trainer(tiny_model_dir, config, device="cpu")
        seen: list[str | None] = []
        from openclaw_rl import compose
        real = compose.served_with_block
        monkeypatch.setattr(compose, "served_with_block",
                            lambda s, owner, sessions: seen.append(owner) or real(s, owner, sessions))
        gate = personal_gates(trainer, config, store, tokenizer)(tmp_path / "anchors.json", "ann")
        gate.with_lessons([[1, 2]])
        shared, _ = build_updates(trainer, config, store, tokenizer)
        shared.with_lessons([[1, 2]])
        assert seen == ["ann", "bob"]  # ann's own gate reads ann's turns; the shared one the one user with lessons
    finally:
        store.close()
