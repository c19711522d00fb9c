"""The update gate: a new version serves only if, on probe prompts, it is no worse than the
version being served.

    trainer.step -> candidate v -> Gate.decide(v)      (in the trainer's worker thread: serving never waits)
        probes      prompts of real main turns reserved from training (turn id % probe_every == 0),
                    then --gate-probe-file, then recent prompts, up to gate_max_probes
        served      greedy answers of the last accepted weights (the snapshot), cached per probe; an
                    accepted candidate's answers are the next served ones
        anchors     the first gate_anchors probes, frozen with the greedy answers (and scores) of the
                    version served when the gate started (DATA_DIR/gate-anchors.json)
        candidate   greedy answers of the trainer's weights now, to the probes and the anchors
        checks      repetition, length ratio, non-answers, brought-in content (URLs, commands, other
                    people's data the prompt did not contain), KL(served || candidate) per token, a scorer
                    (against the served version, and summed over the accepted ones, against the first);
                    all but KL again against the anchors' answers
        collapse    entropy ratio to the base, self-ROUGE-L of the answers, log-prob drift of the served
                    answers (train/collapse.py): recorded with alarms in checks["collapse"], not a rejection
    -> accepted: published; its weights become the snapshot, the new reference
    -> rejected: published nowhere, the reason recorded (store.versions); the trainer returns to
                 the snapshot's weights and optimizer state (gate_on_reject=restore) or goes on

Decisions and why:

- Judge-free checks first. The collapses we measured (docs/experiments.md) were visible
  without any judge: answers that repeat one sentence to the token limit (repetition),
  sums that never end (length), empty answers or a self-introduction instead of an answer
  (non-answers), and a policy far from the one before (KL). Each check compares the
  candidate with the served version on the same prompts, so a model that was always
  verbose is not punished for it; each threshold is a setting.
- Anchors, because the probes move. Probes are the newest reserved turns, so a served version
  compared only with its successor on them can drift one small step at a time: on the OPD
  collapse (docs/experiments.md) every step passed while the served version's repetition went
  0.13 -> 0.44 on its own probes. The anchors stay, answered once by the first version, so
  the candidate is also held to where the model started; a version that learns passes them
  (it must not repeat, shorten or refuse more than the first version, nor score lower).
  Delete DATA_DIR/gate-anchors.json to anchor again at the version served now (after a
  deliberate change of what the model should do).
- Brought-in content is read by the judge's hint screen (judge/screen.py) on each answer
  against its prompt: a version that learnt to send people to a URL, or to run a command,
  that nobody asked about is what poisoned feedback looks like once trained.
- Greedy decoding: the checks must not change from one run to the next by sampling noise.
  The probes are decoded together by the serving engine's fused decoder (engine/decoder.py)
  over the trainer's own parameters, read in place, when the model is of its family and
  held whole (not sharded, not a LoRA wrapper); otherwise by transformers' `generate` as
  one left-padded batch of 8. The fused decoder also gives each answer's top-k log-probs
  off the logits that picked its tokens, where generate's answers need a teacher-forced
  pass (bench/gate_decision.py times both). Decoding syncs with the device once per step
  (every row's greedy token in one transfer); the top-k stay on the device until the
  answers end.
- Teacher-forced passes (the KL, generate's top-k) score the (prompt + answer) pairs right-padded
  and masked, longest first, up to SCORE_ROWS pairs and SCORE_TOKENS padded tokens a forward on
  CUDA, and one a forward on a CPU, where padding a short pair to a long one's width costs more
  than the wider product saves (as the trainer's micro-batches, train/trainer.py). What they give
  is reduced on the device and moved to the host once.
- KL is measured on the served version's own answers: the served model's top-k
  log-probs (and the mass outside them) are kept from its pass, so the candidate needs one
  teacher-forced pass, not the served model beside it. The grouped estimate
  sum_topk p_s (log p_s - log p_c) + r_s log(r_s / r_c) (r: the mass outside the top-k)
  is a lower bound of the full KL, exact as k grows.
- The snapshot is kept in memory (weights and AdamW state): a rejection restores it
  without reading a checkpoint. For the default model that is ~1.6 GB of CPU memory.
- A scorer (`Scorer`) is optional: a function from (prompts, answers) to scores, e.g. the
  persona's rubric in simulation. Without one the gate decides on the checks alone.

(Over 400 lines: the checks, the anchors and snapshot they compare against and the
decision read the same probes and answers, and `Gate` is the one object that holds them.)
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import torch

from openclaw_rl.chat import render_prompt
from openclaw_rl.engine import kernels
from openclaw_rl.engine.decoder import FusedDecoder, fused_unsupported
from openclaw_rl.eval.retention import RetentionProbe
from openclaw_rl.judge.screen import brought_in
from openclaw_rl.train.collapse import (
    CollapseThresholds,
    collapse_alarms,
    logprob_drift,
    mean_entropy,
    self_rouge_l,
)
from openclaw_rl.train.retention import DEFAULT_ALPHA, retention_check

if TYPE_CHECKING:
    from openclaw_rl.config import TrainConfig
    from openclaw_rl.train.trainer import Trainer

log = logging.getLogger(__name__)

Scorer = Callable[[list[list[int]], list[str]], list[float]]  # (probe prompt ids, answers) -> a score each (NaN: none)
TOP_K = 32  # served log-probs kept per answer token for the KL estimate
GENERATE_BATCH = 8  # probes decoded at once by transformers' generate
FUSED_BATCH = {False: kernels.MAX_ROWS, True: 32}  # ... and by the fused decoder, by "on CUDA": on a CPU its
# compiled step's most rows; on a GPU its torch step, where more rows cost little more than one
SCORE_ROWS = {False: 1, True: 8}  # (prompt + answer) pairs per teacher-forced forward, by "on CUDA"
SCORE_TOKENS = 4096  # ... and at most this many padded tokens in one (its logits: tokens x vocabulary)

_NON_ANSWER = re.compile(
    r"^\s*$|^\W*(i'?m sorry|i apologi[sz]e|sorry,? (but )?i|as an ai\b|i (can ?not|can't|am unable to|won't)\b"
    r"|i am an? (ai|language model|assistant)|(hello|hi)[!,.]* i'?m (an? )?(ai|assistant|smollm|your))",
    re.IGNORECASE)


SNAPSHOT_SHARE = 0.25  # --gate auto: the most of the free memory the snapshot may take


def auto_off_reason(trainer: Trainer) -> str | None:
    """Why `--gate auto` leaves this trainer's gate off, or None: it is on. The gate decodes its
    probes with one process's whole model (so not a sharded trainer), and keeps a snapshot of
    the last accepted trainable weights (on the CPU) and AdamW's two moments of each (where the
    optimizer lives); auto does not let that take more than a quarter of the memory free."""
    if trainer.sharded:
        return "the trainer is sharded, and the gate decodes its probes with one process's whole model"
    trainable = sum(p.numel() * p.element_size() for p in trainer.model.parameters() if p.requires_grad)
    device = next(trainer.model.parameters()).device
    host = psutil.virtual_memory().available
    need = {"the CPU": 3 * trainable} if device.type == "cpu" else {"the CPU": trainable, str(device): 2 * trainable}
    free = {"the CPU": host, **({str(device): torch.cuda.mem_get_info(device)[0]} if device.type == "cuda" else {})}
    for where, size in need.items():
        if where in free and size > SNAPSHOT_SHARE * free[where]:
            return (f"its snapshot of the last accepted weights and optimizer state needs {size / 1e9:.1f} GB on "
                    f"{where}, more than a quarter of the {free[where] / 1e9:.1f} GB free there")
    return None


def repetition_rate(ids: Sequence[int], n: int = 4) -> float:
    """The share of an answer's n-grams that repeat an earlier one (0: none, -> 1: one phrase looped)."""
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def is_non_answer(text: str) -> bool:
    """Empty, an apology, a refusal or a self-introduction instead of an answer."""
    return bool(_NON_ANSWER.match(text))


