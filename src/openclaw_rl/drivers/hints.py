"""`openclaw-rl hints`: would OPD help this model on these users? (judge/hint_check.py)

For the newest `--limit` judged turns with a hint, the weights of `--model` (the bundled
base model by default: the gap before any training) answer the hinted prompt greedily,
and the judge's comparer (and, with `--simulation`, the persona's rubric) says whether
that answer is better than the recorded response (`--against response`, what OPD trains
on: sampled, by whatever version served it) or than the same weights' greedy answer
without the hint (`--against unhinted`: the hint's effect alone, the decoding held equal;
a small model's greedy answers repeat themselves more than its sampled ones). The report, per comparer: how many
better / same / worse / unknown, the share better among the decided turns with its 95 %
Wilson interval, and the call (go, no-go, undecided); with two comparers also how often
they agree. It goes to the terminal and, with every turn's two answers, to a JSON file.

The hinted answers decode together (the engine batches concurrent requests), `BATCH` at
a time. Nothing is written to the store: the check reads it only.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from openclaw_rl.compose import build_engine, build_judge, hint_comparer, open_store
from openclaw_rl.config import ConfigError, HintsConfig, JudgeConfig, ServeConfig, SimulateConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.drivers.simulate import persona_of
from openclaw_rl.eval.problems import train_problems
from openclaw_rl.judge.hint_check import HintCheck, RubricComparer, summarize, teacher_answer

__all__ = ["check_store", "simulation_rubric"]

BATCH = 8


def simulation_rubric(out: str | Path) -> tuple[RubricComparer, list[str]]:
    """The rubric comparer of a simulate/demo run (its persona, approval level and problems, from
    its summary.json) and the run's data dirs, one per method."""
    path = Path(out) / "summary.json"
    if not path.is_file():
        raise ConfigError(f"--simulation {out}: no summary.json there; pass the --out dir of a finished run")
    summary = json.loads(path.read_text())
    persona = persona_of(SimulateConfig(persona=summary["persona"], approve_threshold=summary.get("approve_threshold")))
    sessions = summary["sessions"]
    played = max(sessions.values()) if isinstance(sessions, dict) else int(sessions)
    methods = list(summary.get("runs") or [summary["method"]])
    data_dirs = [str(Path(out) / method / "data") for method in methods]
    return RubricComparer(persona, train_problems(int(summary["seed"]), played)), data_dirs


def check_store(config: HintsConfig, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run the check and write the report; returns it.

    (Over 60 lines: the hinted answers' async batch and the report's tallies share the
    turns, comparers and engine of one check, and read best in order.)"""
    rubric, data_dirs = simulation_rubric(config.simulation) if config.simulation else (None, [])
    data_dir = config.data_dir
    if not data_dir:
        if len(data_dirs) != 1:
            raise ConfigError(f"--simulation {config.simulation} holds several runs; pick one with --data-dir "
                              f"({', '.join(data_dirs)})")
        data_dir = data_dirs[0]
    if not Path(data_dir).is_dir() and not config.store:
        raise ConfigError(f"--data-dir {data_dir}: no such directory")
    store = open_store(config.store, Path(data_dir))
    turns = store.hinted_turns(config.limit)
    if not turns:
        raise ConfigError(f"{data_dir}: no judged turn with a hint yet; the check needs turns the judge read a "
                          "correction in (serve with a judge, and let people correct the model)")
    model_dir = resolve_model_dir(config.model or None)
    judge_config = JudgeConfig.from_spec(config.judge, config.judge_model)
    engine = build_engine(ServeConfig(model=str(model_dir), data_dir=str(data_dir)), model_dir)
    comparers = [hint_comparer(build_judge(judge_config, model_dir, engine), judge_config)]
    if rubric is not None:
        comparers.append(rubric)

    async def run() -> list[tuple[Any, str, str, list]]:
        limit, done = asyncio.Semaphore(BATCH), [0]

        async def one(turn, verdict):
            hint = verdict.selected_hint or verdict.hints[0]
            async with limit:
                answer = await teacher_answer(engine, engine.tokenizer, turn, hint, config.max_tokens)
                if config.against == "unhinted":  # the baseline: the same weights' answer without the hint
                    unhinted = await teacher_answer(engine, engine.tokenizer, turn, None, config.max_tokens)
                    turn = replace(turn, response_text=unhinted)
            comparisons = [await c.compare(turn, hint, answer) for c in comparers]
            done[0] += 1
            if progress:
                progress(done[0], len(turns))
            return turn, hint, answer, comparisons

        try:
            return await asyncio.gather(*(one(t, v) for t, v in turns))
        finally:
            await engine.aclose()

    results = asyncio.run(run())
    checks: dict[str, list[HintCheck]] = {c.name: [] for c in comparers}
    rows = []
    for turn, hint, answer, comparisons in results:
        for comparer, comparison in zip(comparers, comparisons):
            checks[comparer.name].append(HintCheck(turn.id, hint, turn.response_text, answer, comparison.outcome,
                                                   comparison.detail, comparer.name))
        rows.append({"turn_id": turn.id, "session_id": turn.session_id, "policy_version": turn.policy_version,
                     "hint": hint, config.against: turn.response_text, "hinted_answer": answer,
                     "outcomes": {c.name: {"outcome": x.outcome, "detail": x.detail}
                                  for c, x in zip(comparers, comparisons)}})
    report: dict[str, Any] = {
        "data_dir": str(data_dir), "model": str(model_dir), "against": config.against, "turns": len(rows),
        "by": {name: summarize(found) for name, found in checks.items()},
    }
    if len(comparers) == 2:
        pairs = [(a.outcome, b.outcome) for a, b in zip(*checks.values())
                 if "unknown" not in (a.outcome, b.outcome)]
        report["agreement"] = {"turns": len(pairs), "share": round(sum(a == b for a, b in pairs) / len(pairs), 3)
                               if pairs else None}
    report["checks"] = rows
    out = Path(config.out) if config.out else Path(data_dir) / "hint-check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    report["written_to"] = str(out)
    return report

