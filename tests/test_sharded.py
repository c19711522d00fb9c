"""Sharded training (train/sharded.py): FSDP2 on 2 gloo ranks against the one-process trainer.

Two ranks (torch.multiprocessing, one torch thread each) train the tiny Llama for a few
steps, full fine-tuning and LoRA (and top-k distillation with a KL reference), on batches of 3 micro-batches (so one rank runs a
padding micro-batch), publish, and write a sharded checkpoint. The one-process trainer
trains the same samples from the same start; losses, published weights and the LoRA
adapter agree within TOLERANCE (float summation order differs: gradients are reduced
across ranks). The sharded checkpoint then resumes in one process, with its AdamW state:
the next step matches the one-process trainer's next step.
"""

from __future__ import annotations

import faulthandler
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from openclaw_rl.config import TrainConfig
from openclaw_rl.store import make_store
from openclaw_rl.train import checkpoint
from openclaw_rl.train.sharded import ShardedTrainer, end_rank, init_from_env
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.train.weights import FilesChannel
from test_trainer import TEST_LR, make_samples, one_thread, tiny_llama  # noqa: F401 (fixtures used by name)

STEPS = 3
WORLD = 2
# measured here: losses equal, grad norms within 1.2e-7 relative, published weights within 1.2e-7 (full) and
# 0 (LoRA); the tolerance leaves 100x for other CPUs and BLAS builds, and stays 300x under how far the weights move
TOLERANCE = {"loss_rel": 1e-4, "weight_abs": 1e-5}
# kind -> (lora, method, kl_beta): combined full and LoRA; top-k distillation with the KL penalty, whose
# reference copy is sharded too
KINDS = {"full": (False, "combined", 0.0), "lora": (True, "combined", 0.0), "topk-kl": (False, "topk", 0.1)}


def config(kind: str) -> TrainConfig:
    lora, method, kl_beta = KINDS[kind]
    return TrainConfig(method=method, lora=lora, lr=TEST_LR[lora], micro_batch_size=2, kl_beta=kl_beta)


