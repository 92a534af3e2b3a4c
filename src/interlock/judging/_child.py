"""The sandboxed child process. Standard library only, run as a script (``python -I _child.py``).

Before it reads a job it limits itself (CPU, address space, file size, no core dumps), leaves
the network (a new, empty network namespace; where the kernel refuses, sockets are disabled),
and installs an audit hook that cannot be removed: no subprocesses, no ctypes, no sockets,
writes only under its scratch folder and, for model-written scripts, reads only there and in the
interpreter's own library. Where it runs as root and the interpreter is readable by everyone,
a script also drops to the unprivileged ``nobody`` user. The parent gives it a minimal
environment, and sends every job (check specs, script code) over stdin, never through a file
the agent could have written.

Modes:

- ``worker``: answer compiled-check jobs, one length-prefixed JSON message each, until stdin
  closes. The checks come from the checkout this file lies in, not from the installed package.
  A job is ``{"root", "specs", "cpu_seconds"}``; the answer ``{"results": [[passed, evidence,
  seconds], ...]}``.
- ``script``: read one ``{"code", "workspace", "scratch", "read_roots", "drop_uid"}`` message,
  write an isolation report (one JSON line) to stdout, then run the code with stdout and stderr
  going to the log file the parent opened as stderr. Exit status 0 means the check passed.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import struct
import sys
import time

#: the folder holding the ``interlock`` package this file belongs to (the checkout's ``src``)
LIBRARY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLONE_NEWNET = 0x40000000
NOBODY = 65534
_HEADER = struct.Struct(">Q")

#: events refused outright, whatever their arguments
_BLOCKED_PREFIXES = ("subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty",
                     "os.system", "os.kill", "os.killpg", "os.setuid", "os.setgid", "os.setgroups",
                     "pty.", "ctypes.", "socket.", "resource.setrlimit", "resource.prlimit",
                     "urllib.", "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.",
                     "telnetlib.", "webbrowser.", "sys.remote_exec", "signal.pthread_kill")
#: modules that would reach past the hook (raw processes, foreign calls, raw sockets)
_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes", "ctypes", "_socket", "socket", "ssl",
                              "_ssl", "_multiprocessing", "multiprocessing", "mmap", "_xxsubinterpreters"})
#: events that change the file system: which arguments are paths
_WRITE_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.mkdir": (0,),
                 "os.symlink": (1,), "os.link": (0, 1), "os.chmod": (0,), "os.chown": (0,),
                 "os.truncate": (0,), "os.utime": (0,), "os.chflags": (0,), "os.lchflags": (0,),
                 "os.lchmod": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
                 "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1)}
_READ_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,), "os.getxattr": (0,),
                "os.listxattr": (0,)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


# ----------------------------------------------------------------------------- messages

def read_message(stream) -> dict | None:
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    body = _read_exact(stream, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def _read_exact(stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_message(stream, message: dict) -> None:
    body = json.dumps(message).encode()
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


# ----------------------------------------------------------------------------- isolation

def limit(cpu_seconds: float, memory_mb: int, file_mb: int) -> None:
    """Resource limits on this process (and anything it could start)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    if file_mb > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails, it does not kill
    if cpu_seconds > 0:
        soft = max(1, math.ceil(cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def leave_network(try_namespace: bool = True) -> str:
    """A new network namespace (no interfaces up) if the kernel allows; else sockets disabled."""
    reason = "not tried"
    try:
        if not try_namespace:
            raise OSError("a network namespace was not requested")
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return "netns"
        reason = os.strerror(ctypes.get_errno())
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back
        reason = f"{type(exc).__name__}: {exc}"
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")

    for name in ("socket", "create_connection", "create_server", "socketpair", "fromfd",
                 "getaddrinfo", "gethostbyname"):
        setattr(socket, name, refuse)
    return f"sockets-disabled (unshare refused: {reason})"


def drop_privileges(paths: list[str]) -> str | None:
    """As root: hand ``paths`` to ``nobody`` and become ``nobody``. None when not root."""
    if os.geteuid() != 0:
        return None
    for path in paths:
        for folder, dirs, names in os.walk(path):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + names)]:
                os.lchown(name, NOBODY, NOBODY)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    return f"uid {NOBODY}"


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def install_hook(write_roots: list[str], read_roots: list[str] | None,
                 allowed: tuple[str, ...] = ()) -> None:
    """An audit hook (permanent for the life of the process) that confines what code may do.

    ``read_roots`` None means reads anywhere (a worker that runs only the compiled checks);
    ``allowed`` lists blocked events the process itself still needs (a worker sets its own
    per-job CPU limit)."""
    writes = tuple(os.path.realpath(r) for r in write_roots)
    reads = None if read_roots is None else tuple(os.path.realpath(r) for r in read_roots) + writes
    realpath, fsdecode = os.path.realpath, os.fsdecode
    blocked_prefixes, blocked_imports = _BLOCKED_PREFIXES, _BLOCKED_IMPORTS
    write_events, read_events, write_flags = _WRITE_EVENTS, _READ_EVENTS, _WRITE_FLAGS

    def check(path, allowed, what) -> None:
        if isinstance(path, int) or path is None or allowed is None:
            return
        real = realpath(fsdecode(path))
        if not _inside(real, allowed):
            raise PermissionError(f"sandbox: {what} {real} is outside the workspace")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and bool(flags & write_flags))
            check(path, writes if writing else reads, "writing" if writing else "reading")
        elif event == "import":
            if args and args[0] in blocked_imports:
                raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        elif event.startswith(blocked_prefixes) and event not in allowed:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event in write_events:
            for index in write_events[event]:
                if index < len(args):
                    check(args[index], writes, f"{event} on")
        elif event in read_events:
            for index in read_events[event]:
                if index < len(args):
                    check(args[index], reads, f"{event} on")

    sys.addaudithook(hook)
    for name in ("ctypes", "_ctypes", "socket", "_socket"):  # nothing already loaded to reuse
        sys.modules.pop(name, None)


