"""The composition root (compose.py): every deployment's parts come from one builder."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import torch

from openclaw_rl.compose import StackSpec, build_stack
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.judge.worker import Reading
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.train.runner import Flush
from openclaw_rl.train.weights import EngineChannel

SRC = Path(__file__).resolve().parent.parent / "src" / "openclaw_rl"


def _callers(pattern: str, definition: str) -> set[str]:
    """The modules of src/ that call `pattern` (a line defining it aside)."""
    found = set()
    for path in SRC.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if pattern in line and not re.match(rf"\s*{definition}", line):
                found.add(str(path.relative_to(SRC)))
    return found


def test_judge_workers_publishers_and_trainer_loops_are_built_in_the_composition_root_only():
    assert _callers("JudgeWorker(", "class JudgeWorker") == {"compose.py"}
    assert _callers("Publisher.for_trainer(", "def for_trainer") == {"compose.py"}
    assert _callers("run_trainer(", "async def run_trainer") == {"compose.py"}
    # one way to open a store (with --log-text and --redact): compose.open_store
    assert _callers("make_store(", "def make_store") - {"store/__init__.py"} == {"compose.py"}
    assert not {m for m in _callers("Store(", "class Store") if not m.startswith("store/")}


def test_the_gate_is_refused_with_a_sharded_trainer_in_one_place():
    said = [p for p in SRC.rglob("*.py") if "--gate on is not supported" in p.read_text(encoding="utf-8")]
    assert [str(p.relative_to(SRC)) for p in said] == ["train/sharded.py"]


class _Approves:
    name = "approves"

    async def read(self, turn) -> Reading:
        return Reading(votes=[1], raw=["SCORE: 1"], hints=[])


def test_a_verdicts_only_stack_judges_trains_in_process_and_writes_no_samples(tiny_model_dir, tmp_path):
    """The agent driver's mode: the judge writes verdicts (the PRM votes it reads), never samples,
    and the in-process trainer's versions go to the serving engine; `flush` reaches the trainer."""
    port, flush = free_port(), Flush()
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), port=port, status_interval_s=0.0,
                        train=True)
    stack = build_stack(serve, JudgeConfig(poll_interval_s=0.1),
                        TrainConfig(method="stepwise", batch_size=1, gate="off", train_poll_interval_s=0.1),
                        StackSpec(judge=_Approves(), write_samples=False, flush=flush))
    server = stack.server
    assert stack.training == "in_process" and stack.judge.name == "approves" and stack.trainer is not None
    assert isinstance(stack.publisher.channels[0], EngineChannel)
    assert stack.publisher.channels[0].engine is server.engine
    thread = ServerThread(stack.app(), port)
    try:
        messages = [{"role": "user", "content": "What is 2 + 2?"}]
        first = httpx.post(f"{thread.base_url}/v1/chat/completions", timeout=120,
                           json={"messages": messages, "max_tokens": 4, "temperature": 1.0})
        assert first.status_code == 200, first.text
        messages += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "Thanks, that's right!"}]  # the first turn's next state
        second = httpx.post(f"{thread.base_url}/v1/chat/completions", timeout=120,
                            json={"messages": messages, "max_tokens": 4, "temperature": 1.0})
        assert second.status_code == 200, second.text
        turn = server.store.turns(first.headers["x-session-id"])[0]
        deadline = time.monotonic() + 60
        while turn.id not in server.store.verdicts([turn.id]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.store.verdicts([turn.id])[turn.id].votes == [1]
        flush.requested.set()
        assert server.wait_for(flush.done, 60)  # the trainer drained: nothing was there to train
        assert sum(server.store.sample_counts().values()) == 0
    finally:
        thread.stop()


def test_the_ray_trainer_keeps_the_log_text_and_redact_settings(tiny_model_dir, tmp_path):
    from openclaw_rl.cluster.actors import TrainerActor

    threads = torch.get_num_threads()
    try:
        actor = TrainerActor(ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), log_text="off",
                                         redact="email"), TrainConfig(gate="off"))
    finally:
        torch.set_num_threads(threads)  # the actor keeps torch to one thread, as it should in its own process
    try:
        assert (actor.store.log_text, actor.store.redact_kinds) == ("off", ("email",))
    finally:
        actor.store.close()
