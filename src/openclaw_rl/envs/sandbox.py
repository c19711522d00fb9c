"""A sandboxed shell per episode: commands run in a throwaway directory, isolated by bubblewrap.

    with Sandbox(files={"notes.txt": "hello\\n"}) as box:
        print(box.run("wc -l notes.txt").text())
        box.run_python("print(open('notes.txt').read())")

Every command gets fresh namespaces (mount, pid, net, ipc, uts, user, cgroup) from
`bwrap`, sees the sandbox directory read-write at `/work` (its cwd) and little else, and
runs under rlimits per process and the episode's totals (memory, processes, disk: see
envs/budget.py); when it returns, times out or passes a total, its pid namespace dies, so
nothing it started outlives it. Between commands only files in the directory persist.

(Over 400 lines: the bubblewrap command line, the rlimits and the process-group
handling are one security boundary, reviewed together.)

Decisions and why:

- **bubblewrap**, not Docker or a VM: one small setuid-free binary (`apt-get install
  bubblewrap`), a start-up of ~10 ms, no daemon, and it composes mount/pid/net namespaces
  exactly as a sandbox for short shell commands needs. Without it we refuse to run rather
  than run commands unconfined: `SandboxUnavailableError` names the fix.
- **What the sandbox sees**: `/usr` read-only (with `/bin`, `/lib`, `/lib64`, `/sbin` as the
  usual symlinks into it), but `/usr/local` masked by an empty tmpfs, since that is where a
  host keeps its own installs and their configuration; a generated `/etc` (a passwd/group
  naming the user `agent`, hosts, nsswitch) plus the harmless system pieces programs need
  (`/etc/alternatives`, through which Debian's `awk`, `vi`, ... resolve, and
  `/etc/ld.so.cache`); fresh `/proc` and `/dev`; `/work`; and `/tmp` and `/dev/shm`, which
  like `/work` are directories of the sandbox's own (emptied after each command), so all
  three share its disk quota. The host's `/root`, `/home`, `/work/main` (the project, its
  venv and data), `/etc/shadow`, `/tmp` and `/var` simply do not exist inside. `/`,
  `/usr/local` and `/dev` are remounted read-only (bwrap makes them tmpfs, writable and as
  large as half the RAM), so the only writable places are `/work`, `/tmp` and `/dev/shm`.
- **Python inside is the system's `/usr/bin/python3`** (Debian 12 ships it; `python` is
  symlinked to it). The project's venv is never bound: model-written code must not import
  or read our code, our weights or our data. Only where the system has no python3 do we
  bind the base interpreter prefix of `sys.executable` (e.g. a pyenv version, never a
  venv) read-only at its own path.
- **No network**: a new network namespace has only its own loopback, so neither the
  host's 127.0.0.1 services nor DNS (there is no resolv.conf either) can be reached.
- **Limits** are set *inside* the namespaces with util-linux `prlimit`, not by a
  `preexec_fn` (unsafe in a threaded pool server). RLIMIT_NPROC in particular must be set
  after the user namespace exists: the kernel then counts processes per namespace, so one
  sandbox's fork bomb is capped at `Limits.processes` without counting the host's own
  processes. Wall-clock time is enforced by the host, which SIGKILLs bwrap's process group;
  `--die-with-parent` and the pid namespace take everything inside with it.
- **Totals per episode** (`Limits.total_memory_mb`, `processes`, `disk_mb`), because rlimits
  alone let 64 processes of 512 MB each take more than the host has: a cgroup per sandbox
  (v2, or v1 where that is what the machine has) caps memory and processes, and the
  sandbox directory is a tmpfs with size= (so the quota holds across processes and
  commands); without cgroups or without mounting, host-side watches kill a command past a
  total. `Sandbox.enforcement` says which is in force; a result that ran into a total says
  which, its value and what happened in `RunResult.exceeded` (and in `text()`).
- **Host user**: the kernel never applies RLIMIT_NPROC to host root (uid 0), and a user
  namespace mapped onto root would count as root. So when we are root, bwrap itself runs
  as an unprivileged host uid drawn at random per sandbox from a high unused range
  (`_HOST_UID_RANGE`) and the sandbox directory is chowned to it; sandboxes then cannot
  read each other's files on the host either. When we are not root, bwrap runs as us.
  Inside, the user is always `agent` (uid 1000) with no capabilities, and with
  `--disable-userns` it cannot create further user namespaces.
- **Output** is captured with a bounded buffer (the head and the tail of each stream) so a
  command printing gigabytes cannot exhaust host memory; beyond `max_output_chars` the
  middle is replaced by a note saying how much was left out (the tail keeps the error at
  the end of a traceback).
- **Host-side `read`/`write`** resolve the path on the host and refuse anything that is
  absolute, climbs out with `..`, or passes through a symlink pointing outside the
  sandbox directory, because a command may have planted such a link for us to follow.

Known limits: there is no seccomp filter (the kernel's attack surface is the full syscall
set of an unprivileged user). Under cgroups a file in `/work` lives in RAM and counts
against the memory total as well as the disk quota. Where the machine allows neither
cgroups nor mounts, the totals are held by polling watches, which can overshoot by what a
command allocates or writes in one poll (measured here: up to ~70 MB of memory in 50 ms, and
up to ~50 MB of disk in 5 ms from four writers at full speed, also with both cores busy) and
do not see memfds or unlinked open files (envs/budget.py). CPU time is limited per process
(RLIMIT_CPU) and per command (wall clock), not per episode. A `Sandbox` is not
thread-safe: one episode, one thread (`close` from another thread is the exception).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType

from openclaw_rl.envs.base import EnvError
from openclaw_rl.envs.budget import (
    NAME_PREFIX,
    Enforcement,
    EpisodeBudget,
    Totals,
    detect_enforcement,
)

__all__ = [
    "Enforcement",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxPathError",
    "SandboxUnavailableError",
    "detect_enforcement",
    "sandbox_available",
]

logger = logging.getLogger(__name__)

SANDBOX_WORKDIR = "/work"  # where the sandbox directory appears inside, and every command's cwd
_INSIDE_UID = 1000  # the user `agent` inside
_HOST_UID_RANGE = (1_100_000, 1_900_000)  # when we are root: host uids for bwrap, unused by any distribution
_SCRATCH_DIRS = {"tmp": "/tmp", "shm": "/dev/shm"}  # host dir in the sandbox's base -> inside; emptied after each command
_KILL_GRACE_S = 2.0  # after a kill, how long we keep draining pipes before giving up on them
_SYSTEM_ETC = ("alternatives", "ld.so.cache")  # harmless host /etc entries programs need


class SandboxUnavailableError(EnvError):
    """The machine cannot run the sandbox (no bwrap, user namespaces disabled, ...)."""


class SandboxPathError(ValueError):
    """A host-side path that would leave the sandbox directory."""


@dataclass(frozen=True)
class Limits:
    """Per process (rlimits) and per episode (totals, see envs/budget.py). The defaults let a
    24 GB host run a dozen episodes at their worst and still have room for itself."""

    cpu_s: int = 10  # RLIMIT_CPU per process of a command
    memory_mb: int = 512  # RLIMIT_AS per process
    wall_s: float = 20.0  # wall-clock timeout per command; the whole sandbox is killed
    processes: int = 64  # processes and threads of the episode at once (pids.max, and RLIMIT_NPROC per command)
    file_mb: int = 64  # RLIMIT_FSIZE: the largest file a command may write
    max_output_chars: int = 8000  # per stream; beyond this the middle is cut, with a note
    total_memory_mb: int = 1024  # all processes of the episode together; past it the command is killed
    disk_mb: int = 256  # /work, /tmp and /dev/shm together, across commands

    def __post_init__(self) -> None:
        names = ("cpu_s", "memory_mb", "wall_s", "processes", "file_mb", "max_output_chars", "total_memory_mb", "disk_mb")
        for name in names:
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")
        if self.processes < 4:
            # bwrap's init, prlimit's exec of bash and one child already count.
            raise ValueError(f"Limits.processes must be at least 4 for a shell to run, got {self.processes}")
        if self.total_memory_mb < 32:
            raise ValueError(f"Limits.total_memory_mb must be at least 32 for bash and python3 to start, got {self.total_memory_mb}")

    def totals(self) -> Totals:
        return Totals(memory_mb=self.total_memory_mb, processes=self.processes, disk_mb=self.disk_mb)


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int  # as a shell reports it: 128 + N when killed by signal N
    timed_out: bool
    duration_s: float = 0.0
    exceeded: str = ""  # which episode total the command ran into and its value, when it did

    def text(self) -> str:
        """What an agent sees: stdout, stderr, and lines for a non-zero exit, a timeout or a total reached."""
        parts = [stream.rstrip("\n") for stream in (self.stdout, self.stderr) if stream.strip()]
        if self.timed_out:
            parts.append(f"[timed out after {self.duration_s:.1f} s: the command and everything it started were killed]")
        elif self.exit_code != 0:
            parts.append(f"[exit code {self.exit_code}]")
        if self.exceeded:
            parts.append(f"[{self.exceeded}]")
        return "\n".join(parts) if parts else "(no output)"


class _BoundedCapture:
    """Keeps the first and last `keep_bytes` of a stream and counts the rest."""

    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = keep_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped_bytes = 0

    def feed(self, chunk: bytes) -> None:
        room = self.keep_bytes - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        excess = len(self.tail) - self.keep_bytes
        if excess > 0:
            del self.tail[:excess]
            self.dropped_bytes += excess

    def text(self, max_chars: int) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.dropped_bytes and len(head) + len(tail) <= max_chars:
            return head + tail
        whole = head + tail
        first, last = max_chars // 2, max_chars - max_chars // 2
        omitted = len(whole) - max_chars + self.dropped_bytes  # dropped bytes counted as characters
        shown_head = whole[:first]
        shown_tail = whole[len(whole) - last :] if last else ""
        note = f"\n[... output truncated: {omitted} characters omitted (limit {max_chars}) ...]\n"
        return shown_head + note + shown_tail


@functools.cache
def _bwrap_options() -> frozenset[str]:
    """The options this bwrap understands (older releases lack --disable-userns)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return frozenset()
    help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    return frozenset(word for word in help_text.split() if word.startswith("--"))


