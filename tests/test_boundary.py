"""The operating-system boundaries model-written checks run behind (issue 14, item 6; issue 26).

One escape suite for every sandbox provider (:mod:`interlock.judging.sandboxes`): a script tries
every route out we could think of behind each provider's boundary, with the seccomp filter and
the audit hook (as the judge runs it) and behind the boundary alone (both off: the boundary
holds by itself); for ``namespaces`` also through a user namespace (the way an unprivileged
caller takes, exercised even when the tests run as root). Each route fails, with an error rather
than a bug in the test's script, and a canary file outside the workspace stays unchanged and
unread. A provider this machine cannot build is skipped, with the probe's reason in the skip
(``pytest -rs`` lists them). Then the set-up's record, and a machine without any boundary:
model-written checks refuse to run, with the reason; they never run with less.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from interlock.core.chat import ToolCall
from interlock.judging import boundary, sandbox
from interlock.judging.boundary import Mode
from interlock.judging.inspection import InspectionEnvironment
from interlock.judging.sandbox import Limits, ScriptResult, run_script
from interlock.synthesis.workspace import materialize

from helpers.boundary import require_boundary
from helpers.repo import REPO, command_timeout

READ_ONLY_MOUNTS = sandbox.read_only_mounts()

TIGHT = Limits(cpu_seconds=2, wall_seconds=5, memory_mb=256, file_mb=1, output_chars=6000)
FILES = {"out/decisions.csv": "case_id,outcome\nC-1,approved\n", "cases.csv": "id,amount\nC-1,420\n"}
#: (provider, audit hook and seccomp, user namespace) for each way a script is run
LAYERINGS = {"boundary, seccomp and hook": (True, None), "boundary alone": (False, None),
             "user namespace alone": (False, True)}
LAYERS = {f"{provider}: {name}": (provider, *layering) for provider in boundary.PROVIDERS
          for name, layering in LAYERINGS.items()
          if provider == boundary.NAMESPACES or name != "user namespace alone"}
#: what a script raises when it is wrong rather than refused: a broken test, not a route that failed
BUGS = ("NameError", "SyntaxError", "TypeError", "AttributeError", "ImportError", "ModuleNotFoundError",
        "IndentationError")
STDLIB = sysconfig.get_paths()["stdlib"]
#: files a route tries to create outside (the interpreter's library, the venv, the C libraries)
ESCAPES = (Path(STDLIB) / "interlock-escaped.txt", Path(sys.prefix) / "interlock-escaped.txt",
           Path("/usr/lib/interlock-escaped.txt"))


@dataclass(frozen=True)
class Outside:
    """What lies outside the workspace: a canary file and servers a script might reach."""

    folder: Path
    canary: Path
    secret: str
    tcp_port: int
    abstract: str  # an abstract unix socket's name (no file: scoped to the network namespace)
    unix: Path  # a unix socket file


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[int, str, Path, list[socket.socket]]]:
    folder = tmp_path_factory.mktemp("servers")
    tcp = socket.create_server(("127.0.0.1", 0))
    abstract_name = f"interlock-test-{secrets.token_hex(6)}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(folder / "judge.sock"))
    listening = [tcp, abstract, unix]
    for server in listening:
        server.listen()
        server.setblocking(False)
    yield tcp.getsockname()[1], abstract_name, folder / "judge.sock", listening
    for server in listening:
        server.close()


def _snapshot(folder: Path) -> dict[str, tuple]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.lstat().st_mtime_ns,
                                         p.lstat().st_mode, p.lstat().st_uid, p.lstat().st_nlink)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def outside(tmp_path: Path, servers) -> Iterator[Outside]:
    """A canary outside the workspace; afterwards nothing there changed, and no server was reached."""
    folder = tmp_path / "outside"
    folder.mkdir()
    secret = f"CANARY-{secrets.token_hex(8)}"
    (folder / "canary.txt").write_text(secret)
    before = _snapshot(folder)
    port, abstract, unix, listening = servers
    yield Outside(folder, folder / "canary.txt", secret, port, abstract, unix)
    assert _snapshot(folder) == before
    for server in listening:
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected


@pytest.fixture
def workspace(tmp_path: Path, outside: Outside) -> Path:
    """The workspace, with a link an agent planted to the canary."""
    materialize(FILES, tmp_path / "ws")
    (tmp_path / "ws" / "planted").symlink_to(outside.canary)
    return tmp_path / "ws"


@functools.cache
def _user_namespace_mode() -> Mode:
    return sandbox.probe_boundary()  # called with USER_NAMESPACE set to True


def provider_of(layers: str) -> str:
    return LAYERS[layers][0]


@pytest.fixture(params=list(LAYERS))
def layers(request, monkeypatch, workspace: Path) -> str:
    provider, hook, userns = LAYERS[request.param]
    mode = sandbox.boundary_mode(provider)
    if not mode.available:
        pytest.skip(f"sandbox provider {provider} is not available here: {mode.detail}")
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", hook)
    monkeypatch.setattr(sandbox, "SECCOMP", hook)
    monkeypatch.setattr(sandbox, "USER_NAMESPACE", userns)
    if userns and not _user_namespace_mode().available:
        pytest.skip(f"no user namespace for scripts here: {_user_namespace_mode().detail}")
    return request.param


def _libc(body: str) -> str:
    return "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n" + body


def _routes(o: Outside) -> dict[str, str]:
    c, judge = str(o.canary), os.getpid()
    read_canary = f"print(open({c!r}).read())"
    return {
        "absolute path, read": f"print(open({c!r}).read())",
        "absolute path, write": f"open({c!r}, 'w').write('x')",
        "dot-dot": f"print(open('../../../../../../../../..' + {c!r}).read())",
        "directory handle on /": (
            "import os\nroot = os.open('/', os.O_RDONLY)\n"
            f"print(os.read(os.open({c.lstrip('/')!r}, os.O_RDONLY, dir_fd=root), 99))"),
        "directory handle on the interpreter's library (issue 14's route)": (
            f"import os\nlib = os.open({STDLIB!r}, os.O_RDONLY)\n"
            f"os.write(os.open({ESCAPES[0].name!r}, os.O_WRONLY | os.O_CREAT, dir_fd=lib), b'x')"),
        "directory handle climbing from the workspace": (
            "import os\nhere = os.open('.', os.O_RDONLY)\n"
            f"print(os.read(os.open('../../../../../../../..' + {c!r}, os.O_RDONLY, dir_fd=here), 99))"),
        "/proc/self/root": f"print(open('/proc/self/root' + {c!r}).read())",
        "/proc/self/cwd": f"print(open('/proc/self/cwd/../../../../../../..' + {c!r}).read())",
        "/proc/1/root": f"print(open('/proc/1/root' + {c!r}).read())",
        "/proc of the judge": f"print(open('/proc/{judge}/root' + {c!r}).read())",
        "symbolic link, read": f"import os\nos.symlink({c!r}, 'link')\nprint(open('link').read())",
        "symbolic link, write": f"import os\nos.symlink({c!r}, 'link')\nopen('link', 'a').write('x')",
        "planted symbolic link, read": "print(open('planted').read())",
        "planted symbolic link, write": "open('planted', 'a').write('x')",
        "hard link": f"import os\nos.link({c!r}, 'hard')\nopen('hard', 'a').write('x')",
        "ctypes, the C library's open": _libc(
            f"fd = libc.open({c.encode()!r}, 0)\nassert fd >= 0, os.strerror(ctypes.get_errno())\n"
            "print(os.read(fd, 99))"),
        "ctypes, openat from a handle on /": _libc(
            f"root = os.open('/', os.O_RDONLY)\nfd = libc.openat(root, {c.lstrip('/').encode()!r}, 0)\n"
            "assert fd >= 0, os.strerror(ctypes.get_errno())\nprint(os.read(fd, 99))"),
        "ctypes, remount the venv read-write": _libc(
            f"assert libc.mount(None, {sys.prefix.encode()!r}, None, ctypes.c_ulong(0x1020), None) == 0, "
            "os.strerror(ctypes.get_errno())\n"
            f"open({str(ESCAPES[1])!r}, 'w').write('x')"),
        "ctypes, unmount the root": _libc(
            "assert libc.umount2(b'/', 2) == 0, os.strerror(ctypes.get_errno())\n"
            f"print(open({c!r}).read())"),
        "nested user namespace, chroot escape": _libc(
            "os.mkdir('/tmp/jail')\n"
            "assert libc.unshare(0x10000000) == 0, os.strerror(ctypes.get_errno())\n"
            "os.chroot('/tmp/jail')\nos.chdir('../../../../../../..')\n"
            f"os.chroot('.')\nprint(open({c!r}).read())"),
        "nested user namespace, mount /proc": _libc(
            "os.mkdir('/tmp/proc')\n"
            "assert libc.unshare(0x10000000 | 0x20000) == 0, os.strerror(ctypes.get_errno())\n"
            "assert libc.mount(b'proc', b'/tmp/proc', b'proc', ctypes.c_ulong(0), None) == 0, "
            "os.strerror(ctypes.get_errno())\n"
            f"print(open('/tmp/proc/{judge}/root' + {c!r}).read())"),
        "subprocess": ("import subprocess, sys\n"
                       f"subprocess.run([sys.executable, '-c', {read_canary!r}], check=True)"),
        "os.system": f"import os\nassert os.system('cat {c}') == 0",
        "os.execv": f"import os\nos.execv('/bin/sh', ['sh', '-c', 'cat {c}'])",
        "os.fork": ("import os\npid = os.fork()\nif pid == 0:\n    try:\n"
                    f"        open({c!r}, 'w').write('x')\n        os._exit(0)\n"
                    "    except BaseException:\n        os._exit(1)\n"
                    "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0"),
        "the repository's files": f"print(open({str(REPO / 'params.yaml')!r}).read())",
        "the judge's own code": f"print(open({str(Path(sandbox.__file__))!r}).read())",
        "the data folder (private checks)": f"import os\nprint(os.listdir({str(REPO / 'data')!r}))",
        "/etc/shadow": "print(open('/etc/shadow').read())",
        "root's home": "print(open('/root/.bashrc').read())",
        "a disk or the kernel's memory": (
            "import os\nopened = []\nfor name in ('/dev/vda', '/dev/sda', '/dev/nvme0n1', '/dev/mem', "
            "'/dev/kmsg', '/dev/tty'):\n    try:\n        os.close(os.open(name, os.O_RDONLY))\n"
            "        opened.append(name)\n    except OSError as exc:\n        print(exc)\n"
            "assert opened, 'none could be opened'"),
        "/sys": "import os\nprint(os.listdir('/sys/fs/cgroup'))",
        "write the virtual environment": f"open({str(ESCAPES[1])!r}, 'w').write('x')",
        "write the interpreter's library": "import os\nopen(os.__file__, 'a').write('#')",
        "write the C libraries": f"open({str(ESCAPES[2])!r}, 'w').write('x')",
        "the network, TCP to this machine": (
            f"import socket\nsocket.create_connection(('127.0.0.1', {o.tcp_port}), timeout=1)"),
        "the network, an abstract unix socket": (
            f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0{o.abstract}')"),
        "the network, a unix socket file": (
            f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(o.unix)!r})"),
        "signal the judge": f"import os\nos.kill({judge}, 0)",
        "signal every process it may": "import os\nos.kill(-1, 0)",
        "become root": "import os\nos.setuid(0)",
    }


ROUTE_NAMES = sorted(_routes(Outside(Path("/x"), Path("/x/c"), "", 1, "a", Path("/x/s"))))
INTERPRETER_OS = Path(os.__file__)
INTERPRETER_OS_STAT = INTERPRETER_OS.stat()


def _assert_untouched(result: ScriptResult, outside: Outside) -> None:
    assert outside.secret not in result.output
    assert outside.canary.read_text() == outside.secret
    for escaped in ESCAPES:
        assert not escaped.exists(), f"{escaped} was written"
    now = INTERPRETER_OS.stat()
    assert (now.st_size, now.st_mtime_ns) == (INTERPRETER_OS_STAT.st_size, INTERPRETER_OS_STAT.st_mtime_ns)


@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_every_route_out_fails(route: str, layers: str, outside: Outside, workspace: Path) -> None:
    result = run_script(_routes(outside)[route], workspace, TIGHT, provider=provider_of(layers))
    try:
        assert not result.passed, f"{route} ({layers}) got out:\n{result.output}"
        assert result.reason == "exit status 1", result.reason  # it ran, and an error stopped it
        assert not any(bug in result.output for bug in BUGS), result.output
        _assert_untouched(result, outside)
    finally:
        for escaped in ESCAPES:
            escaped.unlink(missing_ok=True)


FORK_BOMB = ("import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n        time.sleep(30)\n"
             "        os._exit(0)\n")


def test_a_fork_bomb_runs_out_of_forks(layers: str, workspace: Path) -> None:
    """As the judge runs scripts, the seccomp filter allows no new process; behind the boundary
    alone, the process-count limit stops the bomb, except for root behind a provider's user
    namespace (root's uid outside it is exempt from RLIMIT_NPROC: docs/judging.md)."""
    provider, hook, userns = LAYERS[layers]
    if not hook and os.geteuid() == 0 and (provider != boundary.NAMESPACES or userns):
        pytest.skip(f"{layers}: started by root, the script keeps root's uid outside its user namespace, "
                    "which RLIMIT_NPROC exempts; only the seccomp filter stops a fork bomb there")
    result = run_script(FORK_BOMB, workspace, TIGHT, provider=provider)
    assert not result.passed and result.reason == "exit status 1", (result.reason, result.output)
    expected = "PermissionError" if hook else "BlockingIOError"
    assert result.output.strip().splitlines()[-1].startswith(expected), result.output


def test_writing_through_a_planted_hard_link_changes_only_the_copy(layers: str, outside: Outside,
                                                                  workspace: Path) -> None:
    os.link(outside.canary, workspace / "hard")  # the copy holds its content, but not the file
    result = run_script("open('hard', 'w').write('changed')\nprint(open('hard').read())", workspace, TIGHT,
                        provider=provider_of(layers))
    assert result.passed and "changed" in result.output
    assert outside.canary.read_text() == outside.secret
    (workspace / "hard").unlink()


_INSIDE = """
import os, sys
assert os.getcwd() == "/workspace" and os.geteuid() == 65534 and os.getpid() == 2, (os.getcwd(), os.geteuid())
assert open("out/decisions.csv").read().startswith("case_id,outcome"), "the workspace copy is readable"
open("note.txt", "w").write("x")
open("/tmp/scratch.txt", "w").write("x")
import csv, decimal, json, datetime, statistics  # the standard library works
"""
_LOOK_AROUND = """
top = sorted(os.listdir("/"))
assert not {"etc", "proc", "sys", "home", "var", "run", "boot"} & set(top), top
assert sorted(os.listdir("/dev")) == ["null", "random", "urandom", "zero"], os.listdir("/dev")
repo = %r
if os.path.isdir(repo):
    assert set(os.listdir(repo)) <= {".venv"}, os.listdir(repo)  # the venv, none of the project
print("top:", top)
"""


def test_a_check_runs_behind_each_layering(layers: str, workspace: Path) -> None:
    provider, hook, userns = LAYERS[layers]
    code = _INSIDE + ("" if hook else _LOOK_AROUND % str(REPO))
    result = run_script(code, workspace, TIGHT, provider=provider)
    assert result.passed, result.output
    if provider == boundary.NAMESPACES:
        expected = ("namespaces (user, mount, pid, net, ipc, uts)" if userns or os.geteuid() != 0
                    else "namespaces (mount, pid, net, ipc, uts)")
        assert result.isolation[0] == expected
        assert {"netns", "pivot-root"} <= set(result.isolation)
    else:
        assert result.isolation[0] == f"{provider} (its own namespaces and root)"
    assert {"no-capabilities", "no-new-privs", "rlimits", "minimal-env"} <= set(result.isolation)
    assert ("uid 65534 (user namespace)" if userns else "uid 65534") in result.isolation
    assert ("audit-hook" in result.isolation) == hook
    assert any(layer.startswith("seccomp (") for layer in result.isolation) == hook
    assert not (workspace / "note.txt").exists()  # its copy changed, not the workspace


def test_an_environment_under_tmp_shows_inside_the_scripts_tmp(layers: str, monkeypatch,
                                                                tmp_path: Path, workspace: Path) -> None:
    """A checkout cloned under /tmp puts its virtual environment there, where the script's own
    /tmp is mounted: both must show (the read-only folder inside the writable one)."""
    library = tmp_path / "venv" / "lib"
    library.mkdir(parents=True)
    (library / "marker.txt").write_text("installed")
    monkeypatch.setattr(sandbox, "read_only_mounts", lambda: [*READ_ONLY_MOUNTS, str(tmp_path / "venv")])
    code = (f"import os\nassert open({str(library / 'marker.txt')!r}).read() == 'installed'\n"
            f"open('/tmp/scratch.txt', 'w').write('ok')\n"
            f"try:\n    open({str(library / 'new.txt')!r}, 'w')\nexcept OSError:\n    pass\n"
            f"else:\n    raise SystemExit('the environment is writable')\n")
    result = run_script(code, workspace, TIGHT, provider=provider_of(layers))
    assert result.passed, (result.reason, result.output)
    assert not (library / "new.txt").exists()


# ----------------------------------------------------------------------------- seen from outside

def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _script_process(deadline: float) -> int:
    """The process running the script: our child's grandchild (its init's child)."""
    while time.monotonic() < deadline:
        for child in _children(os.getpid()):
            if b"_child.py\0script" in Path(f"/proc/{child}/cmdline").read_bytes():
                for init in _children(child):
                    for script in _children(init):
                        if Path(f"/proc/{script}/root/workspace/made.txt").exists():
                            return script
        time.sleep(0.05)
    raise AssertionError("the script's process was not found")


def test_the_script_is_an_unprivileged_process_in_namespaces_of_its_own(workspace: Path) -> None:
    """Seen from outside, the ``namespaces`` provider's script: the real ``nobody`` (even when the
    judge is root), no capabilities, PID 2 of namespaces of its own."""
    mode = sandbox.boundary_mode(boundary.NAMESPACES)
    if not mode.available:
        pytest.skip(f"sandbox provider namespaces is not available here: {mode.detail}")
    results: list[ScriptResult] = []
    code = "open('made.txt', 'w').write('x')\nimport time\ntime.sleep(4)\n"
    slow = Limits(wall_seconds=20)
    thread = threading.Thread(target=lambda: results.append(
        run_script(code, workspace, slow, provider=boundary.NAMESPACES)))
    thread.start()
    try:
        pid = _script_process(time.monotonic() + 10)
        status = _status(pid)
        made = os.stat(f"/proc/{pid}/root/workspace/made.txt")
        namespaces = {name: (os.readlink(f"/proc/{pid}/ns/{name}"), os.readlink(f"/proc/self/ns/{name}"))
                      for name in ("mnt", "pid", "net", "ipc", "uts")}
    finally:
        thread.join()
    outside_uid = 65534 if os.geteuid() == 0 else os.geteuid()
    assert status["Uid"].split() == [str(outside_uid)] * 4
    assert made.st_uid == outside_uid != 0  # what it writes is not root's
    assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    assert status["NSpid"].split()[1:] == ["2"]  # PID 2 of a PID namespace below ours
    assert all(theirs != ours for theirs, ours in namespaces.values()), namespaces
    assert results and results[0].passed


# ----------------------------------------------------------------------------- the recorded mode

@pytest.mark.parametrize("provider", boundary.PROVIDERS)
def test_the_set_up_recorded_what_this_machine_allows(provider: str, workspace: Path) -> None:
    """``make venv`` probed every provider and recorded each answer; the record is what a probe
    finds now, and what scripts run under."""
    record = boundary.recorded(provider)
    assert record is not None, f"no record of {provider} at {boundary.RECORD}: run `make venv` (or " \
                               "`python -m interlock.judging.sandbox`)"
    fresh = sandbox.probe_boundary(provider)
    assert (record.name, record.detail) == (fresh.name, fresh.detail)
    assert sandbox.boundary_mode(provider) == record
    if record.available:
        assert record.name == provider and "uid 65534" in record.detail
        if provider == boundary.NAMESPACES:
            assert ("user" in record.detail) != (os.geteuid() == 0)
        assert run_script("pass", workspace, TIGHT, provider=provider).isolation[0].startswith(provider)
    else:
        assert record.detail.startswith(f"{provider}: ")
        refused = run_script("print('it ran')", workspace, TIGHT, provider=provider)
        assert not refused.passed and record.detail in refused.reason and "it ran" not in refused.output


def test_auto_takes_the_first_available_provider_in_order(workspace: Path) -> None:
    modes = [sandbox.boundary_mode(provider) for provider in boundary.preference()]
    chosen = sandbox.boundary_mode()
    if any(mode.available for mode in modes):
        assert chosen == next(mode for mode in modes if mode.available)
        assert run_script("pass", workspace, TIGHT).isolation[0].startswith(chosen.name)
    else:
        assert chosen.detail == "; ".join(mode.detail for mode in modes)
        require_boundary(workspace)  # asserts the refusal
    assert boundary.preference()[0] == (boundary.NAMESPACES if os.geteuid() == 0 else "bubblewrap")


def test_a_record_counts_only_for_its_own_kernel_and_user(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    boundary.write("bubblewrap", Mode(boundary.UNAVAILABLE, "recorded by the test"), path)
    boundary.write(boundary.NAMESPACES, Mode(boundary.NAMESPACES, "beside it"), path)
    assert boundary.recorded("bubblewrap", path) == Mode(boundary.UNAVAILABLE, "recorded by the test")
    assert boundary.recorded(boundary.NAMESPACES, path) == Mode(boundary.NAMESPACES, "beside it")
    assert boundary.recorded("docker", path) is None
    record = json.loads(path.read_text())
    record["bubblewrap"]["kernel"] = "another-kernel"
    path.write_text(json.dumps(record))
    assert boundary.recorded("bubblewrap", path) is None
    path.write_text("not json")
    assert boundary.recorded(boundary.NAMESPACES, path) is None


def test_without_a_boundary_model_written_checks_refuse(monkeypatch, tmp_path: Path, workspace: Path) -> None:
    """Every provider recorded unavailable: every script is refused with the reasons, none runs
    (not even one that would pass), and the judge's review tool reports the refusal instead of
    crashing."""
    record = tmp_path / "record.json"
    for provider in boundary.PROVIDERS:
        boundary.write(provider, Mode(boundary.UNAVAILABLE, f"{provider}: forced off by the test"), record)
    monkeypatch.setattr(boundary, "RECORD", record)
    sandbox.boundary_mode.cache_clear()
    try:
        reasons = "; ".join(f"{provider}: forced off by the test" for provider in boundary.preference())
        assert sandbox.boundary_mode().detail == reasons
        result = run_script("print('it ran')", workspace, TIGHT)
        review = InspectionEnvironment("criterion", workspace, TIGHT, "rollout", "C1").execute(
            ToolCall("run_check_script", {"code": "pass"}))
    finally:
        sandbox.boundary_mode.cache_clear()
    assert not result.passed and result.isolation == () and "it ran" not in result.output
    assert result.reason == ("refused: model-written checks run only behind an operating-system "
                             f"boundary, and this machine has none ({reasons})")
    assert review.ok and review.output.startswith("FAILED (refused: ")
    assert "forced off by the test" in review.output


def _can_confine_the_test() -> bool:
    """Whether util-linux's ``unshare`` can give a command a user namespace of its own here."""
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--user", "--map-root-user", "true"], capture_output=True,
        timeout=command_timeout()).returncode == 0


@pytest.mark.skipif(not _can_confine_the_test(), reason="needs util-linux's unshare and user namespaces")
def test_where_the_kernel_refuses_the_probe_says_why_and_scripts_do_not_run(workspace: Path) -> None:
    """Inside a user namespace allowed no nested ones, the boundary cannot be built: the probe
    answers unavailable with the kernel's reason, and a script run anyway (the record says the
    boundary exists) is refused by the child, unrun."""
    probe = ("import json, sys\nfrom interlock.core.registry import SANDBOXES\n"
             "from interlock.judging import sandbox\n"
             "mode = sandbox.probe_boundary('namespaces')\n"
             "result = SANDBOXES.get('namespaces')().run(\"print('it ran')\", sys.argv[1],\n"
             "                                            sandbox.DEFAULT_LIMITS, None)\n"
             "print(json.dumps([mode.name, mode.detail, result.passed, result.reason, result.output]))\n")
    command = ["unshare", "--user", "--map-root-user", "sh", "-c",
               'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1" "$2"',
               sys.executable, probe, str(workspace)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=command_timeout())
    assert done.returncode == 0, done.stderr
    name, detail, passed, reason, output = json.loads(done.stdout.splitlines()[-1])
    assert name == boundary.UNAVAILABLE and "unshare" in detail
    assert not passed and reason.startswith("refused: the sandbox's boundary could not be built")
    assert "unshare" in reason and "it ran" not in output
