"""The sandbox: compiled checks still work there; hostile scripts fail and get nothing.

Every hostile script runs in a fresh process with tight limits; the test asserts the script
failed, what it tried did not happen (no file outside its workspace, no connection received,
no secret in its output), and the parent carries on. Scripts run behind the operating-system
boundary (``test_boundary.py`` tries every route out of it); where this machine has none, a test
that runs scripts asserts they are refused and stops there.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

import pytest

from interlock.judging.sandbox import Limits, SandboxWorkers, minimal_env, run_script
from interlock.synthesis.workspace import materialize

from helpers.boundary import require_boundary

FILES = {"out/decisions.csv": "case_id,outcome,basis\nC-1,approved,P-1\n",
         "cases.csv": "id,amount\nC-1,420\n"}
RECORD = {"op": "record", "path": "out/decisions.csv", "format": "csv", "key_field": "case_id",
          "key": "C-1", "expect": {"outcome": "approved"}}
TIGHT = Limits(cpu_seconds=1, wall_seconds=3, memory_mb=256, file_mb=1, output_chars=2000)
SECRET = "INTERLOCK_TEST_SECRET"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    materialize(FILES, tmp_path / "ws")
    return tmp_path / "ws"


@pytest.fixture
def bounded(workspace: Path) -> None:
    require_boundary(workspace)


@pytest.fixture(scope="module")
def pool():
    with SandboxWorkers(2, Limits(cpu_seconds=2, wall_seconds=5, memory_mb=160)) as running:
        yield running


def test_compiled_checks_run_in_the_workers(pool: SandboxWorkers, workspace: Path,
                                            network_isolation: str) -> None:
    wrong = {**RECORD, "expect": {"outcome": "rejected"}}
    results = pool.run([(workspace, [RECORD, wrong, {"op": "nope"}])] * 5)
    assert len(results) == 5
    for outcomes in results:
        assert [o.passed for o in outcomes] == [True, False, False]
        assert "expected 'rejected'" in outcomes[1].evidence
    assert pool.network.split(" ")[0] == network_isolation


def test_pool_survives_a_worker_that_runs_out_of_memory(pool: SandboxWorkers, tmp_path: Path,
                                                        workspace: Path) -> None:
    huge = tmp_path / "huge"
    materialize({"out/decisions.csv": "case_id,outcome\n" + "C-9,x\n" * 30_000_000}, huge)  # ~180 MB
    results = pool.run([(huge, [RECORD]), (workspace, [RECORD])])
    assert results[0][0].passed is False
    # the check's own MemoryError, or the kernel's kill of the whole worker: either names memory
    assert re.fullmatch(r"check ran out of memory|the check process ended \(killed \(CPU hard limit "
                        r"or out of memory\);.*", results[0][0].evidence, re.S), results[0][0].evidence
    assert results[1][0].passed is True  # the next job runs on a working (or fresh) worker
    assert pool.run([(workspace, [RECORD])])[0][0].passed


def test_workers_read_only_through_the_confined_store(pool: SandboxWorkers, tmp_path: Path) -> None:
    (tmp_path / "secret.csv").write_text("case_id,outcome\nC-1,approved\n")
    ws = tmp_path / "ws2"
    ws.mkdir()
    (ws / "out").mkdir()
    (ws / "out" / "decisions.csv").symlink_to(tmp_path / "secret.csv")
    outcome = pool.run([(ws, [RECORD])])[0][0]
    assert not outcome.passed and "link" in outcome.evidence


def test_the_environment_is_minimal(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(SECRET, "s3cr3t")
    env = minimal_env(tmp_path)
    assert SECRET not in env
    assert set(env) <= {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE"}
    assert env["HOME"].startswith(str(tmp_path)) and env["TMPDIR"].startswith(str(tmp_path))


@pytest.mark.usefixtures("bounded")
def test_a_script_that_checks_passes(workspace: Path, network_isolation: str) -> None:
    code = ("import csv\nrows = list(csv.DictReader(open('out/decisions.csv')))\n"
            "assert rows[0]['outcome'] == 'approved'\nprint('checked', len(rows))\n")
    result = run_script(code, workspace, TIGHT)
    assert result.passed and result.reason == "passed" and "checked 1" in result.output
    assert "rlimits" in result.isolation and "audit-hook" in result.isolation
    assert result.isolation[0].startswith("namespaces") and "no-new-privs" in result.isolation
    assert [i.split(" ")[0] for i in result.isolation if i.startswith(("netns", "sockets"))] == [
        network_isolation]
    failing = run_script("assert False, 'outcome is wrong'", workspace, TIGHT)
    assert not failing.passed and "outcome is wrong" in failing.output


@pytest.mark.usefixtures("bounded")
def test_a_script_cannot_reach_the_network(workspace: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        for code in (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
                     f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))\n",
                     "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)\n"):
            result = run_script(code, workspace, TIGHT)
            assert not result.passed, code
        with pytest.raises(socket.timeout):
            server.accept()  # nothing ever connected
    finally:
        server.close()


@pytest.mark.usefixtures("bounded")
def test_a_script_cannot_write_outside_its_workspace(workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    for code in (f"open({str(target)!r}, 'w').write('x')\n",
                 "open('../../escaped.txt', 'w').write('x')\n",
                 f"import os\nos.symlink('/etc', 'etc')\nopen({str(target)!r}, 'a').write('x')\n",
                 f"import os\nos.system('touch {target}')\n",
                 f"import subprocess\nsubprocess.run(['touch', {str(target)!r}])\n",
                 f"import ctypes\nctypes.CDLL(None).system(b'touch {target}')\n",
                 f"import shutil\nshutil.rmtree({str(workspace)!r})\n"):
        result = run_script(code, workspace, TIGHT)
        assert not result.passed, code
    assert not target.exists()
    assert not (workspace.parent.parent / "escaped.txt").exists()
    assert (workspace / "out" / "decisions.csv").read_text() == FILES["out/decisions.csv"]
    # inside its own copy it may write; the original workspace is untouched
    assert run_script("open('note.txt', 'w').write('x')\n", workspace, TIGHT).passed
    assert not (workspace / "note.txt").exists()


@pytest.mark.usefixtures("bounded")
def test_a_script_that_sleeps_or_spins_is_stopped(workspace: Path) -> None:
    asleep = run_script("import time\ntime.sleep(600)\n", workspace, TIGHT)
    assert not asleep.passed and asleep.reason == f"wall-clock limit ({TIGHT.wall_seconds:g} s)"
    assert asleep.seconds < 600  # stopped, not slept out
    spinning = run_script("while True:\n    pass\n", workspace, TIGHT)
    assert not spinning.passed
    assert spinning.reason in (f"CPU time limit ({TIGHT.cpu_seconds:g} s)",
                               f"wall-clock limit ({TIGHT.wall_seconds:g} s)")


@pytest.mark.usefixtures("bounded")
def test_a_script_cannot_allocate_4_gb(workspace: Path) -> None:
    result = run_script("data = bytearray(4 * 1024 ** 3)\nprint(len(data))\n", workspace, TIGHT)
    assert not result.passed and "memory" in result.reason
    assert "4294967296" not in result.output


@pytest.mark.usefixtures("bounded")
def test_a_script_sees_none_of_the_parents_secrets(workspace: Path, monkeypatch) -> None:
    monkeypatch.setenv(SECRET, "s3cr3t-value")
    for code in ("import os\nprint(dict(os.environ))\nassert os.environ.get(" + repr(SECRET) + ")\n",
                 f"print(open('/proc/{os.getpid()}/environ', 'rb').read())\n",
                 f"print(open('/proc/{os.getppid()}/environ', 'rb').read())\n"):
        result = run_script(code, workspace, TIGHT)
        assert not result.passed, code
        assert "s3cr3t-value" not in result.output


@pytest.mark.usefixtures("bounded")
def test_a_flooding_script_is_clipped(workspace: Path) -> None:
    result = run_script("import sys\nsys.stdout.write('x' * 50_000_000)\n", workspace, TIGHT)
    assert len(result.output) <= TIGHT.output_chars + 100


def test_a_dead_or_hung_worker_is_replaced(workspace: Path) -> None:
    import signal

    with SandboxWorkers(1, Limits(wall_seconds=1.0)) as small:
        os.kill(small._workers[0].process.pid, signal.SIGSTOP)  # hung: never answers
        hung = small.run([(workspace, [RECORD])])[0][0]
        assert not hung.passed and "wall-clock" in hung.evidence
        os.kill(small._workers[0].process.pid, signal.SIGKILL)  # dead before the next job
        assert all(o[0].passed for o in small.run([(workspace, [RECORD])] * 3))
        assert small.restarts == 2


@pytest.mark.usefixtures("bounded")
def test_a_script_cannot_read_the_project(workspace: Path) -> None:
    project_file = Path(__file__).resolve()
    result = run_script(f"print(open({str(project_file)!r}).read())\n", workspace, TIGHT)
    # refused by the audit hook, or (a checkout under /tmp, which the hook lets scripts read)
    # not there at all behind the boundary
    assert not result.passed and "def test_a_script_cannot_read_the_project" not in result.output
    assert "outside the workspace" in result.output or "No such file or directory" in result.output


def test_workers_start_where_the_interpreter_was_found_by_a_relative_path(
        workspace: Path, monkeypatch) -> None:
    """``PATH=.venv/bin:$PATH dvc repro`` gives the stage a relative ``sys.executable``; the
    workers, started in their own folders, must still find it."""
    interpreter = Path(sys.executable)
    monkeypatch.chdir(interpreter.parents[1])
    monkeypatch.setattr(sys, "executable", str(interpreter.relative_to(interpreter.parents[1])))
    with SandboxWorkers(1) as relative:
        assert relative.run([(workspace, [RECORD])])[0][0].passed


def test_without_a_network_namespace_sockets_are_disabled(workspace: Path, monkeypatch) -> None:
    """Workers fall back to disabled sockets; a script's network namespace is part of its
    boundary, never given up."""
    from interlock.judging import sandbox

    monkeypatch.setattr(sandbox, "USE_NETNS", False)
    with SandboxWorkers(1) as fallback:
        assert fallback.network.startswith("sockets-disabled")
        assert fallback.run([(workspace, [RECORD])])[0][0].passed
    require_boundary(workspace)
    result = run_script("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
                        workspace, TIGHT)
    assert not result.passed
    assert "netns" in result.isolation
