"""`openclaw-rl simulate` end to end on the tiny model: two sessions, all three output files."""

from __future__ import annotations

import json

from openclaw_rl.cli import main


def test_two_session_smoke_run_writes_all_outputs(tiny_model_dir, tmp_path):
    out = tmp_path / "sim"
    code = main(["simulate", "--persona", "student", "--sessions", "2", "--method", "combined", "--judge", "oracle",
                 "--model", str(tiny_model_dir), "--out", str(out), "--batch-size", "2", "--heldout", "2",
                 "--max-turns", "2"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("method", "judge", "sessions", "updates", "score_before", "score_after", "score_by_update"):
        assert key in summary
    assert summary["judge"] == "oracle" and "ORACLE" in summary["judge_label"]
    assert summary["sessions"] == 2 and 0.0 <= summary["score_before"] <= 1.0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines].count("session") == 2 and lines[0]["event"] == "eval"
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
