"""Verification in separate processes: time and memory limits, no network, no secrets.

Two ways in:

- :class:`SandboxWorkers` starts N worker processes once and feeds them compiled-check jobs,
  ``(workspace dir, [check specs]) -> [CheckOutcome]``. The specs travel over a pipe, never
  through the workspace, and the workers read the workspace only through a confined
  :class:`~interlock.synthesis.workspace.DirectoryStore`. A worker that crashes, runs out of memory or
  overruns its time is killed and replaced; its job fails with the reason.
- :func:`run_script` runs one check written by a model in a fresh process with the same limits,
  on its own copy of the workspace, behind an operating-system boundary (namespaces of its own
  where only that copy, the interpreter and its libraries are visible, as ``nobody``): passed
  (exit status 0) or not, its output, and why. Where this machine cannot build the boundary, it
  refuses to run the script, with the reason; it never runs one behind the audit hook alone.

``python -m interlock.judging.sandbox`` (run by ``make venv``) probes whether the boundary can be
built here and records the answer (:mod:`~interlock.judging.boundary`).

The child (``_child.py``) applies the limits to itself before it runs anything it was sent; see
its docstring for the layers. The parent gives it only ``PATH`` and ``LANG`` from its own
environment, and ``HOME``/``TMPDIR`` inside a fresh temporary folder (``/tmp`` for a script).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from interlock.core.registry import SANDBOXES, plugin_folders
from interlock.judging import boundary
from interlock.judging._child import PLUGIN_PATH, REFUSED, TMP, pack_tree, read_message, write_message

CHILD = Path(__file__).with_name("_child.py")
#: where a provider that builds the boundary itself shows the child inside it (nothing else of the
#: project shows there)
CHILD_INSIDE = "/.interlock/child.py"
#: workers try a new network namespace first (False: go straight to disabling sockets, as where
#: the kernel refuses; the tests use it to exercise that path). Scripts always get one: it is
#: part of their boundary.
USE_NETNS = True
#: scripts also run under the audit hook (False: behind the boundary alone; the tests use it to
#: show that the boundary holds by itself)
AUDIT_HOOK = True
#: scripts also run under the seccomp filter (False: the tests show the boundary holds without it)
SECCOMP = True
#: a user namespace for scripts: None where the caller is not root (root drops to ``nobody``
#: without one), True always (the tests use it to exercise, as root, an unprivileged caller's way)
USER_NAMESPACE: bool | None = None
#: the machine's C library folders, which the interpreter's extension modules load from
SYSTEM_LIBRARIES = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/lib", "/lib64", "/lib32",
                    "/libx32")
_KEPT_ENV = ("PATH", "LANG")


@dataclass(frozen=True)
class Limits:
    """What one sandboxed job may use."""

    cpu_seconds: float = 5.0  # CPU time per job (RLIMIT_CPU)
    wall_seconds: float = 10.0  # wall clock per job, enforced by the parent
    memory_mb: int = 512  # address space of the process (RLIMIT_AS)
    file_mb: int = 16  # largest file the process may write (RLIMIT_FSIZE)
    output_chars: int = 4000  # how much of a script's output comes back
    scratch_mb: int = 64  # what a script may add to its workspace copy, and write to /tmp
    processes: int = 32  # processes a script's user may have (RLIMIT_NPROC; a container's pids limit)


DEFAULT_LIMITS = Limits()


class CheckJob(NamedTuple):
    """Compiled checks to run on one workspace folder, and what the episode that left it did
    (``submitted``), which the criteria about the episode read."""

    root: Path | str
    specs: list[dict]
    submitted: bool = False


class CheckOutcome(NamedTuple):
    passed: bool
    evidence: str
    seconds: float  # time the check itself took inside the sandbox


@dataclass(frozen=True)
class ScriptResult:
    passed: bool
    output: str
    reason: str  # "passed", "exit status 1", "wall-clock limit (10 s)", ...
    isolation: tuple[str, ...] = ()
    seconds: float = 0.0


def scratch_base(min_free_mb: int = 1024) -> str | None:
    """Where judges place workspace copies: memory-backed ``/dev/shm`` where it is writable and
    roomy (copies are small and many; on a disk file system creating and removing them is the
    bottleneck), else the system's temporary folder."""
    shm = Path("/dev/shm")
    try:
        usable = shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)
        stats = os.statvfs(shm) if usable else None
    except OSError:
        return None
    return str(shm) if stats and stats.f_bavail * stats.f_frsize >= min_free_mb << 20 else None


