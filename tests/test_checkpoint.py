"""Checkpoints survive kills and resume exactly; exports load in transformers; the weights channel."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from openclaw_rl.config import TrainConfig
from openclaw_rl.engine.loading import cache_dir
from openclaw_rl.store import make_store
from openclaw_rl.engine.weight_files import FULL_FILE
from openclaw_rl.train import checkpoint
from openclaw_rl.train.weights import FilesChannel
from openclaw_rl.train.batch import collate
from openclaw_rl.train.trainer import Trainer
from openclaw_rl.types import TurnRecord
from test_trainer import (  # noqa: F401 (fixtures used by name)
    TEST_LR, build_tiny_llama, make_samples, one_thread, served_logprobs, tiny_llama,
)

CACHED_TOKENIZER = cache_dir() / "test-models" / "tiny-llama-v1"


def trained(model_dir: Path, lora: bool, steps: int = 2) -> Trainer:
    trainer = Trainer(model_dir, TrainConfig(method="combined", lora=lora, lr=TEST_LR[lora]), device="cpu")
    samples = make_samples(model_dir)
    for _ in range(steps):
        trainer.step(samples)
    return trainer


def same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- round trip -------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_restored_trainer_continues_exactly_like_the_original(tiny_llama, tmp_path, lora) -> None:
    original = trained(tiny_llama, lora)
    path = checkpoint.save(tmp_path, original)
    assert path.name == "step-000002"
    assert (path / ("adapter/adapter_model.safetensors" if lora else "model.safetensors")).is_file()

    saved = checkpoint.load_latest(tmp_path)
    assert (saved.path, saved.train_step, saved.policy_version, saved.lora) == (path, 2, 2, lora)
    resumed = Trainer(tiny_llama, TrainConfig(method="combined", lora=lora, lr=TEST_LR[lora]), device="cpu")
    checkpoint.restore(resumed, saved)
    assert (resumed.train_step, resumed.policy_version) == (2, 2)
    assert same_tensors(resumed.policy_state_dict(), original.policy_state_dict())

    samples = make_samples(tiny_llama)
    original.step(samples)
    resumed.step(samples)  # equal only if the AdamW moments and step count came back too
    torch.testing.assert_close(resumed.policy_state_dict(), original.policy_state_dict(), atol=1e-7, rtol=0)


def test_restore_refuses_a_checkpoint_of_the_other_kind(tiny_llama, tmp_path) -> None:
    checkpoint.save(tmp_path, trained(tiny_llama, lora=False, steps=1))
    lora_trainer = Trainer(tiny_llama, TrainConfig(lora=True), device="cpu")
    with pytest.raises(ValueError, match="lora=False but the config has lora=True"):
        checkpoint.restore(lora_trainer, checkpoint.load_latest(tmp_path))


# -- interrupted writes -----------------------------------------------------------------

KILLED_SAVER = textwrap.dedent("""
    import sys, torch
    torch.set_num_threads(1)
    from openclaw_rl.config import TrainConfig
    from openclaw_rl.train import checkpoint
    from openclaw_rl.train.trainer import Trainer

    model_dir, data_dir, lora = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    trainer = Trainer(model_dir, TrainConfig(lora=lora), device="cpu")
    for p in trainer.trainable:
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()  # an optimizer state worth saving
    while True:  # saves back to back, so a kill almost always lands mid-save
        trainer.train_step += 1
        trainer.policy_version += 1
        checkpoint.save(data_dir, trainer, keep=2)
        print(trainer.train_step, flush=True)
