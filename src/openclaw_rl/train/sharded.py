"""Sharded training: the policy split over N processes with FSDP2 (torch.distributed.fsdp).

    openclaw-rl train --nproc N ...        starts N ranks here with torchrun (or run it under torchrun)
    rank 0: the runner (train/runner.py) as in one process: claims, gates nothing, publishes, checkpoints
            ShardedTrainer.step(samples)  -> leads "step", scatters micro-batches, trains its share
    ranks > 0: ShardedTrainer.follow()    -> runs each command rank 0 leads, until "stop"

Every parameter is a DTensor shard (1/N of it) with its AdamW moments, so the float32
master weights and optimizer state of a model (16 bytes per parameter with the gradient)
are split N ways; each layer is gathered for its forward and backward, one at a time.

Decisions, and why:

- Rank 0 alone talks to the store, the publisher and the files; every other rank only
  computes. Anything that touches the model is a collective, so each such method of
  ShardedTrainer first *leads* it: rank 0 broadcasts the method's name (and small
  arguments), and the followers call the same method. The runner, the publisher and
  checkpoint.py call the trainer as they call a one-process one; nothing above this
  module knows the policy is sharded.
- A step scatters micro-batches: batch.py pads per micro-batch, so rank r receives its
  samples (`scatter_object_list`) and collates them itself, with rank 0's learning rate
  (the runner lowers it while settled: train/runner.py). Every rank must run the same
  number of forwards and backwards (each one gathers the layers from all ranks), so a
  rank short of micro-batches runs a copy of one with a zero loss (padding).
- Gradients: FSDP2 averages them over the ranks; the one-process trainer divides the
  summed, sample-weighted gradient by the batch's count of trained samples. The counts
  and stats are summed over the ranks (`_reduce`) and the gradient divided by count / N,
  so the step is the one-process step up to float summation order (tests/test_sharded.py
  measures how close).
- Precision: FSDP2's MixedPrecisionPolicy casts the float32 shards to the compute dtype
  for each gathered layer and reduces gradients in float32; no autocast on top.
- Publishing gathers full weights on rank 0 (`get_model_state_dict(full_state_dict,
  cpu_offload)`); a LoRA adapter is merged there in float32, as in one process.
- Checkpoints are torch.distributed.checkpoint directories: each rank writes its shards,
  and loading reshards to whatever the loader's ranks are, so a run saved on N ranks
  resumes on M, one process included (checkpoint.py).
  A one-process checkpoint resumes sharded as well: every rank reads its files and keeps
  its shards of the weights and of the AdamW state (renamed from the optimizer's indices
  to parameter names).
- Not here: the update gate (it decodes with the trainer's model; a sharded one would need
  every rank to decode): refused with a message.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, set_model_state_dict, set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from openclaw_rl.config import ConfigError, TrainConfig
from openclaw_rl.engine.base import LoraAdapter
from openclaw_rl.train import checkpoint
from openclaw_rl.train.batch import split_micro_batches
from openclaw_rl.train.trainer import ADAPTER, Trainer, is_lora_parameter
from openclaw_rl.types import Sample

log = logging.getLogger(__name__)

STOP = "stop"
_PEFT_PREFIX = "base_model.model."  # a PeftModel's names in front of the base model's


def world_size() -> int:
    """The ranks torchrun started (WORLD_SIZE), 1 outside torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_from_env() -> int:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT); returns the rank.
    gloo on CPUs (tests, this machine), NCCL on GPUs, one GPU per local rank."""
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            raise RuntimeError("a sharded trainer runs under torchrun (RANK and WORLD_SIZE unset): start it with "
                               "`openclaw-rl train --nproc N`, which starts torchrun")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank()


def end_rank(status: int) -> NoReturn:
    """Leave the process group (if still in it) and end this rank's process with `status`,
    skipping the interpreter's teardown: a gloo worker thread still alive while Python
    finalizes can abort a rank that has finished its work ("terminate called without an active
    exception", SIGABRT: seen on CI, not reproduced here), and torchrun would report the run
    as failed. Only on success: an error leaves as usual, with its traceback."""
    if dist.is_initialized():
        dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def launch(nproc: int, argv: Sequence[str]) -> int:
    """`openclaw-rl train --nproc N`: the same command under torchrun with N ranks here; its exit status.
    The ranks get the command without --nproc (WORLD_SIZE tells them; torchrun's own parser would
    take `--nproc` for its `--nproc-per-node`)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "openclaw_rl.cli", *_without_nproc(argv)]
    log.info("starting %d trainer ranks: %s", nproc, " ".join(command))
    return subprocess.call(command)


