"""The trainer: a training copy of the policy (float32 master weights) and one `step` per batch.

`Trainer.step(samples)` pads the samples (batch.py), measures the current policy's
log-probs of the exact sampled tokens, adds up the method's loss terms (methods.py) and
takes `optimizer_steps_per_batch` AdamW steps. It knows nothing of the store, the
engine or files: the runner feeds it and publishes what `policy_state_dict()` returns,
and checkpoint.py saves and restores it.

Decisions, and why:

- Log-probs are measured exactly as sampling measured them (engine/sampling.py):
  logits / T at each sample's temperature, then its top-p truncation and
  renormalisation. Any other transform makes the ratio differ from 1 at the first step
  for no reason (ignoring top-p 0.8 made it the kept mass, about 0.8). A sampled token
  that the current policy's nucleus no longer holds has log-prob -inf: its ratio is
  clipped (losses.py clamps the log-ratio) and it gives no gradient.
- The KL penalty to the reference compares the tempered distributions before top-p: a
  KL between two truncated distributions is infinite wherever their nuclei differ.
  Top-k distillation compares the truncated ones, as the teacher reports them, with
  the bins top-p cuts floored like the tail (losses.py).
- Dropout stays off (the model is kept in eval mode while gradients flow): with
  dropout the first ratio is noise around 1 instead of exactly pi_theta / pi_old.
- Micro-batches accumulate gradients. The loss is a mean over the samples that have a
  trained token, so each micro-batch's loss is weighted by its count of such samples
  and the sum divided by the batch's count: the gradient equals the full batch's
  whatever the split, even when some samples are masked out entirely.
- AdamW without weight decay: decay pulls weights toward zero, not toward the initial
  policy; `kl_beta` is the regulariser that does the latter. On CUDA it is torch's fused
  AdamW (one kernel for every parameter's update, `adamw_options`); elsewhere torch's default.
- A batch in which no sample carries a signal (every reward 0, no teacher) takes no
  optimizer step and does not bump the policy version: the weights did not change.
- LoRA (peft): the reference policy of the KL term is the same model with the adapter
  disabled, so no second copy is held. The published weights merge the adapter into
  copies of the base weights (W + scale * B @ A) keyed like the base model's
  named_parameters, so serving loads them as it loads any full update; the training
  model is never merged in place, which would be undone imprecisely. Engines that
  hot-load adapters (vLLM, SGLang) get `lora_adapter()` instead: peft's own format.
  peft is imported where LoRA uses it, not at the top: importing it loads bitsandbytes
  where that is installed (2.5 s on two cores, and a warning on stderr), compose.py imports
  this module for every command, and LoRA is off by default. Here and in checkpoint.py and
  sharded.py such an import says "LoRA only".
- Precision (`train_dtype`, engine/precision.py): the weights AdamW updates and its moments
  are always float32; bfloat16 is a compute precision (torch.autocast here, FSDP2's
  MixedPrecisionPolicy in train/sharded.py), so an update smaller than bfloat16's
  resolution is not rounded away. A LoRA base is frozen, so it is held in the compute
  precision itself (half the memory) while the adapter trains in float32; the KL
  reference copy likewise; with `lora_4bit` it is held in 4-bit NF4 (bitsandbytes, QLoRA)
  and dequantized only to merge the adapter for publishing.
- Truncated importance sampling (`tis_cap`, train/losses.py): on the first pass over a
  batch the trainer's own log-probs are kept as the PPO ratio's base; an engine sampling
  in bfloat16 then no longer makes the first ratio differ from 1.
- Collective work is split into hooks (`_wrap`, `_accumulate`, the state-dict methods)
  that train/sharded.py overrides; this class is the one-process trainer.

(Over 400 lines: the step, its measurement of log-probs and the weights' ways out and in
share the model's state, and the sharded trainer overrides pieces of each.)
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from transformers.modeling_layers import GradientCheckpointingLayer

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.base import LoraAdapter
from openclaw_rl.engine.grammar import Grammars, model_eos_ids
from openclaw_rl.engine.precision import needs_importance_correction, resolve_dtype
from openclaw_rl.engine.sampling import sampling_logprobs
from openclaw_rl.train import checkpoint
from openclaw_rl.train.batch import collate, split_micro_batches
from openclaw_rl.train.losses import LossParams, k3_kl, opd_advantages
from openclaw_rl.train.methods import Method, get_method
from openclaw_rl.types import Sample


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER = checkpoint.ADAPTER_NAME  # peft's name for the single adapter we train
# micro_batch_size unset: on a CPU one sample per pass, since padding a short sample to a long one's width
# costs more than the wider products save (8 demo samples of 106-743 tokens: 75 s in passes of 4 sorted by
# length, 40 s one by one, one thread); on a GPU the wider products win
MICRO_BATCH = {False: 1, True: 4}  # by "on CUDA"
CHECKPOINT_TOKENS = 2048  # gradient_checkpointing=auto: micro-batches above this many (padded) tokens
_MEAN_STATS = ("loss", "pg_loss", "topk_kl", "ref_kl", "approx_kl", "clip_fraction", "ratio_mean",
               "tis_weight_mean", "tis_capped_fraction", "mismatch")
TIS_CAP = 2.0  # tis_cap's value when unset and some precision is below float32 (verl's and slime's)


class Trainer:
    sharded = False  # train/sharded.py: the policy is split over ranks, and checkpoints are sharded
    _world_size = 1  # ranks whose gradients FSDP2 averages (train/sharded.py)

    def __init__(
        self,
        model_dir: str | Path,
        config: TrainConfig,
        initial_version: int = 0,
        *,
        device: str | None = None,
    ):
        self.config = config
        self.model_dir = Path(model_dir)
        self.method: Method = get_method(config.method)  # before the model loads: a bad name fails fast
        self.device = torch.device(device or self._default_device())
        self.micro_batch_size = config.micro_batch_size or MICRO_BATCH[self.device.type == "cuda"]
        self.compute_dtype = resolve_dtype(config.train_dtype, self.device)
        default_tis = TIS_CAP if needs_importance_correction(self.device, self.compute_dtype) else 0.0  # precision.py
        tis_cap = config.tis_cap if config.tis_cap is not None else default_tis
        self.loss_params = LossParams(
            eps_low=config.eps_low, eps_high=config.eps_high, opd_clip_c=config.opd_clip_c,
            w_rl=config.w_rl, w_opd=config.w_opd, kl_beta=config.kl_beta, opd_baseline=config.opd_baseline,
            tis_cap=tis_cap,
        )
        self.method.check(self.loss_params)
        # full fine-tuning: float32 master weights; a LoRA base is frozen, so it is held as it computes
        load_dtype = self.compute_dtype if config.lora else torch.float32
        self.quantized = config.lora and config.lora_4bit
        if self.quantized:  # placed on the device as it loads (a 4-bit model is not moved after)
            model = _load_4bit(self.model_dir, self.compute_dtype, self.device, sharded=self.sharded)
        else:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=load_dtype)  # `_wrap` places it
        self.reference: torch.nn.Module | None = None
        if config.lora:
            model = _add_lora(model, config)
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.float()  # the adapter and its AdamW state: float32
        elif config.kl_beta > 0:
            self.reference = copy.deepcopy(model).to(self.compute_dtype).requires_grad_(False).eval()
        model, self.reference = self._wrap(model.eval(), self.reference)
        self.model = model  # eval = dropout off; gradients still flow
        self._checkpointed = _enable_checkpointing(model, config) if config.gradient_checkpointing != "off" else []
        forward = (model.get_base_model() if config.lora else model).forward
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(forward).parameters
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=config.learning_rate, weight_decay=0.0,
                                           **adamw_options(self.trainable))
        self.train_step = 0  # training steps taken (batches consumed)
        self.policy_version = initial_version  # version of the weights held now
        self.parent_version: int | None = None  # the version those weights came from (None: the base)
        self._numbered = initial_version  # the highest number taken, by a version the gate rejected too
        # torch threads for the next micro-batch, asked before each one (None: train_threads throughout);
        # in-process beside serving, compose lends the trainer serving's core once serving is idle
        self.threads: Callable[[], int] | None = None
        self.stepping = False  # in `step` now: serving's engine uses one core fewer meanwhile (compose)

    # -- hooks of the sharded trainer (train/sharded.py) --------------------------------

    def _default_device(self) -> str:
        return "cuda" if torch.cuda.is_available() else "cpu"

    def _wrap(self, model: torch.nn.Module, reference: torch.nn.Module | None):
        """The models as they train, on the device (sharded: FSDP2 moves each block's shards there)."""
        if self.quantized:
            return model, None  # loaded on the device; a LoRA trainer has no reference copy
        return model.to(self.device), reference.to(self.device) if reference is not None else None

    @property
    def _autocast(self) -> bool:
        """Whether forwards run under torch.autocast in the compute precision (FSDP2 casts by itself)."""
        return self.compute_dtype != torch.float32

    def _reduce(self, values: list[float]) -> list[float]:
        """Sums over every rank (one process: the values)."""
        return values

    # -- training ---------------------------------------------------------------------

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Train on one batch; returns stats (means over the batch and its passes).

        kl: k3 estimate of KL between behaviour and current policy on every response
        token; loss, clip_fraction, ...: as the method's loss reports them; reward_mean and
        opd_adv_abs_mean are NaN when no sample has a verdict / a teacher.
        """
        if not samples:
            raise ValueError("step needs at least one sample")
        self.stepping = True
        try:
            return self._step(samples)
        finally:
            self.stepping = False

    def _step(self, samples: Sequence[Sample]) -> dict[str, float]:
        if self.config.train_threads:  # per calling thread: serving keeps its own budget
            torch.set_num_threads(self.config.train_threads)
        started = time.perf_counter()
        micro_batches = [self._collate(chunk) for chunk in split_micro_batches(samples, self.micro_batch_size)]
        passes: list[dict[str, float]] = []
        for _ in range(self.config.optimizer_steps_per_batch):
            stats = self._accumulate(micro_batches, first_pass=not passes)
            passes.append(stats)
            if stats["trained_samples"] == 0:
                break
            norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.config.grad_clip)
            stats["grad_norm"] = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

        optimizer_steps = sum(1 for p in passes if p["trained_samples"] > 0)
        self.train_step += 1
        if optimizer_steps:
            self.parent_version = self.policy_version
            self.policy_version = self._numbered = max(self.policy_version, self._numbered) + 1
        seconds = time.perf_counter() - started
        tokens = float(sum(int(b["loss_mask"].sum()) for b in micro_batches))
        result = {key: sum(p.get(key, 0.0) for p in passes) / len(passes) for key in passes[0]}
        result.update(_signal_stats(micro_batches, self.loss_params.opd_clip_c))
        result.update(
            samples=float(len(samples)),
            tokens=tokens,
            seconds=seconds,
            tokens_per_s=tokens * len(passes) / max(seconds, 1e-9),
            optimizer_steps=float(optimizer_steps),
            train_step=float(self.train_step),
            policy_version=float(self.policy_version),
            lr=self.optimizer.param_groups[0]["lr"],
        )
        return result

    def _collate(self, samples: Sequence[Sample]) -> dict[str, Tensor]:
        top_k = self.config.topk_k if self.method.topk_kl else 0
        batch = collate(samples, top_k=top_k)
        if any(s.constraint for s in samples):  # sampled under a grammar: the same mask, replayed (engine/grammar.py)
            batch["allowed"] = self._grammars.batch_masks(list(samples), batch["response_ids"].shape[1])
        return {k: v.to(self.device) for k, v in batch.items()}

    @functools.cached_property
    def _grammars(self) -> Grammars:
        """The tokenizer's vocabulary for constrained turns' masks, built on the first such turn."""
        tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        config = self.model.config
        return Grammars(tokenizer, int(config.vocab_size), model_eos_ids(self.model.generation_config, tokenizer))

    def _accumulate(self, micro_batches: list[dict[str, Tensor]], *, first_pass: bool = True,
                    padding: Sequence[bool] = ()) -> dict[str, float]:
        """Gradients of the full batch's loss in `.grad`, built micro-batch by micro-batch.

        `padding` marks micro-batches run only so that every rank takes part in the same
        collectives (train/sharded.py): their backward is of zero. Sums of counts and stats go
        through `_reduce` (every rank's), and FSDP2 averages gradients over the ranks, so the
        gradient is divided by the global count over the world size.
        """
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(_MEAN_STATS, 0.0)
        trained_samples = trained_tokens = kl_sum = samples = 0.0
        collective = bool(padding)
        for i, batch in enumerate(micro_batches):
            if self.threads is not None:  # per calling thread, so serving keeps its own
                torch.set_num_threads(self.threads())
            real = not (padding and padding[i])
            loss, stats, logprobs = self._micro_loss(batch, first_pass)
            count = self.method.trained_samples(batch, stats) if real else 0.0
            if count or collective:  # a rank of a sharded step always runs backward: it is a collective
                (loss * count).backward()
            if not real:
                continue
            with torch.no_grad():  # how far the policy has moved from behaviour, on every response token
                kl_sum += float(k3_kl(batch["behaviour_logprobs"], logprobs, batch["loss_mask"])) * len(logprobs)
            samples += len(logprobs)
            trained_samples += count
            trained_tokens += stats["tokens"]
            for key in _MEAN_STATS:
                if key in stats:
                    sums[key] += stats[key] * count
        keys = list(_MEAN_STATS)
        totals = self._reduce([trained_samples, trained_tokens, kl_sum, samples, *(sums[k] for k in keys)])
        trained_samples, trained_tokens, kl_sum, samples = totals[:4]
        present = self._stat_keys()
        if trained_samples:
            divisor = trained_samples / self._world_size
            for p in self.trainable:
                if p.grad is not None:
                    p.grad.div_(divisor)
        stats = {key: value / max(trained_samples, 1.0) for key, value in zip(keys, totals[4:]) if key in present}
        stats.update(kl=kl_sum / max(samples, 1.0), trained_samples=trained_samples, trained_tokens=trained_tokens)
        return stats

    def _stat_keys(self) -> set[str]:
        """The loss stats this trainer's method and settings report."""
        keys = {"loss"}
        if self.method.advantages is not None:
            keys |= {"pg_loss", "approx_kl", "clip_fraction", "ratio_mean"}
            if self.loss_params.tis_cap:
                keys |= {"tis_weight_mean", "tis_capped_fraction", "mismatch"}
        if self.method.topk_kl:
            keys.add("topk_kl")
        if self.loss_params.kl_beta > 0:
            keys.add("ref_kl")
        return keys

    def _micro_loss(self, batch: dict[str, Tensor], first_pass: bool) -> tuple[Tensor, dict[str, float], Tensor]:
        """One micro-batch's loss, its stats and the log-probs (B, T) of its response tokens.
        On the first pass over a batch its log-probs are kept as TIS's proximal log-probs."""
        logits = self._response_logits(batch)  # (B, T, V)
        logprobs, vocab_logprobs = _measure(logits, batch, with_vocab=self.method.topk_kl)
        if first_pass and self.loss_params.tis_cap:
            batch["proximal_logprobs"] = logprobs.detach()
        ref_logprobs = kl_logprobs = None
        if self.loss_params.kl_beta > 0:
            kl_logprobs, _ = _measure(logits, batch, top_p=False)
            with torch.no_grad():
                ref_logprobs, _ = _measure(self._response_logits(batch, reference=True), batch, top_p=False)
        loss, stats = self.method.loss(batch, logprobs, vocab_logprobs, ref_logprobs, self.loss_params,
                                       kl_logprobs=kl_logprobs)
        return loss, stats, logprobs

    def logprobs(
        self, batch: dict[str, Tensor], *, with_vocab: bool = False, reference: bool = False, top_p: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """Log-probs of the response tokens (B, T), and over the vocabulary (B, T, V) if asked.

        Measured at each sample's temperature and top-p, as sampling measured them (before
        top-p with `top_p=False`). `reference` uses the initial policy (the frozen copy, or
        the model with its adapter off).
        """
        return _measure(self._response_logits(batch, reference=reference), batch, with_vocab=with_vocab, top_p=top_p)

    def _response_logits(self, batch: dict[str, Tensor], *, reference: bool = False) -> Tensor:
        """The logits (B, T, V) that predict each response token."""
        positions = batch["response_positions"]  # (B, T) columns of the response tokens
        first = int(positions.min()) - 1  # the earliest column whose logits predict a response token
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "use_cache": False}
        if self._accepts_logits_to_keep:
            kwargs["logits_to_keep"] = batch["input_ids"].shape[1] - first  # skip the prompt-only columns
        else:
            first = 0
        with torch.autocast(self.device.type, dtype=self.compute_dtype, enabled=self._autocast):
            if not reference:
                tokens = batch["input_ids"].numel()
                recompute = self.config.gradient_checkpointing == "on" or tokens > CHECKPOINT_TOKENS
                for layer in self._checkpointed:  # a layer checkpoints only in training mode; its children stay eval
                    layer.training = recompute
                logits = self.model(**kwargs).logits  # (B, L - first, V)
            elif self.reference is not None:
                logits = self.reference(**kwargs).logits
            else:  # LoRA: the initial policy is the base model, adapter off
                with self.model.disable_adapter():
                    logits = self.model(**kwargs).logits
        b, t = positions.shape
        index = (positions - 1 - first)[..., None].expand(b, t, logits.shape[-1])  # (B, T, V)
        return logits.gather(1, index)  # (B, T, V)

    def renumber(self, version: int) -> None:
        """Name the weights held now `version`, above every version ever used.

        On resume after a crash the checkpoint's weights are older than versions published
        after it, and those numbers name the lost weights forever. The checkpoint's weights
        therefore get a fresh number (their parent is the version they were), and training
        counts on from there; train step, weights and optimizer state are unchanged.
        """
        if version <= self.policy_version:
            raise ValueError(f"a new number must be above the held v{self.policy_version}, got {version}")
        self.parent_version, self.policy_version = self.policy_version, version
        self._numbered = max(self._numbered, version)

    @torch.no_grad()
    def anchor_reference(self) -> None:
        """The KL penalty's reference becomes the weights held now (kl_reference = accepted)."""
        if self.reference is None:
            return
        reference = dict(self.reference.named_parameters())
        for name, p in self.model.named_parameters():
            reference[name].copy_(p)

    def reserve_numbers(self, highest: int) -> None:
        """Numbers up to `highest` are taken (by versions the gate rejected before a restart):
        the weights held keep their number, the next step is numbered above them."""
        self._numbered = max(self._numbered, highest)

    def return_to(self, version: int, parent: int | None) -> None:
        """The weights held are version `version` again (the gate restored them); numbers taken
        since stay taken, so the next step is numbered above them."""
        self.policy_version, self.parent_version = version, parent

    # -- weights out and in -----------------------------------------------------------

    @torch.no_grad()
    def policy_state_dict(self) -> dict[str, Tensor]:
        """The full policy weights to publish, on the CPU, keyed like the base model's
        named_parameters; LoRA deltas merged into copies (the training model is untouched)."""
        if not self.config.lora:
            return {name: p.detach().to("cpu", copy=True) for name, p in self.model.named_parameters()}
        from peft.tuners.lora import LoraLayer  # LoRA only (module docstring)

        base = self.model.get_base_model()
        deltas = {
            f"{name}.base_layer.weight": module.get_delta_weight(ADAPTER)
            for name, module in base.named_modules()
            if isinstance(module, LoraLayer) and ADAPTER in module.lora_A
        }
        merged = {}
        for name, p in base.named_parameters():
            if is_lora_parameter(name):
                continue
            p = _dense(p)  # a 4-bit base weight dequantized (bitsandbytes), else itself
            # merged in float32: a bf16 base would round a small delta away
            value = p.detach().float() + deltas[name].float() if name in deltas else p.detach()
            merged[name.replace(".base_layer.", ".")] = value.to("cpu", copy=True)
        return merged

    @torch.no_grad()
    def lora_adapter(self) -> LoraAdapter:
        """The adapter alone, as peft saves it, for engines that hot-load adapters (vLLM,
        SGLang): a few MB instead of the full weights, and no merge on either side."""
        from peft import get_peft_model_state_dict  # LoRA only (module docstring)

        config = self._adapter_config()
        state = {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(self.model).items()}
        return LoraAdapter(state, config)

    def _adapter_config(self) -> dict:
        """The adapter's peft config as JSON-able values."""
        if not self.config.lora:
            raise ValueError("lora_adapter() needs a LoRA trainer (lora = true); publish policy_state_dict()")
        config = self.model.peft_config[ADAPTER].to_dict()
        config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
        config["base_model_name_or_path"] = str(self.model_dir)
        return config

    def trainable_state_dict(self) -> dict[str, Tensor]:
        """What a checkpoint stores: every weight, or the adapter in peft's format."""
        if not self.config.lora:
            return self.policy_state_dict()
        from peft import get_peft_model_state_dict  # LoRA only (module docstring)

        return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(self.model).items()}

    @torch.no_grad()
    def load_trainable_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """The inverse of `trainable_state_dict`; raises on any missing or unknown key."""
        self._check_keys(state_dict)
        if self.config.lora:
            from peft import set_peft_model_state_dict  # LoRA only (module docstring)

            set_peft_model_state_dict(self.model, state_dict)
        else:
            params = dict(self.model.named_parameters())
            for name, tensor in state_dict.items():
                params[name].copy_(tensor)

    def _check_keys(self, state_dict: dict[str, Tensor]) -> None:
        """Raise unless `state_dict` has exactly the names `trainable_state_dict` gives."""
        names = [name for name, p in self.model.named_parameters() if p.requires_grad or not self.config.lora]
        if self.config.lora:  # peft's saved names: the adapter's name left out
            names = [name.replace(f".{ADAPTER}.", ".") for name in names]
        expected = set(names)
        missing, unknown = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
        if missing or unknown:
            raise ValueError(
                f"the weights do not fit this trainer's model (lora={self.config.lora}): "
                f"missing {missing[:5]}, unknown {unknown[:5]}; was the checkpoint made from another model?"
            )

    def load_checkpoint_files(self, saved: checkpoint.Checkpoint) -> None:
        """Weights (the adapter, for LoRA) and AdamW state of a one-process checkpoint."""
        self.load_trainable_state_dict(saved.weights())
        self.optimizer.load_state_dict(saved.optimizer_state())

    def save_sharded(self, directory: Path) -> None:
        """Weights (the adapter, for LoRA) and AdamW state as a torch.distributed.checkpoint directory,
        which loads on any number of ranks (checkpoint.py)."""
        checkpoint.save_dcp(self.model, self.optimizer, directory, trainable_only=self.config.lora)

    def load_sharded(self, directory: Path) -> None:
        """The inverse of `save_sharded`, from a directory written on any number of ranks."""
        checkpoint.load_dcp(self.model, self.optimizer, directory, trainable_only=self.config.lora)

    def save_adapter_config(self, directory: Path) -> None:
        """adapter_config.json beside the adapter weights, so peft can load them."""
        self.model.peft_config[ADAPTER].save_pretrained(str(directory))

    def state(self) -> dict:
        """The counters and settings a checkpoint records, as JSON-able values."""
        c = self.config
        return {
            "train_step": self.train_step,
            "policy_version": self.policy_version,
            "parent_version": self.parent_version,
            "model_dir": str(self.model_dir.resolve()),
            "method": c.method,
            "lora": c.lora,
            "lora_rank": c.lora_rank if c.lora else None,
            "lora_alpha": c.lora_alpha if c.lora else None,
            "config": json.loads(json.dumps(c.__dict__)),
            "sharded": self.sharded,
            "world_size": self._world_size,
        }


def _measure(logits: Tensor, batch: dict[str, Tensor], *, with_vocab: bool = False,
             top_p: bool = True) -> tuple[Tensor, Tensor | None]:
    """Log-probs (B, T) of the response tokens under `logits` (B, T, V), at each sample's
    temperature and (unless `top_p` is False) its top-p; the (B, T, V) table if asked."""
    b, t, vocab = logits.shape
    if "allowed" in batch:  # constrained turns: the tokens their grammar allowed, as sampling masked them
        logits = logits.masked_fill(~batch["allowed"], float("-inf"))
    temperatures = batch["temperatures"].repeat_interleave(t)  # (B * T,)
    top_ps = batch["top_ps"].repeat_interleave(t) if top_p else torch.ones_like(temperatures)  # (B * T,)
    vocab_logprobs = sampling_logprobs(logits.reshape(b * t, vocab), temperatures, top_ps).reshape(b, t, vocab)
    chosen = vocab_logprobs.gather(-1, batch["response_ids"][..., None])[..., 0]  # (B, T)
    return chosen, (vocab_logprobs if with_vocab else None)


def _enable_checkpointing(model: torch.nn.Module, config: TrainConfig) -> list[torch.nn.Module]:
    """Turn on transformers' activation checkpointing; returns the layers that apply it.

    A layer recomputes only while its own `training` flag is set, which `logprobs` sets per
    micro-batch. Setting the flag on the layer alone keeps dropout in its children off.
    """
    base = model.get_base_model() if config.lora else model
    layers = [m for m in base.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers or not getattr(base, "supports_gradient_checkpointing", False):
        if config.gradient_checkpointing == "on":
            raise ValueError(f"{type(base).__name__} does not support gradient checkpointing; "
                             "use gradient_checkpointing = off (or auto, which then keeps activations)")
        return []
    enable = getattr(base, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # older transformers name it after gradients
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for layer in layers:
        layer.training = False
    return layers


def _load_4bit(model_dir: Path, compute_dtype: torch.dtype, device: torch.device, sharded: bool) -> torch.nn.Module:
    """The base model with its linear weights in 4-bit NF4 (bitsandbytes, double-quantized), computing
    in `compute_dtype`, on `device`; norms and embeddings in float32 (peft's k-bit preparation)."""
    if sharded:
        raise ValueError("lora_4bit is not supported with a sharded trainer (--nproc > 1): FSDP2 does not shard "
                         "bitsandbytes' 4-bit weights; use --nproc 1, or lora_4bit = false")
    try:
        import bitsandbytes  # noqa: F401  (the optional extra qlora; transformers loads through it)
    except ImportError as error:
        raise ValueError("lora_4bit needs bitsandbytes: pip install 'openclaw-rl[qlora]' (bitsandbytes==0.50.2, "
                         "which runs 4-bit weights on CPUs as well as CUDA)") from error
    from peft import prepare_model_for_kbit_training  # LoRA only (module docstring)

    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                      bnb_4bit_compute_dtype=compute_dtype)
    model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=quantization,
                                                 device_map={"": str(device)})
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _dense(p: torch.Tensor) -> torch.Tensor:
    """A weight as a dense tensor: a bitsandbytes 4-bit one dequantized, any other unchanged."""
    state = getattr(p, "quant_state", None)
    if state is None:
        return p
    import bitsandbytes.functional as bnbf  # only a 4-bit weight gets here: the optional extra qlora

    return bnbf.dequantize_4bit(p.data, state)


def adamw_options(params: Sequence[Tensor]) -> dict[str, bool]:
    """How AdamW updates these parameters: `fused=True` (one CUDA kernel for every parameter's update,
    FSDP2's shards too) when each is a floating-point tensor on CUDA; otherwise nothing, so torch's
    default (foreach where the device has it, the per-parameter loop on a CPU)."""
    on_cuda = bool(params) and all(p.device.type == "cuda" and p.dtype.is_floating_point for p in params)
    return {"fused": True} if on_cuda else {}


def _add_lora(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model  # LoRA only (module docstring)

    present = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    targets = [t for t in LORA_TARGETS if t in present]
    if not targets:
        raise ValueError(
            f"LoRA targets {LORA_TARGETS} match no linear layer of this model (its linear layers: "
            f"{sorted(present)[:10]}); use full fine-tuning (lora = false) for this architecture"
        )
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0, bias="none",
                      target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, lora, adapter_name=ADAPTER)


def is_lora_parameter(name: str) -> bool:
    return any(part.startswith("lora_") for part in name.split("."))


def _signal_stats(micro_batches: list[dict[str, Tensor]], clip_c: float) -> dict[str, float]:
    """Mean reward over samples with a verdict and mean |A_opd| over teacher tokens (NaN if none)."""
    rewards = torch.cat([b["reward"][b["has_reward"]] for b in micro_batches])
    adv = torch.cat([
        opd_advantages(b["teacher_logprobs"], b["behaviour_logprobs"], b["teacher_mask"], clip_c)[b["teacher_mask"]]
        for b in micro_batches
    ])
    return {
        "reward_mean": float(rewards.mean()) if rewards.numel() else math.nan,
        "opd_adv_abs_mean": float(adv.abs().mean()) if adv.numel() else math.nan,
        "rewarded_samples": float(rewards.numel()),
    }
