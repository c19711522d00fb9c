"""The default judge's reading of a turn: rules where rules are right, two small classifiers elsewhere.

    vote = rule_verdict(request, action, next state)     where the rules speak (judge.evidence)
         = argmax softmax(W_role x + b_role) - 1         otherwise

Two multinomial logistic regressions, one for what people write (user and feedback next
states) and one for what tools and environments print, over:

- `prototypes` (people only): for each label, the mean cosine similarity of the next
  state's all-MiniLM-L6-v2 embedding with its 3 nearest tuning next states of that
  label (the bank of tuning embeddings ships with the weights);
- `similarities`: cosine of the next state with the request, with the action, of the
  request with the action, and of a clicked GUI element's name with the request;
- `cues`: the lexical evidence of `judge.evidence` (approval, doubt, contrast, requests
  for change or for more, new questions, sarcasm ...) or, for machine output, its
  machine evidence (success words, failure words, pending states, grounding of the page
  and of the clicked element in the request ...).

The weights are trained on the tuning split by `python -m openclaw_rl.judge.train_classifier`
and shipped beside this file (next_state_classifier.safetensors); the file records the
feature blocks, the standardisation, and the sha256 of the cases it was trained on.

Decisions and why (the alternatives' numbers are in docs/judge.md):

- Logistic regression over a frozen encoder, not a fine-tuned cross-encoder: 200 tuning
  cases fit a few hundred weights, not 22M; it trains in seconds on the CPU, is
  deterministic (one vote; m does not apply) and its weights are small enough to commit.
  An MLP of the same features did no better in cross-validation on the tuning split.
- Prototype similarities instead of the raw 384-dimensional embedding: with 117 people
  cases, a linear model over the raw embedding learns the tuning topics; the similarity
  to the nearest labelled replies carries the reply's intent in three numbers.
- The request and the action enter through similarities and cues, not as embeddings of
  their own, for the same reason (cross-validation, docs/judge.md).
- Tool and environment output is read by rules first: an error, or an action aimed at
  something the request did not name, is -1 on any wording; the machine classifier reads
  what the rules leave (did the page that opened match the request? is it still loading?).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from openclaw_rl.judge.backends import SentenceEncoder
from openclaw_rl.judge.evidence import (
    CUE_NAMES,
    MACHINE_CUE_NAMES,
    PEOPLE_CUE_NAMES,
    Material,
    clicked_name,
    cue_features,
    rule_verdict,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_WEIGHTS", "Featurizer", "JudgeModel", "Linear", "NextStateClassifier", "NextStateReading",
           "fit_logistic", "prototypes"]

DEFAULT_WEIGHTS = Path(__file__).with_name("next_state_classifier.safetensors")
LABELS = (-1, 0, 1)  # class i is vote LABELS[i]
PROTOTYPE_K = 3
PEOPLE_BLOCKS = ("prototypes", "similarities", "people_cues")
MACHINE_BLOCKS = ("similarities", "machine_cues")


@dataclass(frozen=True)
class NextStateReading:
    vote: int
    probabilities: dict[int, float]
    basis: str  # "rules: why" | "classifier"

    def explain(self) -> str:
        probs = ", ".join(f"{label:+d}: {p:.2f}" for label, p in sorted(self.probabilities.items()))
        return f"embedding judge ({self.basis}) -> SCORE: {self.vote:+d}" + (f" [p {probs}]" if probs else "")


def prototypes(queries: torch.Tensor, bank: torch.Tensor, bank_labels: torch.Tensor,
               exclude: torch.Tensor | None = None) -> torch.Tensor:
    """(Q, 3): per label, the mean cosine of each query with its PROTOTYPE_K nearest bank rows of that label.

    `queries` (Q, H) and `bank` (K, H) are L2-normalised; `bank_labels` (K,) are class
    indices; `exclude` (Q, K) marks pairs never to use (a tuning case and itself).
    """
    similarity = queries @ bank.T  # (Q, K)
    if exclude is not None:
        similarity = similarity.masked_fill(exclude, float("-inf"))
    columns = []
    for label in range(len(LABELS)):
        mine = similarity[:, bank_labels == label]
        k = min(PROTOTYPE_K, mine.shape[1])
        if not k:
            columns.append(torch.zeros(len(queries)))
            continue
        nearest = mine.topk(k, dim=-1).values
        nearest = nearest.masked_fill(nearest.isinf(), float("nan"))  # fewer than k left once excluded
        columns.append(nearest.nanmean(-1).nan_to_num(0.0))
    return torch.stack(columns, dim=-1)


class Featurizer:
    """Feature blocks for a batch of materials (one encoder pass over all their texts)."""

    def __init__(self, encoder: SentenceEncoder | None = None):
        self.encoder = encoder or SentenceEncoder()

    def blocks(self, materials: list[Material]) -> dict[str, torch.Tensor]:
        """Every block but `prototypes`, which needs a bank (`JudgeModel.features` adds it)."""
        n = len(materials)
        clicked = [clicked_name(m) for m in materials]
        texts = [t or "(empty)" for m in materials for t in (m.next_state, m.request, m.action)]
        texts += [c for c in clicked if c]
        embedded = self.encoder.encode(texts)  # (3n + clicks, H)
        e_next, e_request, e_action = embedded[0 : 3 * n : 3], embedded[1 : 3 * n : 3], embedded[2 : 3 * n : 3]
        e_clicked = torch.zeros_like(e_request)
        rows = [i for i, c in enumerate(clicked) if c]
        if rows:
            e_clicked[rows] = embedded[3 * n :]
        similarities = torch.stack([(e_next * e_request).sum(-1), (e_next * e_action).sum(-1),
                                    (e_request * e_action).sum(-1), (e_clicked * e_request).sum(-1)], dim=-1)
        cues = [cue_features(m) for m in materials]
        return {
            "e_next": e_next, "e_request": e_request, "e_action": e_action, "similarities": similarities,
            "people_cues": torch.tensor([[f[name] for name in PEOPLE_CUE_NAMES] for f in cues]),
            "machine_cues": torch.tensor([[f[name] for name in MACHINE_CUE_NAMES] for f in cues]),
            "cues": torch.tensor([[f[name] for name in CUE_NAMES] for f in cues]),
            "roles": torch.tensor([[float(m.role == r) for r in ("user", "feedback", "tool", "environment")]
                                   for m in materials]),
        }


@dataclass
class Linear:
    """A multinomial logistic regression over standardised features."""

    weight: torch.Tensor  # (3, D)
    bias: torch.Tensor  # (3,)
    mean: torch.Tensor  # (D,)
    std: torch.Tensor  # (D,)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(((x - self.mean) / self.std) @ self.weight.T + self.bias, dim=-1)  # (N, 3)


def fit_logistic(x: torch.Tensor, labels: torch.Tensor, *, l2: float, balanced: bool = True,
                 steps: int = 300) -> Linear:
    """Fit a `Linear` by L-BFGS from zeros (deterministic); `balanced` weights classes by inverse frequency.

    `x` is (N, D); `labels` (N,) are class indices into LABELS.
    """
    mean, std = x.mean(0), x.std(0).clamp(min=1e-3)
    z = (x - mean) / std
    counts = torch.bincount(labels, minlength=len(LABELS)).float().clamp(min=1)
    class_weight = counts.sum() / (len(LABELS) * counts) if balanced else torch.ones(len(LABELS))
    weight = torch.zeros(len(LABELS), x.shape[1], requires_grad=True)
    bias = torch.zeros(len(LABELS), requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ weight.T + bias, labels, weight=class_weight)
        loss = loss + l2 * weight.pow(2).sum() / len(labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return Linear(weight.detach(), bias.detach(), mean, std)


@dataclass
class JudgeModel:
    """The two classifiers and the bank of labelled people next states their prototypes read."""

    people: Linear
    machine: Linear
    bank: torch.Tensor  # (K, H) tuning next-state embeddings (people roles)
    bank_labels: torch.Tensor  # (K,) class indices
    metadata: dict[str, str]

    def probabilities(self, materials: list[Material], blocks: dict[str, torch.Tensor]) -> torch.Tensor:
        blocks = {**blocks, "prototypes": prototypes(blocks["e_next"], self.bank.float(), self.bank_labels)}
        people = torch.cat([blocks[b] for b in PEOPLE_BLOCKS], dim=-1)
        machine = torch.cat([blocks[b] for b in MACHINE_BLOCKS], dim=-1)
        is_machine = torch.tensor([m.machine for m in materials])[:, None]
        return torch.where(is_machine, self.machine.probabilities(machine), self.people.probabilities(people))

    def save(self, path: Path) -> None:
        tensors = {"bank": self.bank.half().contiguous(), "bank_labels": self.bank_labels}
        for name, part in (("people", self.people), ("machine", self.machine)):
            tensors |= {f"{name}.{k}": getattr(part, k).clone() for k in ("weight", "bias", "mean", "std")}
        metadata = {**self.metadata, "labels": json.dumps(list(LABELS)),
                    "people_blocks": json.dumps(list(PEOPLE_BLOCKS)),
                    "machine_blocks": json.dumps(list(MACHINE_BLOCKS)),
                    "people_cues": json.dumps(list(PEOPLE_CUE_NAMES)),
                    "machine_cues": json.dumps(list(MACHINE_CUE_NAMES))}
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def load(cls, path: Path) -> JudgeModel:
        with safe_open(str(path), "pt") as opened:
            metadata = dict(opened.metadata() or {})
        expected = {"labels": list(LABELS), "people_blocks": list(PEOPLE_BLOCKS),
                    "machine_blocks": list(MACHINE_BLOCKS), "people_cues": list(PEOPLE_CUE_NAMES),
                    "machine_cues": list(MACHINE_CUE_NAMES)}
        for key, value in expected.items():
            if json.loads(metadata.pop(key, "null")) != value:
                raise ValueError(f"{path} was trained with other {key.replace('_', ' ')} than this code reads; "
                                 "retrain it: python -m openclaw_rl.judge.train_classifier")
        t = load_file(str(path))
        parts = {name: Linear(*(t[f"{name}.{k}"] for k in ("weight", "bias", "mean", "std")))
                 for name in ("people", "machine")}
        return cls(parts["people"], parts["machine"], t["bank"], t["bank_labels"], metadata)


class NextStateClassifier:
    """Reads a turn's material: the rules, then the trained classifier for its role."""

    name = "embedding"

    def __init__(self, encoder: SentenceEncoder | None = None, weights: Path = DEFAULT_WEIGHTS):
        if not weights.exists():
            raise FileNotFoundError(
                f"no trained judge classifier at {weights}; train one: python -m openclaw_rl.judge.train_classifier")
        self.model = JudgeModel.load(weights)
        self.featurizer = Featurizer(encoder)

    def read(self, m: Material) -> NextStateReading:
        ruled = rule_verdict(m)
        if ruled is not None:
            return NextStateReading(ruled[0], {}, f"rules: {ruled[1]}")
        with torch.inference_mode():
            probs = self.model.probabilities([m], self.featurizer.blocks([m]))[0]
        vote = LABELS[int(probs.argmax())]
        return NextStateReading(vote, {label: float(p) for label, p in zip(LABELS, probs)}, "classifier")