def minimal_env(scratch: Path | None) -> dict[str, str]:
    """The child's whole environment: nothing inherited but PATH and LANG. ``scratch`` None: a
    script's, whose home is its own ``/tmp``."""
    env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    if scratch is None:
        home = temp = TMP
    else:
        (scratch / "home").mkdir(parents=True, exist_ok=True)
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        home, temp = str(scratch / "home"), str(scratch / "tmp")
    env.update(HOME=home, TMPDIR=temp, PYTHONDONTWRITEBYTECODE="1")
    return env


def _command(mode: str, limits: Limits, cpu: bool) -> list[str]:
    # absolute: a worker starts in its scratch folder, where an interpreter found through a
    # relative PATH entry (``PATH=.venv/bin:$PATH``) would not be (symlinks kept: the venv's own)
    return [os.path.abspath(sys.executable), "-I", str(CHILD), mode,
            "--cpu", str(limits.cpu_seconds if cpu else 0),
            "--memory-mb", str(limits.memory_mb), "--file-mb", str(limits.file_mb),
            "--processes", str(limits.processes), "--netns", "1" if USE_NETNS else "0"]


def _describe_exit(code: int | None, limits: Limits) -> str:
    if code is None:
        return f"wall-clock limit ({limits.wall_seconds:g} s)"
    if code < 0:
        sig = -code
        if sig == signal.SIGXCPU:
            return f"CPU time limit ({limits.cpu_seconds:g} s)"
        if sig == signal.SIGKILL:
            return "killed (CPU hard limit or out of memory)"
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {code}"


# ----------------------------------------------------------------------------- the pool

class _Worker:
    def __init__(self, limits: Limits, scratch: Path, index: int, plugins: str) -> None:
        """``plugins``: the installed plugins' folders, joined as a path (``PLUGIN_PATH``)."""
        self.home = scratch / f"worker{index}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log = open(self.home / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            _command("worker", limits, cpu=False), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, env={**minimal_env(self.home), PLUGIN_PATH: plugins},
            cwd=self.home, close_fds=True, start_new_session=True, bufsize=0)
        self.job: int | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.network = "?"

    def handshake(self, timeout: float) -> None:
        ready, _, _ = _select([self.process.stdout], timeout)
        message = read_message(self.process.stdout) if ready else None
        if not message or not message.get("ready"):
            self.close()
            raise RuntimeError(f"sandbox worker did not start: {self.stderr_tail()}")
        self.network = message["network"]

    def send(self, index: int, job: CheckJob, limits: Limits) -> None:
        self.job, self.started = index, time.perf_counter()
        self.deadline = self.started + limits.wall_seconds
        write_message(self.process.stdin, {"root": str(job.root), "specs": job.specs,
                                           "submitted": bool(job.submitted),
                                           "cpu_seconds": limits.cpu_seconds})

    def stderr_tail(self) -> str:
        self.log.flush()
        try:
            text = (self.home / "stderr.log").read_bytes()[-600:].decode(errors="replace").strip()
        except OSError:
            text = ""
        return text.splitlines()[-1] if text else "no output"

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: only what it started
        self.process.wait()


def _select(streams: list, timeout: float) -> tuple[list, list, list]:
    import select

    return select.select(streams, [], [], max(0.0, timeout))


