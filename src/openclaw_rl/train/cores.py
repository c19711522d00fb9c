"""How serving and an in-process trainer share the machine's cores and the interpreter.

Thread budget: torch thread pools are per OS thread, and two pools of 2 threads on 2
cores slow each other 5-10x. With training in-process, serving and training get one
thread each unless told otherwise (compose.build_stack decides); serving borrows the
trainer's between its steps (`trainer_core_lender`), and the trainer borrows serving's
once no engine has had work for `LEND_AFTER_IDLE_S` (`idle_core_lender`).

The interpreter is shared too: a model thread takes the GIL back after every torch op,
and with Python's default 5 ms switch interval it waits behind any thread that runs
Python (HTTP streams, the judge, simulated users) up to 5 ms each time. Measured here:
one training step of the default model, 2.9 s alone, took 16.3 s beside one busy Python
thread and 4.9 s with a 0.5 ms interval. So every process with a model thread in it
switches every `SWITCH_INTERVAL_S` (`share_the_interpreter`).

Lending is a CPU matter: off the CPU (CUDA) the model's work is on the device and a torch
thread budget only changes the host's small ops, so both lenders are off there (None), and
each side keeps torch's default.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch

from openclaw_rl.engine.base import Engine
from openclaw_rl.train.trainer import Trainer

LEND_AFTER_IDLE_S = 5.0  # serving's core goes to training after this long without a request
SWITCH_INTERVAL_S = 0.0005


def share_the_interpreter() -> None:
    """Let model threads take the GIL back quickly (see the module docstring)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)


def idle_core_lender(engines: Sequence[Engine | None], quiet_s: float = LEND_AFTER_IDLE_S, *,
                     device: torch.device | str = "cpu") -> Callable[[], int] | None:
    """The in-process trainer's threads for its next micro-batch: serving's core too once no
    engine of the process has had work for `quiet_s` (one that cannot tell is never idle), so
    the core is lent when traffic stops, not in the gaps between one user's turns. A request
    that arrives meanwhile shares a core with training for at most one micro-batch.
    None: the trainer's `device` is not the CPU (module docstring)."""
    if torch.device(device).type != "cpu":
        return None
    engines = [e for e in engines if e is not None]

    def threads() -> int:
        idle = [getattr(e, "idle_s", None) for e in engines]
        return 2 if all(s is not None and s >= quiet_s for s in idle) else 1

    return threads


def trainer_core_lender(trainer: Trainer, engine: Engine) -> Callable[[], int] | None:
    """Serving's threads for its next step: the trainer's core too while it is not in a step
    (its gate checks and writes run at a lower priority, train/runner.py). A step that starts
    meanwhile shares a core with decoding for at most one decode step. None: the engine
    cannot take it (no `threads_now`), or the trainer is not on the CPU (module docstring).
    Asked only where `compose.build_stack` lends cores (2 or more)."""
    if not hasattr(engine, "threads_now") or torch.device(trainer.device).type != "cpu":
        return None
    return lambda: 1 if trainer.stepping else 2
