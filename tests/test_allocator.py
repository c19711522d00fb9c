"""The allocator settings (openclaw_rl/allocator.py), each in a fresh interpreter: they are
process-wide, and what they change is how much of freed memory stays resident."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Allocates 40 tensors of 8 MB (big blocks, like a step's activations), frees them, and prints
# the resident size (MB) after the free and again after release_freed_memory.
PROBE = """
import sys, torch
from openclaw_rl import allocator
tuned = sys.argv[1] == "tuned"
if tuned:
    assert allocator.tune_allocator()

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

base = rss_mb()
blocks = [torch.ones(2 * 2**20) for _ in range(40)]  # 40 x 8 MB, touched
del blocks
freed = rss_mb()
allocator.release_freed_memory()
print(round(freed - base), round(rss_mb() - base))
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kept, after_release = out.stdout.split()
    return int(kept), int(after_release)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_tuned_heap_keeps_freed_blocks_for_reuse_until_released() -> None:
    kept, after_release = _probe("tuned")
    assert kept >= 250  # of the 320 MB freed: still resident, so the next step reuses it without page faults
    assert after_release <= 40  # given back once the trainer asks (after every step)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator: Linux only")
def test_glibc_defaults_return_big_blocks_at_once() -> None:
    kept, _ = _probe("glibc")  # what the tuning changes: mmap'd blocks go back on free, and fault in again
    assert kept <= 40
