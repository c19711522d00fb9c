"""An episode's totals: the memory, processes and disk all of a sandbox's commands share.

rlimits (envs/sandbox.py) cap each process; an `EpisodeBudget` caps what the processes of
one episode hold *together*, across processes and across commands:

    budget = EpisodeBudget(base, Totals(memory_mb=1024, processes=64, disk_mb=256), host_uid)
    process = budget.launch(argv, stdout=PIPE, ...)    # a command, inside the episode's budget
    budget.check()                                     # polled while it runs: a message past a total
    budget.end_command()                               # nothing of it left; notes on limits it hit
    budget.close()

How, best first (`detect_enforcement()` says which this machine gives):

- **memory and processes**: `cgroup-v2`, a child cgroup per episode with memory.max,
  memory.swap.max=0, memory.oom.group=1 and pids.max, where a cgroup v2 directory with the
  memory and pids controllers is ours to divide ($OPENCLAW_SANDBOX_CGROUP, say a systemd
  scope with Delegate=yes, or our own cgroup if its children already get both); else
  `cgroup-v1`, the memory and pids hierarchies with each episode a child of our own cgroup
  there (a container where we are root); else `rss-watch`: the host sums the resident
  memory of the command's process tree every 50 ms and kills the command past the total,
  and processes rest on RLIMIT_NPROC (`rlimit-nproc`), which the kernel counts per user
  namespace, so per command.
- **disk**: `tmpfs`, the sandbox directory (which holds /work, /tmp and /dev/shm) is a tmpfs
  mounted with size= and nr_inodes=, so a write past the quota fails with ENOSPC whoever
  makes it; where we cannot mount (not root), `usage-watch`: the host sums the directory's
  usage every 5 ms (less often for a tree so large that walking it takes over 0.5 ms) and
  kills the command past the quota, and RLIMIT_FSIZE caps each file at what is left when
  the command starts.

Decisions and why:

- A cgroup per *episode*, not per command: tmpfs pages stay charged to the cgroup that
  wrote them, so what earlier commands left in /work counts against the memory total of
  later ones. Under cgroups a file in /work therefore costs the episode memory as well as
  disk quota: it lives in RAM, and RAM is what the total protects.
- Past the memory total the whole command is killed, not only the process the kernel's
  OOM killer chose: what is left of a half-killed command is rarely useful, and the
  result names the budget so the agent can retry with less.
- At the process limit forks fail with EAGAIN and nothing is killed, since a build that
  hits it briefly recovers; the result says how many forks were refused (cgroups count
  them; RLIMIT_NPROC does not).
- The command starts behind a gate (bash waiting on a pipe) and is moved into its
  cgroup before the gate opens, so not even its first fork runs outside: `subprocess`
  cannot start a child in a cgroup, and a preexec_fn is unsafe in a threaded server.
- Mounts and cgroups carry the creating process's pid in their names; leftovers of a
  process that died without closing its sandboxes are removed the next time a process
  detects the machine, so a crash does not leak RAM.

(Over 400 lines: detecting the mechanism, the two cgroup versions and the watches are one
boundary behind one interface, `EpisodeBudget`, and are reviewed together.)

Known limits: the watches poll, so a burst can overshoot by what a command allocates or
writes in a poll interval before it is killed, and they do not see memory held only in a
memfd or a file that is unlinked but still open. The cgroup-v2 path has not yet run on a
machine that offers it (this project's machines give v1: their cgroup2 mount has no memory
controller); the tests run whichever mechanism the machine gives, and the watches too.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openclaw_rl.envs.base import EnvError

__all__ = ["Enforcement", "EpisodeBudget", "Totals", "detect_enforcement"]

logger = logging.getLogger(__name__)

NAME_PREFIX = "openclaw-sandbox-"  # + our pid + "-": sandbox directories, their mounts and cgroups
MEMORY_POLL_S = 0.05  # how often a running command's memory is checked
DISK_POLL_S = 0.005  # how often usage-watch walks the directory: a writer at memory speed adds ~10 MB per ms
_DISK_POLL_COST = 10  # ... or 10x as long as a walk takes, so a huge tree does not cost a core
_MIB = 1024 * 1024
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_INODES_PER_MB = 256  # tmpfs nr_inodes per MB of quota: an empty-file flood must not cost unbounded kernel memory
_MIN_ENTRY_BYTES = 4096  # usage-watch charges every file at least a block, for the same reason
_FULL_BELOW_BYTES = _MIB  # a tmpfs with less free is reported full
_CGROUP_ENV = "OPENCLAW_SANDBOX_CGROUP"  # a delegated cgroup v2 directory to make episode cgroups in
_OWNER = re.compile(rf"^{NAME_PREFIX}(\d+)-")
_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


@dataclass(frozen=True)
class Totals:
    memory_mb: int  # all processes of the episode together (and, under cgroups, its files in RAM)
    processes: int  # processes and threads at once, bwrap's own included
    disk_mb: int  # /work, /tmp and /dev/shm together


@dataclass(frozen=True)
class Enforcement:
    """Which mechanism holds each total (see the module docstring)."""

    memory: str  # "cgroup-v2" | "cgroup-v1" | "rss-watch"
    processes: str  # "cgroup-v2" | "cgroup-v1" | "rlimit-nproc"
    disk: str  # "tmpfs" | "usage-watch"

    def __str__(self) -> str:
        return f"memory: {self.memory}, processes: {self.processes}, disk: {self.disk}"


# ---- what the machine allows -------------------------------------------------------------


@dataclass(frozen=True)
class _CgroupKind:
    version: int  # 1 or 2
    parents: tuple[Path, ...]  # where episode cgroups go: (memory, pids) for v1, (one,) for v2


@dataclass(frozen=True)
class _Machine:
    cgroup: _CgroupKind | None
    can_mount: bool

    def enforcement(self) -> Enforcement:
        if self.cgroup is None:
            memory, processes = "rss-watch", "rlimit-nproc"
        else:
            memory = processes = f"cgroup-v{self.cgroup.version}"
        return Enforcement(memory, processes, "tmpfs" if self.can_mount else "usage-watch")


_machine_lock = threading.Lock()


def detect_enforcement() -> Enforcement:
    """What a sandbox made now gets on this machine."""
    return _machine().enforcement()


def _machine() -> _Machine:
    with _machine_lock:
        return _detect()


@functools.cache
def _detect() -> _Machine:
    cgroup = _cgroup_v2() or _cgroup_v1()
    machine = _Machine(cgroup, _can_mount())
    _sweep_leftovers(machine)
    logger.info("sandbox totals enforced by %s", machine.enforcement())
    return machine


def _mounts() -> list[tuple[str, str, str, list[str]]]:
    """(root, mount point, fstype, super options) of each mount we see."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) >= 5 and len(after) >= 3:
            mounts.append((fields[3], fields[4], after[0], after[2].split(",")))
    return mounts