def _rank(rank: int, port: int, model_dir: Path, out: Path, samples, plain: Path) -> None:
    log = os.open(out / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # what a crash says, for the fixture
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()  # a fatal signal (SIGABRT, SIGSEGV) writes each thread's Python stack there too
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    init_from_env()
    try:
        for kind, (lora, _, _) in KINDS.items():
            torch.manual_seed(0)  # the same LoRA A matrices as the one-process trainer's
            trainer = ShardedTrainer(model_dir, config(kind))
            if rank != 0:
                trainer.follow()
                continue
            try:
                stats = [trainer.step(samples) for _ in range(STEPS)]
                result = {"stats": stats, "policy": trainer.policy_state_dict(),
                          "adapter": trainer.lora_adapter().state_dict if lora else None,
                          "trainable": trainer.trainable_state_dict(),
                          "checkpoint": str(checkpoint.save(out / kind, trainer))}
                torch.save(result, out / f"{kind}.pt")
            finally:
                trainer.stop_followers()
        trainer = ShardedTrainer(model_dir, config("full"))  # a one-process checkpoint, resumed on 2 ranks
        if rank != 0:
            trainer.follow()
            end_rank(0)
        try:
            checkpoint.restore(trainer, checkpoint.load_latest(plain))
            result = {"stats": trainer.step(samples), "policy": trainer.policy_state_dict()}
            for group in trainer.optimizer.param_groups:  # as the runner does while settled: the ranks follow
                group["lr"] = 0.0
            trainer.step(samples)
            result["after_lr_0"] = trainer.policy_state_dict()
            torch.save(result, out / "from-plain.pt")
        finally:
            trainer.stop_followers()
    except BaseException:
        dist.destroy_process_group()
        raise
    end_rank(0)  # as `openclaw-rl train --nproc` ends its ranks: past a teardown that can abort (seen on CI)


def _log_tail(path: Path, lines: int = 40) -> str:
    """The end of a rank's output, without progress bars: what it said before it died."""
    text = path.read_text(errors="replace") if path.exists() else ""
    kept = [line for line in re.split(r"[\r\n]+", text) if line.strip() and "it/s]" not in line]
    return f"--- {path.name}, last {lines} lines ---\n" + "\n".join(kept[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sharded_run(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded")
    samples = make_samples(tiny_llama)
    plain, _ = one_process(tiny_llama, "full", samples)
    checkpoint.save(out / "plain", plain)
    started = time.monotonic()
    try:
        mp.spawn(_rank, args=(_free_port(), tiny_llama, out, samples, out / "plain"), nprocs=WORLD, join=True)
    except mp.ProcessExitedException as error:  # the dead rank's last words first: CI's summary shows one line
        tails = [_log_tail(out / f"rank{r}.log") for r in range(WORLD)]
        said = tails[error.error_index].split("\nFatal Python error")[0].splitlines()[-1]
        raise AssertionError(f"{error}, having said: {said}\n" + "\n".join(tails)) from error
    seconds = time.monotonic() - started
    assert seconds < 90, f"the 2-rank run took {seconds:.0f} s"
    return out, samples


def one_process(model_dir: Path, kind: str, samples, steps: int = STEPS) -> tuple[Trainer, list[dict]]:
    torch.manual_seed(0)
    trainer = Trainer(model_dir, config(kind), device="cpu")
    return trainer, [trainer.step(samples) for _ in range(steps)]


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.parametrize("kind", KINDS)
def test_two_ranks_match_one_process(sharded_run, tiny_llama, kind) -> None:
    out, samples = sharded_run
    result = torch.load(out / f"{kind}.pt", weights_only=False)
    trainer, stats = one_process(tiny_llama, kind, samples)
    for sharded, single in zip(result["stats"], stats):
        assert sorted(sharded) == sorted(single)
        for key in ("loss", "pg_loss", "topk_kl", "ref_kl", "kl", "clip_fraction", "trained_samples", "tokens"):
            if key in single:
                assert sharded[key] == pytest.approx(single[key], rel=TOLERANCE["loss_rel"], abs=1e-7), key
        assert sharded["grad_norm"] == pytest.approx(single["grad_norm"], rel=TOLERANCE["loss_rel"])
    assert result["stats"][-1]["loss"] != result["stats"][0]["loss"]  # it trained
    assert (result["stats"][-1]["policy_version"], result["stats"][-1]["train_step"]) == (STEPS, STEPS)
    initial = Trainer(tiny_llama, config("full"), device="cpu").policy_state_dict()
    moved = max_diff(result["policy"], initial)
    assert moved > 100 * TOLERANCE["weight_abs"]  # the weights moved far more than the tolerance
    assert max_diff(result["policy"], trainer.policy_state_dict()) < TOLERANCE["weight_abs"]
    assert max_diff(result["trainable"], trainer.trainable_state_dict()) < TOLERANCE["weight_abs"]
    if KINDS[kind][0]:
        assert max_diff(result["adapter"], trainer.lora_adapter().state_dict) < TOLERANCE["weight_abs"]


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_a_sharded_checkpoint_resumes_in_one_process(sharded_run, tiny_llama, kind, tmp_path) -> None:
    out, samples = sharded_run
    result = torch.load(out / f"{kind}.pt", weights_only=False)
    saved = checkpoint.load_latest(out / kind)
    assert saved is not None and saved.sharded and saved.state["world_size"] == WORLD
    assert not (saved.path / checkpoint.WEIGHTS_FILE).exists() and (saved.path / checkpoint.DCP_DIR).is_dir()
    torch.manual_seed(1)  # other LoRA A matrices: the checkpoint must replace them
    resumed = Trainer(tiny_llama, config(kind), device="cpu")
    checkpoint.restore(resumed, saved)
    assert (resumed.train_step, resumed.policy_version) == (STEPS, STEPS)
    assert max_diff(resumed.trainable_state_dict(), result["trainable"]) == 0.0  # the shards, put back together
    reference, _ = one_process(tiny_llama, kind, samples)
    after, expected = resumed.step(samples), reference.step(samples)  # the AdamW moments came back too
    assert after["loss"] == pytest.approx(expected["loss"], rel=TOLERANCE["loss_rel"])
    assert max_diff(resumed.policy_state_dict(), reference.policy_state_dict()) < TOLERANCE["weight_abs"]
    exported = checkpoint.export(out / kind, tmp_path / "export", model_dir=tiny_llama)
    assert (exported / "config.json").is_file()


def test_a_one_process_checkpoint_resumes_on_two_ranks(sharded_run, tiny_llama) -> None:
    out, samples = sharded_run
    result = torch.load(out / "from-plain.pt", weights_only=False)
    reference, stats = one_process(tiny_llama, "full", samples, steps=STEPS + 1)  # AdamW's moments matter here
    assert (result["stats"]["train_step"], result["stats"]["policy_version"]) == (STEPS + 1, STEPS + 1)
    assert result["stats"]["loss"] == pytest.approx(stats[-1]["loss"], rel=TOLERANCE["loss_rel"])
    assert max_diff(result["policy"], reference.policy_state_dict()) < TOLERANCE["weight_abs"]
    assert max_diff(result["after_lr_0"], result["policy"]) == 0.0  # rank 0's learning rate reached every shard


def test_train_nproc_2_learns_from_the_store_and_resumes_on_one_rank(tiny_llama, tmp_path) -> None:
    """`openclaw-rl train --nproc 2`: torchrun, rank 0 claiming from the store, full weights published
    to the files channel, a sharded checkpoint; then `train --resume` in one process goes on from it."""
    from test_checkpoint import _ready_samples

    store = make_store("", data_dir=tmp_path)
    _ready_samples(store, tiny_llama, 12)
    store.close()
    command = [sys.executable, "-m", "openclaw_rl.cli", "train", "--data-dir", str(tmp_path), "--model",
               str(tiny_llama), "--batch-size", "4", "--catch-up", "1", "--micro-batch-size", "2", "--lr", "0.001",
               "--max-staleness", "100", "--train-threads", "1", "--train-poll-interval-s", "0.05", "--gate", "off"]
    proc = subprocess.run([*command, "--nproc", "2", "--max-steps", "2"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "trained 2 steps"  # rank 0's line alone
    channel = FilesChannel(tmp_path)
    assert channel.latest_version() == 2 and channel.parent_version(2) == 1
    saved = checkpoint.load_latest(tmp_path)
    assert saved is not None and saved.sharded and (saved.train_step, saved.state["world_size"]) == (2, 2)
    proc = subprocess.run([*command, "--max-steps", "3", "--resume"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "trained 3 steps"
    assert channel.latest_version() == 3 and channel.parent_version(3) == 2
    resumed = checkpoint.load_latest(tmp_path)
    assert not resumed.sharded and resumed.train_step == 3  # one process writes its own format again


def test_serve_train_nproc_2_trains_beside_serving_and_stops_with_it(tiny_model_dir, tmp_path) -> None:
    """`serve --train-nproc 2`: the sharded trainer is a child of serving; its versions reach the
    engine through the data dir while requests keep succeeding, and it stops when serving does."""
    import httpx
    from conftest import LiveServer
    from test_checkpoint import _ready_samples

    store = make_store("", data_dir=tmp_path)
    _ready_samples(store, tiny_model_dir, 4)
    store.close()
    train = TrainConfig(batch_size=2, catch_up=1, micro_batch_size=1, lr=1e-3, max_staleness=100, train_poll_interval_s=0.05)
    server = LiveServer(tiny_model_dir, tmp_path, train=train, train_nproc=2)
    statuses = []
    try:
        deadline = time.monotonic() + 240
        while server.server.engine.policy_version < 2 and time.monotonic() < deadline:
            r = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=60,
                           json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            statuses.append(r.status_code)
            time.sleep(0.5)
        assert server.server.engine.policy_version == 2, (tmp_path / "trainer.log").read_text()[-3000:]
    finally:
        server.stop()
    assert statuses and set(statuses) == {200}
    assert _processes_naming(tmp_path) == []  # torchrun and both ranks are gone
    saved = checkpoint.load_latest(tmp_path)  # the stop let rank 0 finish with a final checkpoint
    assert saved is not None and saved.sharded and saved.train_step >= 2


def _processes_naming(path: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"train" in words and str(path).encode() in words:
            found.append(b" ".join(words).decode(errors="replace"))
    return found


def test_the_gate_and_a_sharded_trainer_are_refused_together_with_the_fix(tiny_model_dir, tmp_path,
                                                                          monkeypatch) -> None:
    from openclaw_rl.processes import train_process, trainer_process
    from openclaw_rl.config import ConfigError, ServeConfig

    monkeypatch.setenv("WORLD_SIZE", "2")  # a rank under torchrun: refused before it joins the group
    with pytest.raises(ConfigError, match="--gate on is not supported with --nproc > 1.*--gate off"):
        train_process(str(tmp_path), str(tiny_model_dir), TrainConfig(gate="on"), resume=False)
    with pytest.raises(ConfigError, match="--gate on is not supported with --train-nproc > 1"):
        trainer_process(ServeConfig(data_dir=str(tmp_path), train_nproc=2), TrainConfig(gate="on"), tiny_model_dir)
