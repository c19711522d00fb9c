"""A training method, declared once: the signals it learns from and the loss it trains them with.

    Method("binary", signals=("reward",), advantages=reward_advantages, weights=("w_rl",))

Each layer reads what it needs from this one object, so no method name is branched on
anywhere else: the trainer takes its loss terms and batch keys, the store's claim calls
`assemble` to turn a turn's sample into this method's sample (or the reason there is
none), and the composition root asks `reads_teacher` to decide whether the judge scores
teachers at all. The judge never sees a method: it writes every signal it found, once
per turn (judge/samples.py). Add a method by writing one `Method` (in its own module,
with one line in METHODS below, or anywhere outside the package as `--method
module:ATTR`); docs/architecture.md walks through an example that a test trains.

Decisions, and why:

- `signals` are "any of": a turn that carries none of them gives the method nothing to
  learn, and its claim records why (per method, so another method that can learn from
  the turn still may). Combined and consolidate are the built-ins that name two.
- A method sees only the signals it names: `assemble` clears the others (binary never
  sees teacher log-probs, topk never a reward). The batch, the loss and the trainer's
  stats (reward_mean, opd_adv_abs_mean) then describe what the method trains on, with
  the same numbers as when the judge built one sample per method.
- A reward of 0 (a tie or a neutral verdict) and a step advantage of 0 give no direction,
  so they count as absent: binary skips such a turn, combined keeps it only for its
  teacher (with reward None, as before). No verdict is a different reason from reward 0.
- The weights are LossParams fields (w_rl, w_opd), i.e. settings: a method names the ones
  that scale its terms, and at least one of them must be positive, or the method would
  train nothing and say nothing (`check`).
- Two kinds of term cover every method here: the clipped surrogate on per-token
  advantages (`advantages`, any function of the batch) and the top-k distillation KL.
  A method whose loss is neither needs a new term in `total_loss` too.
- The name keys the method's claims in the store: each name trains each turn once, and
  two trainers of one method share the turns. A method loaded from outside the package
  may therefore not take a built-in's name.
- The agent path's step advantage is a signal of its own (`step_advantage`), trained by
  `stepwise`, not a reward under another name: its tokens get A_t = the advantage, as
  `binary_advantages` gives a reward (w_rl does not scale it; the advantage is already
  standardized).
- The experience signal (`experience`: a turn served with its user's lessons, scored
  without and with them) is trained *on the prompt without the block*: `assemble` puts
  the student's view in the sample's own fields (prompt ids without the block, the
  student's log-probs as the behaviour the PPO ratio is taken against, the served
  prompt's log-probs as the teacher), so `consolidate` is combined's sum of terms with
  no loss of its own: A_t = w_rl r + w_opd clip(teacher - student, -C, C), its first
  ratio 1. A method may not read it beside the hint teacher's signals: those are
  targets for the served prompt, and the sample then holds the other one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from torch import Tensor

from openclaw_rl.plugins import import_named
from openclaw_rl.train.losses import LossParams, binary_advantages, surrogate_advantages, total_loss
from openclaw_rl.types import Sample

__all__ = ["METHODS", "Method", "Signal", "get_method"]

Signal = Literal["reward", "teacher_logprobs", "teacher_top_k", "step_advantage", "experience"]
SIGNALS: tuple[Signal, ...] = get_args(Signal)
TEACHER_SIGNALS: frozenset[Signal] = frozenset({"teacher_logprobs", "teacher_top_k"})

# the Sample fields a signal travels in; a method's sample keeps only those of its signals
_SAMPLE_FIELDS: dict[Signal, tuple[str, ...]] = {
    "reward": ("reward",),
    "teacher_logprobs": ("teacher_logprobs", "hint"),
    "teacher_top_k": ("teacher_logprobs", "teacher_top_ids", "teacher_top_logprobs", "hint"),
    "step_advantage": ("step_advantage",),
    "experience": ("experience",),  # assembled into prompt_token_ids, behaviour_logprobs and teacher_logprobs
}
# the batch keys (train/batch.py) a signal arrives in
_BATCH_KEYS: dict[Signal, tuple[str, ...]] = {
    "reward": ("reward", "has_reward"),
    "teacher_logprobs": ("teacher_logprobs", "teacher_mask"),
    "teacher_top_k": ("teacher_top_ids", "teacher_top_logprobs", "teacher_mask"),
    "step_advantage": ("step_advantage", "has_step_advantage"),
    "experience": ("teacher_logprobs", "teacher_mask"),  # the served prompt's log-probs, in the teacher's place
}
_WEIGHTS = frozenset(f.name for f in dataclasses.fields(LossParams) if f.name.startswith("w_"))

AdvantageFn = Callable[[Mapping[str, Tensor], LossParams], tuple[Tensor, Tensor]]
"""(batch, params) -> (advantages, loss_mask), both (B, T): the clipped surrogate's inputs."""


