"""What the experience gate reads on real lessons: D for every version of a stored run that added or replaced one.

    python scripts/experience_gate_calibration.py DATA_DIR [DATA_DIR ...] [--model MODEL_DIR] [--turns 8]
        [--placement user] [--budget 256]

Each DATA_DIR is a store (a `serve` data dir, or a `simulate` run's RUN/METHOD/data) whose
users learned lessons. For every user and every version of their change log made by an
`added` or `replaced` change, the version before it and the version itself are rebuilt from
the log (`experience.replay`) and checked by the gate's own code (judge/experience_gate.py
`ExperienceGate.check`, on `--model`, default the bundled base model) twice:

- **then**: on the labelled turns the judge had when the version was made (turns before the
  change's turn), what the gate would have decided had it been on;
- **end**: on the user's latest labelled turns of the whole run (more turns, served later).

And once per user, their final block against no block at all ("whole"). Printed as a table:
the turns per side, each side's mean Δ (nats per token), D, the bootstrap p, the decision,
and "chance": the 5th percentile of D when the same turns' labels are shuffled (2000 times,
the sides' sizes kept), the D a block change that ignores what the user approved reaches
by chance on those turns.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import replace
from pathlib import Path

from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.experience import Experience, GateDecision, GatePolicy, gate_decision, replay, shift_statistic
from openclaw_rl.judge.experience_gate import GATED_KINDS, ExperienceGate
from openclaw_rl.store import Store


class AsOf:
    """A store's labelled turns as they were before turn `before_id` (None: all of them)."""

    def __init__(self, store: Store, before_id: int | None):
        self.store, self.before_id = store, before_id

    def labelled_turns(self, owner: str, reward: int, limit: int):
        found = self.store.labelled_turns(owner, reward, 10**6)
        return [t for t in found if self.before_id is None or t.id < self.before_id][:limit]


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:+.3f}"


def _row(run: str, owner: str, what: str, lessons: int, d: GateDecision, chance: float | None) -> str:
    return (f"| {run} | {owner} | {what} | {lessons} | {d.approved_turns} / {d.rejected_turns} | "
            f"{_num(d.approved_shift)} | {_num(d.rejected_shift)} | {_num(d.statistic)} | "
            f"{'' if d.p_value is None else f'{d.p_value:.3f}'} | {_num(chance)} | {d.outcome}: {d.reason[:50]} |")


def _chance(approved: list[float], rejected: list[float], policy: GatePolicy) -> float | None:
    """The 5th percentile of D over shuffles of the turns' labels (None: a side does not enter)."""
    use_a, use_r = policy.sides(len(approved), len(rejected))
    if not (use_a and use_r):
        return None
    rng, pooled, found = random.Random(0), approved + rejected, []
    for _ in range(2000):
        rng.shuffle(pooled)
        found.append(shift_statistic(pooled[:len(approved)], pooled[len(approved):]))
    return sorted(found)[len(found) // 20]


async def _check(gate: ExperienceGate, before: Experience, after: Experience, policy: GatePolicy
                 ) -> tuple[GateDecision, float | None]:
    """What `gate.check` decides, and the label-shuffled D's 5th percentile on the same turns."""
    old, new = gate.block(before), gate.block(after)
    approved, rejected = gate.labelled(after.owner)
    if old == new or not policy.enough(len(approved), len(rejected)):
        return await gate.check(before, after), None
    shifts, _ = await gate.shifts(after.owner, [*approved, *rejected], old, new)
    a, r = shifts[:len(approved)], shifts[len(approved):]
    return gate_decision(a, r, after.version, policy), _chance(a, r, policy)


async def measure(engine: LocalEngine, data: Path, args: argparse.Namespace) -> None:
    store = Store(data)
    policy = replace(GatePolicy(), turns_per_side=args.turns)
    try:
        for owner in store.experience_owners():
            log = sorted(store.experience_changes(owner, 10**6), key=lambda c: c.version)
            for change in log:
                if change.kind not in GATED_KINDS:
                    continue
                before = replay(owner, [c for c in log if c.version < change.version])
                after = replay(owner, [c for c in log if c.version <= change.version])
                for when, cut in (("then", int(change.turn_id or 0) or None), ("end", None)):
                    gate = ExperienceGate(AsOf(store, cut), engine, engine.tokenizer, budget_tokens=args.budget,
                                          placement=args.placement, policy=policy)
                    decision, chance = await _check(gate, before, after, policy)
                    print(_row(data.parent.name if data.name == "data" else data.name, owner,
                               f"v{change.version} {change.kind} ({when})", len(after.lessons), decision, chance),
                          flush=True)
            final = store.experience(owner)
            gate = ExperienceGate(AsOf(store, None), engine, engine.tokenizer, budget_tokens=args.budget,
                                  placement=args.placement, policy=policy)
            print(_row(data.name, owner, "whole block vs none (end)", len(final.lessons),
                       *await _check(gate, Experience(owner), final, policy)), flush=True)
    finally:
        store.close()


async def run(args: argparse.Namespace) -> None:
    engine = LocalEngine(resolve_model_dir(args.model), threads=args.threads)
    try:
        for data in args.data:
            await measure(engine, data, args)
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument("--model", default=None)
    parser.add_argument("--turns", type=int, default=8, help="labelled turns per side (the gate's default: 8)")
    parser.add_argument("--placement", default="user", choices=("user", "system"))
    parser.add_argument("--budget", type=int, default=256, help="the block's token budget (serve's default: 256)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print("| run | user | version | lessons | turns approved / rejected | Δ approved | Δ rejected | D | p | chance | "
          "decision |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