def _missing_tools() -> str | None:
    """Why the sandbox cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux namespaces (bubblewrap); this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed; the sandbox needs it: apt-get install bubblewrap"
    for tool in ("prlimit", "bash"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed; the sandbox needs it: apt-get install {'util-linux' if tool == 'prlimit' else tool}"
    return None


def _python_prefix() -> str | None:
    """A host directory to bind for python3 when the system has none (see the module docstring)."""
    if Path("/usr/bin/python3").exists():
        return None
    prefix = Path(sys.base_prefix).resolve()
    return None if prefix.is_relative_to("/usr") else str(prefix)


_probe_ok = False


def sandbox_available() -> tuple[bool, str]:
    """(True, a description) when commands can be sandboxed here, else (False, what to do)."""
    global _probe_ok
    missing = _missing_tools()
    if missing:
        return False, missing
    if not _probe_ok:
        try:
            with Sandbox(Limits(wall_s=30.0), _skip_probe=True) as box:
                result = box.run("echo ok")
        except OSError as error:
            return False, f"bwrap could not be started: {error}"
        if result.stdout.strip() != "ok":
            return False, (
                "bwrap is installed but could not create a sandbox (are unprivileged user namespaces "
                f"allowed? check sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces): "
                f"{result.text()}"
            )
        _probe_ok = True
    return True, f"bubblewrap at {shutil.which('bwrap')}; episode totals enforced by {detect_enforcement()}"


def _chown_tree(path: Path, uid: int | None) -> None:
    if uid is None:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for child in path.rglob("*"):
            os.chown(child, uid, uid, follow_symlinks=False)


def _remove_tree(path: str) -> None:
    """rmtree that also gets through directories a command made unreadable (chmod 000)."""

    def retry_writable(function, failed_path, _exc_info) -> None:  # type: ignore[no-untyped-def]
        try:
            os.chmod(os.path.dirname(failed_path), 0o700)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, 0o700)
                shutil.rmtree(failed_path, ignore_errors=True)
            else:
                function(failed_path)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry_writable)


def _open_no_symlink(host_path: Path, flags: int, path: str) -> int:
    """os.open that refuses a final symlink (the directories above were resolved already)."""
    try:
        return os.open(host_path, flags | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SandboxPathError(f"path {path!r} is a symlink; refused") from error
        raise


def _release(budget: EpisodeBudget, base: str) -> None:
    """A sandbox's end: nothing of it left running, its cgroup and mount gone, then its files."""
    budget.close()
    _remove_tree(base)


