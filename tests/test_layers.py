"""The import contract (pyproject.toml, [tool.importlinter]) holds, and it would catch a
lower layer importing a higher one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(package_parent: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layers_hold():
    done = _lint(ROOT / "src")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_engine_that_imports_serve_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "src" / "openclaw_rl", tmp_path / "openclaw_rl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "openclaw_rl" / "engine" / "base.py", "a") as module:
        module.write("\nimport openclaw_rl.serve.app  # noqa: E402,F401 - the violation under test\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "openclaw_rl.engine is not allowed to import openclaw_rl.serve" in done.stdout
