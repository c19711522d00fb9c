"""The sandbox: commands work inside it, and every way out we could think of is closed.

Each test states an escape attempt or a limit and checks both the command's view (it
failed) and the host's view (nothing changed, nothing left running).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openclaw_rl.envs import sandbox as sandbox_module
from openclaw_rl.envs.sandbox import (
    Limits,
    RunResult,
    Sandbox,
    SandboxPathError,
    SandboxUnavailableError,
    sandbox_available,
)

AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=WHY)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
FAST = Limits(cpu_s=2, memory_mb=256, wall_s=5.0, processes=16, file_mb=1, max_output_chars=1000)


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
    for target in ("/usr/bin", "/etc", "/", "/work/..", "/proc/1"):
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


def test_run_result_text() -> None:
    assert RunResult("out\n", "", 0, False).text() == "out"
    assert RunResult("", "", 0, False).text() == "(no output)"
    assert RunResult("a\n", "oops\n", 2, False).text() == "a\noops\n[exit code 2]"
    assert RunResult("", "", 137, True, 3.04).text().startswith("[timed out after 3.0 s")


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="wall_s must be positive"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="processes must be at least 4"):
        Limits(processes=2)


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
