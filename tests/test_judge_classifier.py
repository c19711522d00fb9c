"""The default judge's classifier: its shipped weights come from the tuning data as it is now,
and the training pieces do what the weights rely on (judge/classifier.py, judge/train_classifier.py)."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest
import torch

from openclaw_rl.eval.problems import train_problems
from openclaw_rl.eval.student import STUDENT
from openclaw_rl.eval.teacher import TEACHER
from openclaw_rl.judge.classifier import (
    DEFAULT_WEIGHTS,
    LABELS,
    JudgeModel,
    Linear,
    NextStateClassifier,
    fit_logistic,
    prototypes,
)
from openclaw_rl.judge.evidence import material_from_parts
from openclaw_rl.judge.rules import correction_hints

DATA = Path(__file__).parent / "data"
AGENT_DOMAINS = ("toolcall", "terminal", "swe", "gui")


def _cases(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"judge_{name}.jsonl").read_text().splitlines() if line.strip()]


TRAINED_ON = ("tuning", "heldout", "heldout2")  # the splits docs/judge.md trains on (the tuning data)


def test_the_shipped_weights_were_trained_on_the_tuning_data_as_it_is():
    model = JudgeModel.load(DEFAULT_WEIGHTS)
    digests = {name: hashlib.sha256((DATA / f"judge_{name}.jsonl").read_bytes()).hexdigest() for name in TRAINED_ON}
    expected = "; ".join(f"judge_{name}.jsonl sha256:{digest}" for name, digest in digests.items())
    assert model.metadata["trained_on"] == expected, (
        "the tuning data changed since the weights were trained: run python -m openclaw_rl.judge.train_classifier "
        + " ".join(f"--cases tests/data/judge_{name}.jsonl" for name in TRAINED_ON))
    people = [c for name in TRAINED_ON for c in _cases(name) if c["next_state_role"] in ("user", "feedback")]
    assert model.bank.shape == (len(people), 384) and model.bank_labels.shape == (len(people),)


def test_the_splits_share_no_case():
    splits = {name: _cases(name) for name in ("tuning", "measured", "agent_states", "heldout", "heldout2",
                                              "heldout3")}
    assert len(splits["tuning"]) + len(splits["measured"]) >= 300
    heldouts = {name: splits.pop(name) for name in ("heldout", "heldout2", "heldout3")}
    for heldout in heldouts.values():
        assert len(heldout) >= 130 and sum(c["domain"] in AGENT_DOMAINS for c in heldout) >= 45
    people = ("user", "feedback")  # tool output such as "(no output)" may repeat among the older splits
    for (name, first), (other, second) in itertools.combinations(splits.items(), 2):
        seen = {(c["request"], c["next_state"]) for c in first}
        assert not [c["id"] for c in second if (c["request"], c["next_state"]) in seen], (name, other)
        assert not ({c["next_state"] for c in first if c["next_state_role"] in people}
                    & {c["next_state"] for c in second if c["next_state_role"] in people}), (name, other)
    # each held-out split was written apart from the others (heldout2 blind, docs/judge.md): none of
    # its next states, tool output included, appears in any other split or twice in it
    for name, heldout in heldouts.items():
        elsewhere = {c["next_state"] for other, cases in {**splits, **heldouts}.items() if other != name
                     for c in cases}
        assert not [c["id"] for c in heldout if c["next_state"] in elsewhere], name
        assert len({c["next_state"] for c in heldout}) == len(heldout), name
    for case in [c for cases in [*splits.values(), *heldouts.values()] for c in cases]:
        assert case["expected_score"] == {"approval": 1, "progression": 1, "correction": -1,
                                          "ambiguity": 0}[case["kind"]], case["id"]
        assert case["expected_hint"] is None or case["expected_score"] == -1, case["id"]


def test_fit_logistic_separates_what_is_separable():
    torch.manual_seed(0)
    centres = torch.tensor([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    labels = torch.arange(3).repeat_interleave(20)
    x = centres[labels] + 0.3 * torch.randn(60, 2)
    model = fit_logistic(x, labels, l2=1.0)
    assert torch.equal(model.probabilities(x).argmax(-1), labels)
    again = fit_logistic(x, labels, l2=1.0)
    assert torch.equal(model.weight, again.weight)  # deterministic: the shipped weights can be reproduced


def test_prototypes_are_the_mean_of_the_nearest_per_label_and_can_leave_a_case_out():
    bank = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]]), dim=-1)
    bank_labels = torch.tensor([2, 2, 1, 0])
    query = bank[:1]
    found = prototypes(query, bank, bank_labels)
    assert found[0].tolist() == pytest.approx([-1.0, 0.0, (1.0 + 0.8) / 2])
    left_out = prototypes(query, bank, bank_labels, exclude=torch.tensor([[True, False, False, False]]))
    assert left_out[0, 2].item() == pytest.approx(0.8)


def test_saved_weights_load_back(tmp_path):
    part = Linear(torch.randn(3, 5), torch.randn(3), torch.zeros(5), torch.ones(5))
    model = JudgeModel(part, part, torch.nn.functional.normalize(torch.randn(4, 384), dim=-1),
                       torch.tensor([0, 1, 2, 2]), {"trained_on": "x"})
    model.save(tmp_path / "w.safetensors")
    loaded = JudgeModel.load(tmp_path / "w.safetensors")
    assert torch.equal(loaded.people.weight, part.weight) and loaded.metadata == {"trained_on": "x"}
    assert torch.allclose(loaded.bank.float(), model.bank, atol=1e-3)


def test_the_classifier_reads_the_response_in_view_of_the_request():
    classifier = NextStateClassifier()
    asked_italian = material_from_parts("Translate 'where is the station' into Italian.",
                                        "¿Dónde está la estación?", [], "user",
                                        "That's Portuguese. I wanted it in Italian.")
    moved_on = material_from_parts("What is the capital of Italy?", "Rome.", [], "user", "And the capital of Spain?")
    assert classifier.read(asked_italian).vote == -1
    assert classifier.read(moved_on).vote == 1
    unruled = material_from_parts("What is the capital of Italy?", "Rome.", [], "user", "Spain next.")
    reading = classifier.read(unruled)  # no rule speaks on it (a follow-up question is ruled: people_state.py)
    assert reading.basis == "classifier" and set(reading.probabilities) == set(LABELS)


def test_the_demo_users_are_read_as_they_mean_it():
    """The simulated student and teacher of the demo: an approval is never a correction, a
    correction is -1 with a hint, and asking again is never +1 and has no hint (mostly -1, sometimes 0)."""
    classifier = NextStateClassifier()
    bad = "Certainly! Great question.\n\n## Solution\n\n- **Step 1:** Multiply.\n\n**Final Answer:** 56"
    approvals, reasks = [], []
    for persona in (STUDENT, TEACHER):
        problem = train_problems(0, 1)[0]
        request = persona.first_message(problem)
        for text in persona.approvals:
            approvals.append(classifier.read(material_from_parts(request, "He has 55 left.", [], "user", text)).vote)
        for text in persona.reasks:
            reasks.append(classifier.read(material_from_parts(request, bad, [], "user", text)).vote)
            assert correction_hints(text, "user") == [], text
        replies = [persona.reply(problem, bad, 0, random.Random(seed)) for seed in range(8)]
        corrections = [r for r in replies if r.kind == "correct"]
        assert len(corrections) >= 3
        for reply in corrections:
            assert classifier.read(material_from_parts(request, bad, [], "user", reply.text)).vote == -1, reply.text
            assert correction_hints(reply.text, "user"), reply.text
    assert -1 not in approvals and approvals.count(1) >= 0.8 * len(approvals), approvals
    assert 1 not in reasks and reasks.count(-1) >= 0.5 * len(reasks), reasks