""")


def test_sigkill_mid_save_never_corrupts_the_last_good_checkpoint(tiny_llama, tmp_path) -> None:
    script, data = tmp_path / "saver.py", tmp_path / "data"
    script.write_text(KILLED_SAVER)
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_llama), str(data), "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3):  # a few complete saves first
            if not proc.stdout.readline():
                raise AssertionError(f"the saver died: {proc.stderr.read()}")
        time.sleep(random.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()

    saved = checkpoint.load_latest(data)
    assert saved is not None and saved.train_step >= 3
    assert saved.path.name == f"step-{saved.train_step:06d}"
    resumed = Trainer(tiny_llama, TrainConfig(), device="cpu")
    checkpoint.restore(resumed, saved)  # every file is there and loads
    assert resumed.policy_version == saved.train_step
    assert resumed.optimizer.state_dict()["state"]  # the moments came back
    resumed.train_step += 1
    checkpoint.save(data, resumed)  # and the next save clears whatever the kill left behind
    assert not list((data / "checkpoints").glob(".tmp-*"))


def test_a_save_that_fails_midway_leaves_the_previous_checkpoint_latest(tiny_llama, tmp_path, monkeypatch) -> None:
    trainer = trained(tiny_llama, lora=False, steps=1)
    first = checkpoint.save(tmp_path, trainer)
    trainer.step(make_samples(tiny_llama))

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        checkpoint.save(tmp_path, trainer)

    assert checkpoint.load_latest(tmp_path).path == first
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-000001"]


def test_load_latest_falls_back_to_the_newest_complete_checkpoint(tiny_llama, tmp_path) -> None:
    assert checkpoint.load_latest(tmp_path) is None
    trainer = trained(tiny_llama, lora=False, steps=1)
    checkpoint.save(tmp_path, trainer)
    trainer.train_step = 2
    checkpoint.save(tmp_path, trainer)
    root = tmp_path / "checkpoints"
    (root / "step-000003").mkdir()  # a directory without its files is not a checkpoint
    (root / "latest").write_text("step-000003\n")
    assert checkpoint.load_latest(tmp_path).train_step == 2
    (root / "latest").unlink()
    (root / "step-000002" / "optimizer.pt").unlink()
    assert checkpoint.load_latest(tmp_path).train_step == 1


def test_old_checkpoints_are_pruned_but_latest_is_kept(tiny_llama, tmp_path) -> None:
    trainer = Trainer(tiny_llama, TrainConfig(), device="cpu")
    for step in range(1, 6):
        trainer.train_step = step
        checkpoint.save(tmp_path, trainer, keep=3)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["latest", "step-000003", "step-000004", "step-000005"]
    assert checkpoint.load_latest(tmp_path).train_step == 5


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_disk_estimate_covers_what_the_checkpoints_and_versions_write(tiny_llama, tmp_path, lora,
                                                                          caplog) -> None:
    from openclaw_rl.compose import warn_if_short_of_disk
    from openclaw_rl.train.versions import VersionArchive

    trainer = trained(tiny_llama, lora, steps=1)
    archive = VersionArchive(tmp_path, keep=2)
    for step in range(1, checkpoint.KEEP + 2):  # more than kept of each
        trainer.train_step = trainer.policy_version = step
        checkpoint.save(tmp_path, trainer)
        archive.write(step, trainer, parent=step - 1)
    written = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    estimate = checkpoint.disk_needed(trainer, keep_versions=2)
    assert written <= estimate <= 1.5 * written  # the 3 protected versions it also counts are not here

    assert not warn_if_short_of_disk(tmp_path, estimate)  # this disk has room for the tiny model
    assert warn_if_short_of_disk(tmp_path, 10**18)  # an exabyte: said, with both numbers, at start
    message = caplog.records[-1].getMessage()
    assert caplog.records[-1].levelname == "WARNING" and "GB free" in message and "1000000000.0 GB" in message


# -- export -----------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_export_writes_a_model_directory_transformers_loads(tmp_path, lora) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = build_tiny_llama(tmp_path / "base")
    with_tokenizer = CACHED_TOKENIZER.is_dir()
    if with_tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (CACHED_TOKENIZER / name).is_file():
                shutil.copy(CACHED_TOKENIZER / name, base / name)
    trainer = trained(base, lora)
    checkpoint.save(tmp_path / "data", trainer)

    out = checkpoint.export(tmp_path / "data", tmp_path / "export")

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any("lora" in name for name, _ in model.named_parameters())
    samples = make_samples(base)
    batch = collate(samples)
    with torch.no_grad():
        expected, _ = trainer.logprobs(batch)
    exported = served_logprobs(model, samples)
    torch.testing.assert_close(exported, expected[batch["loss_mask"]], atol=1e-5, rtol=0)
    if with_tokenizer:
        assert AutoTokenizer.from_pretrained(out)("hello").input_ids
    with pytest.raises(FileExistsError, match="not empty"):
        checkpoint.export(tmp_path / "data", out)


def test_export_without_a_checkpoint_says_so(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.export(tmp_path, tmp_path / "out")


# -- policy versions across crashes ---------------------------------------------------------


def _ready_samples(store, model_dir: Path, count: int) -> None:
    store.ensure_session("s", "header")
    turn_ids = [
        store.record_turn(TurnRecord(
            session_id="s", kind="main", policy_version=0, prompt_messages=[], prompt_token_ids=[1],
            response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="", tool_calls=[], sampling={},
            finish_reason="stop")).id
        for _ in range(count)
    ]
    for sample in make_samples(model_dir, [(1.0, True), (-1.0, False)] * (count // 2), turn_ids=turn_ids):
        store.add_sample(sample)


def test_a_resume_after_a_crash_between_checkpoints_keeps_the_published_versions(tiny_llama, store_url, tmp_path,
                                                                                 monkeypatch) -> None:
    """Checkpoint at step 3, a SIGKILL after step 5: v5 was published, so training goes on from
    v5 as v5. Only weights that are lost (v7 below, gone from every copy) give the ones held a
    new number: no number ever names two sets of weights."""
    import hashlib

    from openclaw_rl.processes import train_process

    store = make_store(store_url, data_dir=tmp_path)
    _ready_samples(store, tiny_llama, 14)
    store.close()
    published: list[tuple[int, int | None, str]] = []  # (version, parent, content hash) of every publish
    write = FilesChannel.write

    def recording(channel, version, state_dict, parent=None):
        stored = write(channel, version, state_dict, parent)
        published.append((version, parent, hashlib.sha256((stored.path / FULL_FILE).read_bytes()).hexdigest()))
        return stored

    monkeypatch.setattr(FilesChannel, "write", recording)
    config = TrainConfig(method="combined", batch_size=2, catch_up=1, lr=1e-3, checkpoint_every=3, max_staleness=100,
                         train_poll_interval_s=0.05, train_threads=1, gate="off")
    root = str(tmp_path)
    assert train_process(root, str(tiny_llama), config, resume=False, max_steps=5, store_url=store_url) == 5
    shutil.rmtree(checkpoint.checkpoints_dir(tmp_path) / "step-000005")  # the kill came before this save
    assert checkpoint.load_latest(tmp_path).policy_version == 3
    channel = FilesChannel(tmp_path)
    v5 = channel.read(5)

    assert train_process(root, str(tiny_llama), config, resume=True, max_steps=7, store_url=store_url) == 7
    assert [version for version, _, _ in published] == [1, 2, 3, 4, 5, 6, 7]  # v5 is not published again
    assert [parent for _, parent, _ in published] == [0, 1, 2, 3, 4, 5, 6]  # v6 was trained from v5
    assert same_tensors(channel.read(5), v5)

    # v7's weights lost from every copy (checkpoint, archive, files channel), v7 served all the same
    shutil.rmtree(checkpoint.checkpoints_dir(tmp_path) / "step-000007")
    shutil.rmtree(tmp_path / "versions" / "v000007")
    shutil.rmtree(tmp_path / "weights" / "v000007")
    (tmp_path / "weights" / "LATEST").write_text("6\n")
    assert train_process(root, str(tiny_llama), config, resume=True, max_steps=7, store_url=store_url) == 7
    assert [version for version, _, _ in published] == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # v6's weights are v8 now
    assert [parent for _, parent, _ in published][7:] == [6, 8]  # and step 7's samples trained again, into v9
    restored = checkpoint.Checkpoint(checkpoint.checkpoints_dir(tmp_path) / "step-000006", {"lora": False})
    assert same_tensors(channel.read(8), restored.weights())
    reader = make_store(store_url, data_dir=tmp_path)
    try:
        assert reader.policy() | {"last_update_at": None} == {"policy_version": 9, "train_steps": 7,
                                                               "last_update_at": None}
        assert reader.sample_counts("combined")["used"] == 14
    finally:
        reader.close()


class _Serving:
    """What serving does with EngineChannel's deliveries: holds the weights and number (v0 at each start)."""

    loads_lora_adapters = False

    def __init__(self) -> None:
        self.policy_version, self.weights = 0, None

    async def load_weights(self, weights, version: int) -> None:
        self.weights, self.policy_version = weights, version


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_hard_stop_before_the_first_checkpoint_keeps_the_accepted_weights_and_their_number(
        tiny_llama, store_url, tmp_path, lora) -> None:
    """Issue 36, finding 3: three accepted versions, then a stop in step 4 with no checkpoint yet
    (the default interval is 10 steps); the restart serves v3's weights as v3, not the base as v4."""
    import asyncio
    import contextlib
    import threading

    from openclaw_rl.compose import build_trainer_loop, load_trainer
    from openclaw_rl.train.weights import EngineChannel

    store = make_store(store_url, data_dir=tmp_path)
    _ready_samples(store, tiny_llama, 8)
    config = TrainConfig(method="combined", batch_size=2, catch_up=1, lora=lora, lr=TEST_LR[lora], max_staleness=100,
                         train_poll_interval_s=0.02, train_threads=1, gate="off")
    assert config.checkpoint_every > 4  # the default: no checkpoint before the stop

    trainer = load_trainer(tiny_llama, tmp_path, config, resume=False, store=store)
    in_step_4, killed = threading.Event(), threading.Event()
    step = trainer.step

    def step_until_killed(samples):
        if trainer.train_step == 3:  # step 4 claimed its samples; it never ends
            in_step_4.set()
            killed.wait(60)
            raise RuntimeError("SIGKILL")
        return step(samples)

    trainer.step = step_until_killed
    served = _Serving()
    loop = build_trainer_loop(store, trainer, config, [EngineChannel(served)])

    async def run_until_killed() -> None:
        task = asyncio.create_task(loop.run(asyncio.Event()))
        while not (in_step_4.is_set() and store.policy_version() == 3):
            await asyncio.sleep(0.02)
        task.cancel()  # the loop ends where it is: no final checkpoint, no further write
        killed.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(run_until_killed(), 120))
    assert served.policy_version == 3 and checkpoint.load_latest(tmp_path) is None
    v3 = served.weights
    method = trainer.method.name
    store.close()

    def restart() -> tuple[Trainer, _Serving, object]:
        opened = make_store(store_url, data_dir=tmp_path)
        resumed = load_trainer(tiny_llama, tmp_path, config, resume=True, store=opened)
        serving = _Serving()
        loop = build_trainer_loop(opened, resumed, config, [EngineChannel(serving)])
        asyncio.run(loop.catch_up())
        stop = asyncio.Event()
        stop.set()
        asyncio.run(loop.run(stop))  # starts (archiving its start if new) and stops without a step
        return resumed, serving, opened

    resumed, serving, store = restart()
    assert (serving.policy_version, resumed.policy_version, resumed.train_step) == (3, 3, 3)
    assert same_tensors(serving.weights, v3)  # the accepted weights, not the base
    assert (store.policy_version(), store.highest_policy_version()) == (3, 3)
    counts = store.sample_counts(method)
    assert (counts["used"], counts["ready"]) == (6, 2)  # step 4's claim, lost with it, is claimable again
    history = store.versions()
    store.close()

    resumed, serving, store = restart()  # again, without training: no new number
    assert (serving.policy_version, resumed.policy_version) == (3, 3) and same_tensors(serving.weights, v3)
    assert store.versions() == history and store.highest_policy_version() == 3

    stop = asyncio.Event()
    loop = build_trainer_loop(store, resumed, config, [EngineChannel(serving)], on_step=lambda stats: stop.set())
    asyncio.run(asyncio.wait_for(loop.run(stop), 120))  # training goes on from v3 with the released samples
    assert serving.policy_version == 4 and store.version(4)["parent"] == 3
    assert store.sample_counts(method)["used"] == 8
    store.close()