class SandboxWorkers:
    """N sandboxed worker processes for compiled checks, started once, replaced when they die."""

    def __init__(self, workers: int | None = None, limits: Limits = DEFAULT_LIMITS,
                 scratch: Path | str | None = None) -> None:
        self.size = max(1, workers or min(os.cpu_count() or 1, 8))
        self.limits = limits
        self._own_scratch = scratch is None
        self.scratch = Path(scratch or tempfile.mkdtemp(prefix="interlock-sandbox-"))
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._workers: list[_Worker] = []
        self._spawned = 0
        self.restarts = 0
        self._plugins = os.pathsep.join(plugin_folders())  # read once: every worker, replacements too

    # lifecycle
    def __enter__(self) -> SandboxWorkers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self._workers:
            return
        fresh = [self._spawn() for _ in range(self.size)]
        for worker in fresh:
            worker.handshake(timeout=60)
        self._workers = fresh

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers = []
        if self._own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    @property
    def network(self) -> str:
        """How the workers are kept off the network: ``netns`` or ``sockets-disabled (...)``."""
        self.start()
        return self._workers[0].network

    def _spawn(self) -> _Worker:
        self._spawned += 1
        return _Worker(self.limits, self.scratch, self._spawned, self._plugins)

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        worker.close()
        self.restarts += 1
        fresh = self._spawn()
        fresh.handshake(timeout=60)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    # jobs
    def run(self, jobs: list[CheckJob | tuple]) -> list[list[CheckOutcome]]:
        """Every job's outcomes, in job order; the workers take jobs as they become free
        (a job: a :class:`CheckJob` or the tuple of its fields).

        A job whose worker dies is retried once on a fresh worker (the worker may have died of
        something else); if that one dies too, the job fails with the reason. A job that
        overruns the wall clock fails at once, and its worker is replaced."""
        self.start()
        jobs = [CheckJob(*job) for job in jobs]
        results: list[list[CheckOutcome] | None] = [None] * len(jobs)
        queue = deque(range(len(jobs)))
        deaths: Counter = Counter()
        selector = selectors.DefaultSelector()

        def died(worker: _Worker, index: int) -> _Worker:
            worker.process.poll()
            reason = _describe_exit(worker.process.returncode, self.limits)
            deaths[index] += 1
            if deaths[index] < 2:
                queue.appendleft(index)
            else:
                results[index] = self._failed(jobs[index].specs, f"the check process ended ({reason}; "
                                                              f"{worker.stderr_tail()})")
            return self._replace(worker)

        def feed(worker: _Worker) -> None:
            while queue:
                index = queue.popleft()
                try:
                    worker.send(index, jobs[index], self.limits)
                except OSError:  # a broken pipe: it died while idle
                    worker = died(worker, index)
                    continue
                selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
                return
            worker.job = None

        try:
            for worker in list(self._workers):
                feed(worker)
            while any(r is None for r in results):
                busy = [w for w in self._workers if w.job is not None]
                timeout = min(w.deadline for w in busy) - time.perf_counter()
                for key, _ in selector.select(max(0.0, timeout)):
                    worker: _Worker = key.data
                    selector.unregister(key.fileobj)
                    index, specs = worker.job, jobs[worker.job].specs
                    try:
                        message = read_message(worker.process.stdout)
                    except (OSError, ValueError):
                        message = None
                    if message is None or len(message.get("results", ())) != len(specs):
                        feed(died(worker, index))
                        continue
                    results[index] = [CheckOutcome(bool(p), str(e), float(s))
                                      for p, e, s in message["results"]]
                    feed(worker)
                now = time.perf_counter()
                for worker in [w for w in self._workers if w.job is not None and w.deadline <= now]:
                    selector.unregister(worker.process.stdout)
                    results[worker.job] = self._failed(
                        jobs[worker.job].specs, f"the checks overran the wall-clock limit "
                                             f"({self.limits.wall_seconds:g} s)")
                    feed(self._replace(worker))
        finally:
            selector.close()
        return results  # type: ignore[return-value]

    @staticmethod
    def _failed(specs: list[dict], reason: str) -> list[CheckOutcome]:
        return [CheckOutcome(False, f"sandbox: {reason}", 0.0) for _ in specs]


# ----------------------------------------------------------------------------- scripts

