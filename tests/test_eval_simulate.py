"""`openclaw-rl simulate` end to end on the tiny model: two sessions, all three output files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from openclaw_rl.cli import main
from openclaw_rl.store import Store
from openclaw_rl.users import LOCAL


def test_two_session_smoke_run_writes_all_outputs(tiny_model_dir, tmp_path):
    out = tmp_path / "sim"
    code = main(["simulate", "--persona", "student", "--sessions", "2", "--method", "combined", "--judge", "oracle",
                 "--model", str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--heldout", "2",
                 "--max-turns", "2", "--opd-baseline", "mean", "--w-opd", "0.25"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["opd_baseline"] == "mean"
    assert summary["w_opd"] == summary["runs"]["combined"]["w_opd"] == 0.25  # the trainer's weight of the OPD term
    assert summary["lr"] == summary["runs"]["combined"]["lr"] == 1e-5  # the rate used when --lr is unset
    for key in ("method", "judge", "sessions", "updates", "score_before", "score_after", "score_by_update"):
        assert key in summary
    assert summary["judge"] == "oracle" and "ORACLE" in summary["judge_label"]
    assert summary["sessions"] == 2 and 0.0 <= summary["score_before"] <= 1.0
    engine = summary["runs"]["combined"]["engine"]  # the serving engine's counters, kept prefixes among them
    assert engine["prompt_tokens"] > 0 and 0 <= engine["prefix_tokens_reused"] <= engine["prompt_tokens"] + engine[
        "scored_tokens"]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines].count("session") == 2
    assert [x["updates"] for x in lines if x["event"] == "eval"][0] == 0  # the score before training
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallel_users_stop_at_max_updates_and_each_score_is_its_versions(tiny_model_dir, tmp_path):
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "12", "--method", "binary", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--catch-up", "1", "--heldout", "2", "--max-turns", "2",
                 "--parallel", "3", "--max-updates", "2", "--eval-every", "2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] >= 2 and summary["parallel"] == 3
    assert "0" in summary["score_by_update"] and "2" in summary["score_by_update"]
    assert "1" not in summary["score_by_update"]  # every second update only
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["event"] == "eval"]
    for e in evals:  # each held-out answer came from the version the score is reported for
        assert {a["version"] for a in e["answers"]} == {e["updates"]}
    sessions_at = {e["updates"]: e["sessions"] for e in evals}
    assert sessions_at[0] == 0 and 0 < sessions_at[2] <= summary["sessions"]
    # serving held each scored version until its answers were in (only v0's could race v1)
    assert summary["runs"]["binary"]["evaluations_answered_by"]["serving"] >= len(evals) - 1
    # the seeds report of docs/experiments.md reads such a run: one row, and the figure
    script = Path(__file__).parents[1] / "scripts" / "demo_seeds.py"
    report = subprocess.run([sys.executable, str(script), str(out), "--figure", str(tmp_path / "seeds.png")],
                            capture_output=True, text=True, check=True).stdout
    row = next(line for line in report.splitlines() if line.startswith("| 1e-05 | 0 |"))
    assert f"{summary['score_by_update']['2']:.3f} @2 ({sessions_at[2]})" in row
    assert "- lr 1e-05, 1 seeds:" in report
    assert (tmp_path / "seeds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True)
    assert missing.returncode == 2 and "holds no summary.json" in missing.stderr


def test_the_training_off_control_plays_the_whole_stream_against_the_base_model(tiny_model_dir, tmp_path):
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "4", "--method", "off", "--experience", "off", "--judge", "oracle",
                 "--model", str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--heldout", "2",
                 "--max-turns", "2", "--parallel", "2", "--max-updates", "1",
                 "--default-temperature", "0.5", "--default-top-p", "0.8"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    run = summary["runs"]["off"]
    store = Store(out / "off" / "data")  # the users send no temperature: the run's server defaults sampled them
    try:
        sampled = {(t.sampling["temperature"], t.sampling["top_p"]) for s in store.list_sessions()
                   for t in store.turns(s.id) if t.kind == "main"}
    finally:
        store.close()
    assert sampled == {(0.5, 0.8)}
    # max_updates never stops a control: it plays every session, judges nothing and trains nothing
    assert summary["sessions"] == 4 and summary["updates"] == 0 and summary["judge"] == "off"
    assert len(run["accepted"]) == 4 and run["accept_rate"] is not None
    assert run["samples"].get("trained", 0) == 0 and summary["score_by_update"].keys() == {"0"}
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(x["updates"] == 0 for x in lines if x["event"] == "session")
    # the base acceptance at every approval level, from the control's first-answer scores
    scripts = Path(__file__).parents[1] / "scripts"
    firsts = [x["first_score"] for x in sorted((x for x in lines if x["event"] == "session"), key=lambda x: x["index"])]
    report = subprocess.run([sys.executable, str(scripts / "approval_level.py"), str(out), "--target", "0.5"],
                            capture_output=True, text=True, check=True).stdout
    row = next(line for line in report.splitlines() if line.startswith("| 0.700 |"))
    accepted = sum(f >= 0.7 for f in firsts)
    assert f"({accepted}/4)" in row and "lowest level with base acceptance <= 0.5:" in report
    rescored = subprocess.run([sys.executable, str(scripts / "adaptation_seeds.py"), f"control={out}",
                               "--control-at", "0.0"], capture_output=True, text=True, check=True).stdout
    assert "| control | 1 | 1 [1, 1] | 0 of 1 | 1.00 (4/4) [0.51, 1.00] |" in rescored  # at level 0 all are accepted


def test_experience_without_training_learns_each_users_lessons_and_serves_them_in_context(tiny_model_dir, tmp_path):
    """The study's experience-only arm: --method off with the experience layer on judges (the oracle's hints
    are the rubric's failed checks), learns lessons before the run ends (it waits for the judge), and writes
    no samples; the weights never change. Whether a later session is served with the block depends on the
    judge finishing before that session starts, so it is tested where it is deterministic
    (tests/test_experience_serving.py), not here."""
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "4", "--method", "off", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--heldout", "2", "--max-turns", "2", "--parallel", "1",
                 "--response-max-tokens", "8", "--eval-max-tokens", "8", "--eval-every-sessions", "2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 0 and summary["runs"]["off"]["experience"] == "on"
    # scored before play and after sessions 2 and 4 (the weights stay, the experience served moves on); an
    # evaluation served with a block also scored the weights alone without it
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["event"] == "eval"]
    assert sorted(e["sessions"] for e in evals) == [0, 2, 4]
    assert all((e["weights_score"] is None) == (e["experience_version"] is None) for e in evals)
    assert summary["runs"]["off"]["judge"] == "oracle"
    store = Store(out / "off" / "data")
    try:
        learned = store.experience(LOCAL.name)
        assert learned.lessons, "the oracle's hints (failed rubric checks) became no lesson"
        assert store.sample_counts()["ready"] == 0  # verdicts and lessons only: nothing would train a sample
        assert store.judge_backlog() == 0  # the run waited for the judge
        turns = [t for s in store.list_sessions() for t in store.turns(s.id)]
        assert all(t.policy_version == 0 for t in turns)
        assert all(t.experience_block for t in turns if t.experience_version is not None)
    finally:
        store.close()


def test_a_preference_shift_plays_the_new_persona_from_its_session_and_scores_by_its_rubric(tiny_model_dir, tmp_path):
    """--shift-to: the same user (one key, one experience) wants what another persona wants from
    --shift-at on; the sessions, the held-out scores after it and the summary say so."""
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "4", "--method", "off", "--judge", "embedding", "--model",
                 str(tiny_model_dir), "--out", str(out), "--heldout", "2", "--max-turns", "2", "--parallel", "1",
                 "--response-max-tokens", "8", "--eval-max-tokens", "8", "--eval-every-sessions", "4",
                 "--shift-to", "parent", "--shift-at", "2", "--approve-threshold", "0.75"])
    assert code == 0
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    sessions = sorted((e for e in events if e["event"] == "session"), key=lambda e: e["index"])
    assert [e["persona"] for e in sessions] == ["student", "student", "parent", "parent"]
    evals = sorted((e["sessions"], e["persona"]) for e in events if e["event"] == "eval")
    assert evals == [(0, "student"), (2, "parent"), (4, "parent")]  # scored at the shift, by the new rubric
    shift = json.loads((out / "summary.json").read_text())["runs"]["off"]["shift"]
    assert shift["to"] == "parent" and shift["at"] == 2 and shift["approve_threshold"] == 0.75
    flags = [e["accepted"] for e in sessions]
    assert shift["before"]["accept_rate"] == sum(flags[:2]) / 2 and shift["after"]["accept_rate"] == sum(flags[2:]) / 2


@pytest.mark.parametrize("flags, message", [
    (["--shift-at", "4"], "shift_at"), (["--shift-at", "0"], "shift_at"), (["--judge", "oracle"], "oracle"),
    (["--hint-check", "rubric"], "rubric")])
def test_a_preference_shift_that_cannot_run_is_refused_naming_the_setting(flags, message, capsys):
    given = {"--shift-to": "parent", "--shift-at": "2", "--sessions": "4", **dict(zip(flags[::2], flags[1::2]))}
    assert main(["simulate", *[x for pair in given.items() for x in pair], "--print-config"]) != 0
    error = capsys.readouterr().err
    assert "openclaw-rl: error:" in error and message in error and "--shift-to" in error


def test_with_the_gate_on_only_served_versions_are_scored_and_each_decision_is_recorded(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    from openclaw_rl.drivers import simulate

    out = tmp_path / "sim"
    trainers: list = []
    build_stack = simulate.build_stack
    monkeypatch.setattr(simulate, "build_stack", lambda serve, judge, train, spec: (trainers.append(train),
                                                                                   build_stack(serve, judge, train, spec))[1])
    # lr 1 on the tiny model: every candidate drifts far from the served one, so the gate turns them away
    code = main(["simulate", "--sessions", "12", "--method", "binary", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--heldout", "2", "--max-turns", "2",
                 "--parallel", "3", "--max-updates", "2", "--eval-every", "1", "--gate", "on", "--lr", "1",
                 "--gate-probes", "3", "--gate-max-length-ratio", "2.5", "--gate-max-repetition-increase", "0.2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["gate_max_length_ratio"], summary["gate_max_repetition_increase"]) == (2.5, 0.2)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    decisions = {x["version"]: x["gate"] for x in lines if x["event"] == "version"}
    # the probes: 3 more problems of the persona, asked as first messages (then reserved turns, up to
    # --gate-max-probes), the 3 held as anchors by v0
    asked = [json.loads(line)["messages"] for line in (out / "binary" / "gate-probes.jsonl").read_text().splitlines()]
    assert len(asked) == 3 and all(len(m) == 1 and m[0]["role"] == "user" for m in asked)
    checked = [x["checks"] for x in lines if x["event"] == "version" and x["gate"] in ("accepted", "rejected")]
    assert checked and all(c["probes"] >= 3 and c["anchors"]["probes"] == 3 and c["anchors"]["version"] == 0
                           and c["anchors"]["decoded"] == 0 for c in checked)
    assert decisions[0] == "base" and {1, 2} <= set(decisions)
    assert summary["gate"] == "on" and summary["rejected_versions"] == sum(g == "rejected" for g in decisions.values())
    assert summary["rejected_versions"] >= 1
    rejected = next(x for x in lines if x["event"] == "version" and x["gate"] == "rejected")
    assert "gate_max" in rejected["reason"] and "score_delta" in rejected["checks"]  # the rubric scored it too
    assert [(t.gate, t.gate_max_length_ratio, t.gate_max_repetition_increase) for t in trainers] == [("on", 2.5, 0.2)]
    scored = {x["updates"] for x in lines if x["event"] == "eval"}
    assert scored and all(decisions[v] in ("base", "accepted") for v in scored)  # what served, never a candidate
    # what the gate's checks read on each evaluated version (docs/experiments.md calibrates with it)
    script = Path(__file__).parents[1] / "scripts" / "gate_calibration.py"
    report = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True,
                            check=True).stdout
    assert "| version | score | mean tokens |" in report and "| v0 | " in report


def test_several_methods_each_run_in_a_process_of_their_own(tiny_model_dir, tmp_path):
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "2", "--method", "binary,opd", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--heldout", "2", "--max-turns", "2",
                 "--parallel", "2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "binary,opd" and set(summary["runs"]) == {"binary", "opd"}
    assert set(summary["score_before"]) == {"binary", "opd"}
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for method in ("binary", "opd"):  # both children appended to the one metrics file
        assert [x["event"] for x in lines if x["method"] == method].count("session") == 2


def test_the_approval_threshold_applies_to_the_user_and_the_oracle():
    import pytest

    from openclaw_rl.eval.oracle import OracleJudge
    from openclaw_rl.eval.problems import heldout_problems
    from openclaw_rl.config import SimulateConfig
    from openclaw_rl.drivers.simulate import persona_of

    assert persona_of(SimulateConfig()).approve_threshold == 0.8  # the student's own
    persona = persona_of(SimulateConfig(approve_threshold=0.7))
    assert persona.approve_threshold == 0.7 and OracleJudge(persona).threshold == 0.7
    problem = heldout_problems(1)[0]
    answer = "Tomas buys 8 packs of 8 crayons. He gives 9 crayons to Greta, so he has 50 crayons left."  # 0.725
    score = persona.rubric(problem, answer)
    assert 0.7 <= score < 0.8, score
    assert persona.reply(problem, answer, 0, __import__("random").Random(0)).satisfied
    assert not persona_of(SimulateConfig()).reply(problem, answer, 0, __import__("random").Random(0)).satisfied
    with pytest.raises(ValueError, match="approve_threshold"):
        SimulateConfig(approve_threshold=1.5)


def test_the_demo_uses_the_settings_whose_curve_rose_and_simulate_the_plain_defaults():
    from openclaw_rl.cli import _parser
    from openclaw_rl.config import SimulateConfig, build, driver_values

    def resolved(*argv: str) -> SimulateConfig:
        return build(SimulateConfig, driver_values(SimulateConfig, "simulate", argv[0]), _parser().parse_args(argv))

    demo = resolved("demo")
    assert (demo.train.lr, demo.approve_threshold, demo.method, demo.judge_spec) == (5e-5, 0.7, "combined", "embedding")
    assert demo.train.gate == "on"  # no version worse than the one it replaces
    assert (demo.train.batch_size, demo.train.max_staleness, demo.judge.max_hints) == (2, 4, 1)
    simulate = resolved("simulate")
    assert (simulate.train.lr, simulate.approve_threshold, simulate.train.gate) == (None, None, "off")
    assert (simulate.train.batch_size, simulate.train.max_staleness) == (4, 4)  # presets/simulate.toml
    assert resolved("demo", "--gate", "off").train.gate == "off"
    assert resolved("demo", "--lr", "1e-4").train.lr == 1e-4  # a flag wins over the demo's default


def test_the_evaluator_answers_from_serving_while_it_serves_the_version_else_from_a_snapshot(tiny_model_dir,
                                                                                              tmp_path):
    from openclaw_rl.compose import build_server
    from openclaw_rl.config import ServeConfig, SimulateConfig
    from openclaw_rl.drivers.simulate import _SnapshotEvaluator
    from openclaw_rl.eval.personas import get_persona
    from openclaw_rl.eval.problems import heldout_problems

    serving = build_server(ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path / "serving"), train=False),
                           threads=1)
    scores: list[tuple[int, set]] = []
    config = SimulateConfig(model=str(tiny_model_dir), heldout=2, eval_max_tokens=8)
    evaluator = _SnapshotEvaluator(config, get_persona("student"), heldout_problems(2), tmp_path / "eval",
                                   lambda v, score, answers, **_: scores.append((v, {a.policy_version for a in answers})),
                                   serving=serving)
    weights = {name: p.detach().clone() for name, p in serving.engine.model.named_parameters()}
    evaluator.submit(0, None)  # serving serves v0: answered there
    evaluator.submit(3, weights)  # serving never had v3: its snapshot is loaded and answers
    evaluator.close()
    assert scores == [(0, {0}), (3, {3})]
    assert evaluator.answered_by == {"serving": 1, "snapshot": 1}
    assert serving.engine.policy_version == 0 and serving.store.counts()["turns"] == 0  # the users' store: untouched
    from openclaw_rl.types import SamplingParams

    async def still_serving():  # the evaluator's app did not close the engine it shares
        events = [e async for e in serving.engine.stream([1, 2, 3], SamplingParams(max_new_tokens=2))]
        await serving.engine.aclose()
        return events

    assert asyncio.run(still_serving())


def test_a_run_whose_trainer_loop_died_stops_with_the_error_instead_of_playing_on(tiny_model_dir, tmp_path,
                                                                                    monkeypatch, capsys):
    """The disk filled during a demo: the trainer loop died on the first step while the users
    played on untrained and the run waited out the drain. Now the run stops at the next
    session with the loop's error, and what was played stays in metrics.jsonl."""
    from openclaw_rl.train.trainer import Trainer

    def full_disk(self, samples):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trainer, "step", full_disk)  # the one fake: the real loop, server and users run
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "40", "--method", "binary", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--batch-size", "1", "--heldout", "1", "--max-turns", "1",
                 "--parallel", "1", "--drain-timeout-s", "600"])
    assert code == 1
    error = capsys.readouterr().err
    assert "binary run stopped after" in error and "No space left on device" in error and "loop" in error
    sessions = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    played = [x for x in sessions if x["event"] == "session"]
    assert 1 <= len(played) < 40  # stopped early, and the sessions it played were kept
    assert not (out / "summary.json").exists()