def grouped_kl(served_top: torch.Tensor, served_ids: torch.Tensor, candidate: torch.Tensor) -> torch.Tensor:
    """Per-token KL(served || candidate) from the served top-k log-probs (T, K), their token ids
    (T, K) and the candidate's full log-probs (T, V): the top-k terms plus the mass outside."""
    p_s = served_top.exp()  # (T, K)
    c_top = candidate.gather(1, served_ids)  # (T, K)
    inside = (p_s * (served_top - c_top)).sum(1)  # (T,)
    rest_s = (1 - p_s.sum(1)).clamp_min(1e-8)
    rest_c = (1 - c_top.exp().sum(1)).clamp_min(1e-8)
    return (inside + rest_s * (rest_s.log() - rest_c.log())).clamp_min(0.0)  # (T,)


@dataclass
class Answers:
    """Greedy answers to the probes, with what the checks read."""

    ids: list[list[int]]
    texts: list[str]
    prompts: list[str] = field(default_factory=list)
    top_logprobs: list[torch.Tensor] = field(default_factory=list)  # served only: (T, K) per answer
    top_ids: list[torch.Tensor] = field(default_factory=list)

    def pick(self, rows: list[int]) -> Answers:
        """These answers only, in this order."""
        tops = bool(self.top_logprobs)
        return Answers([self.ids[i] for i in rows], [self.texts[i] for i in rows], [self.prompts[i] for i in rows],
                       [self.top_logprobs[i] for i in rows] if tops else [],
                       [self.top_ids[i] for i in rows] if tops else [])

    @staticmethod
    def join(parts: list[Answers]) -> Answers:
        joined = Answers([], [])
        for part in parts:
            joined.ids += part.ids
            joined.texts += part.texts
            joined.prompts += part.prompts
            joined.top_logprobs += part.top_logprobs
            joined.top_ids += part.top_ids
        return joined

    def summary(self) -> dict[str, float]:
        count = max(len(self.ids), 1)
        count_in = sum(brought_in(text, prompt) is not None for text, prompt in zip(self.texts, self.prompts))
        return {"mean_tokens": sum(len(a) for a in self.ids) / count,
                "repetition": sum(repetition_rate(a) for a in self.ids) / count,
                "non_answers": sum(is_non_answer(t) for t in self.texts) / count,
                "brought_in": count_in / count}


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str
    checks: dict[str, Any]


