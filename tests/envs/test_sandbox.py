"""The sandbox: commands work inside it, and every way out we could think of is closed.

Each test states an escape attempt or a limit and checks both the command's view (it
failed) and the host's view (nothing changed, nothing left running). The episode totals
(memory, processes, disk) are measured from the host while the escape runs, once with the
machine's mechanism and once with the host-side watches that stand in where cgroups or
mounts are not allowed; `-s` prints what each achieved.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

import pytest

from openclaw_rl.envs import budget as budget_module
from openclaw_rl.envs import sandbox as sandbox_module
from openclaw_rl.envs.sandbox import (
    Limits,
    RunResult,
    Sandbox,
    SandboxPathError,
    SandboxUnavailableError,
    detect_enforcement,
    sandbox_available,
)

AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=WHY)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
FAST = Limits(cpu_s=2, memory_mb=256, wall_s=5.0, processes=16, file_mb=1, max_output_chars=1000)
MIB = 1024 * 1024


@pytest.fixture
def box() -> Iterator[Sandbox]:
    with Sandbox(FAST, files={"notes/a.txt": "alpha\nbeta\n"}) as sandbox:
        yield sandbox


def host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes containing `marker` (sandboxed ones are visible from the host)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(cmdline)
    return found


# ---- it works ------------------------------------------------------------------------


@needs_sandbox
def test_commands_run_in_the_seeded_directory(box: Sandbox) -> None:
    result = box.run("pwd; whoami; cat notes/a.txt | wc -l")
    assert result == RunResult("/work\nagent\n2\n", "", 0, False, result.duration_s)
    assert box.run("exit 3").exit_code == 3
    assert box.run("tr a-z A-Z", stdin="hello").stdout == "HELLO"


@needs_sandbox
def test_files_persist_between_commands_and_are_shared_with_the_host(box: Sandbox) -> None:
    box.run("echo made inside > inside.txt && mkdir -p d/e && chmod 600 inside.txt")
    assert box.read("inside.txt") == "made inside\n"
    box.write("d/e/from_host.txt", "made on the host\n")
    assert box.run("cat d/e/from_host.txt && echo more >> d/e/from_host.txt").exit_code == 0
    assert box.read("d/e/from_host.txt") == "made on the host\nmore\n"
    assert box.run("stat -c %a inside.txt").stdout == "600\n"


@needs_sandbox
def test_seeded_files_and_directories_get_their_modes_whatever_the_hosts_umask() -> None:
    """The CLI runs with umask 077 (its data is private): a seeded file must not start at 600, or a
    task that asks the agent to make a file private is solved before the agent acts."""
    previous = os.umask(0o077)
    try:
        with Sandbox(FAST, files={"keys/secret.key": "k\n"}) as sandbox:
            assert sandbox.run("stat -c %a keys/secret.key keys").stdout == "644\n755\n"
            sandbox.run("chmod 600 keys/secret.key")
            sandbox.write("keys/secret.key", "replaced\n")  # a replaced file keeps the mode it was given
            assert sandbox.run("stat -c %a keys/secret.key").stdout == "600\n"
    finally:
        os.umask(previous)


@needs_sandbox
def test_python_is_the_system_interpreter_without_the_project(box: Sandbox) -> None:
    result = box.run_python("import sys\nprint(sys.version_info[:2] >= (3, 8), sys.prefix)\nimport openclaw_rl")
    assert result.stdout.startswith("True ")
    assert sys.prefix not in result.stdout  # not our venv
    assert "ModuleNotFoundError: No module named 'openclaw_rl'" in result.stderr
    assert result.exit_code == 1
    assert box.run("python -c 'print(6 * 7)'").stdout == "42\n"  # `python` works too


@needs_sandbox
def test_common_tools_work_inside(box: Sandbox) -> None:
    result = box.run("printf 'b 2\\na 1\\n' | sort | awk '{s += $2} END {print s}'")
    assert result.stdout == "3\n", result.text()  # awk resolves through /etc/alternatives on Debian
    tools = "tar gzip sed grep find cut sort uniq wc xargs head tail tr chmod mkdir mv cp"
    assert box.run(f"command -v {tools}").exit_code == 0
    locked = box.run_python("import multiprocessing\nwith multiprocessing.Lock():\n    print('locked')")
    assert locked.stdout == "locked\n", locked.text()  # POSIX semaphores need a writable /dev/shm


# ---- no way out: files -----------------------------------------------------------------


@needs_sandbox
def test_project_home_and_secrets_are_invisible(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "host_secret.txt"
    secret.write_text("do not read me")
    targets = [PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / ".venv" / "bin" / "python", secret, Path("/etc/shadow")]
    for target in targets:
        result = box.run(f"cat {target}")
        assert result.exit_code != 0 and "do not read me" not in result.stdout, (target, result.text())
    assert box.run("ls /root || ls /home/* || ls /var").exit_code != 0
    assert box.run(f"ln -s {secret} link && cat link").exit_code != 0
    assert "pytest" not in box.run("cat /proc/*/cmdline").stdout  # no host processes in sight
    assert set(box.run("ls /usr/local").stdout.split()) <= {"bin"}  # the host's local installs are masked


@needs_sandbox
def test_nothing_outside_the_directory_is_writable(box: Sandbox) -> None:
    marker = f"openclaw-escape-{os.getpid()}-{time.monotonic_ns()}"
    for target in ("/usr/bin", "/etc", "/", "/work/..", "/proc/1", "/usr/local", "/dev"):
        result = box.run(f"touch {target}/{marker}")
        assert result.exit_code != 0, (target, result.text())
    assert box.run(f"cd .. && touch {marker}").exit_code != 0
    assert box.run(f"echo x > /tmp/{marker} && cat /tmp/{marker}").stdout == "x\n"  # a private tmpfs ...
    assert not (Path("/tmp") / marker).exists()  # ... not the host's /tmp
    assert not (box.root.parent / marker).exists()


@needs_sandbox
def test_host_side_read_and_write_refuse_paths_that_escape(box: Sandbox) -> None:
    box.run("ln -s /etc/passwd passwd_link && ln -s .. up && ln -s /work/notes abs_link && ln -s loop loop")
    escapes = ("../outside.txt", "/etc/passwd", "notes/../../x", "passwd_link", "up/x", "abs_link/a.txt", "loop", "")
    for path in escapes:
        with pytest.raises(SandboxPathError):
            box.write(path, "x")
        with pytest.raises(SandboxPathError):
            box.read(path)
    assert not (box.root.parent / "outside.txt").exists()
    assert box.read("notes/../notes/a.txt") == "alpha\nbeta\n"  # `..` that stays inside is fine


# ---- no way out: network ---------------------------------------------------------------


@needs_sandbox
def test_no_network_not_even_the_hosts_loopback(box: Sandbox) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        code = f"""
import socket
for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection(address, timeout=2).close()
        print("connected", address)
    except OSError as error:
        print("refused", type(error).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    print("resolved")
except OSError as error:
    print("no dns", type(error).__name__)
"""
        result = box.run_python(code)
        with pytest.raises(TimeoutError):
            server.accept()  # the host's server never saw a connection
    assert "connected" not in result.stdout and "resolved" not in result.stdout, result.text()
    assert result.stdout.count("refused") == 2 and "no dns" in result.stdout


# ---- limits ----------------------------------------------------------------------------


@needs_sandbox
def test_process_limit_caps_forks() -> None:
    code = """
import os, time
children = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(0.5)
            os._exit(0)
        children += 1
    except OSError:
        break
print(children)
"""
    with Sandbox(FAST) as box:
        result = box.run_python(code)
    assert 0 < int(result.stdout) < FAST.processes


@needs_sandbox
def test_fork_bomb_is_contained_and_the_host_survives() -> None:
    limits = Limits(cpu_s=2, wall_s=1.5, processes=16)
    with Sandbox(limits) as box:
        started = time.monotonic()
        result = box.run(":(){ :|:& };: ; sleep 30")
        assert time.monotonic() - started < limits.wall_s + 3
        assert result.timed_out
        assert box.run("echo still here").stdout == "still here\n"
        uid = box._host_uid
    if uid is not None:  # we are root: the sandbox ran as its own host uid, so we can look for its processes
        time.sleep(0.2)
        assert _live_processes_of(uid) == []


def _live_processes_of(uid: int) -> list[str]:
    """`pid state` of host processes owned by `uid`, zombies aside (dead, waiting for init to reap them)."""
    live = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            if proc_dir.stat().st_uid != uid:
                continue
            state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            live.append(f"{proc_dir.name} {state}")
    return live


@needs_sandbox
def test_memory_hog_gets_memory_error(box: Sandbox) -> None:
    result = box.run_python("block = bytearray(1024 * 1024 * 1024)\nprint('allocated')")
    assert "MemoryError" in result.stderr and "allocated" not in result.stdout
    assert result.exit_code == 1


@needs_sandbox
def test_infinite_loop_hits_the_cpu_limit() -> None:
    with Sandbox(Limits(cpu_s=1, wall_s=10.0)) as box:
        result = box.run("python3 -c 'while True: pass'")
    assert not result.timed_out and result.exit_code in (128 + 24, 128 + 9)  # SIGXCPU, then SIGKILL at the hard limit
    assert result.duration_s < 5


@needs_sandbox
def test_timeout_kills_the_command_and_its_children(box: Sandbox) -> None:
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 1_000_000}"
    result = box.run(f"sleep 100{marker} & (setsid sleep 200{marker} &) ; sleep 300{marker}", timeout_s=0.5)
    assert result.timed_out and result.exit_code == 128 + 9
    assert "timed out after" in result.text()
    time.sleep(0.2)
    assert host_processes_with(marker) == []


@needs_sandbox
def test_background_processes_do_not_outlive_their_command(box: Sandbox) -> None:
    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 1_000_000}"
    result = box.run(f"nohup setsid sleep 100{marker} > /dev/null 2>&1 &")
    assert result.exit_code == 0 and not result.timed_out
    time.sleep(0.2)
    assert host_processes_with(marker) == []


@needs_sandbox
def test_file_size_limit(box: Sandbox) -> None:
    result = box.run("head -c 2000000 /dev/zero > big.bin")
    assert result.exit_code != 0
    assert (box.root / "big.bin").stat().st_size <= FAST.file_mb * 1024 * 1024


@needs_sandbox
def test_long_output_is_truncated_with_a_note_keeping_head_and_tail(box: Sandbox) -> None:
    result = box.run("seq 1 100000; seq 1 3 >&2")
    assert result.stdout.startswith("1\n2\n3\n") and result.stdout.endswith("99999\n100000\n")
    assert "output truncated" in result.stdout
    assert len(result.stdout) < FAST.max_output_chars + 200
    assert result.stderr == "1\n2\n3\n"
    started = time.monotonic()
    flood = box.run("head -c 50000000 /dev/zero | tr '\\0' x")  # 50 MB never held in host memory
    assert len(flood.stdout) < FAST.max_output_chars + 200 and time.monotonic() - started < 5


# ---- episode totals: memory, processes and disk of all commands together -----------------


@pytest.fixture(params=["machine", "watch"])
def enforced(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The machine's mechanism, then the host-side watches (the fallback without cgroups or mounts)."""
    if request.param == "watch":
        watches = budget_module._Machine(cgroup=None, can_mount=False)
        if detect_enforcement() == watches.enforcement():
            pytest.skip("the watches are this machine's mechanism already")
        monkeypatch.setattr(budget_module, "_machine", lambda: watches)
    return request.param


class HostSampler:
    """Samples `measure()` from the host every few ms while a command runs; keeps the peak."""

    def __init__(self, measure: Callable[[], int]) -> None:
        self.measure = measure
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.measure())
            time.sleep(0.005)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def host_uid_of(box: Sandbox) -> int:
    """The host uid the sandbox runs as (its own when we are root); skip where it shares ours."""
    if box._host_uid is None:
        pytest.skip("not root: the sandbox runs as our own uid, so its processes cannot be told apart by uid")
    return box._host_uid


