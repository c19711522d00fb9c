"""Train the default judge's classifiers on the tuning split, and compare the alternatives.

    .venv/bin/python -m openclaw_rl.judge.train_classifier [--cases tests/data/judge_tuning.jsonl [--cases ...]]
        [--out src/openclaw_rl/judge/next_state_classifier.safetensors] [--results FILE.json]
        [--report-on tests/data/judge_measured.jsonl]

1. Reads the labelled cases of the tuning split, or of every split named by `--cases`
   (request, response, tool calls, next state with its role, expected score), and
   computes every feature block once.
2. Scores each alternative by 5-fold cross-validation on the tuning split, as the judge
   runs: the rules first, the classifier on the rest. The alternatives are the shipped
   design (one classifier for people, one for machine output; `judge.classifier`) at
   several L2 strengths, its variants with other feature blocks, and one shared
   classifier for all roles over the raw next-state embedding (with and without cues,
   similarities and context embeddings; logistic and MLP).
3. Fits the shipped design at the L2 strength with the best cross-validated agreement
   on the whole tuning split and writes its weights.

`--report-on` also prints each alternative's agreement on another split (fitted on the
whole tuning split). It is a report, never an input to any choice: the measured split
must not tune the judge. Deterministic: folds by case id, L-BFGS from zeros, seeded MLPs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from openclaw_rl.judge.classifier import (
    DEFAULT_WEIGHTS,
    LABELS,
    MACHINE_BLOCKS,
    PEOPLE_BLOCKS,
    Featurizer,
    JudgeModel,
    Linear,
    fit_logistic,
    prototypes,
)
from openclaw_rl.judge.evidence import Material, material_from_parts, rule_verdict

FOLDS = 5
L2_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)
MACHINE_L2_GRID = (3.0, 10.0, 30.0)
SHARED_SETS = {  # one classifier for every role (the first designs tried)
    "next_state": ("e_next",),
    "next_state+cues": ("e_next", "roles", "cues"),
    "next_state+similarities+cues": ("e_next", "similarities", "roles", "cues"),
    "next_state+context_embeddings+similarities+cues": ("e_next", "e_request", "e_action", "similarities", "roles",
                                                        "cues"),
}
PEOPLE_SETS = {  # the people classifier's blocks; the machine one always reads MACHINE_BLOCKS
    "prototypes+similarities+cues": PEOPLE_BLOCKS,
    "prototypes+cues": ("prototypes", "people_cues"),
    "prototypes": ("prototypes",),
    "next_state+similarities+cues": ("e_next", "similarities", "people_cues"),
    "prototypes+next_state+similarities+cues": ("prototypes", "e_next", "similarities", "people_cues"),
}


@dataclass(frozen=True)
class Alternative:
    design: str  # "split" (people / machine) | "shared"
    blocks: tuple[str, ...]  # the people blocks (split) or everyone's (shared)
    name: str
    model: str = "logistic"  # | "mlp" (shared only)
    l2: float = 10.0
    machine_l2: float = 10.0
    machine_balanced: bool = False

    @property
    def label(self) -> str:
        if self.design == "shared":
            return f"{self.model} (one for all roles): {self.name}, l2={self.l2:g}"
        machine = f"machine l2={self.machine_l2:g}{', balanced' if self.machine_balanced else ''}"
        return f"{self.model} (people/machine): {self.name}, people l2={self.l2:g}, {machine}"


def load_cases(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def case_material(case: dict) -> Material:
    return material_from_parts(case["request"], case["response"], case.get("tool_calls"), case["next_state_role"],
                               case["next_state"])


def _mlp(x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, l2: float) -> torch.Tensor:
    torch.manual_seed(0)
    mean, std = x_train.mean(0), x_train.std(0).clamp(min=1e-3)
    net = torch.nn.Sequential(torch.nn.Linear(x_train.shape[1], 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                              torch.nn.Linear(64, len(LABELS)))
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=l2 / 100)
    counts = torch.bincount(y_train, minlength=len(LABELS)).float().clamp(min=1)
    for _ in range(300):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net((x_train - mean) / std), y_train,
                                                 weight=counts.sum() / (len(LABELS) * counts))
        loss.backward()
        optimizer.step()
    net.eval()
    with torch.no_grad():
        return net((x_test - mean) / std).argmax(-1)


class Trainer:
    """Fits an alternative on some cases and predicts others, from blocks computed once."""

    def __init__(self, blocks: dict[str, torch.Tensor], materials: list[Material], labels: torch.Tensor):
        self.blocks, self.materials, self.labels = blocks, materials, labels
        self.machine = torch.tensor([m.machine for m in materials])
        self.ruled = torch.tensor([rule_verdict(m) is not None for m in materials])

    def fit(self, alt: Alternative, train: torch.Tensor) -> dict:
        """A fitted alternative: train is a (N,) bool mask over the cases."""
        fitted: dict = {}
        if alt.design == "split":
            bank_rows = (train & ~self.machine).nonzero().flatten()
            fitted["bank"] = (self.blocks["e_next"][bank_rows], self.labels[bank_rows], bank_rows)
        for group, blocks in self._groups(alt):
            rows = (train & group & ~self.ruled).nonzero().flatten()
            x = self._x(blocks, rows, fitted.get("bank"))
            machine = alt.design == "split" and blocks == MACHINE_BLOCKS
            fitted[blocks] = ("mlp", x, self.labels[rows]) if alt.model == "mlp" else fit_logistic(
                x, self.labels[rows], l2=alt.machine_l2 if machine else alt.l2,
                balanced=alt.machine_balanced if machine else True)
        return fitted

    def votes(self, alt: Alternative, fitted: dict, rows: torch.Tensor, blocks: dict | None = None,
              materials: list[Material] | None = None) -> list[int]:
        """The judge's votes on `rows` of these cases (or of other `blocks`/`materials`)."""
        own = blocks is None
        blocks, materials = blocks or self.blocks, materials or self.materials
        machine = torch.tensor([m.machine for m in materials])
        votes = {}
        for group, names in self._groups(alt, machine):
            mine = rows[group[rows]]
            if not len(mine):
                continue
            x = self._x(names, mine, fitted.get("bank"), blocks, exclude_bank_self=own)
            part = fitted[names]
            if isinstance(part, tuple):
                predicted = _mlp(part[1], part[2], x, alt.l2)
            else:
                predicted = part.probabilities(x).argmax(-1)
            votes |= dict(zip(mine.tolist(), predicted.tolist()))
        out = []
        for i in rows.tolist():
            ruled = rule_verdict(materials[i])
            out.append(ruled[0] if ruled else LABELS[votes[i]])
        return out

    def _groups(self, alt: Alternative, machine: torch.Tensor | None = None):
        machine = self.machine if machine is None else machine
        if alt.design == "shared":
            return [(torch.ones_like(machine), alt.blocks)]
        return [(~machine, alt.blocks), (machine, MACHINE_BLOCKS)]

    def _x(self, names: tuple[str, ...], rows: torch.Tensor, bank, blocks: dict | None = None,
           exclude_bank_self: bool = True) -> torch.Tensor:
        blocks = blocks or self.blocks
        parts = []
        for name in names:
            if name == "prototypes":
                _, bank_labels, bank_rows = bank
                exclude = rows[:, None] == bank_rows[None, :] if exclude_bank_self else None
                parts.append(prototypes(blocks["e_next"][rows], self.blocks["e_next"][bank_rows], bank_labels,
                                        exclude))
            else:
                parts.append(blocks[name][rows])
        return torch.cat(parts, dim=-1)