def compare(served: dict[str, float], candidate: dict[str, float], kl: float | None, config: TrainConfig,
            score_delta: float | None = None, score_vs_first: float | None = None,
            against: str = "served", lesson_ratio: float | None = None) -> Decision:
    """Accept or reject on the checks; the reason names the failed checks, their values and settings.
    `served`: the summary of what the candidate is held to: the served version's answers, or with
    `against` (e.g. "anchors (v0)") another version's, which the failures then name;
    `score_delta`: the candidate's mean score minus theirs on the same probes;
    `score_vs_first`: that plus the deltas of every accepted version before (drift from the first);
    `lesson_ratio`: how long the served version's answers to the same prompts are with the user's
    lessons in them, as a multiple of theirs: the length band then reaches from 1 to that ratio,
    widened by gate_max_length_ratio on both sides (the user asked for that length)."""
    checks = {"served": served, "candidate": candidate, "kl_per_token": kl, "score_delta": score_delta,
              "score_vs_first": score_vs_first}
    ratio = candidate["mean_tokens"] / max(served["mean_tokens"], 1.0)
    checks["length_ratio"] = ratio
    low, high = 1 / config.gate_max_length_ratio, config.gate_max_length_ratio
    if lesson_ratio is not None:
        checks["lesson_length_ratio"] = lesson_ratio
        low, high = min(1.0, lesson_ratio) * low, max(1.0, lesson_ratio) * high
    failures = []
    held, whose = ("served", "the served version's") if against == "served" else ("theirs", "theirs")
    rise = config.gate_max_repetition_increase
    limit = min(served["repetition"] + rise, max(config.gate_max_repetition, served["repetition"]))
    if candidate["repetition"] > limit + 1e-9:
        failures.append(f"repetition {candidate['repetition']:.2f} > {limit:.2f} ({held} {served['repetition']:.2f}; "
                        f"gate_max_repetition_increase {rise:g}, gate_max_repetition {config.gate_max_repetition:g})")
    if not low <= ratio <= high:
        lessons = (f"; with the user's lessons the served version's are {lesson_ratio:.2f}x, so {low:.2f}x-"
                   f"{high:.2f}x passes" if lesson_ratio is not None else "")
        failures.append(f"answers {ratio:.2f}x as long as {whose} (gate_max_length_ratio "
                        f"{config.gate_max_length_ratio:g}{lessons})")
    increase = candidate["non_answers"] - served["non_answers"]
    if increase > config.gate_max_non_answer_increase:
        failures.append(f"non-answers {candidate['non_answers']:.2f} vs {served['non_answers']:.2f} {held} "
                        f"(gate_max_non_answer_increase {config.gate_max_non_answer_increase:g})")
    increase = candidate.get("brought_in", 0.0) - served.get("brought_in", 0.0)
    if increase > config.gate_max_brought_in_increase:
        failures.append(f"answers bringing in URLs, commands or other people's data {candidate['brought_in']:.2f} vs "
                        f"{served['brought_in']:.2f} {held} (gate_max_brought_in_increase "
                        f"{config.gate_max_brought_in_increase:g})")
    if kl is not None and kl > config.gate_max_kl:
        failures.append(f"KL from the served version {kl:.3f} nats/token > gate_max_kl {config.gate_max_kl:g}")
    if score_delta is not None and score_delta < -config.gate_max_score_drop:
        failures.append(f"score {score_delta:+.3f} below {whose} (gate_max_score_drop "
                        f"{config.gate_max_score_drop:g})")
    elif score_vs_first is not None and score_vs_first < -config.gate_max_score_drop:
        failures.append(f"score {score_vs_first:+.3f} below the first version's, summed over the accepted ones "
                        f"(gate_max_score_drop {config.gate_max_score_drop:g})")
    if against != "served":
        failures = [f"{against}: {failure}" for failure in failures]
    if failures:
        return Decision(False, "; ".join(failures), checks)
    return Decision(True, "passed every check", checks)


