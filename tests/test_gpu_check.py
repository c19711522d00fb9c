"""bench/gpu_check.py end to end on a CPU with `--smoke`: every phase a GPU machine runs at Qwen3-4B's size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_check_runs_every_phase_on_a_cpu_and_writes_one_json(tmp_path) -> None:
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--smoke", "--threads", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["shape"] == "tiny" and result["device"] == "cpu" and result["parameters"] > 0 and result["smoke"]
    assert result["phases"] == ["decode", "train", "loop", "tests"]
    assert all("error" not in result[phase] for phase in ("loop", "tests")), proc.stdout[-4000:]
    assert [row["batch"] for row in result["decode"]] == [1, 8, 32]
    assert all(row["tokens_per_s"] > 0 and row["ms_per_step"] > 0 for row in result["decode"])
    assert {(row["method"], row["lora"]) for row in result["train"]} == {("combined", False), ("combined", True)}
    assert all(row["seconds"] > 0 and row["model_tflops_per_s"] > 0 for row in result["train"])
    assert {row["train_dtype"] for row in result["train"]} == {"float32"}  # auto on a CPU
    assert result["peak_tflops"] > 0
    loop = result["loop"]  # the demo with the oracle judge and the gate on, 2 sessions
    # whether 2 sessions train a candidate before the run ends, and whether the gate serves it, depends on
    # the machine's load and the random model's answers, not on the check: what is reported must be sane
    assert loop["sessions"] == 2 and loop["sessions_per_minute"] > 0 and loop["updates"] >= 0
    assert {"gate_decisions", "gate_decision_s_median", "train_step_s_median", "score_after"} <= loop.keys()
    assert (result["tests"]["returncode"], result["tests"]["passed"]) == (0, 1)
    assert "decode batch 32:" in proc.stdout and "loop: 2 sessions" in proc.stdout and "tests: 1 passed" in proc.stdout