def _own_cgroup(controller: str | None) -> Path | None:
    """Our cgroup's directory in the hierarchy of `controller` (v1), or the v2 one (None)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if (controller is None and hierarchy == "0") or (controller is not None and controller in controllers.split(",")):
            break
    else:
        return None
    for root, mount_point, fstype, options in _mounts():
        v2_match = controller is None and fstype == "cgroup2"
        if (v2_match or (fstype == "cgroup" and controller in options)) and (path + "/").startswith(root.rstrip("/") + "/"):
            return Path(mount_point) / path[len(root.rstrip("/")) :].lstrip("/")
    return None


def _can_make_children(parent: Path, needed_file: str) -> bool:
    probe = parent / f"{NAME_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / needed_file).exists()
    finally:
        probe.rmdir()


def _cgroup_v2() -> _CgroupKind | None:
    delegated = os.environ.get(_CGROUP_ENV)
    parent = Path(delegated) if delegated else _own_cgroup(None)
    if parent is None:
        return None
    try:
        if not {"memory", "pids"} <= set((parent / "cgroup.controllers").read_text().split()):
            return None
        if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
            if not delegated:  # our own cgroup holds processes, so the kernel refuses; do not try
                return None
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as error:
        if delegated:
            logger.warning("$%s=%s cannot hold sandbox cgroups (%s); falling back", _CGROUP_ENV, delegated, error)
        return None
    return _CgroupKind(2, (parent,)) if _can_make_children(parent, "memory.max") else None


def _cgroup_v1() -> _CgroupKind | None:
    memory, pids = _own_cgroup("memory"), _own_cgroup("pids")
    if memory is None or pids is None:
        return None
    if _can_make_children(memory, "memory.limit_in_bytes") and _can_make_children(pids, "pids.max"):
        return _CgroupKind(1, (memory, pids))
    return None


_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(target: Path, size_bytes: int, inodes: int) -> None:
    options = f"size={size_bytes},nr_inodes={inodes},mode=0711".encode()
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount tmpfs on {target}: {os.strerror(code)}")


def _unmount(target: Path) -> None:
    if _libc.umount2(os.fsencode(target), _MNT_DETACH) != 0 and ctypes.get_errno() != errno.EINVAL:  # EINVAL: not mounted
        logger.warning("could not unmount %s: %s", target, os.strerror(ctypes.get_errno()))


def _can_mount() -> bool:
    probe = Path(tempfile.mkdtemp(prefix=f"{NAME_PREFIX}{os.getpid()}-probe-"))
    try:
        _mount_tmpfs(probe, _MIB, 16)
    except OSError:
        return False
    else:
        _unmount(probe)
        return True
    finally:
        probe.rmdir()


def _owner_is_dead(name: str) -> bool:
    match = _OWNER.match(name)
    if match is None or int(match.group(1)) == os.getpid():
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _sweep_leftovers(machine: _Machine) -> None:
    """Unmount tmpfs and remove cgroups that a dead process left (see the module docstring)."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for _, mount_point, fstype, _ in _mounts():
        path = Path(mount_point)
        if fstype == "tmpfs" and path.parent == tmp and _owner_is_dead(path.name):
            _unmount(path)
            try:
                path.rmdir()
            except OSError:
                pass
            logger.info("unmounted %s, left by a process that died", path)
    for parent in machine.cgroup.parents if machine.cgroup else ():
        for child in parent.glob(f"{NAME_PREFIX}*"):
            if child.is_dir() and _owner_is_dead(child.name):
                _Cgroup(machine.cgroup.version, [child]).remove()