def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def python_roots() -> list[str]:
    """What a script's interpreter must be able to read: its own libraries, nothing of the
    project (not the parent's import path, which may hold the repository)."""
    paths = sysconfig.get_paths()
    roots = {sys.base_prefix, sys.base_exec_prefix,
             *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    return sorted(os.path.realpath(r) for r in roots)


def read_only_mounts() -> list[str]:
    """What a script's root shows read-only, at the same paths, besides its workspace: the
    interpreter's install and its virtual environment (as named and as resolved), and the C
    libraries; a folder inside another listed one is left to it."""
    paths = sysconfig.get_paths()
    roots = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    candidates = {form(r) for r in roots for form in (os.path.abspath, os.path.realpath)}
    kept: list[str] = []
    for path in sorted(candidates | set(SYSTEM_LIBRARIES)):
        if not any(_under(path, folder) for folder in kept):
            kept.append(path)
    return kept


def run_script(code: str, workspace_dir: Path | str, limits: Limits = DEFAULT_LIMITS,
               base: Path | str | None = None, provider: str = "auto") -> ScriptResult:
    """Run a model-written check in a fresh sandboxed process on a copy of ``workspace_dir``,
    behind the boundary of ``provider`` (``auto``: the first available of
    :func:`~interlock.judging.boundary.preference`, as the set-up recorded them).

    It passes when it exits with status 0 (fail with ``assert`` or ``sys.exit(1)``). A timeout,
    crash, or refused operation is a failure with the reason, and so is a machine where that
    boundary cannot be built (the script is then not run); this function never raises for
    anything the script does."""
    mode = boundary_mode(provider)
    if not mode.available:
        return ScriptResult(False, "", f"refused: model-written checks run only behind an "
                                       f"operating-system boundary, and this machine has none "
                                       f"({mode.detail})")
    return SANDBOXES.get(mode.name)().run(code, workspace_dir, limits, base)


def run_in_scratch(base: Path | str | None, limits: Limits,
                   prepare: Callable[[Path], tuple[list[str], dict]], **options) -> ScriptResult:
    """:func:`run_child` (with ``options``) on the ``(command, job)`` that ``prepare`` makes in a
    fresh scratch folder (under ``base``), removed afterwards; an operating-system error is a
    failed result."""
    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="interlock-script-", dir=base))
    try:
        return run_child(*prepare(scratch), limits, scratch, **options)
    except OSError as exc:
        return ScriptResult(False, "", f"could not run the script: {exc}", (), time.perf_counter() - start)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_child(command: list[str], job: dict, limits: Limits, scratch: Path, *,
              signals_as_status: bool = False) -> ScriptResult:
    """Run the sandboxed child (``command`` ends in ``_child.py script ...``) with ``job`` on its
    stdin, in ``scratch`` (its output log lies there, outside anything the script sees), killed with
    its whole process group at the wall-clock limit; what happened, as a :class:`ScriptResult`.

    ``signals_as_status``: the command reports a child killed by signal N as exit status 128 + N,
    as a shell does (a provider's own init); read back as the signal."""
    start = time.perf_counter()
    log_path = scratch / "output.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                   env=minimal_env(None), cwd=scratch, close_fds=True, start_new_session=True)
        try:
            report, _ = process.communicate(_framed(job), timeout=limits.wall_seconds)
            code_ = process.returncode
        except subprocess.TimeoutExpired:
            _kill_group(process)
            report, _ = process.communicate()
            code_ = None
    if signals_as_status and code_ is not None and code_ > 128:
        code_ = 128 - code_
    output = _head(log_path, limits.output_chars)
    seconds = time.perf_counter() - start
    report_ = _report(report)
    if code_ == REFUSED and "refused" in report_:
        return ScriptResult(False, output, f"refused: the sandbox's boundary could not be built "
                                           f"({report_['refused']})", (), seconds)
    isolation = tuple(report_.get("isolation", ()))
    if code_ not in (0, None) and not isolation:  # it never reached the code: the provider failed
        last = output.strip().splitlines()[-1:] or [_describe_exit(code_, limits)]
        return ScriptResult(False, output, f"refused: the sandbox did not start ({last[0]})", (), seconds)
    reason = "passed" if code_ == 0 else _describe_exit(code_, limits)
    if code_ not in (0, None) and "MemoryError" in output:
        reason = f"out of memory ({limits.memory_mb} MB)"
    return ScriptResult(code_ == 0, output, reason, isolation, seconds)