def _options(argv: list[str]) -> dict[str, float]:
    values = {"cpu": 0.0, "memory-mb": 0.0, "file-mb": 0.0, "netns": 1.0}
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        values[flag.removeprefix("--")] = float(value)
    return values


# ----------------------------------------------------------------------------- modes

def worker(options: dict[str, float]) -> None:
    limit(0, int(options["memory-mb"]), int(options["file-mb"]))
    network = leave_network(bool(options["netns"]))
    sys.dont_write_bytecode = True
    # ``-I`` leaves the script's own folders off sys.path, so without this the checks would come
    # from the installed package: a queued experiment (a copy of the checkout) would be judged by
    # the main workspace's code. This file lies in <library>/interlock/judging/.
    sys.path.insert(0, LIBRARY)
    from interlock.synthesis.checks import View, run_check
    from interlock.synthesis.workspace import DirectoryStore

    stdin = sys.stdin.buffer
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print can never corrupt the protocol
    install_hook(write_roots=[], read_roots=None, allowed=("resource.setrlimit",))  # checks only read
    write_message(protocol, {"ready": True, "network": network, "pid": os.getpid()})
    while True:
        job = read_message(stdin)
        if job is None:
            return
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        soft = math.ceil(used + max(1.0, float(job.get("cpu_seconds", 5.0))))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
        view = View(DirectoryStore(job["root"]))
        results = []
        for spec in job["specs"]:
            start = time.perf_counter()
            try:
                passed, evidence = run_check(spec, view)
            except MemoryError:
                passed, evidence = False, "check ran out of memory"
            except Exception as exc:  # noqa: BLE001 - a hostile workspace must not kill the worker
                passed, evidence = False, f"check raised {type(exc).__name__}: {exc}"
            results.append([bool(passed), str(evidence), time.perf_counter() - start])
        write_message(protocol, {"results": results})


def script(options: dict[str, float]) -> None:
    limit(options["cpu"], int(options["memory-mb"]), int(options["file-mb"]))
    network = leave_network(bool(options["netns"]))
    job = read_message(sys.stdin.buffer)
    if job is None:
        raise SystemExit(2)
    layers = ["rlimits", network, "minimal-env"]
    user = drop_privileges([job["scratch"]]) if job.get("drop_uid") else None
    if user:
        layers.append(user)
    os.chdir(job["workspace"])
    sys.dont_write_bytecode = True
    install_hook(write_roots=[job["scratch"]], read_roots=job["read_roots"])
    layers.append("audit-hook")
    sys.stdout.write(json.dumps({"isolation": layers, "network": network}) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # the code's output goes to the log the parent reads back, size-limited
    code = compile(job["code"], "<check script>", "exec")
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    del job
    exec(code, namespace)  # noqa: S102 - this is the sandbox


def main() -> None:
    mode, options = sys.argv[1], _options(sys.argv[2:])
    {"worker": worker, "script": script}[mode](options)


if __name__ == "__main__":
    main()