class Sandbox:
    """A throwaway directory in which shell commands and Python run isolated; see the module docstring."""

    root: Path  # host path of the sandbox's working directory (/work inside)
    enforcement: Enforcement  # which mechanism holds each of the episode's totals

    def __init__(
        self, limits: Limits = Limits(), files: dict[str, str] | None = None, *, _skip_probe: bool = False
    ) -> None:
        if not _skip_probe:
            ok, why = sandbox_available()
            if not ok:
                raise SandboxUnavailableError(why)
        elif (missing := _missing_tools()) is not None:
            raise SandboxUnavailableError(missing)
        self.limits = limits
        self._host_uid: int | None = random.randrange(*_HOST_UID_RANGE) if os.geteuid() == 0 else None
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        base = Path(tempfile.mkdtemp(prefix=f"{NAME_PREFIX}{os.getpid()}-"))  # the pid lets a later process sweep leftovers
        try:
            self._budget = EpisodeBudget(base, limits.totals(), self._host_uid)  # may mount a tmpfs on `base`
        except OSError as error:
            base.rmdir()
            raise SandboxUnavailableError(
                f"could not set up the episode's totals ({detect_enforcement()}): {error}"
            ) from error
        self.enforcement = self._budget.enforcement
        self._finalizer = weakref.finalize(self, _release, self._budget, str(base))
        self._base = base
        self.root = base / "work"
        self._etc = base / "etc"
        base.chmod(0o711)  # the host uid must traverse it to bind /work; nobody may list it
        for directory in [self.root, *(base / name for name in _SCRATCH_DIRS)]:
            directory.mkdir(mode=0o755)
            _chown_tree(directory, self._host_uid)
        self._write_etc()
        for path, text in (files or {}).items():
            self.write(path, text)

    # ---- commands ----------------------------------------------------------------------

    def run(self, command: str, *, stdin: str | None = None, timeout_s: float | None = None) -> RunResult:
        """`bash -c COMMAND` in the sandbox, cwd /work; killed with all it started after the timeout."""
        return self._execute(["bash", "-c", command], stdin=stdin, timeout_s=timeout_s)

    def run_python(self, code: str, *, timeout_s: float | None = None) -> RunResult:
        """python3 with `code` as its program (read from stdin, so the code itself cannot read stdin)."""
        return self._execute(["python3", "-"], stdin=code, timeout_s=timeout_s)

    def _execute(self, argv: list[str], *, stdin: str | None, timeout_s: float | None) -> RunResult:
        if self._closed:
            raise RuntimeError("this Sandbox is closed; create a new one")
        timeout_s = self.limits.wall_s if timeout_s is None else timeout_s
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        user_kwargs = {} if self._host_uid is None else {"user": self._host_uid, "group": self._host_uid, "extra_groups": []}
        started = time.monotonic()
        process = self._budget.launch(
            self._bwrap_argv() + self._prlimit_argv() + argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills bwrap and its helpers
            close_fds=True,
            cwd=self._base,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            umask=0o022,  # the usual one inside, whatever the host process runs with (the CLI: 077)
            **user_kwargs,
        )
        self._process = process
        exceeded = ""
        try:
            stdout, stderr, timed_out, exceeded = self._communicate(process, stdin, started + timeout_s)
        finally:
            self._kill(process)
            process.wait()
            self._process = None
            if not self._closed:
                exceeded = "; ".join(note for note in (exceeded, self._budget.end_command()) if note)
                self._empty_scratch()
        exit_code = process.returncode if process.returncode >= 0 else 128 - process.returncode
        max_chars = self.limits.max_output_chars
        return RunResult(
            stdout=stdout.text(max_chars),
            stderr=stderr.text(max_chars),
            exit_code=exit_code,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            exceeded=exceeded,
        )

    def _empty_scratch(self) -> None:
        """/tmp and /dev/shm start empty for every command (only /work persists)."""
        for name in _SCRATCH_DIRS:
            os.chmod(self._base / name, 0o755)  # a command may have chmod-ed it away from a non-root host
            for entry in os.scandir(self._base / name):
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)

    def _communicate(
        self, process: subprocess.Popen[bytes], stdin: str | None, deadline: float
    ) -> tuple[_BoundedCapture, _BoundedCapture, bool, str]:
        """Feed stdin and drain stdout/stderr until the command ends, the deadline passes or it
        exceeds an episode total: (stdout, stderr, timed out, which total it exceeded or "")."""
        keep_bytes = 4 * self.limits.max_output_chars  # enough for max_output_chars of UTF-8
        captures = {"stdout": _BoundedCapture(keep_bytes), "stderr": _BoundedCapture(keep_bytes)}
        selector = selectors.DefaultSelector()
        assert process.stdout is not None and process.stderr is not None
        selector.register(process.stdout, selectors.EVENT_READ, captures["stdout"])
        selector.register(process.stderr, selectors.EVENT_READ, captures["stderr"])
        pending = memoryview((stdin or "").encode("utf-8"))
        if process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            if pending:
                selector.register(process.stdin, selectors.EVENT_WRITE, None)
            else:
                process.stdin.close()
        timed_out, exceeded, killed = False, "", False
        open_readers = 2
        while open_readers or not (killed or process.poll() is not None):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (not killed and (exceeded := self._budget.check() or "")):
                if killed:
                    break  # killed, and still no EOF after the grace period: give up on the pipes
                if exceeded:
                    ended = process.poll() is not None  # between two polls
                    exceeded += "; the command had ended" if ended else "; the command and everything it started were killed"
                timed_out, killed = not exceeded, True
                self._kill(process)
                self._budget.kill_all()
                deadline = time.monotonic() + _KILL_GRACE_S
                continue
            if not open_readers:  # it closed its output but runs on: wait for it, still watching the totals
                try:
                    process.wait(timeout=min(remaining, self._budget.next_check_in()))
                except subprocess.TimeoutExpired:
                    pass
                continue
            for key, _ in selector.select(timeout=min(remaining, self._budget.next_check_in())):
                if key.data is None:  # stdin is writable
                    pending = self._feed(key, pending)
                    if not pending:
                        selector.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.feed(chunk)
                else:
                    selector.unregister(key.fileobj)
                    open_readers -= 1
        selector.close()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        return captures["stdout"], captures["stderr"], timed_out, exceeded

    @staticmethod
    def _feed(key: selectors.SelectorKey, pending: memoryview) -> memoryview:
        """Write what stdin takes of `pending`; what is left."""
        try:
            written = os.write(key.fd, pending[:65536])
        except BrokenPipeError:
            written = len(pending)  # the command stopped reading; the rest is moot
        return pending[written:]

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # not our process group any more; kill bwrap itself
            process.kill()

    def _prlimit_argv(self) -> list[str]:
        limits = self.limits
        memory_bytes = limits.memory_mb * 1024 * 1024
        file_bytes = self._budget.file_size_cap(limits.file_mb * 1024 * 1024)
        return [
            "prlimit",
            f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",  # SIGXCPU first, so the shell can say why
            f"--as={memory_bytes}",
            f"--nproc={limits.processes}",
            f"--fsize={file_bytes}",
            "--core=0",
            "--",
        ]

    def _bwrap_argv(self) -> list[str]:
        options = _bwrap_options()
        argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user"]
        if "--disable-userns" in options:
            argv.append("--disable-userns")
        argv += ["--uid", str(_INSIDE_UID), "--gid", str(_INSIDE_UID), "--hostname", "sandbox"]
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": SANDBOX_WORKDIR,
            "USER": "agent",
            "LOGNAME": "agent",
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ litter in the agent's tree
        }
        python_prefix = _python_prefix()
        if python_prefix:
            environment["PATH"] = f"{python_prefix}/bin:" + environment["PATH"]
        for key, value in environment.items():
            argv += ["--setenv", key, value]
        argv += ["--ro-bind", "/usr", "/usr", "--tmpfs", "/usr/local"]
        for name in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/usr/{name}").exists():
                argv += ["--symlink", f"usr/{name}", f"/{name}"]
        if not Path("/usr/bin/python").exists():
            argv += ["--symlink", "/usr/bin/python3" if not python_prefix else f"{python_prefix}/bin/python3",
                     "/usr/local/bin/python"]
        if python_prefix:
            argv += ["--ro-bind", python_prefix, python_prefix]
        argv += ["--ro-bind", str(self._etc), "/etc"]
        for name in _SYSTEM_ETC:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for name, inside in _SCRATCH_DIRS.items():  # in the sandbox's directory, so inside the disk quota
            argv += ["--bind", str(self._base / name), inside]
        argv += ["--bind", str(self.root), SANDBOX_WORKDIR, "--chdir", SANDBOX_WORKDIR]
        # bwrap's own tmpfs (/, /usr/local, /dev) would be writable and as large as half the RAM.
        argv += ["--remount-ro", "/usr/local", "--remount-ro", "/dev", "--remount-ro", "/", "--"]
        return argv

    def _write_etc(self) -> None:
        """A minimal /etc: who `agent` is, localhost, and mount points for the host pieces we bind."""
        self._etc.mkdir(mode=0o755)
        uid = _INSIDE_UID
        generated = {
            "passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nagent:x:{uid}:{uid}:agent:{SANDBOX_WORKDIR}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            "group": f"root:x:0:\nagent:x:{uid}:\nnogroup:x:65534:\n",
            "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
            "hostname": "sandbox\n",
            "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        }
        for name, text in generated.items():
            (self._etc / name).write_text(text)
        for name in _SYSTEM_ETC:
            host = Path("/etc") / name
            if host.is_dir():
                (self._etc / name).mkdir()
            elif host.exists():
                (self._etc / name).touch()
        for path in [self._etc, *self._etc.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    # ---- host-side file access ---------------------------------------------------------

    def _host_path(self, path: str) -> Path:
        """The host path for a sandbox-relative path; refuses anything that resolves outside."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise SandboxPathError(f"a sandbox path must be a non-empty relative path, got {path!r}")
        if PurePosixPath(path).is_absolute():
            raise SandboxPathError(
                f"absolute path {path!r} refused: give a path relative to the sandbox directory ({SANDBOX_WORKDIR} inside)"
            )
        root = self.root.resolve()
        try:
            resolved = (root / path).resolve()  # follows symlinks a command may have planted
        except (OSError, RuntimeError) as error:  # a symlink loop
            raise SandboxPathError(f"path {path!r} cannot be resolved ({error}); refused") from error
        if resolved != root and not resolved.is_relative_to(root):
            raise SandboxPathError(f"path {path!r} resolves to {resolved}, outside the sandbox directory; refused")
        return resolved

    def read(self, path: str) -> str:
        """The text of a file in the sandbox (undecodable bytes replaced)."""
        self._check_open()
        with open(_open_no_symlink(self._host_path(path), os.O_RDONLY, path), "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")

    def write(self, path: str, text: str) -> None:
        """Create or replace a file in the sandbox (and its parent directories), owned by the sandbox user."""
        self._check_open()
        host_path = self._host_path(path)
        if host_path == self.root.resolve():
            raise SandboxPathError(f"path {path!r} names the sandbox directory itself, not a file")
        missing = [parent for parent in reversed(host_path.parents) if not parent.exists()]
        for directory in missing:
            directory.mkdir()
            directory.chmod(0o755)  # not the host process's umask (the CLI's is 077): the task sets modes
            _chown_tree(directory, self._host_uid)
        self._host_path(path)  # check again now the parents exist
        data = text.encode("utf-8")
        self._budget.check_room(len(data))
        created = not host_path.exists()
        with open(_open_no_symlink(host_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, path), "wb") as handle:
            handle.write(data)
            if created:  # a seeded file is 644 whatever the umask; a replaced one keeps its mode
                os.fchmod(handle.fileno(), 0o644)
        _chown_tree(host_path, self._host_uid)

    # ---- lifetime ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Sandbox is closed; create a new one")

    def close(self) -> None:
        """Kill a command still running (from another thread) and remove the directory; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._process is not None:
            self._kill(self._process)
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else str(self.root)
        return f"Sandbox({state})"


class SandboxedEnv:
    """What every sandboxed environment shares: one sandbox per episode, closed with it.

    Subclasses set `self._sandbox` (a `Sandbox` or None) and `self._task`."""

    _sandbox: Sandbox | None = None
    _task: object | None = None

    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def close(self) -> None:
        """Remove the sandbox; safe to call twice, and the env can be reset again afterwards."""
        self._close_sandbox()
        self._task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