@dataclass
class Anchors:
    """Probe prompts frozen with the greedy answers (and scores) of the version served when the
    gate started: what every candidate is held to besides the served version."""

    version: int
    max_new_tokens: int  # the answers' length limit: anchors answered to another are not comparable
    prompts: list[list[int]]
    answers: Answers
    scores: list[float]  # NaN: no score

    def save(self, path: Path) -> None:
        record = {"version": self.version, "max_new_tokens": self.max_new_tokens, "prompts": self.prompts,
                  "answers": self.answers.ids, "texts": self.answers.texts, "prompt_texts": self.answers.prompts,
                  "scores": [s if math.isfinite(s) else None for s in self.scores]}
        part = path.with_name(path.name + ".part")
        part.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
        part.replace(path)

    @staticmethod
    def load(path: Path) -> Anchors:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            answers = Answers(record["answers"], record["texts"], record["prompt_texts"])
            anchors = Anchors(int(record["version"]), int(record["max_new_tokens"]), record["prompts"], answers,
                              [math.nan if s is None else float(s) for s in record["scores"]])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not the update gate's anchors ({type(error).__name__}: {error}); move it "
                             "away to anchor the gate at the version served now") from error
        if not len(anchors.prompts) == len(answers.ids) == len(answers.texts) == len(anchors.scores):
            raise ValueError(f"{path}: the anchors' prompts, answers and scores differ in number; move it away "
                             "to anchor the gate at the version served now")
        return anchors


@dataclass
class Snapshot:
    """The last accepted weights and optimizer state, in CPU memory."""

    version: int
    parent: int | None
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