def _in_start_order(store: Store) -> list:
    """The store's sessions in the order they were played (by their first turn)."""
    return sorted(store.list_sessions(), key=lambda s: store.turns(s.id)[0].created_at)


def test_a_caught_up_user_is_served_the_weights_every_earlier_session_made(tiny_model_dir, tmp_path):
    """--pace caught-up: each session waits for the judge and for the trainer to train every judged
    sample (the last batch even if short: here every batch is, at --batch-size 16). So every session
    after the first is served a version trained on all earlier sessions; with --pace sequential the
    trainer would wait for 16 samples and every session would be served v0."""
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "3", "--method", "binary", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--batch-size", "16", "--heldout", "2", "--max-turns", "2",
                 "--pace", "caught-up", "--gate", "off", "--response-max-tokens", "8", "--eval-max-tokens", "8"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pace"] == "caught-up" and summary["parallel"] == 1
    store = Store(out / "binary" / "data")
    try:
        sessions = _in_start_order(store)
        served = [store.turns(s.id)[0].policy_version for s in sessions]
        trained = store.sample_counts("binary")
    finally:
        store.close()
    assert served[0] == 0 and served[1] >= 1 and served == sorted(served), served
    assert trained.get("ready", 0) == 0 and trained["used"] >= 2, trained  # nothing judged was left untrained