@dataclass(frozen=True)
class Method:
    """A training objective: the signals it learns from and the loss terms it trains them with."""

    name: str  # what --method names it by, and the key of its claims in the store
    signals: tuple[Signal, ...]  # a turn carrying none of them is skipped, with the reason
    advantages: AdvantageFn | None = None  # per-token advantages of the clipped surrogate; None: no surrogate
    topk_kl: bool = False  # add the reverse KL to the teacher's top-K tokens + tail (needs teacher_top_k)
    weights: tuple[str, ...] = ()  # the LossParams weights that scale its terms; one must be > 0

    def __post_init__(self) -> None:
        where = f"method {self.name!r}"
        if not self.name or ":" in self.name:
            raise ValueError(f"a method needs a name without ':' (it keys the store's claims), got {self.name!r}")
        unknown = [s for s in self.signals if s not in SIGNALS]
        if not self.signals or unknown:
            raise ValueError(f"{where} names signals {list(self.signals)}; use one or more of {', '.join(SIGNALS)}")
        if self.advantages is None and not self.topk_kl:
            raise ValueError(f"{where} has no loss term: give it advantages=... or topk_kl=True")
        if self.topk_kl and "teacher_top_k" not in self.signals:
            raise ValueError(f"{where} trains top-k distillation, so its signals must include 'teacher_top_k'")
        if "experience" in self.signals and TEACHER_SIGNALS.intersection(self.signals):
            raise ValueError(f"{where} reads 'experience' beside the hint teacher's signals; the experience is "
                             "trained on the prompt without the block and the hint teacher's targets are for the "
                             "prompt served: read one or the other")
        bad = [w for w in self.weights if w not in _WEIGHTS]
        if bad:
            raise ValueError(f"{where} names weights {bad}; the weights are the LossParams fields {sorted(_WEIGHTS)}")

    @property
    def reads_teacher(self) -> bool:
        """Whether the method learns from teacher targets (scoring them costs a prefill per hint)."""
        return bool(TEACHER_SIGNALS.intersection(self.signals))

    @property
    def reads_experience(self) -> bool:
        """Whether the method learns from the experience pass (two prefills per turn served with a block)."""
        return "experience" in self.signals

    # -- the store's side: a turn's sample -> this method's sample --------------------------

    def assemble(self, sample: Sample) -> Sample | str:
        """`sample` with only the signals this method reads, or why it gives the method nothing."""
        reasons = {signal: _missing(sample, signal) for signal in self.signals}
        present = [signal for signal, reason in reasons.items() if reason is None]
        if not present:
            return "; ".join(dict.fromkeys(r for r in reasons.values() if r))
        kept = {name for signal in present for name in _SAMPLE_FIELDS[signal]}
        cleared = {name: None for fields in _SAMPLE_FIELDS.values() for name in fields if name not in kept}
        sample = dataclasses.replace(sample, **cleared)
        return _student_view(sample) if "experience" in present else sample

    # -- the trainer's side ------------------------------------------------------------------

    def check(self, params: LossParams) -> None:
        """Raise if `params` would leave every term of this method at weight 0."""
        if self.weights and not any(getattr(params, w) > 0 for w in self.weights):
            names = " or ".join(f"--{w.replace('_', '-')}" for w in self.weights)
            raise ValueError(f"method {self.name!r} trains nothing with {', '.join(self.weights)} all 0: "
                             f"give {names} a positive weight")

    def batch_keys(self) -> list[str]:
        """The batch entries its loss reads."""
        keys = ["loss_mask"] + (["behaviour_logprobs"] if self.advantages is not None else [])
        keys += [key for signal in self.signals for key in _BATCH_KEYS[signal]]
        return list(dict.fromkeys(keys))

    def loss(
        self,
        batch: Mapping[str, Tensor],  # loss_mask (B, T) and the keys batch_keys() names
        logprobs: Tensor,  # (B, T) current policy, sampled tokens
        logits: Tensor | None = None,  # (B, T, V) current policy; the top-k term needs it
        ref_logprobs: Tensor | None = None,  # (B, T) reference policy; needed when kl_beta > 0
        params: LossParams = LossParams(),
        kl_logprobs: Tensor | None = None,  # (B, T) current policy measured as ref_logprobs are
    ) -> tuple[Tensor, dict[str, float]]:
        """The method's loss and stats (losses.total_loss of its terms)."""
        missing = [key for key in self.batch_keys() if key not in batch]
        if missing:
            raise ValueError(f"method {self.name!r} needs batch keys {missing}; the batch has {sorted(batch)}")
        surrogate = self.advantages(batch, params) if self.advantages is not None else None
        return total_loss(batch, logprobs, surrogate=surrogate, topk_kl=self.topk_kl, logits=logits,
                          ref_logprobs=ref_logprobs, params=params, kl_logprobs=kl_logprobs)

    def trained_samples(self, batch: Mapping[str, Tensor], stats: Mapping[str, float]) -> float:
        """How many samples the loss averages over (its denominator), for gradient accumulation:
        those the surrogate trains, or for top-k distillation alone those with a teacher."""
        if self.advantages is not None:
            return stats["samples"]
        return float((batch["loss_mask"].bool() & batch["teacher_mask"].bool()).any(-1).sum())