def _without_nproc(argv: Sequence[str]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            kept.append(arg)
    return kept


def refuse_gate_when_sharded(config: TrainConfig, ranks: int, flag: str = "--nproc") -> None:
    """The one check that the update gate and a trainer sharded over `ranks` > 1 are not asked for
    together (module docstring: "Not here"); `flag` is the option that shards it, named in the fix.
    Called before anything starts: `train --nproc`, `serve --train-nproc` (here and on Ray)."""
    if config.gate == "on" and ranks > 1:
        raise ConfigError(f"--gate on is not supported with {flag} > 1 (the gate decodes probes with the "
                          f"trainer's model); use {flag} 1 with the gate, or --gate off")


class ShardedTrainer(Trainer):
    """A Trainer whose policy is sharded over the process group's ranks (module docstring)."""

    sharded = True

    def __init__(self, model_dir: str | Path, config: TrainConfig, initial_version: int = 0):
        if not dist.is_initialized():
            raise RuntimeError("ShardedTrainer needs a process group: call sharded.init_from_env() first")
        refuse_gate_when_sharded(config, dist.get_world_size())
        self.rank = dist.get_rank()
        self._world_size = dist.get_world_size()
        self._share: list[tuple[list[Sample], bool]] = []
        self._mine: list[dict[str, Tensor]] = []
        super().__init__(model_dir, config, initial_version)

    # -- the Trainer's hooks ---------------------------------------------------------------

    def _default_device(self) -> str:
        return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"

    def _wrap(self, model: torch.nn.Module, reference: torch.nn.Module | None):
        """FSDP2 over the models as loaded on the CPU: fully_shard moves one block at a time to the
        device and keeps 1/N of it there, so no rank ever holds the whole model on a GPU."""
        compute = self.compute_dtype
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32) \
            if compute != torch.float32 else MixedPrecisionPolicy()
        for module in (model, reference):
            if module is None:
                continue
            for layer in _decoder_layers(module.get_base_model() if self.config.lora and module is model else module):
                fully_shard(layer, mp_policy=policy)
            fully_shard(module, mp_policy=policy)
        return model, reference

    @property
    def _autocast(self) -> bool:
        return False  # FSDP2 casts each gathered layer (MixedPrecisionPolicy)

    def _reduce(self, values: list[float]) -> list[float]:
        totals = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(totals)
        return totals.tolist()

    # -- leading and following -------------------------------------------------------------

    def _lead(self, command: str, *args) -> None:
        """Rank 0: tell the followers to run `command(*args)` with it (a no-op on followers)."""
        if self.rank == 0:
            dist.broadcast_object_list([(command, args)], src=0)

    def follow(self) -> None:
        """Ranks > 0: run every command rank 0 leads, until it leads `stop`."""
        while True:
            box: list = [None]
            dist.broadcast_object_list(box, src=0)
            command, args = box[0]
            if command == STOP:
                return
            getattr(self, command)(*args)

    def stop_followers(self) -> None:
        """Rank 0, at the end: let the followers return from `follow`."""
        self._lead(STOP)

    # -- training --------------------------------------------------------------------------

    def step(self, samples: Sequence[Sample] = ()) -> dict[str, float]:
        """Rank 0: train on `samples` with every rank; a follower: its share of them. Returns
        rank 0's stats of the whole batch (a follower's are of no use)."""
        self._lead("step")
        rates = [group["lr"] for group in self.optimizer.param_groups]  # rank 0's: the runner may change them
        shares = [(share, rates) for share in self._shares(list(samples))] if self.rank == 0 else None
        box: list = [None]
        dist.scatter_object_list(box, shares, src=0)
        self._share, rates = box[0]
        for group, rate in zip(self.optimizer.param_groups, rates):
            group["lr"] = rate
        return super().step(samples if self.rank == 0 else [s for chunk, _ in self._share for s in chunk])

    def _shares(self, samples: list[Sample]) -> list[list[tuple[list[Sample], bool]]]:
        """Each rank's micro-batches (samples, is_padding): the batch's micro-batches in turn,
        then copies of the first with zero weight until every rank has as many."""
        if not samples:
            raise ValueError("step needs at least one sample")
        chunks = split_micro_batches(samples, self.micro_batch_size)
        per_rank = math.ceil(len(chunks) / self._world_size)
        shares = [[(chunk, False) for chunk in chunks[r::self._world_size]] for r in range(self._world_size)]
        return [share + [(chunks[0], True)] * (per_rank - len(share)) for share in shares]

    def _accumulate(self, micro_batches: list[dict[str, Tensor]], *, first_pass: bool = True,
                    padding: Sequence[bool] = ()) -> dict[str, float]:
        if first_pass:  # collated once per step: the first pass leaves its proximal log-probs in them
            self._mine = [self._collate(chunk) for chunk, _ in self._share]
        return super()._accumulate(self._mine, first_pass=first_pass, padding=[pad for _, pad in self._share])

    # -- weights out and in ----------------------------------------------------------------

    @torch.no_grad()
    def policy_state_dict(self) -> dict[str, Tensor]:
        """Rank 0: the full policy (LoRA merged in float32) as in one process; followers: {}."""
        self._lead("policy_state_dict")
        return self._gathered_policy()

    @torch.no_grad()
    def lora_adapter(self) -> LoraAdapter:
        self._lead("lora_adapter")
        return LoraAdapter(self._gathered_adapter(), self._adapter_config())

    def trainable_state_dict(self) -> dict[str, Tensor]:
        self._lead("trainable_state_dict")
        return self._gathered_adapter() if self.config.lora else self._gathered_policy()

    @torch.no_grad()
    def load_trainable_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """The inverse of `trainable_state_dict`, on every rank; the AdamW moments start afresh
        (its one caller here is a rollback, which clears them: train/runner.py)."""
        self._lead("load_trainable_state_dict", state_dict)
        self._check_keys(state_dict)
        if self.config.lora:  # peft's format -> the model's names
            state_dict = {_adapter_name(key): value for key, value in state_dict.items()}
        set_model_state_dict(self.model, state_dict, options=StateDictOptions(full_state_dict=True,
                                                                              strict=not self.config.lora))
        self.optimizer.state.clear()

    @torch.no_grad()
    def load_checkpoint_files(self, saved: checkpoint.Checkpoint) -> None:
        """A one-process checkpoint: every rank reads it and keeps its shards of the weights and of
        the AdamW state, whose per-index entries are renamed to the parameters' names."""
        self._lead("load_checkpoint_files", saved)
        weights = saved.weights()
        self._check_keys(weights)
        if self.config.lora:
            weights = {_adapter_name(key): value for key, value in weights.items()}
        full = StateDictOptions(full_state_dict=True, strict=not self.config.lora)
        set_model_state_dict(self.model, weights, options=full)
        plain = saved.optimizer_state()
        names = [name for name, p in self.model.named_parameters() if p.requires_grad]  # the optimizer's order
        by_name = {"state": {names[i]: state for i, state in plain["state"].items()},
                   "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                                    for group in plain["param_groups"]]}
        set_optimizer_state_dict(self.model, self.optimizer, by_name, options=full)

    def anchor_reference(self) -> None:
        self._lead("anchor_reference")
        super().anchor_reference()

    def save_sharded(self, directory: Path) -> None:
        self._lead("save_sharded", directory)
        super().save_sharded(directory)

    def load_sharded(self, directory: Path) -> None:
        self._lead("load_sharded", directory)
        super().load_sharded(directory)

    def _gathered(self, *, trainable_only: bool) -> dict[str, Tensor]:
        """Every rank's shards as full CPU tensors, on rank 0 ({} elsewhere): a collective."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
        return get_model_state_dict(self.model, options=options)

    def _gathered_policy(self) -> dict[str, Tensor]:
        full = self._gathered(trainable_only=False)
        if self.rank != 0:
            return {}
        names = [name for name, _ in self.model.named_parameters()]  # a tied output layer once, as in one process
        if not self.config.lora:
            return {name: full[name] for name in names}
        merged = {}
        for name in names:
            if is_lora_parameter(name):
                continue
            value = full[name]
            if name.endswith(".base_layer.weight"):
                module = name[: -len(".base_layer.weight")]
                a, b = full[f"{module}.lora_A.{ADAPTER}.weight"], full[f"{module}.lora_B.{ADAPTER}.weight"]
                value = value.float() + (b.float() @ a.float()) * self._scalings[module]
            merged[name.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")] = value
        return merged

    def _gathered_adapter(self) -> dict[str, Tensor]:
        """The adapter in peft's format (get_peft_model_state_dict's names), on rank 0."""
        full = self._gathered(trainable_only=True)
        return {key.replace(f".{ADAPTER}.", "."): value for key, value in full.items()}

    @property
    def _scalings(self) -> dict[str, float]:
        from peft.tuners.lora import LoraLayer  # LoRA only (see trainer.py)

        return {name: module.scaling[ADAPTER] for name, module in self.model.named_modules()
                if isinstance(module, LoraLayer) and ADAPTER in module.lora_A}


def _adapter_name(peft_key: str) -> str:
    """peft's saved name of an adapter weight -> the model's parameter name (the adapter named)."""
    head, _, tail = peft_key.rpartition(".")
    return f"{head}.{ADAPTER}.{tail}"


def _decoder_layers(base: torch.nn.Module) -> list[torch.nn.Module]:
    """The units FSDP2 gathers one at a time: the transformer blocks (transformers'
    `_no_split_modules` names their classes); the embedding and output layer stay in the root."""
    names = set(base._no_split_modules or ())
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(base).__name__} names no transformer block class (_no_split_modules); FSDP2 "
                         "would gather the whole model at once: use --nproc 1 for this architecture")
    return layers