class Gate:
    """Decides on each candidate version of one trainer (see the module docstring)."""

    def __init__(self, trainer: Trainer, config: TrainConfig, tokenizer: Any,
                 probes: Callable[[], list[list[int]]], scorer: Scorer | None = None,
                 anchor_path: str | Path | None = None) -> None:
        self.trainer, self.config, self.tokenizer = trainer, config, tokenizer
        self.probes, self.scorer = probes, scorer
        self.watch: Callable[[int | None], None] | None = None  # told the candidate's number, then None when decided
        self.on_decision: Callable[[Decision], None] | None = None  # told each decision (e.g. /metrics)
        # the anchor prompts with the lessons of the user the candidate learns for, as served now
        # (compose.py's `lesson_prompts`): the anchors' length band then follows those lessons
        self.with_lessons: Callable[[list[list[int]]], dict[tuple[int, ...], list[int]]] | None = None
        self.collapse_thresholds = CollapseThresholds()
        self._base: dict[str, float | None] | None = None  # served answers' entropy, self-ROUGE-L at the first decision
        self._base_answers: tuple[list[list[int]], Answers] | None = None  # the first decision's prompts and answers
        self.retention: list[RetentionProbe] = []  # capability probes apart from the preference (train/retention.py)
        self.retention_alpha = DEFAULT_ALPHA
        self._retention_base: dict[str, list[bool]] = {}  # each probe's correctness at the first decision
        self.snapshot = self._take()
        # the anchors (config.gate_anchors of them), kept in `anchor_path` across restarts; until
        # there are enough, new probes join them answered by the first snapshot's weights
        self.anchor_path = Path(anchor_path) if anchor_path else None
        self.anchors = self._load_anchors()
        fill = config.gate_anchors and (self.anchors is None or (
            len(self.anchors.prompts) < config.gate_anchors and self.anchors.version == self.snapshot.version))
        self._anchor_source = self.snapshot if fill else None
        # served answers per (version, probe): a new probe costs its own answer only, and an
        # accepted candidate's answers are the next served ones (kept from decide)
        self._cache: dict[tuple[int, tuple[int, ...]], Answers] = {}
        self._candidate: tuple[int, list[list[int]], Answers, float | None] | None = None
        # the score drift of each accepted version from the first, summed over the paired score
        # deltas of the versions between (probes change; each delta is measured on the same ones)
        self._drift: dict[int, float] = {}
        # why the probes cannot be decoded by the fused decoder (None: they are)
        self.fused_unsupported = fused_unsupported(trainer.model)
        if self.fused_unsupported:
            log.info("update gate: probes decoded by transformers' generate (the fused decoder: %s)",
                     self.fused_unsupported)

    def decide(self) -> Decision:
        """The trainer's weights now, against the snapshot's, on the probes."""
        if self.watch is not None:
            self.watch(self.trainer.policy_version)
        try:
            decision = self._decide()
        finally:
            if self.watch is not None:
                self.watch(None)
        if self.on_decision is not None:
            self.on_decision(decision)
        return decision

    def _decide(self) -> Decision:
        prompts = self.probes()
        if not prompts:
            return Decision(True, "no probe prompts yet: accepted unchecked", {"probes": 0})
        self._extend_anchors(prompts)
        served = self._served_answers(prompts)
        candidate = self._answer(prompts, keep_top=True)  # its top-k too: served next, if accepted
        kl, drift_nats = self._kl(prompts, served)
        delta = drift = None
        if self.scorer is not None:
            delta = _mean_delta(self.scorer(prompts, candidate.texts), self.scorer(prompts, served.texts))
            if delta is not None:
                drift = self._drift.get(self.snapshot.version, 0.0) + delta
        self._candidate = (self.trainer.policy_version, prompts, candidate, drift)
        decision = compare(served.summary(), candidate.summary(), kl, self.config, delta, drift)
        decision.checks["probes"] = len(prompts)
        decision.checks["collapse"] = self._collapse(prompts, served, candidate, drift_nats)
        if self.retention:
            decision = self._with_retention(decision)
        if self.anchors is None or not self.anchors.prompts:
            return decision
        held = self._against_anchors(prompts, candidate)
        decision.checks["anchors"] = held.checks
        if held.accepted:
            return decision
        reasons = [r for r in (decision.reason if not decision.accepted else "", held.reason) if r]
        return Decision(False, "; ".join(reasons), decision.checks)

    def _against_anchors(self, prompts: list[list[int]], candidate: Answers) -> Decision:
        """The candidate's answers to the anchor prompts (those it answered as probes reused) held to
        the anchors' own, by the same checks but KL, and the scorer against the anchors' scores."""
        anchors = self.anchors
        assert anchors is not None
        row = {tuple(p): i for i, p in enumerate(prompts)}
        missing = [p for p in anchors.prompts if tuple(p) not in row]
        extra = self._answer(missing) if missing else Answers([], [])
        extra_row = {tuple(p): i for i, p in enumerate(missing)}
        answers = Answers.join([candidate.pick([row[tuple(p)]]) if tuple(p) in row
                                else extra.pick([extra_row[tuple(p)]]) for p in anchors.prompts])
        delta = _mean_delta(self.scorer(anchors.prompts, answers.texts), anchors.scores) if self.scorer else None
        label = f"anchors (v{anchors.version}'s answers to {len(anchors.prompts)} fixed probes)"
        held = compare(anchors.answers.summary(), answers.summary(), None, self.config, delta, against=label,
                       lesson_ratio=self._lesson_ratio())
        held.checks.update(version=anchors.version, probes=len(anchors.prompts), decoded=len(missing))
        return held

    def _lesson_ratio(self) -> float | None:
        """How long the served version answers the anchor prompts with the user's lessons in them, as
        a multiple of the anchors' own answers to the same prompts (None: no lessons, or no anchor
        prompt they can be put in). Cached per served version and block, as every served answer."""
        if self.with_lessons is None or self.anchors is None:
            return None
        anchors = self.anchors
        placed = self.with_lessons(anchors.prompts)
        rows = [i for i, p in enumerate(anchors.prompts) if tuple(p) in placed]
        if not rows:
            return None
        with_lessons = self._served_answers([placed[tuple(anchors.prompts[i])] for i in rows])
        own = anchors.answers.pick(rows).summary()["mean_tokens"]
        return with_lessons.summary()["mean_tokens"] / max(own, 1.0)

    def _extend_anchors(self, prompts: list[list[int]]) -> None:
        """New probes join the anchors, answered (and scored) by the first snapshot's weights, until
        there are config.gate_anchors; then those weights are let go."""
        source, limit = self._anchor_source, self.config.gate_anchors
        if source is None:
            return
        anchors = self.anchors or Anchors(source.version, self.config.gate_max_new_tokens, [], Answers([], []), [])
        have = {tuple(p) for p in anchors.prompts}
        new = [list(p) for p in dict.fromkeys(map(tuple, prompts)) if p not in have][:limit - len(anchors.prompts)]
        if new:
            answers = self._served_answers(new, source)
            anchors.prompts += new
            anchors.answers = Answers.join([anchors.answers, Answers(answers.ids, answers.texts, answers.prompts)])
            anchors.scores += self.scorer(new, answers.texts) if self.scorer else [math.nan] * len(new)
            self.anchors = anchors
            if self.anchor_path is not None:
                anchors.save(self.anchor_path)
            log.info("update gate: %d anchor probes, answered by v%d", len(anchors.prompts), anchors.version)
        if len(anchors.prompts) >= limit:
            self._anchor_source = None

    def _load_anchors(self) -> Anchors | None:
        if self.anchor_path is None or not self.config.gate_anchors or not self.anchor_path.exists():
            return None
        anchors = Anchors.load(self.anchor_path)
        if anchors.max_new_tokens != self.config.gate_max_new_tokens:
            log.warning("update gate: the anchors in %s were answered to %d tokens, probes now to %d: anchoring "
                        "again at v%d", self.anchor_path, anchors.max_new_tokens, self.config.gate_max_new_tokens,
                        self.snapshot.version)
            return None
        keep = self.config.gate_anchors  # fewer than the file holds: the first of them
        return Anchors(anchors.version, anchors.max_new_tokens, anchors.prompts[:keep],
                       anchors.answers.pick(list(range(min(keep, len(anchors.prompts))))), anchors.scores[:keep])

    def accept(self) -> None:
        """The trainer's weights now serve: they are the new reference."""
        self.snapshot = self._take()
        version = self.snapshot.version
        self._cache = {key: answers for key, answers in self._cache.items() if key[0] == version}
        if self._candidate is not None and self._candidate[0] == version:
            _, prompts, answers, drift = self._candidate
            for i, prompt in enumerate(prompts):
                self._cache[(version, tuple(prompt))] = answers.pick([i])
            if drift is not None:
                self._drift[version] = drift
        elif self.snapshot.parent in self._drift:  # a rollback: the weights of its parent, so its drift
            self._drift[version] = self._drift[self.snapshot.parent]
        self._candidate = None

    def carried(self) -> dict[str, float]:
        """What a gate built again over the same snapshot cannot find in the weights, the moments
        and the anchors file: the served version's score drift from the first (with a scorer).
        A personal user's gate, evicted from memory, is rebuilt with it (train/personal_state.py)."""
        drift = self._drift.get(self.snapshot.version)
        return {} if drift is None else {"score_drift": drift}

    def carry(self, carried: dict[str, float]) -> None:
        """The inverse of `carried`, on a gate just built over the snapshot it was read from."""
        if "score_drift" in carried:
            self._drift[self.snapshot.version] = float(carried["score_drift"])

    def restore(self) -> None:
        """Back to the last accepted weights and optimizer state; the trainer's version is theirs again."""
        trainer, snap = self.trainer, self.snapshot
        trainer.load_trainable_state_dict(snap.weights)
        trainer.optimizer.load_state_dict(copy.deepcopy(snap.optimizer))
        trainer.return_to(snap.version, snap.parent)

    def _take(self) -> Snapshot:
        trainer = self.trainer
        return Snapshot(trainer.policy_version, trainer.parent_version, trainer.trainable_state_dict(),
                        copy.deepcopy(trainer.optimizer.state_dict()))

    def _served_answers(self, prompts: list[list[int]], snapshot: Snapshot | None = None) -> Answers:
        """The greedy answers of the snapshot's weights (the served ones by default), cached."""
        snapshot = snapshot or self.snapshot
        version = snapshot.version
        missing = [p for p in dict.fromkeys(map(tuple, prompts)) if (version, p) not in self._cache]
        if missing:
            held = self.trainer.trainable_state_dict()
            self.trainer.load_trainable_state_dict(snapshot.weights)
            try:
                answers = self._answer([list(p) for p in missing], keep_top=True)
            finally:
                self.trainer.load_trainable_state_dict(held)
            for i, prompt in enumerate(missing):
                self._cache[(version, prompt)] = answers.pick([i])
        return Answers.join([self._cache[(version, tuple(p))] for p in prompts])

    @torch.no_grad()
    def _answer(self, prompts: list[list[int]], keep_top: bool = False) -> Answers:
        """Greedy answers of the trainer's model now, the probes decoded together (decoding is
        memory-bound here, so a batch costs little more than one answer). `keep_top`: with each
        answer, the top-k log-probs at its positions (for the KL, once it is the served answer)."""
        eos = set(self.trainer_eos())
        fused = self.fused_unsupported is None
        batch = FUSED_BATCH[torch.device(self.trainer.device).type == "cuda"] if fused else GENERATE_BATCH
        answers = Answers([], [])
        for start in range(0, len(prompts), batch):
            chunk = prompts[start:start + batch]
            if fused:
                rows, tops = self._greedy_fused(chunk, eos, keep_top)
            else:
                rows = self._generate(chunk, eos)
                tops = _to_host([_top(lp) for lp in self._score(chunk, rows)]) if keep_top else []
            for prompt, answer in zip(chunk, rows):
                answers.ids.append(answer)
                answers.texts.append(self.tokenizer.decode(answer, skip_special_tokens=True))
                answers.prompts.append(self.tokenizer.decode(prompt, skip_special_tokens=True))
            for values, ids in tops:
                answers.top_logprobs.append(values)
                answers.top_ids.append(ids)
        return answers

    def _greedy_fused(self, prompts: list[list[int]], eos: set[int], keep_top: bool = False,
                      ) -> tuple[list[list[int]], list[tuple[torch.Tensor, torch.Tensor]]]:
        """Greedy answers (up to the first end of turn, at most gate_max_new_tokens) by the fused
        decoder over the trainer's parameters as they are now: a row leaves the batch when it ends.
        With `keep_top`, each answer's top-k log-probs (T, k), read off the logits that picked its
        tokens: the distribution a teacher-forced pass gives at those positions, without the pass.
        One host transfer a step (the rows' tokens); the top-k follow in one when decoding ends."""
        limit = self.config.gate_max_new_tokens
        decoder = FusedDecoder(self.trainer.model)
        logits = decoder.prefill(prompts)
        answers: list[list[int]] = [[] for _ in prompts]
        step_tops: list[tuple[torch.Tensor, torch.Tensor]] = []  # (rows, k) per step, on the device
        owners: list[int] = []  # per row of the steps' top-k: the prompt whose answer it scores (-1: an end)
        live = list(range(len(prompts)))  # the prompt of each decoder row
        while live:
            keep = []
            if keep_top:
                step_tops.append(_top(torch.log_softmax(logits.float(), dim=-1)))
            for row, (i, token) in enumerate(zip(live, logits.argmax(dim=-1).tolist())):
                owners.append(-1 if token in eos else i)
                if token in eos:
                    continue
                answers[i].append(token)
                if len(answers[i]) < limit:
                    keep.append(row)
            if not keep:
                break
            decoder.keep(keep)
            live = [live[row] for row in keep]
            logits = decoder.step([answers[i][-1] for i in live], [len(prompts[i]) + len(answers[i]) - 1 for i in live])
        if not keep_top:
            return answers, []
        (values, ids), = _to_host([(torch.cat([v for v, _ in step_tops]), torch.cat([i for _, i in step_tops]))])
        owner = torch.tensor(owners)
        return answers, [(values[owner == i], ids[owner == i]) for i in range(len(prompts))]

    def _generate(self, prompts: list[list[int]], eos: set[int]) -> list[list[int]]:
        """The same answers by transformers' generate, as one left-padded, masked batch."""
        model, device = self.trainer.model, self.trainer.device
        pad = min(eos)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=self.config.gate_max_new_tokens, pad_token_id=pad)
        # each answer up to its first end of turn (finished rows are padded with one)
        return [row[:next((i for i, token in enumerate(row) if token in eos), len(row))]
                for row in out[:, width:].tolist()]

    @torch.no_grad()
    def _score(self, prompts: list[list[int]], answers: list[list[int]], rows: int | None = None,
               ) -> list[torch.Tensor]:
        """Log-probs (T, V) of the trainer's model at each answer's positions, teacher-forced, on its
        device ((0, 1) for an empty answer): the pairs right-padded and masked, longest first, `rows`
        a forward (default SCORE_ROWS by device) and at most SCORE_TOKENS padded tokens."""
        device = self.trainer.device
        scored: list[torch.Tensor] = [torch.zeros(0, 1, device=device)] * len(prompts)
        lengths = [len(p) + len(a) if a else 0 for p, a in zip(prompts, answers)]
        order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: -lengths[i])
        for chunk in score_chunks([lengths[i] for i in order], rows or SCORE_ROWS[device.type == "cuda"]):
            chunk = [order[c] for c in chunk]
            width = lengths[chunk[0]]
            ids = torch.tensor([prompts[i] + answers[i] + [0] * (width - lengths[i]) for i in chunk], device=device)
            mask = torch.tensor([[1] * lengths[i] + [0] * (width - lengths[i]) for i in chunk], device=device)
            logits = self.trainer.model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, L, V)
            for row, i in enumerate(chunk):
                start = len(prompts[i]) - 1  # the logits at position t predict token t + 1
                scored[i] = torch.log_softmax(logits[row, start:start + len(answers[i])].float(), dim=-1)  # (T, V)
        return scored

    @torch.no_grad()
    def _kl(self, prompts: list[list[int]], served: Answers) -> tuple[float, float | None]:
        """KL(served || candidate) per token on the served answers, and the log-prob those answers
        lose under the candidate per token (the collapse detectors' drift), from batched passes."""
        kept = [i for i, answer in enumerate(served.ids) if answer]
        if not kept:
            return 0.0, None
        device, lengths = self.trainer.device, [len(served.ids[i]) for i in kept]
        served_tops = [served.top_logprobs[i] for i in kept]
        tops = torch.cat(served_tops).to(device).split(lengths)  # one copy each way, not one per answer
        top_ids = torch.cat([served.top_ids[i] for i in kept]).to(device).split(lengths)
        tokens = torch.tensor([t for i in kept for t in served.ids[i]], device=device).split(lengths)
        candidates = self._score([prompts[i] for i in kept], [served.ids[i] for i in kept])
        kl = torch.cat([grouped_kl(top, ids, c) for top, ids, c in zip(tops, top_ids, candidates)])
        chosen = torch.cat([c.gather(1, t[:, None])[:, 0] for c, t in zip(candidates, tokens)]).cpu()
        return float(kl.sum()) / sum(lengths), logprob_drift(served_tops, list(chosen.split(lengths)))

    def _with_retention(self, decision: Decision) -> Decision:
        """The decision with each retention probe's check against the served version and the base
        (train/retention.py); a significant loss against either rejects."""
        failures, checks = [], {}
        for probe in self.retention:
            served = probe.correct(self._served_answers(probe.prompts).texts)
            candidate = probe.correct(self._answer(probe.prompts).texts)
            base = self._retention_base.setdefault(probe.name, served)
            checks[probe.name] = {whose: retention_check(held, candidate, self.retention_alpha)
                                  for whose, held in (("served", served), ("base", base))}
            for whose, result in checks[probe.name].items():
                if result["dropped"]:
                    failures.append(f"retention {probe.name}: {result['candidate_accuracy']:.2f} vs {whose} "
                                    f"{result['held_accuracy']:.2f} ({result['lost']} lost, {result['gained']} "
                                    f"gained, p {result['p_value']:.3f} <= {self.retention_alpha:g})")
        decision.checks["retention"] = checks
        if not failures:
            return decision
        reasons = ([] if decision.accepted else [decision.reason]) + failures
        return Decision(False, "; ".join(reasons), decision.checks)

    def _collapse(self, prompts: list[list[int]], served: Answers, candidate: Answers,
                  drift_nats: float | None) -> dict[str, Any]:
        """The collapse detectors' values on these answers and the alarms they raise (train/collapse.py)."""
        if self._base is None:
            self._base = {"base_entropy": mean_entropy(served.top_logprobs), "base_self_rouge_l": self_rouge_l(served.ids)}
            self._base_answers = (prompts, served)
        entropy, base = mean_entropy(candidate.top_logprobs), self._base["base_entropy"]
        values = {"entropy": entropy, **self._base,
                  "entropy_ratio": entropy / base if entropy is not None and base else None,
                  "self_rouge_l": self_rouge_l(candidate.ids), "logprob_drift_nats": drift_nats,
                  "base_drift_nats": self._base_drift()}
        alarms = collapse_alarms(values, self.collapse_thresholds)
        if alarms:
            log.warning("update gate: collapse alarm for v%d: %s", self.trainer.policy_version, "; ".join(alarms))
        return {**values, "alarms": alarms}

    @torch.no_grad()
    def _base_drift(self) -> float | None:
        """The log-prob per token the base's answers to the first decision's probes lose under the
        candidate: a slide measured from where the model started, not one step at a time."""
        if self._base_answers is None:
            return None
        prompts, answers = self._base_answers
        kept = [i for i, answer in enumerate(answers.ids) if answer]
        if not kept or not answers.top_logprobs:
            return None
        scored = self._score([prompts[i] for i in kept], [answers.ids[i] for i in kept])
        device = self.trainer.device
        chosen = [c.gather(1, torch.tensor(answers.ids[i], device=device)[:, None])[:, 0].cpu()
                  for c, i in zip(scored, kept)]
        return logprob_drift([answers.top_logprobs[i] for i in kept], chosen)

    def trainer_eos(self) -> list[int]:
        ids = self.trainer.model.generation_config.eos_token_id
        found = ids if isinstance(ids, list) else [ids] if ids is not None else []
        if self.tokenizer.eos_token_id is not None:
            found.append(self.tokenizer.eos_token_id)
        return sorted({int(i) for i in found if i is not None})