def cross_validate(trainer: Trainer, alt: Alternative, ids: list[str]) -> float:
    fold = torch.tensor([int(hashlib.sha256(i.encode()).hexdigest(), 16) % FOLDS for i in ids])
    correct = 0
    for k in range(FOLDS):
        test = (fold == k).nonzero().flatten()
        votes = trainer.votes(alt, trainer.fit(alt, fold != k), test)
        correct += sum(v == LABELS[int(trainer.labels[i])] for v, i in zip(votes, test.tolist()))
    return correct / len(ids)


def alternatives() -> list[Alternative]:
    found = [Alternative("split", PEOPLE_BLOCKS, "prototypes+similarities+cues", l2=l2, machine_l2=machine_l2,
                         machine_balanced=balanced)
             for l2 in L2_GRID for machine_l2 in MACHINE_L2_GRID for balanced in (False, True)]
    found += [Alternative("split", blocks, name) for name, blocks in PEOPLE_SETS.items() if blocks != PEOPLE_BLOCKS]
    found += [Alternative("shared", blocks, name) for name, blocks in SHARED_SETS.items()]
    found += [Alternative("shared", SHARED_SETS["next_state+similarities+cues"], "next_state+similarities+cues",
                          "mlp", 10.0)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, action="append", default=None,
                        help="a split to train on (repeat for several; default tests/data/judge_tuning.jsonl)")
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--report-on", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=None, help="write the alternatives' numbers here (JSON)")
    args = parser.parse_args()

    paths = args.cases or [Path("tests/data/judge_tuning.jsonl")]
    cases = [case for path in paths for case in load_cases(path)]
    materials = [case_material(c) for c in cases]
    labels = torch.tensor([LABELS.index(c["expected_score"]) for c in cases])
    featurizer = Featurizer()
    with torch.inference_mode():
        trainer = Trainer(featurizer.blocks(materials), materials, labels)
        other = None
        if args.report_on:
            other_cases = load_cases(args.report_on)
            other_materials = [case_material(c) for c in other_cases]
            other = (other_cases, other_materials, featurizer.blocks(other_materials))
    everything = torch.ones(len(cases), dtype=torch.bool)
    rows = []
    for alt in alternatives():
        agreement = cross_validate(trainer, alt, [c["id"] for c in cases])
        row = {"alternative": alt.label, "cv_agreement": round(agreement, 3)}
        if other:
            other_cases, other_materials, other_blocks = other
            votes = trainer.votes(alt, trainer.fit(alt, everything), torch.arange(len(other_cases)), other_blocks,
                                  other_materials)
            row["reported_agreement"] = round(
                sum(v == c["expected_score"] for v, c in zip(votes, other_cases)) / len(other_cases), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)

    shipped = [i for i, alt in enumerate(alternatives()) if alt.design == "split" and alt.blocks == PEOPLE_BLOCKS]
    best_at = max(shipped, key=lambda i: (rows[i]["cv_agreement"], -i))
    best = alternatives()[best_at]
    fitted = trainer.fit(best, everything)
    bank, bank_labels, _ = fitted["bank"]
    trained_on = "; ".join(f"{path.name} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}" for path in paths)
    model = JudgeModel(fitted[PEOPLE_BLOCKS], fitted[MACHINE_BLOCKS], bank, bank_labels, metadata={
        "trained_on": trained_on, "cases": str(len(cases)), "l2": f"{best.l2:g}",
        "cv_agreement": str(rows[best_at]["cv_agreement"]), "command": "python -m openclaw_rl.judge.train_classifier"})
    assert isinstance(model.people, Linear) and isinstance(model.machine, Linear)
    model.save(args.out)
    print(f"chose {best.label} (cross-validated agreement {rows[best_at]['cv_agreement']:.3f}); wrote {args.out}")
    if args.results:
        args.results.write_text(json.dumps({"chosen": best.label, "trained_on": trained_on,
                                            "folds": FOLDS, "alternatives": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