def provided_job(provider: str, code: str, workspace_dir: Path | str) -> dict:
    """The child's job where ``provider`` built the boundary: the workspace travels in the job
    (the script's ``/workspace`` starts empty), the layers the child adds are the usual ones."""
    return {"code": code, "boundary": "provided", "provider": provider,
            "workspace": pack_tree(str(workspace_dir)), "read_roots": python_roots(),
            "audit_hook": AUDIT_HOOK, "seccomp": SECCOMP}


def script_command(limits: Limits, interpreter: str | None = None, child: str | None = None) -> list[str]:
    """The child's command line in script mode (``interpreter`` and ``child`` as the script's
    boundary shows them, where it differs from here)."""
    command = _command("script", limits, cpu=True)
    command[0] = interpreter or command[0]
    command[2] = child or command[2]
    return command


def _framed(message: dict) -> bytes:
    import io

    buffer = io.BytesIO()
    write_message(buffer, message)
    return buffer.getvalue()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _head(path: Path, chars: int) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(chars * 4 + 4)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text[:chars] + ("\n[... output clipped]" if len(text) > chars else "")


def _report(report: bytes) -> dict:
    """The child's report line: its isolation layers, or why it refused."""
    try:
        message = json.loads(report.decode().splitlines()[0])
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}
    return message if isinstance(message, dict) else {}


# ----------------------------------------------------------------------------- the boundary's mode

#: what the probe's script checks from inside: its own root, its copy writable, no way back
_PROBE = """
import os
assert os.getcwd() == "/workspace", os.getcwd()
assert sorted(os.listdir("/workspace")) == ["probe.txt"], os.listdir("/workspace")
assert not os.path.exists("/proc"), "a /proc is visible"
assert os.geteuid() == 65534, os.geteuid()
open("written.txt", "w").write("ok")
"""


def probe_boundary(provider: str = boundary.NAMESPACES) -> boundary.Mode:
    """Build ``provider``'s boundary for real and run a small script inside it: the mode it allows
    (``provider``, with how it is built, or ``unavailable`` with why)."""
    sandbox = SANDBOXES.get(provider)()
    unusable = sandbox.unusable()
    if unusable:
        return boundary.Mode(boundary.UNAVAILABLE, f"{provider}: {unusable}")
    with tempfile.TemporaryDirectory(prefix="interlock-probe-") as folder:
        workspace = Path(folder) / "workspace"
        workspace.mkdir()
        (workspace / "probe.txt").write_text("probe\n")
        result = sandbox.run(_PROBE, workspace, DEFAULT_LIMITS, None)
    layers = result.isolation
    if result.passed and layers:
        return boundary.Mode(provider, ", ".join(layers))
    last = result.output.strip().splitlines()[-1:] or [""]
    return boundary.Mode(boundary.UNAVAILABLE, f"{provider}: {result.reason} {last[0]}".strip())


@functools.cache
def boundary_mode(provider: str = "auto") -> boundary.Mode:
    """The mode model-written checks run under with ``provider``: the set-up's record, else a
    probe (once per process). ``auto``: the first available of the providers in order of
    preference; if none is, the reasons of all."""
    if provider != "auto":
        return boundary.recorded(provider) or probe_boundary(provider)
    modes = [boundary_mode(name) for name in boundary.preference()]
    return next((mode for mode in modes if mode.available),
                boundary.Mode(boundary.UNAVAILABLE, "; ".join(mode.detail for mode in modes)))


def main() -> None:
    """The set-up's step: probe every provider's boundary and record the answers (unavailable
    ones too, with why)."""
    for provider in boundary.preference():
        mode = probe_boundary(provider)
        path = boundary.write(provider, mode)
        state = "available" if mode.available else "unavailable"
        print(f"sandbox {provider} for model-written checks: {state} ({mode.detail})")
    print(f"recorded in {path}; used: {boundary_mode().name} (the first available of "
          f"{', '.join(boundary.preference())})")


if __name__ == "__main__":
    main()
