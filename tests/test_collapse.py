"""Collapse detectors (train/collapse.py) and the update gate's record of them, and the same on
served traffic (serve/collapse.py) (issue 40)."""

from __future__ import annotations

import math
import random
import time

import httpx
import pytest
import torch

from openclaw_rl.config import TrainConfig
from openclaw_rl.serve.collapse import WINDOW, ServedCollapse, WindowStats, served_collapse, window_stats
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.store import Store
from openclaw_rl.train.collapse import (
    CollapseThresholds,
    collapse_alarms,
    lcs_length,
    logprob_drift,
    mean_entropy,
    rouge_l,
    self_rouge_l,
)
from openclaw_rl.train.gate import Decision, Gate
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import TurnRecord
from openclaw_rl.users import Users

# -- the detectors, by hand --------------------------------------------------------------


def _lcs_reference(a: list[int], b: list[int]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_bit_parallel_lcs_matches_the_dynamic_programme():
    rng = random.Random(0)
    for _ in range(200):
        a = [rng.randrange(5) for _ in range(rng.randrange(0, 30))]
        b = [rng.randrange(5) for _ in range(rng.randrange(0, 30))]
        assert lcs_length(a, b) == _lcs_reference(a, b), (a, b)


def test_rouge_l_by_hand():
    # LCS of 1 2 3 4 and 1 3 4 5 5 is 1 3 4: F1 = 2 * 3 / (4 + 5)
    assert rouge_l([1, 2, 3, 4], [1, 3, 4, 5, 5]) == pytest.approx(6 / 9)
    assert rouge_l([], [1]) == 0.0
    # three answers: two the same (1.0), each against a disjoint one (0.0): mean 1/3
    assert self_rouge_l([[1, 2, 3], [1, 2, 3], [7, 8, 9]]) == pytest.approx(1 / 3)
    assert self_rouge_l([[1, 2], []]) is None


def test_entropy_from_the_top_k_counts_the_rest_as_one_outcome():
    quarter = math.log(0.25)
    # uniform over 4 tokens, all 4 kept: ln 4
    assert mean_entropy([torch.full((3, 4), quarter)]) == pytest.approx(math.log(4))
    # the same with the top 2 kept: 2 * 0.25 ln 4 + 0.5 ln 2 (the rest, 0.5, as one outcome)
    assert mean_entropy([torch.full((1, 2), quarter)]) == pytest.approx(0.5 * math.log(4) + 0.5 * math.log(2))
    assert mean_entropy([torch.zeros(0, 4)]) is None


def test_drift_is_the_log_prob_the_served_answer_loses_per_token():
    served = [torch.tensor([[-0.1, -3.0], [-0.5, -1.0]])]  # column 0: the greedy token's log-prob
    candidate = [torch.tensor([-2.1, -0.5])]
    assert logprob_drift(served, candidate) == pytest.approx(((-0.1 + 2.1) + (-0.5 + 0.5)) / 2)
    with pytest.raises(ValueError, match="2 served positions but 1"):
        logprob_drift(served, [torch.tensor([-1.0])])


def test_alarms_name_each_detector_beyond_its_threshold():
    thresholds = CollapseThresholds()
    assert collapse_alarms({"entropy_ratio": 0.9, "self_rouge_l": 0.3, "logprob_drift_nats": 0.4}, thresholds) == []
    alarms = collapse_alarms({"entropy_ratio": 0.4, "self_rouge_l": 0.9, "logprob_drift_nats": 2.5}, thresholds)
    assert alarms == ["entropy ratio 0.40 < 0.6", "self-ROUGE-L 0.90 > 0.85", "log-prob drift 2.50 nats/token > 2"]
    # a base whose answers are already alike is compared with itself
    assert collapse_alarms({"self_rouge_l": 0.9, "base_self_rouge_l": 0.95}, thresholds) == []
    assert collapse_alarms({"self_rouge_l": 0.97, "base_self_rouge_l": 0.95}, thresholds) == [
        "self-ROUGE-L 0.97 > 0.95 (the base's 0.95)"]
    assert collapse_alarms({"entropy_ratio": None}, thresholds) == []
    with pytest.raises(ValueError, match="min_entropy_ratio must be in"):
        CollapseThresholds(min_entropy_ratio=1.5)


# -- on a real (tiny) model -------------------------------------------------------------------


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _prompts(tokenizer) -> list[list[int]]:
    topics = ["rivers of Europe", "adding fractions", "the water cycle", "how bees dance", "a haiku about snow",
              "prime numbers", "the French revolution", "baking bread"]
    return [tokenizer.encode(f"Tell me about {topic}.") for topic in topics]


def _push_to_repeat(trainer: Trainer, prompts: list[list[int]], token: int, steps: int = 24) -> None:
    """Weights trained to answer every prompt with one token over and over: a collapsed policy."""
    model = trainer.model
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    for _ in range(steps):
        loss = 0.0
        for prompt in prompts:
            ids = torch.tensor([prompt + [token] * 12])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]  # (12, V)
            loss = loss + torch.nn.functional.cross_entropy(logits.float(), torch.full((12,), token))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_a_candidate_pushed_to_repeat_one_token_raises_every_alarm_and_a_healthy_one_none(tiny_model_dir, tokenizer):
    config = TrainConfig(gate="on", gate_max_new_tokens=16)
    trainer = Trainer(tiny_model_dir, config, initial_version=0, device="cpu")
    prompts = _prompts(tokenizer)
    seen = []
    gate = Gate(trainer, config, tokenizer, lambda: prompts)
    gate.on_decision = seen.append
    healthy = gate.decide().checks["collapse"]
    assert healthy["alarms"] == [], healthy
    assert healthy["entropy_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert healthy["logprob_drift_nats"] == pytest.approx(0.0, abs=1e-3)
    assert healthy["base_drift_nats"] == pytest.approx(0.0, abs=1e-3)
    assert healthy["self_rouge_l"] == pytest.approx(healthy["base_self_rouge_l"])
    gate.accept()

    trainer.return_to(1, 0)
    _push_to_repeat(trainer, prompts, token=tokenizer.encode(" the")[-1])
    decision = gate.decide()
    collapsed = decision.checks["collapse"]
    assert collapsed["self_rouge_l"] > 0.85 and collapsed["entropy_ratio"] < 0.6, collapsed
    assert collapsed["logprob_drift_nats"] > 2.0, collapsed
    assert collapsed["base_drift_nats"] > 2.0, collapsed
    assert len(collapsed["alarms"]) == 4
    assert seen == [seen[0], decision] and seen[0].checks["collapse"] is healthy

    metrics = Metrics()  # what /metrics shows once loop.show_candidates wired the gate to it
    metrics.record_gate_decision(decision)
    shown = metrics.render().decode()
    assert "openclaw_gate_collapse_alarms 4.0" in shown and "openclaw_gate_self_rouge_l 1.0" in shown


def test_metrics_show_nothing_before_a_decision_with_detectors():
    metrics = Metrics()
    assert "openclaw_gate_entropy_ratio NaN" in metrics.render().decode()
    metrics.record_gate_decision(Decision(True, "no probe prompts yet: accepted unchecked", {"probes": 0}))
    assert "openclaw_gate_logprob_drift_nats NaN" in metrics.render().decode()
    metrics.record_gate_decision(Decision(True, "passed every check", {"collapse": {
        "entropy_ratio": 0.8, "self_rouge_l": 0.2, "logprob_drift_nats": 0.1, "alarms": []}}))
    shown = metrics.render().decode()
    assert "openclaw_gate_entropy_ratio 0.8" in shown and "openclaw_gate_collapse_alarms 0.0" in shown


# -- on served traffic (serve/collapse.py) -------------------------------------------------


def _answer(tokens: list[int], logprob: float, turn_id: int = 0, version: int = 0) -> dict:
    return {"id": turn_id, "created_at": 0.0, "owner": "alice", "policy_version": version,
            "response_token_ids": tokens, "behaviour_logprobs": [logprob] * len(tokens)}


def test_a_served_window_by_hand():
    stats = window_stats([_answer([1, 2, 3], -1.0), _answer([1, 2, 4], -2.0, version=3),
                          _answer([], 0.0, version=3)])
    # -log p per token: (3 × 1 + 3 × 2) / 6; ROUGE-L of the two non-empty answers: LCS 2, 2 × 2 / 6
    assert stats == WindowStats(turns=3, entropy_nats=1.5, self_rouge_l=pytest.approx(2 / 3), mean_tokens=2.0,
                                versions=(0, 3))
    assert window_stats([_answer([1], float("-inf")), _answer([2], -0.5)]).entropy_nats == 0.5  # the finite ones

    base = WindowStats(turns=32, entropy_nats=2.0, self_rouge_l=0.9, mean_tokens=10.0, versions=(0,))
    latest = WindowStats(turns=32, entropy_nats=1.0, self_rouge_l=0.95, mean_tokens=4.0, versions=(5, 6))
    found = served_collapse(latest, base, CollapseThresholds())
    assert found["entropy_ratio"] == 0.5 and found["base"]["self_rouge_l"] == 0.9
    assert found["alarms"] == ["entropy ratio 0.50 < 0.6", "self-ROUGE-L 0.95 > 0.90 (the base's 0.90)"]
    alone = served_collapse(latest, None, CollapseThresholds())  # no base window apart from it yet
    assert alone["entropy_ratio"] is None and alone["base"] is None
    assert alone["alarms"] == ["self-ROUGE-L 0.95 > 0.85"]


def _serve(store: Store, owner: str, answers: list[list[int]], logprob: float, version: int = 0) -> None:
    """Main turns of `owner` as serving records them, one session each."""
    for answer in answers:
        session = f"{owner}-{time.monotonic_ns()}"
        store.ensure_session(session, "header", owner)
        store.record_turn(TurnRecord(
            session_id=session, kind="main", policy_version=version, prompt_messages=[{"role": "user", "content": "q"}],
            prompt_token_ids=[1, 5], response_token_ids=answer, behaviour_logprobs=[logprob] * len(answer),
            response_text="answer", tool_calls=[], sampling={"temperature": 1.0}, finish_reason="stop", owner=owner))


def _varied(rng: random.Random, count: int) -> list[list[int]]:
    return [[rng.randrange(3, 5000) for _ in range(rng.randrange(12, 30))] for _ in range(count)]


COLLAPSED = [7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9]  # the same loop, whatever was asked


def test_a_collapsed_stream_alarms_a_varied_one_does_not_and_each_user_is_measured_apart(tmp_path):
    rng, store = random.Random(0), Store(tmp_path)
    _serve(store, "alice", _varied(rng, WINDOW), -1.6)  # the base window: varied answers, unsure tokens
    _serve(store, "bob", _varied(rng, WINDOW), -1.5)
    _serve(store, "alice", [COLLAPSED] * WINDOW, -0.05, version=4)  # then one sure, repeated answer
    _serve(store, "bob", _varied(rng, WINDOW), -1.4, version=4)
    served = ServedCollapse(store)

    alice = served.of("alice")
    assert alice["user"] == "alice" and alice["turns"] == WINDOW and alice["versions"] == [4]
    assert alice["entropy_ratio"] == pytest.approx(0.05 / 1.6) and alice["self_rouge_l"] == 1.0
    assert alice["mean_tokens"] == 12 and alice["base"]["versions"] == [0]
    assert [a.split(" ")[0] for a in alice["alarms"]] == ["entropy", "self-ROUGE-L"]
    bob = served.of("bob")
    assert bob["alarms"] == [] and bob["entropy_ratio"] == pytest.approx(1.4 / 1.5)
    assert bob["self_rouge_l"] < 0.2, bob
    everyone = served.of(None)  # the newest 32 overall: bob's (recorded last), over the earliest 32: alice's
    assert everyone["user"] is None and everyone["entropy_ratio"] == pytest.approx(1.4 / 1.6)
    assert everyone["alarms"] == [] and everyone["calibrated"] is False
    assert everyone["thresholds"] == {"min_entropy_ratio": 0.6, "max_self_rouge_l": 0.85,
                                      "max_logprob_drift_nats": 2.0, "max_base_drift_nats": 0.15}

    kept = len(served._kept)
    assert served.of("alice") == alice and len(served._kept) == kept  # no new turn: nothing computed again
    store.close()


def test_before_two_windows_are_stored_there_is_no_ratio_and_rouge_alarms_on_its_threshold(tmp_path):
    store = Store(tmp_path)
    assert ServedCollapse(store).of(None)["self_rouge_l"] is None  # nothing served yet: nothing measured
    _serve(store, "alice", [COLLAPSED] * (WINDOW + 5), -0.05)
    found = ServedCollapse(store).of("alice")
    assert found["entropy_ratio"] is None and found["base"] is None
    assert found["alarms"] == ["self-ROUGE-L 1.00 > 0.85"]
    with pytest.raises(ValueError, match="at least 2 turns"):
        ServedCollapse(store, window=1)
    store.close()


def test_the_api_shows_a_user_their_own_numbers_an_admin_everyones_and_metrics_the_overall(scripted_server):
    server = scripted_server(["four"])
    store = server.server.store
    users = Users(store.data_dir)
    keys = {name: users.add(name, admin=name == "root") for name in ("alice", "bob", "root")}
    rng = random.Random(1)
    _serve(store, "alice", _varied(rng, WINDOW), -1.6)
    _serve(store, "bob", _varied(rng, 2 * WINDOW), -1.5)
    _serve(store, "alice", [COLLAPSED] * WINDOW, -0.05, version=2)

    def get(user: str, query: str = "") -> httpx.Response:
        return httpx.get(f"{server.base_url}/v1/collapse{query}", headers={"Authorization": f"Bearer {keys[user]}"})

    alice, bob = get("alice").json(), get("bob").json()
    assert alice["user"] == "alice" and len(alice["alarms"]) == 2 and alice["self_rouge_l"] == 1.0
    assert bob["user"] == "bob" and bob["alarms"] == [] and bob["turns"] == WINDOW
    refused = get("alice", "?user=bob")  # another user's numbers: as if there were no such user
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "user_not_found"
    assert get("alice", "?user=alice").json() == alice
    everyone = get("root").json()
    # the newest 32 overall are alice's loop, the earliest 32 her varied answers
    assert everyone["user"] is None and everyone["self_rouge_l"] == 1.0
    assert everyone["entropy_ratio"] == pytest.approx(0.05 / 1.6)
    assert get("root", "?user=bob").json() == bob
    assert httpx.get(f"{server.base_url}/v1/collapse").status_code == 401

    shown = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {keys['alice']}"}).text
    assert "openclaw_served_self_rouge_l 1.0" in shown and "openclaw_served_collapse_alarms 2.0" in shown
    assert "openclaw_served_mean_tokens 12.0" in shown
    assert "alice" not in shown and "bob" not in shown  # overall numbers only: no user in a label


def test_metrics_show_nan_before_any_served_turn():
    metrics = Metrics()
    assert "openclaw_served_entropy_ratio NaN" in metrics.render().decode()
    metrics.record_served_collapse({"entropy_ratio": None, "self_rouge_l": 0.5, "alarms": []})
    shown = metrics.render().decode()
    assert "openclaw_served_entropy_ratio NaN" in shown and "openclaw_served_self_rouge_l 0.5" in shown
    assert "openclaw_served_collapse_alarms 0.0" in shown