def test_a_resume_keeps_the_number_of_the_weights_held_above_versions_the_gate_rejected(tiny_llama, store) -> None:
    """v2 accepted (archived), v3 rejected (never served): the trainer resumes v2's weights as v2,
    and its next version is v4, since v3 names the rejected weights."""
    from openclaw_rl.compose import load_trainer
    from openclaw_rl.train.versions import VersionArchive

    trainer = trained(tiny_llama, lora=False, steps=2)
    VersionArchive(store.data_dir, keep=5).write(2, trainer, parent=1)
    store.record_version(2, parent=1, train_step=2, gate="accepted")
    store.set_policy_version(2, train_step=2)
    store.record_version(3, parent=2, train_step=3, gate="rejected", reason="worse on the probes")
    resumed = load_trainer(tiny_llama, store.data_dir, TrainConfig(method="combined", lr=TEST_LR[False]),
                           resume=True, store=store)
    assert (resumed.policy_version, resumed.parent_version, resumed.train_step) == (2, 1, 2)
    assert same_tensors(resumed.policy_state_dict(), trainer.policy_state_dict())
    assert not resumed.optimizer.state  # the moments of other weights are not taken: fresh, and said so
    resumed.step(make_samples(tiny_llama))
    assert (resumed.policy_version, resumed.parent_version) == (4, 2)