def resident_bytes_of(uid: int) -> int:
    total = 0
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            if proc_dir.stat().st_uid == uid:
                total += int((proc_dir / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError):
            continue
    return total


def disk_bytes_under(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        try:
            total += path.lstat().st_blocks * 512
        except OSError:
            continue
    return total


def settled_processes_of(uid: int) -> list[str]:
    """`_live_processes_of(uid)`, given up to 2 s for killed processes to finish dying."""
    deadline = time.monotonic() + 2.0
    while (live := _live_processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return live


HOG = """
import sys, time
chunks = []
for step in range(40):
    chunks.append(b"x" * (10 * 1024 * 1024))  # written, so resident
    print(sys.argv[1], (step + 1) * 10, flush=True)
print(sys.argv[1], "done", flush=True)
time.sleep(3)  # hold it: without a total, all eight hold 400 MB at once
"""


@needs_sandbox
def test_eight_processes_of_400_mb_at_once_are_killed_at_the_memory_total(enforced: str) -> None:
    limits = Limits(wall_s=15.0)  # 512 MB per process, so each of the eight alone is allowed
    with Sandbox(limits) as box:
        uid = host_uid_of(box)
        box.write("hog.py", HOG)
        started = time.monotonic()
        with HostSampler(lambda: resident_bytes_of(uid)) as memory:
            result = box.run("for i in 1 2 3 4 5 6 7 8; do python3 hog.py $i & done; wait")
        elapsed = time.monotonic() - started
        assert settled_processes_of(uid) == []
    watched = box.enforcement.memory == "rss-watch"
    print(f"\nmeasured ({box.enforcement.memory}): peak {memory.peak / MIB:.0f} MB resident of 8 x 400 MB "
          f"against a total of {limits.total_memory_mb} MB, killed after {elapsed:.2f} s")
    assert result.stdout.count("done") <= limits.total_memory_mb // 400, result.stdout
    assert memory.peak <= (limits.total_memory_mb + (512 if watched else 128)) * MIB  # RSS counts shared pages per process
    assert result.exit_code == 137 and not result.timed_out and elapsed < 10
    assert result.exceeded.startswith(f"memory total exceeded: all processes of the episode together may use "
                                      f"{limits.total_memory_mb} MB (Limits.total_memory_mb, enforced by {box.enforcement.memory})")
    assert f"[{result.exceeded}]" in result.text() and "were killed" in result.exceeded


@needs_sandbox
@pytest.mark.parametrize("target", ["/tmp", "/dev/shm"])
def test_writing_500_mb_to_tmp_stops_at_the_disk_quota(enforced: str, target: str) -> None:
    limits = Limits(wall_s=15.0)  # 256 MB for /work, /tmp and /dev/shm; files up to 64 MB
    writers = f"for i in 1 2 3 4; do (for j in 1 2 3 4 5; do head -c 25M /dev/zero > {target}/f$i.$j || exit 1; done) & done"
    with Sandbox(limits) as box:
        host_dir = box.root.parent / {"/tmp": "tmp", "/dev/shm": "shm"}[target]  # where it lands, in the sandbox's directory
        with HostSampler(lambda: disk_bytes_under(host_dir)) as disk:
            result = box.run(f"{writers}; wait")  # four processes, 125 MB each
        tmpfs = box.enforcement.disk == "tmpfs"
        print(f"\nmeasured ({box.enforcement.disk}): {disk.peak / MIB:.0f} MB of 500 MB landed in {target} "
              f"against a quota of {limits.disk_mb} MB")
        assert disk.peak <= limits.disk_mb * MIB if tmpfs else disk.peak < 450 * MIB
        assert "disk quota" in result.exceeded and f"{limits.disk_mb} MB (Limits.disk_mb, enforced by {box.enforcement.disk})" in result.exceeded
        assert "No space left on device" in result.stderr if tmpfs else result.exit_code == 137
        assert box.run(f"ls -A {target} | wc -l").stdout == "0\n"  # emptied after the command: the room is back
        assert not (Path("/tmp") / "f1.1").exists()


@needs_sandbox
def test_the_disk_quota_holds_across_commands_and_rm_gives_room_back(enforced: str) -> None:
    limits = Limits(wall_s=15.0)
    with Sandbox(limits) as box:
        first = box.run("for j in 1 2 3; do head -c 50M /dev/zero > a$j || exit 1; done")  # 150 MB: allowed
        assert first.exit_code == 0 and not first.exceeded, first.text()
        second = box.run("for j in 1 2 3; do head -c 50M /dev/zero > b$j || exit 1; done")  # 150 MB more: past 256
        tmpfs = box.enforcement.disk == "tmpfs"
        usage = disk_bytes_under(box.root)
        print(f"\nmeasured ({box.enforcement.disk}): /work held {usage / MIB:.0f} MB after writing 300 MB "
              f"in two commands against a quota of {limits.disk_mb} MB")
        assert f"may hold {limits.disk_mb} MB" in second.exceeded, second.text()
        assert second.exit_code != 0 or not tmpfs  # a watch may only see it after the command ended
        assert usage <= limits.disk_mb * MIB if tmpfs else usage <= 300 * MIB
        assert box.run("head -c 2M /dev/zero > c").exit_code != 0  # refused while full, by the next command too
        with pytest.raises(OSError, match="No space left on device|disk quota"):
            box.write("from_host.txt", "x" * 2 * MIB)  # and from the host
        assert box.run("rm b*").exit_code == 0
        again = box.run("head -c 50M /dev/zero > c && echo ok")
        assert again.stdout == "ok\n" and not again.exceeded, again.text()


@needs_sandbox
def test_a_fork_bomb_stops_at_the_process_limit(enforced: str) -> None:
    limits = Limits(wall_s=3.0)  # 64 processes
    with Sandbox(limits) as box:
        uid = host_uid_of(box)
        with HostSampler(lambda: len(_live_processes_of(uid))) as processes:
            result = box.run(":(){ :|:& };: ; sleep 30")
        print(f"\nmeasured ({box.enforcement.processes}): a fork bomb peaked at {processes.peak} processes "
              f"against a limit of {limits.processes}")
        assert result.timed_out
        # RLIMIT_NPROC counts inside the user namespace, so bwrap's own process outside it comes on top.
        assert limits.processes // 2 <= processes.peak <= limits.processes + 1
        if box.enforcement.processes.startswith("cgroup"):
            assert f"process limit reached: at most {limits.processes} processes" in result.exceeded
            assert "forks were refused" in result.text()
        assert settled_processes_of(uid) == []
        assert box.run("echo still here").stdout == "still here\n"


@needs_sandbox
def test_nothing_of_the_episode_is_left_after_close_mid_command(enforced: str) -> None:
    box = Sandbox(FAST)
    uid = host_uid_of(box)
    base = box.root.parent
    results: list[RunResult] = []
    command = "sleep 100 & (setsid sleep 200 &); head -c 20M /dev/zero > /tmp/f; python3 -c 'import time; time.sleep(300)'"
    runner = threading.Thread(target=lambda: results.append(box.run(command, timeout_s=30)))
    runner.start()
    deadline = time.monotonic() + 10
    while len(_live_processes_of(uid)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    box.close()  # from another thread, as a pool does when an episode is abandoned
    runner.join(timeout=10)
    assert not runner.is_alive() and results[0].exit_code == 137
    assert settled_processes_of(uid) == []
    assert not base.exists() and str(base) not in Path("/proc/self/mountinfo").read_text()
    assert list(Path("/sys/fs/cgroup").glob(f"*/**/{base.name}")) == []


@needs_sandbox
def test_a_crashed_host_process_leaves_no_mount_or_cgroup_behind() -> None:
    machine = budget_module._machine()
    if not machine.can_mount and machine.cgroup is None:
        pytest.skip("this machine gives sandboxes neither a tmpfs nor a cgroup")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names a process that no longer exists
    base = Path(tempfile.gettempdir()) / f"{budget_module.NAME_PREFIX}{gone.pid}-crashed"
    base.mkdir()
    budget_module.EpisodeBudget(base, budget_module.Totals(memory_mb=64, processes=8, disk_mb=1), None)  # never closed
    cgroups = [parent / base.name for parent in machine.cgroup.parents] if machine.cgroup else []
    assert (str(base) in Path("/proc/self/mountinfo").read_text()) == machine.can_mount
    assert all(cgroup.is_dir() for cgroup in cgroups)
    budget_module._sweep_leftovers(machine)  # what the next process to detect the machine does
    assert str(base) not in Path("/proc/self/mountinfo").read_text() and not base.exists()
    assert not any(cgroup.exists() for cgroup in cgroups)


@needs_sandbox
def test_the_mechanism_in_force_is_named() -> None:
    with Sandbox(FAST) as box:
        assert box.enforcement == detect_enforcement()
    assert box.enforcement.memory in {"cgroup-v2", "cgroup-v1", "rss-watch"}
    assert box.enforcement.disk in {"tmpfs", "usage-watch"}
    assert str(box.enforcement) in sandbox_available()[1]


def test_run_result_text() -> None:
    assert RunResult("out\n", "", 0, False).text() == "out"
    assert RunResult("", "", 0, False).text() == "(no output)"
    assert RunResult("a\n", "oops\n", 2, False).text() == "a\noops\n[exit code 2]"
    assert RunResult("", "", 137, True, 3.04).text().startswith("[timed out after 3.0 s")
    assert RunResult("", "", 137, False, 1.0, "memory total exceeded").text() == "[exit code 137]\n[memory total exceeded]"


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="wall_s must be positive"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="processes must be at least 4"):
        Limits(processes=2)
    with pytest.raises(ValueError, match="disk_mb must be positive"):
        Limits(disk_mb=0)
    with pytest.raises(ValueError, match="total_memory_mb must be at least 32"):
        Limits(total_memory_mb=8)


# ---- lifetime and availability -----------------------------------------------------------


@needs_sandbox
def test_close_removes_everything_and_is_idempotent() -> None:
    box = Sandbox(FAST)
    box.run("mkdir locked && touch locked/f && chmod 000 locked")
    base = box.root.parent
    box.close()
    box.close()
    assert not base.exists()
    with pytest.raises(RuntimeError, match="closed"):
        box.run("true")


def test_missing_bwrap_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = sandbox_module.shutil.which
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    ok, why = sandbox_available()
    assert not ok and "apt-get install bubblewrap" in why
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        Sandbox()