def test_a_sequential_user_is_served_every_earlier_sessions_lessons(tiny_model_dir, tmp_path):
    """--pace sequential: one session at a time, each once the judge has judged every earlier turn. So every
    session that starts after a lesson was learned is served with a block holding all lessons learned before it
    (with --pace concurrent that depends on the judge's speed: the test above cannot say it)."""
    out = tmp_path / "sim"
    code = main(["simulate", "--sessions", "4", "--method", "off", "--judge", "oracle", "--model",
                 str(tiny_model_dir), "--out", str(out), "--heldout", "2", "--max-turns", "2", "--parallel", "3",
                 "--pace", "sequential", "--response-max-tokens", "8", "--eval-max-tokens", "8",
                 "--eval-every-sessions", "0"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pace"] == "sequential" and summary["parallel"] == 1
    store = Store(out / "off" / "data")
    try:
        sessions = _in_start_order(store)
        turns = [store.turns(s.id) for s in sessions]
        changes = store.experience_changes(LOCAL.name)
        assert changes, "the oracle's hints (failed rubric checks) became no lesson"
        for k in range(1, len(turns)):
            earlier = {t.id for session in turns[:k] for t in session}
            learned = [c.version for c in changes if c.turn_id is not None and int(c.turn_id) in earlier]
            if learned:  # an earlier session taught a lesson: this one began with it in its block
                assert turns[k][0].experience_version >= max(learned) and turns[k][0].experience_block
        assert any(session[0].experience_block for session in turns[1:])
    finally:
        store.close()


def test_an_unknown_pace_is_refused_naming_it(capsys):
    assert main(["simulate", "--pace", "fast"]) != 0
    assert "pace" in capsys.readouterr().err


def test_the_evaluator_asks_main_turns_served_with_the_users_lessons_and_the_weights_alone_without(tiny_model_dir,
                                                                                                   tmp_path):
    """The served score is what serving sends the user: main turns answered with the user's experience
    (lent to the evaluator's store for the evaluation), checked against the lessons beside an answer
    without the block; the weights' own score asks side turns with no block. Neither touches the
    users' store, and the evaluator's store keeps no lesson."""
    from openclaw_rl.compose import build_server
    from openclaw_rl.config import ServeConfig, SimulateConfig
    from openclaw_rl.drivers.simulate import _SnapshotEvaluator
    from openclaw_rl.eval.personas import get_persona
    from openclaw_rl.eval.problems import heldout_problems
    from openclaw_rl.experience import Experience, Lesson

    serving = build_server(ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path / "serving"), train=False),
                           threads=1)
    lesson = Lesson(id=1, owner=LOCAL.name, text="Answer in one sentence.", support=1, sources=("1",),
                    created_at=0.0, updated_at=0.0)
    experience = Experience(LOCAL.name).with_lessons([lesson], 1)
    scored: list[dict] = []
    config = SimulateConfig(model=str(tiny_model_dir), heldout=2, eval_max_tokens=8)
    assert config.lesson_plain == "on"
    evaluator = _SnapshotEvaluator(config, get_persona("student"), heldout_problems(2), tmp_path / "eval",
                                   lambda v, score, answers, **extra: scored.append(extra), serving=serving,
                                   experience=lambda: experience)
    evaluator.submit(0, None)
    evaluator.close()
    assert scored[0]["experience_version"] == 1 and scored[0]["weights_score"] is not None
    assert serving.store.counts()["turns"] == 0  # the users' store: untouched
    store = Store(tmp_path / "eval")
    try:
        turns = [t for s in store.list_sessions() for t in store.turns(s.id)]
        side = [t for t in turns if t.kind == "side"]
        main_turns = [t for t in turns if t.kind == "main"]
        assert len(side) == 2 and len(main_turns) == 2
        assert not any(t.experience_block for t in side)  # the weights alone
        for turn in main_turns:  # checked against the lesson, beside the answer without the block
            selected = turn.sampling["selected"]
            assert selected["by"] == "lesson_checks" and selected["plain"] == selected["of"] - 1
            assert bool(turn.experience_block) == (selected["picked"] != selected["plain"])
        assert not store.experience(LOCAL.name).lessons  # lent, never stored
    finally:
        store.close()