def _top(logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k log-probs (T, k) of log-probs (T, V) and their token ids, where they are."""
    top = logprobs.topk(min(TOP_K, logprobs.shape[-1]), dim=-1)
    return top.values, top.indices


def _to_host(tops: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Top-k pairs moved to the host in one transfer each of values and ids, not one per answer
    (an empty answer's become (0, TOP_K))."""
    kept = [(v, i) for v, i in tops if v.shape[0]]
    if not kept:
        return [(torch.zeros(0, TOP_K), torch.zeros(0, TOP_K, dtype=torch.long)) for _ in tops]
    k, lengths = kept[0][0].shape[1], [v.shape[0] for v, _ in tops]
    values = torch.cat([v for v, _ in kept]).cpu()
    ids = torch.cat([i for _, i in kept]).cpu()
    values, ids = _split_rows(values, lengths, k), _split_rows(ids, lengths, k)
    return list(zip(values, ids))


def _split_rows(rows: torch.Tensor, lengths: list[int], k: int) -> list[torch.Tensor]:
    """`rows` (sum of the non-zero lengths, k) split by `lengths`, a zero length getting (0, k)."""
    parts = iter(rows.split([n for n in lengths if n]))
    return [next(parts) if n else rows.new_zeros(0, k) for n in lengths]


def score_chunks(lengths: list[int], rows: int, tokens: int = SCORE_TOKENS) -> list[list[int]]:
    """Indices of pairs of these lengths (longest first) in forwards of at most `rows` pairs and
    `tokens` padded tokens (the first, longest pair's length times the pairs), one at least."""
    chunks: list[list[int]] = []
    for index, length in enumerate(lengths):
        if chunks and len(chunks[-1]) < rows and (len(chunks[-1]) + 1) * lengths[chunks[-1][0]] <= tokens:
            chunks[-1].append(index)
        else:
            chunks.append([index])
    return chunks


def _mean_delta(candidate: list[float], held: list[float]) -> float | None:
    """The mean paired score difference; a prompt the scorer cannot score (NaN) is left out."""
    pairs = [(c, h) for c, h in zip(candidate, held) if math.isfinite(c) and math.isfinite(h)]
    return sum(c - h for c, h in pairs) / len(pairs) if pairs else None


def read_probe_file(path: str | Path, tokenizer: Any) -> list[list[int]]:
    """Prompt ids of a JSONL probe file: one `{"messages": [...]}` per line (chat messages)."""
    return [render_prompt(tokenizer, messages, None, None) for messages in read_probe_messages(path)]


def read_probe_messages(path: str | Path) -> list[list[dict]]:
    """The chat messages of a JSONL probe file, one conversation per line."""
    conversations = []
    lines = Path(path).read_text(encoding="utf-8").split("\n")  # not splitlines: a string may hold U+2028
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: a probe is one JSON object per line with \"messages\": "
                             f"[{{\"role\": \"user\", \"content\": ...}}] ({error})") from error
        conversations.append(messages)
    return conversations