def _missing(sample: Sample, signal: Signal) -> str | None:
    """Why `sample` carries no usable `signal`, or None when it does."""
    if signal == "reward":
        if sample.reward is None:
            return "no verdict"
        return "reward 0 carries no evaluative signal" if sample.reward == 0 else None
    if signal == "experience":
        return "not served with an experience block (or the judge scored none)" if sample.experience is None else None
    if signal == "step_advantage":
        if sample.step_advantage is None:
            return "no step advantage"
        return "step advantage 0: no direction" if sample.step_advantage == 0 else None
    if sample.teacher_logprobs is None:
        return "no hint: no directive signal (or the judge scored no teacher)"
    if signal == "teacher_top_k" and not sample.teacher_top_ids:
        return "no teacher top-k"
    return None


def _student_view(sample: Sample) -> Sample:
    """`sample` as the student saw it: the prompt without the experience block, the student's
    log-probs as behaviour, the served prompt's as the teacher (the same sample again if it is already)."""
    experience = sample.experience
    assert experience is not None
    return dataclasses.replace(sample, prompt_token_ids=experience.prompt_token_ids,
                               behaviour_logprobs=experience.student_logprobs,
                               teacher_logprobs=experience.teacher_logprobs)


# -- the built-in methods (docs/method.md §3) ----------------------------------------------------


def reward_advantages(batch: Mapping[str, Tensor], params: LossParams) -> tuple[Tensor, Tensor]:
    """Binary RL: A_t = w_rl r on every token; reward 0 or none masked out."""
    return surrogate_advantages(batch, params, reward=True, opd=False)


def opd_term_advantages(batch: Mapping[str, Tensor], params: LossParams) -> tuple[Tensor, Tensor]:
    """OPD: A_t = w_opd clip(teacher - behaviour, -C, C); tokens without a teacher masked out."""
    return surrogate_advantages(batch, params, reward=False, opd=True)


def combined_term_advantages(batch: Mapping[str, Tensor], params: LossParams) -> tuple[Tensor, Tensor]:
    """Combined: the sum of both; a missing term is 0, a token with neither is masked out."""
    return surrogate_advantages(batch, params, reward=True, opd=True)


def step_advantages(batch: Mapping[str, Tensor], params: LossParams) -> tuple[Tensor, Tensor]:
    """Long-horizon agents: A_t = the step's standardized advantage on every token."""
    return binary_advantages(batch["step_advantage"], batch["has_step_advantage"], batch["loss_mask"].bool())


BINARY = Method("binary", ("reward",), reward_advantages, weights=("w_rl",))  # evaluative
OPD = Method("opd", ("teacher_logprobs",), opd_term_advantages, weights=("w_opd",))  # directive (hindsight OPD)
COMBINED = Method("combined", ("reward", "teacher_logprobs"), combined_term_advantages,
                  weights=("w_rl", "w_opd"))  # both, on every turn with either signal (recommended)
TOPK = Method("topk", ("teacher_top_k",), topk_kl=True)  # reverse KL to the hinted teacher's top-K + tail
STEPWISE = Method("stepwise", ("step_advantage",), step_advantages)  # agents: each step's standardized advantage
# the user's experience into the weights: combined's sum on the prompt without the block, the served prompt the teacher
CONSOLIDATE = Method("consolidate", ("reward", "experience"), combined_term_advantages, weights=("w_rl", "w_opd"))

METHODS: dict[str, Method] = {m.name: m for m in (BINARY, OPD, COMBINED, TOPK, STEPWISE, CONSOLIDATE)}


def get_method(name: str) -> Method:
    """The method `name` stands for: a built-in, or `module:ATTR` naming a Method elsewhere;
    ValueError naming the choices when there is none."""
    if name in METHODS:
        return METHODS[name]
    if ":" not in name:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}, "
                         "or name your own Method as module:ATTR")
    method = import_named(name, f"method {name!r}")
    if not isinstance(method, Method):
        raise ValueError(f"method {name!r} cannot be loaded: it names a {type(method).__name__}, "
                         "not an openclaw_rl.train.methods.Method")
    if method.name in METHODS:
        raise ValueError(f"method {name!r} is named {method.name!r}, a built-in's name; give it a name of its own "
                         "(the store keeps each method's claims apart by name)")
    return method
