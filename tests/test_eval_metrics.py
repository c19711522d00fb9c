"""The personalization score (through a fake OpenAI-compatible server) and the curves."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest

from openclaw_rl.eval.metrics import curve_title, first_answers, personalization_score, plot_curves
from openclaw_rl.eval.student import STUDENT
from openclaw_rl.eval.problems import heldout_problems

HELDOUT = heldout_problems(4)


def completion(text: str) -> dict:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class AnswersByQuestion:
    """A fake server that answers each held-out question with a fixed text."""

    def __init__(self, answers: dict[str, str]):
        self.answers, self.requests, self.lock = answers, [], threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with self.lock:
            self.requests.append((dict(request.headers), body))
        return httpx.Response(200, json=completion(self.answers[body["messages"][0]["content"]]),
                              headers={"X-Policy-Version": "2"})


def test_score_is_the_mean_rubric_of_greedy_side_first_answers():
    texts = ["So the answer is 55.", "## Answer\n**139**", "Certainly! It is 10.", ""]
    fake = AnswersByQuestion({STUDENT.first_message(p): t for p, t in zip(HELDOUT, texts)})
    client = openai.OpenAI(base_url="http://fake/v1", api_key="x", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(fake)))
    expected = [STUDENT.rubric(p, t) for p, t in zip(HELDOUT, texts)]
    assert len(set(expected)) > 1
    score = personalization_score(client, "m", STUDENT, HELDOUT, concurrency=3)
    assert score == pytest.approx(sum(expected) / len(expected))
    assert len(fake.requests) == len(HELDOUT)
    for headers, body in fake.requests:
        assert headers["x-turn-type"] == "side"  # evaluation is never trained on
        assert body["temperature"] == 0.0 and len(body["messages"]) == 1
    answers = first_answers(client, "m", STUDENT, HELDOUT)
    assert [a.problem_id for a in answers] == [p.id for p in HELDOUT]
    assert [a.response for a in answers] == texts and {a.policy_version for a in answers} == {2}
    assert "no_bold" in answers[1].failed_checks


def test_score_of_an_empty_heldout_set_is_an_error():
    with pytest.raises(ValueError, match="held-out set is empty"):
        personalization_score(openai.OpenAI(base_url="http://fake/v1", api_key="x"), "m", STUDENT, [])


def test_plot_curves_writes_a_png_with_one_line_per_method(tmp_path):
    runs = {"binary": [(0, 0, 0.2), (4, 1, 0.25), (8, 2, 0.3)], "combined": [(0, 0, 0.2), (4, 1, 0.5), (8, 2, 0.8)]}
    path = plot_curves(runs, tmp_path / "out" / "curve.png", judge="oracle", persona="student")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    with pytest.raises(ValueError, match="no points"):
        plot_curves({"binary": []}, tmp_path / "empty.png", judge="local")


def test_curve_title_names_the_judge_and_shouts_oracle():
    assert "ORACLE judge" in curve_title("oracle", "teacher") and "teacher" in curve_title("oracle", "teacher")
    assert curve_title("local") == "Personalization score, judge: local"
    assert "ORACLE" not in curve_title("embedding", "student")


def test_sessions_to_adaptation_is_where_the_first_run_of_three_accepts_begins():
    from openclaw_rl.eval.metrics import acceptance, sessions_to_adaptation

    assert sessions_to_adaptation([True, True, False, True, True, True, False]) == 4
    assert sessions_to_adaptation([True, True, True]) == 1
    assert sessions_to_adaptation([True, False, True, True, False]) is None
    assert sessions_to_adaptation([]) is None
    stats = acceptance([False] * 8 + [True] * 4)
    assert stats == {"sessions_to_adaptation": 9, "accept_rate": 0.333, "accept_rate_last_10": 0.4}


def test_the_curve_shows_the_accepted_sessions_beside_the_score(tmp_path):
    import matplotlib.image

    from openclaw_rl.eval.metrics import plot_curves

    points = [(0, 0, 0.5), (4, 2, 0.6), (8, 4, 0.7)]
    plain = plot_curves({"combined": points}, tmp_path / "plain.png", judge="embedding")
    marked = plot_curves({"combined": points}, tmp_path / "marked.png", judge="embedding",
                         accepted={"combined": [False, True, False, True, True, True, False, True]})
    assert (matplotlib.image.imread(plain) != matplotlib.image.imread(marked)).any()


def test_the_seed_aggregator_reports_the_median_its_interval_and_the_runs_that_never_adapted(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "adaptation_seeds.py"
    dirs = []
    for seed, flags in enumerate([[False, True, True, True], [False, False, True, True, True, False],
                                  [False, False, False, False]]):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        from openclaw_rl.eval.metrics import acceptance

        # held-out scores at updates 0, 2, 4: seed 1 fell to 0.55, more than 0.03 below its base of 0.6
        scores = [{"0": 0.6, "2": 0.62, "4": 0.7}, {"0": 0.6, "2": 0.55, "4": 0.65}, {"0": 0.6, "2": 0.6}][seed]
        (run / "summary.json").write_text(json.dumps({"runs": {"combined": {
            "accepted": flags, **acceptance(flags), "score_by_update": scores, "updates": 2 * len(scores) - 2}}}))
        dirs.append(str(run))
    done = subprocess.run([sys.executable, str(script), f"trained={','.join(dirs)}", "--figure",
                           str(tmp_path / "fig.png")], capture_output=True, text=True, check=True)
    row = next(line for line in done.stdout.splitlines() if line.startswith("| trained"))
    # 2, 3 and the never-adapted run counted as 4 + 1 = 5: median 3; 6 of 14 sessions accepted
    assert "| 3 | 3 [" in row and "1 of 3 (counted as length + 1)" in row and "| 0.43 (6/14) [0.21, 0.67] |" in row
    scores = [line for line in done.stdout.splitlines() if line.startswith("| trained")][1]
    # last scores 0.70, 0.65, 0.60: median 0.65; lowest 0.60, 0.55, 0.60; one run below 0.6 - 0.03
    assert scores.startswith("| trained | 3 | 0.600 | 0.650 [") and "| 0.600 (0.550) | 1 of 3 | 4 | - |" in scores
    assert (tmp_path / "fig.png").is_file()


def test_the_agent_seeds_script_pools_held_out_episodes_and_intervals_the_mean(tmp_path):
    """scripts/agent_seeds.py: eval episodes only, environment errors left out, a Wilson
    interval over the pooled episodes and a bootstrap interval over the runs' rates."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "agent_seeds.py"
    dirs = []
    for seed, outcomes in enumerate([[True, False, False, False], [True, True, False, False]]):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        lines = [{"split": "eval", "success": ok, "error": None} for ok in outcomes]
        lines += [{"split": "train", "success": True, "error": None},  # not held out: not counted
                  {"split": "eval", "success": False, "error": "the sandbox died"}]  # not the agent's failure
        (run / "episodes.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        (run / "summary.json").write_text(json.dumps({"updates": 2, "samples_written": 8, "wall_time_s": 120.0}))
        dirs.append(str(run))
    done = subprocess.run([sys.executable, str(script), f"integrated={','.join(dirs)}"], capture_output=True,
                          text=True, check=True)
    row = next(line for line in done.stdout.splitlines() if line.startswith("| integrated"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == ["2", "8"]  # 2 runs, 8 held-out episodes without an error
    assert cells[3].startswith("0.375 [0.137, 0.694]")  # 3 of 8, Wilson
    assert cells[4].startswith("0.375 [0.250, 0.500]") and cells[5] == "0.25, 0.50"
    missing = subprocess.run([sys.executable, str(script), f"x={tmp_path / 'nowhere'}"], capture_output=True, text=True)
    assert missing.returncode != 0 and "episodes.jsonl" in missing.stderr


def test_the_retention_table_counts_lost_and_gained_items_and_flags_a_fall_beyond_the_band():
    """scripts/retention_table.py's summary: per run, items lost and gained against the base with
    the gate's sign test; a probe fell only when the CI of its mean change lies below -band."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "retention_table.py"
    spec = importlib.util.spec_from_file_location("retention_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = {"kept": [True] * 10 + [False] * 10, "broken": [True] * 10 + [False] * 10}
    runs = {f"s{i}": {"kept": [True] * 9 + [False] + [True] + [False] * 9,  # one lost, one gained
                      "broken": [False] * 20}  # every right item lost
            for i in range(3)}
    table = module.summarize(base, runs)
    kept, broken = table["kept"], table["broken"]
    assert kept["runs"]["s0"] == {"correct": 10, "lost": 1, "gained": 1, "p": 0.75}
    assert kept["mean_change"] == 0 and not kept["fell"]
    assert broken["runs"]["s1"]["lost"] == 10 and broken["runs"]["s1"]["p"] == 0.001
    assert broken["mean_change"] == -0.5 and broken["fell"] and 0.1 < broken["noise_band"] < 0.25


def test_two_users_compare_pairs_the_arms_by_seed_and_tests_the_differences(tmp_path, capsys):
    """scripts/two_users.py --compare: per user, arm A's served held-out at the last evaluation minus
    arm B's, paired by seed (an unpaired run is left out, a seed twice in one arm refused)."""
    import importlib.util
    import json
    from pathlib import Path

    import pytest

    path = Path(__file__).resolve().parent.parent / "scripts" / "two_users.py"
    spec = importlib.util.spec_from_file_location("two_users", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def run(name: str, seed: int, parent: float, student: float) -> str:
        out = tmp_path / name
        out.mkdir()
        users = {"parent": {"served": [[0, 0.233], [12, parent]]}, "student": {"served": [[0, 0.633], [12, student]]}}
        (out / "summary.json").write_text(json.dumps({"seed": seed, "users": users}))
        return str(out)

    a = [run(f"on-s{s}", s, 0.5 + 0.01 * s, 0.60) for s in range(5)] + [run("on-s9", 9, 0.9, 0.9)]
    b = [run(f"off-s{s}", s, 0.4, 0.60 + 0.01 * s) for s in range(5)]
    found = module.compare(a, b)
    assert found["parent"]["seeds"] == [0, 1, 2, 3, 4]  # seed 9 has no pair
    assert found["parent"]["better"] == 5 and found["parent"]["sign_p"] == 0.0625
    assert found["parent"]["median"] == pytest.approx(0.12) and found["parent"]["ci"][0] > 0
    assert found["student"]["better"] == 0 and found["student"]["diff"][0] == pytest.approx(0)
    assert found["student"]["sign_p"] == 0.125  # 4 worse of 4 (the tie left out): 2 x 1/16
    assert "unpaired runs left out: [9]" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="two runs of seed 0"):
        module.compare([a[0], run("again-s0", 0, 0.5, 0.5)], b)


def test_two_users_held_out_answers_are_main_turns_of_an_evaluator_served_with_each_users_lessons(tiny_model_dir,
                                                                                                  tmp_path):
    """scripts/two_users.py's evaluation: each user's held-out answers are main turns of a server over the
    same engine whose store holds only its own turns (the user's lessons lent to it while they are asked),
    answered as the user's own requests are (checked against the lessons beside the answer without the
    block); the users' store gets no main turn from it, and no lesson crosses users."""
    import importlib.util
    from dataclasses import replace
    from pathlib import Path

    from openclaw_rl.config import JudgeConfig, SimulateConfig
    from openclaw_rl.store import Store
    from test_experience_serving import teach

    path = Path(__file__).resolve().parent.parent / "scripts" / "two_users.py"
    spec = importlib.util.spec_from_file_location("two_users", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = replace(SimulateConfig(model=str(tiny_model_dir), heldout=2, eval_max_tokens=8, method="off"),
                     judge=JudgeConfig(judge="off"))
    run = module.Run(config, {"parent": 0.75, "student": 0.74}, tmp_path / "run", "off")
    try:
        teach(run.server.store, "parent", ("Answer in one sentence.",))
        found = run.evaluate(0)
    finally:
        run.close()
    assert set(found["served"]) == {"parent", "student"}
    users = Store(tmp_path / "run" / "data")
    evaluator = Store(tmp_path / "run" / "eval-data")
    try:
        assert not [t for s in users.list_sessions() for t in users.turns(s.id) if t.kind == "main"]
        turns = [t for s in evaluator.list_sessions() for t in evaluator.turns(s.id)]
        by_owner = {owner: [t for t in turns if t.owner == owner] for owner in ("parent", "student")}
        assert all(t.kind == "main" for t in turns) and all(len(v) == 2 for v in by_owner.values())
        for turn in by_owner["parent"]:  # her lesson: checked, beside the answer without the block
            selected = turn.sampling["selected"]
            assert selected["plain"] == selected["of"] - 1
            assert bool(turn.experience_block) == (selected["picked"] != selected["plain"])
            assert "one sentence" not in turn.experience_block or turn.experience_version == 1
        assert not any(t.experience_block or t.sampling.get("selected") for t in by_owner["student"])
        assert not evaluator.experience("parent").lessons  # lent, never stored
    finally:
        users.close()
        evaluator.close()