def test_a_trainer_without_a_checkpoint_numbers_its_weights_above_every_version_recorded(tiny_llama, store) -> None:
    from openclaw_rl.compose import load_trainer

    store.ensure_session("s", "header")
    store.record_turn(TurnRecord(
        session_id="s", kind="main", policy_version=9, prompt_messages=[], prompt_token_ids=[1],
        response_token_ids=[2], behaviour_logprobs=[-1.0], response_text="", tool_calls=[], sampling={},
        finish_reason="stop"))  # served by a v9 since lost
    store.set_policy_version(7, train_step=7)
    trainer = load_trainer(tiny_llama, store.data_dir, TrainConfig(), resume=True, store=store)
    assert (trainer.policy_version, trainer.parent_version, trainer.train_step) == (10, 0, 0)  # the base, renumbered
    assert store.policy_version() == 10  # reserved before anything serves it


def test_the_weights_channel_refuses_a_version_it_already_has(tmp_path) -> None:
    channel = FilesChannel(tmp_path)
    channel.write(3, {"w": torch.ones(2)})
    for version in (3, 2):
        with pytest.raises(ValueError, match="names one set of weights forever"):
            channel.write(version, {"w": torch.zeros(2)})
    assert same_tensors(channel.read(3), {"w": torch.ones(2)})
    (tmp_path / "weights" / "v000009.safetensors").write_bytes(b"")  # a version of the old layout counts too
    with pytest.raises(ValueError, match="not above v9"):
        channel.write(4, {"w": torch.zeros(2)})


