"""How the process's C heap is kept: fast to reuse within a step, given back between steps.

Two costs pull in opposite directions on glibc:

- A training step allocates and frees the same activation tensors (1-500 MB each) again
  and again. Served by mmap, every one of them comes back as fresh zeroed pages, and the
  kernel faults each 4 KB page in: one forward and backward of the default model on
  4 x 450 tokens took 2.5 million page faults and 8.6 s of system time in a 30 s step.
  Served from the heap, the same step took 0.1 million faults and 22 s
  (`bench/train_pass.py` measures a whole step under each setting).
- Every policy update makes full copies of the weights (540 MB for the default model, in
  tensors of 1-113 MB) and frees the previous ones. Left to glibc's defaults, those land
  in per-thread heap arenas that fragment, freed memory is never returned, and a long
  `simulate` run grew to 13 GB until the kernel killed it.

So big blocks come from the heap (`tune_allocator`: a fixed mmap threshold of 1 GB, and
no automatic trimming under 1 GB), and the trainer gives the heap's free pages back once
per version (`release_freed_memory`, glibc's `malloc_trim`, which also returns the free
pages inside fragmented arenas): resident memory stays flat however many versions pass,
and a step reuses what the previous one freed. On a C library other than glibc both are
no-ops.
"""

from __future__ import annotations

import ctypes
import functools
import logging

log = logging.getLogger(__name__)

HEAP_UP_TO_BYTES = 1 << 30  # blocks below this come from the heap, not a fresh mmap
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 (glibc has it; musl's libc.so.6 stand-ins do not)
        return libc
    except (OSError, AttributeError):
        return None


def tune_allocator() -> bool:
    """Serve blocks under 1 GB from the heap and trim only on request. Call once, early, in
    a process that trains or serves; returns whether glibc took the settings."""
    libc = _glibc()
    if libc is None:
        return False
    taken = libc.mallopt(_M_MMAP_THRESHOLD, HEAP_UP_TO_BYTES) == 1
    taken &= libc.mallopt(_M_TRIM_THRESHOLD, HEAP_UP_TO_BYTES) == 1
    if not taken:
        log.info("glibc refused the allocator settings: big blocks stay on mmap")
    return taken


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (after a version's weight copies are
    freed). Cheap when little is free; the next step faults in what it needs once."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
