"""bench/gpu_check.py end to end on a CPU with the tiny shape: what a GPU machine runs at Qwen3-4B's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from openclaw_rl.train.methods import METHODS

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_check_runs_end_to_end_on_a_cpu(tmp_path) -> None:
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--shape", "tiny", "--ranks", "1",
                           "--threads", "1", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["shape"] == "tiny" and result["device"] == "cpu" and result["parameters"] > 0
    decode = [row for row in result["decode"] if "batch" in row]
    assert [row["batch"] for row in decode] == [1, 8, 32] and all(row["tokens_per_s"] > 0 for row in decode)
    trained = {(row["method"], row["lora"]) for row in result["train"]}
    assert trained == {(name, lora) for name in METHODS for lora in (False, True)}
    assert all(row["seconds"] > 0 and row["peak_memory_gb"] > 0 for row in result["train"])
    assert {row["train_dtype"] for row in result["train"]} == {"float32"}  # auto on a CPU