# -- weights channel ----------------------------------------------------------------------


def test_weights_channel_publishes_atomically_and_keeps_the_last_three(tmp_path) -> None:
    channel = FilesChannel(tmp_path)
    assert channel.latest_version() is None
    published = {}
    for version in range(1, 6):
        published[version] = {"w": torch.full((2, 3), float(version)), "b": torch.arange(version)}
        channel.write(version, published[version])
        assert channel.latest_version() == version

    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["LATEST", "v000003", "v000004", "v000005"]
    assert sorted(p.name for p in (tmp_path / "weights" / "v000005").iterdir()) == [FULL_FILE]
    assert same_tensors(channel.read(5), published[5])
    assert same_tensors(channel.read(3), published[3])
    with pytest.raises(FileNotFoundError, match="versions on disk: \\[3, 4, 5\\]"):
        channel.read(2)


def test_weights_channel_ignores_and_clears_a_killed_publish(tmp_path) -> None:
    channel = FilesChannel(tmp_path)
    channel.write(1, {"w": torch.ones(2)})
    leftover = tmp_path / "weights" / ".v000002.tmp-999999"
    leftover.mkdir()
    (leftover / FULL_FILE).write_bytes(b"half a file")  # what a SIGKILL mid-write leaves
    assert channel.latest_version() == 1
    channel.write(2, {"w": torch.zeros(2)})
    assert not leftover.exists()
    assert same_tensors(channel.read(channel.latest_version()), {"w": torch.zeros(2)})


def test_published_policy_weights_load_into_the_base_model(tiny_llama, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    trainer = trained(tiny_llama, lora=True, steps=1)
    channel = FilesChannel(tmp_path)
    channel.write(trainer.policy_version, trainer.policy_state_dict())
    loaded = channel.read(channel.latest_version())
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    assert set(loaded) == {name for name, _ in model.named_parameters()}
    assert same_tensors(loaded, trainer.policy_state_dict())