# ---- one episode's cgroup ----------------------------------------------------------------


def _keyed(path: Path) -> dict[str, int]:
    """A cgroup file of `key value` lines (memory.events, pids.events, memory.oom_control)."""
    pairs = (line.split() for line in path.read_text().splitlines())
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


class _Cgroup:
    """The episode's cgroup: one directory under v2, one per controller under v1."""

    def __init__(self, version: int, dirs: list[Path]) -> None:
        self.version = version
        self.dirs = dirs
        self.memory_dir, self.pids_dir = dirs[0], dirs[-1]

    @classmethod
    def create(cls, kind: _CgroupKind, name: str, totals: Totals) -> _Cgroup:
        cgroup = cls(kind.version, [parent / name for parent in kind.parents])
        try:
            for directory in cgroup.dirs:
                directory.mkdir()
            cgroup._set_limits(totals)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    def _set_limits(self, totals: Totals) -> None:
        memory = str(totals.memory_mb * _MIB)
        if self.version == 2:
            (self.memory_dir / "memory.max").write_text(memory)
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (self.memory_dir / name).exists():
                    (self.memory_dir / name).write_text(value)
        else:
            (self.memory_dir / "memory.limit_in_bytes").write_text(memory)
            if (self.memory_dir / "memory.memsw.limit_in_bytes").exists():  # swap counted too, where accounted
                (self.memory_dir / "memory.memsw.limit_in_bytes").write_text(memory)
        (self.pids_dir / "pids.max").write_text(str(totals.processes))

    def add(self, pid: int) -> None:
        for directory in self.dirs:
            (directory / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _keyed(self.memory_dir / name).get("oom_kill", 0)

    def refused_forks(self) -> int:
        return _keyed(self.pids_dir / "pids.events").get("max", 0)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found.update(int(pid) for pid in (directory / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
        return found

    def kill(self) -> None:
        """SIGKILL everything in it, until nothing is (a process may fork while we kill)."""
        if self.version == 2:
            try:
                (self.memory_dir / "cgroup.kill").write_text("1")
            except OSError:  # before Linux 5.14, or removed already: the loop below does it
                pass
        deadline = time.monotonic() + 2.0
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    def remove(self) -> None:
        self.kill()
        deadline = time.monotonic() + 2.0
        for directory in self.dirs:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:  # EBUSY while the last exits are reaped
                    if time.monotonic() > deadline:
                        logger.warning("could not remove cgroup %s: %s", directory, error)
                        break
                    time.sleep(0.01)


# ---- the watches (no cgroup, no mount) ---------------------------------------------------


def _tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of `root_pid` and all its descendants (a sandbox cannot leave its tree:
    orphans are re-parented to its pid namespace's init, itself a child of bwrap)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry.name)
        rss[pid] = int(fields[21]) * _PAGE_BYTES
        children.setdefault(int(fields[1]), []).append(pid)
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total


def _usage_bytes(directory: Path) -> int:
    """What the files under `directory` occupy, each at least a block; symlinks not followed."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except PermissionError:  # a command chmod-ed it away from us; we own it (non-root), so take it back
        os.chmod(directory, 0o700)
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        total += max(stat.st_blocks * 512, _MIN_ENTRY_BYTES)
        if entry.is_dir(follow_symlinks=False):
            total += _usage_bytes(Path(entry.path))
    return total


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process of a host uid that only this sandbox uses (zombies are dead already)."""
    for _ in range(100):
        found = False
        for entry in os.scandir("/proc"):
            try:
                if not entry.name.isdigit() or entry.stat().st_uid != uid:
                    continue
                if Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
            except (OSError, IndexError):
                continue
        if not found:
            return
        time.sleep(0.005)


# ---- the budget --------------------------------------------------------------------------


class EpisodeBudget:
    """The totals of one sandbox episode, enforced as the machine allows; see the module docstring.

    `base` is the sandbox's directory on the host: under `tmpfs` it becomes the mount point,
    so it must be empty and may not be filled until this returns."""

    def __init__(self, base: Path, totals: Totals, host_uid: int | None) -> None:
        machine = _machine()
        self.totals = totals
        self.enforcement = machine.enforcement()
        self._base = base
        self._host_uid = host_uid
        self._closed = False
        self._mounted = False
        self._cgroup: _Cgroup | None = None
        if machine.can_mount:
            _mount_tmpfs(base, totals.disk_mb * _MIB, max(1024, totals.disk_mb * _INODES_PER_MB))
            self._mounted = True
        if machine.cgroup is not None:
            try:
                self._cgroup = _Cgroup.create(machine.cgroup, base.name, totals)
            except OSError:
                self.close()
                raise
        self._root_pid: int | None = None
        self._counts_at_start = (0, 0)  # (OOM kills, refused forks) when the command started
        self._usage_at_start = 0
        self._next_memory_check = self._next_disk_check = 0.0
        self._disk_flagged = False  # check() has reported the disk quota during this command

    # ---- a command's life ----

    def launch(self, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Popen(argv) inside the episode's budget: under cgroups, in its cgroup from the first instruction."""
        if self._cgroup is None:
            process = subprocess.Popen(argv, **popen_kwargs)
        else:
            process = self._launch_gated(self._cgroup, argv, popen_kwargs)
        self._root_pid = process.pid
        self._counts_at_start = (self._cgroup.oom_kills(), self._cgroup.refused_forks()) if self._cgroup else (0, 0)
        self._usage_at_start = 0 if self._mounted else _usage_bytes(self._base)
        self._next_memory_check = self._next_disk_check = 0.0
        self._disk_flagged = False
        return process

    @staticmethod
    def _launch_gated(cgroup: _Cgroup, argv: list[str], popen_kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
        gate_read, gate_write = os.pipe()
        try:
            gate = f'read -r _ <&{gate_read} && exec {gate_read}<&- && exec "$@"'  # bash: dash takes fds 0-9 only
            bash = shutil.which("bash") or "/bin/bash"
            process = subprocess.Popen([bash, "-c", gate, "bash", *argv], pass_fds=(gate_read,), **popen_kwargs)
        except BaseException:
            os.close(gate_write)
            raise
        finally:
            os.close(gate_read)
        try:
            cgroup.add(process.pid)
        except OSError as error:
            os.close(gate_write)  # the gate's read fails, so the shell exits without running anything
            process.kill()
            process.wait()
            raise EnvError(f"could not put the sandbox command into its cgroup {cgroup.memory_dir}: {error}") from error
        try:
            os.write(gate_write, b"go\n")
        except BrokenPipeError:  # the shell died before the gate opened; its exit status says why
            pass
        finally:
            os.close(gate_write)
        return process

    def check(self) -> str | None:
        """While a command runs: why it must be killed now (a total exceeded), or None. Cheap between polls."""
        now, cgroup = time.monotonic(), self._cgroup
        if self._closed:
            return None
        try:
            if now >= self._next_memory_check:
                self._next_memory_check = now + MEMORY_POLL_S
                if cgroup is not None:
                    if cgroup.oom_kills() > self._counts_at_start[0]:
                        return self._memory_message()
                elif self._root_pid is not None and _tree_rss_bytes(self._root_pid) > self.totals.memory_mb * _MIB:
                    return self._memory_message()
            if not self._mounted and now >= self._next_disk_check:
                usage = _usage_bytes(self._base)
                walk_s = time.monotonic() - now
                self._next_disk_check = now + max(DISK_POLL_S, _DISK_POLL_COST * walk_s)
                if usage > max(self.totals.disk_mb * _MIB, self._usage_at_start):
                    self._disk_flagged = True
                    return self._disk_message(usage)
        except FileNotFoundError:  # the sandbox was closed from another thread meanwhile
            return None
        return None

    def next_check_in(self) -> float:
        """Seconds until `check()` next has something to look at: how long a caller may block."""
        due = self._next_memory_check if self._mounted else min(self._next_memory_check, self._next_disk_check)
        return min(MEMORY_POLL_S, max(0.0, due - time.monotonic()))

    def _memory_message(self) -> str:
        return (f"memory total exceeded: all processes of the episode together may use {self.totals.memory_mb} MB "
                f"(Limits.total_memory_mb, enforced by {self.enforcement.memory})")

    def _disk_message(self, usage_bytes: int) -> str:
        return (f"disk quota exceeded: /work, /tmp and /dev/shm together may hold {self.totals.disk_mb} MB "
                f"(Limits.disk_mb, enforced by {self.enforcement.disk}) and held {usage_bytes // _MIB} MB; "
                "delete files, in a command of their own, to make room")

    def kill_all(self) -> None:
        """Kill whatever of the episode still runs (the host side has killed bwrap already)."""
        cgroup = self._cgroup
        if cgroup is not None:
            cgroup.kill()
        elif self._host_uid is not None:
            _kill_uid(self._host_uid)

    def end_command(self) -> str:
        """After a command: kill what is left of it; a note on a total it ran into, or ""."""
        self.kill_all()
        self._root_pid = None
        notes, cgroup = [], self._cgroup
        try:
            refused = cgroup.refused_forks() - self._counts_at_start[1] if cgroup is not None else 0
            free_bytes, usage = _FULL_BELOW_BYTES, 0
            if self._mounted:
                disk = os.statvfs(self._base)
                free_bytes = disk.f_bavail * disk.f_frsize
            elif not self._disk_flagged:  # it may have ended between two polls
                usage = _usage_bytes(self._base)
        except FileNotFoundError:  # closed from another thread meanwhile
            return ""
        if refused > 0:
            notes.append(f"process limit reached: at most {self.totals.processes} processes and threads at once "
                         f"(Limits.processes, enforced by {self.enforcement.processes}); {refused} forks were refused")
        if free_bytes < _FULL_BELOW_BYTES:
            notes.append(f"disk quota full: /work, /tmp and /dev/shm together may hold {self.totals.disk_mb} MB "
                         "(Limits.disk_mb, enforced by tmpfs); writes past it fail with 'No space left on device'; "
                         "delete files to make room")
        if usage > max(self.totals.disk_mb * _MIB, self._usage_at_start):
            notes.append(self._disk_message(usage))
        return "; ".join(notes)

    def check_room(self, size_bytes: int) -> None:
        """Before a host-side write: OSError(ENOSPC) if it would pass the quota (the tmpfs refuses by itself)."""
        if not self._mounted and _usage_bytes(self._base) + size_bytes > self.totals.disk_mb * _MIB:
            raise OSError(errno.ENOSPC, f"the sandbox's disk quota (Limits.disk_mb = {self.totals.disk_mb} MB) is full")

    def file_size_cap(self, file_bytes: int) -> int:
        """RLIMIT_FSIZE for the next command: `file_bytes`, or under usage-watch no more than is left."""
        if self._mounted:
            return file_bytes
        return max(0, min(file_bytes, self.totals.disk_mb * _MIB - _usage_bytes(self._base)))

    def close(self) -> None:
        """Kill everything left, remove the cgroup and unmount; the caller removes `base` afterwards. Idempotent."""
        self._closed = True
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        elif self._host_uid is not None:
            _kill_uid(self._host_uid)
        if self._mounted:
            _unmount(self._base)
            self._mounted = False
