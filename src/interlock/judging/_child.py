"""The sandboxed child process. Standard library only, run as a script (``python -I _child.py``).

Before it runs anything it was sent, it limits itself (CPU, address space, file size, no core
dumps) and installs an audit hook that cannot be removed: no subprocesses, no ctypes, no
sockets, writes only where it may write. The parent gives it a minimal environment, and sends
every job (check specs, script code) over stdin, never through a file the agent could have
written.

A compiled-check worker runs our own code: it leaves the network (a new, empty network
namespace; where the kernel refuses, sockets are disabled) and reads only through a confined
store. A model-written script runs behind an operating-system boundary first, since the audit
hook alone is not one (a file opened relative to a directory handle escapes it; so does
anything the hook does not name). :func:`enter_boundary` gives the script new mount, PID,
network, IPC and UTS namespaces whose root is an empty, read-only file system holding only the
interpreter and its virtual environment (read-only), the C libraries its extension modules
load, four harmless devices, its copy of the workspace at ``/workspace`` and an empty ``/tmp``
(both small memory-backed file systems: the copy's own size plus ``scratch_mb`` each). The old
root is detached (``pivot_root``), not merely hidden, and there is no ``/proc``. The script
itself runs as PID 2 of its namespace under a minimal init (so it can signal nothing outside,
and dies with it), as the unprivileged ``nobody`` with no capabilities and ``no_new_privs``:
started as root, the child drops to ``nobody`` outright; started by any other user, it also
takes a user namespace of its own that maps ``nobody`` inside to that user outside. Where the
kernel refuses any step, the script does not run: the child reports why and exits with
:data:`REFUSED`.

Modes:

- ``worker``: answer compiled-check jobs, one length-prefixed JSON message each, until stdin
  closes. The checks come from the checkout this file lies in, not from the installed package.
  A job is ``{"root", "specs", "cpu_seconds"}``; the answer ``{"results": [[passed, evidence,
  seconds], ...]}``.
- ``script``: read one ``{"code", "source", "root", "mounts", "read_roots", "scratch_mb",
  "audit_hook", "user_namespace"}`` message, build the boundary (``root`` is an empty folder to
  build it on, ``source`` the workspace to copy), write an isolation report (one JSON line;
  ``{"refused": why}`` when the boundary could not be built) to stdout, then run the code with
  stdout and stderr going to the log file the parent opened as stderr. Exit status 0 means the
  check passed.
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
#: the environment variable that hands a worker the folders of installed plugins
PLUGIN_PATH = "INTERLOCK_PLUGIN_PATH"
LIBRARY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
#: mount flags a read-only remount must keep (a user namespace may not clear locked ones)
_KEPT_MOUNT_FLAGS = (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME
                     | os.ST_RELATIME)
MNT_DETACH = 0x2
PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522
#: ``pivot_root`` has no C library wrapper: its system call number, by machine
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
NOBODY = 65534
#: where a script finds its copy of the workspace, and the one other folder it may write
WORKSPACE, TMP = "/workspace", "/tmp"
DEVICES = ("null", "zero", "random", "urandom")
#: the exit status of a script child that refused to run the code (no boundary)
REFUSED = 3
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

def limit(cpu_seconds: float, memory_mb: int, file_mb: int, processes: int = 0) -> None:
    """Resource limits on this process (and anything it could start): ``processes`` caps how many
    processes its user may have (RLIMIT_NPROC), so a fork bomb behind a boundary without the audit
    hook runs out of forks, not of the machine."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if processes > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
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


class Kernel:
    """The system calls the boundary needs that ``os`` lacks (Python 3.11), through the C
    library; every failure raises :class:`OSError` with the call's name."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)

    def _call(self, name: str, *args) -> None:
        if getattr(self.libc, name)(*args) == -1:
            errno = self.ctypes.get_errno()
            raise OSError(errno, f"{name}: {os.strerror(errno)}")

    @staticmethod
    def _path(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    def unshare(self, flags: int) -> None:
        self._call("unshare", self.ctypes.c_int(flags))

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        self._call("mount", self._path(source), self._path(target), self._path(fstype),
                   self.ctypes.c_ulong(flags), self._path(data))

    def pivot_root(self, new_root: str) -> None:
        """Make ``new_root`` the root and detach the old one entirely (a ``chroot`` would only
        hide it: still mounted, one escape away)."""
        number = SYS_PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise OSError(f"pivot_root: no system call number known for {os.uname().machine}")
        os.chdir(new_root)
        self._call("syscall", self.ctypes.c_long(number), b".", b".")
        self._call("umount2", b".", self.ctypes.c_int(MNT_DETACH))
        os.chdir("/")

    def sethostname(self, name: str) -> None:
        self._call("sethostname", name.encode(), self.ctypes.c_size_t(len(name)))

    def drop_capabilities(self) -> None:
        """No capabilities left, in any set (what the creator of a user namespace holds there)."""
        header = (self.ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
        self._call("capset", header, (self.ctypes.c_uint32 * 6)())

    def no_new_privs(self) -> None:
        self._call("prctl", self.ctypes.c_int(PR_SET_NO_NEW_PRIVS), self.ctypes.c_ulong(1),
                   self.ctypes.c_ulong(0), self.ctypes.c_ulong(0), self.ctypes.c_ulong(0))


#: system calls a check never needs and an escape often does, refused with EPERM by the seccomp
#: filter (by name: libseccomp resolves each for this machine). ``clone3`` answers ENOSYS, so the C
#: library falls back to ``clone``, whose flags the filter can read: a new thread is allowed, a
#: new process or namespace is not (a check never starts one, and a fork bomb then has nothing to
#: fork with, even where the process-count limit does not hold: root's uid outside bubblewrap's
#: user namespace is exempt from RLIMIT_NPROC).
SECCOMP_REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
                   "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
                   "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
                   "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
                   "open_by_handle_at", "name_to_handle_at", "syslog", "iopl", "ioperm", "mknod",
                   "mknodat", "fsopen", "fsmount", "move_mount", "open_tree", "io_uring_setup",
                   "fork", "vfork")
CLONE_THREAD = 0x00010000
_SCMP_ACT_ALLOW, _SCMP_ACT_ERRNO, _SCMP_CMP_MASKED_EQ = 0x7FFF0000, 0x00050000, 7
_CLONE_NAMESPACES = (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
                     | CLONE_NEWNET | 0x02000000 | 0x00000080)  # + CLONE_NEWCGROUP, CLONE_NEWTIME


def install_seccomp() -> str:
    """A seccomp filter (through the machine's libseccomp) that refuses :data:`SECCOMP_REFUSED`, and
    ``clone`` with any namespace flag or without ``CLONE_THREAD``, for this process and all it
    starts (``no_new_privs`` must be set). Returns the layer's name, or why there is none (no
    libseccomp here)."""
    import ctypes
    import errno

    try:  # by its soname: ctypes.util.find_library would start ldconfig, which is not in the boundary
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as exc:
        return f"no-seccomp (libseccomp not found: {exc})"

    class ArgCmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                    ("datum_b", ctypes.c_uint64)]

    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not context:
        raise OSError("seccomp_init failed")
    try:
        refused = 0
        for syscall in (*SECCOMP_REFUSED, "clone3"):
            number = lib.seccomp_syscall_resolve_name(syscall.encode())
            if number < 0:  # not a system call on this machine
                continue
            action = _SCMP_ACT_ERRNO | (errno.ENOSYS if syscall == "clone3" else errno.EPERM)
            if lib.seccomp_rule_add_array(context, action, number, 0, None) != 0:
                raise OSError(f"seccomp: cannot refuse {syscall}")
            refused += 1
        clone = lib.seccomp_syscall_resolve_name(b"clone")
        # a rule per flag: "masked equal" matches one bit pattern, and any namespace bit must refuse
        for bit in (1 << i for i in range(64) if _CLONE_NAMESPACES >> i & 1):
            flags = ArgCmp(0, _SCMP_CMP_MASKED_EQ, bit, bit)
            if lib.seccomp_rule_add_array(context, _SCMP_ACT_ERRNO | errno.EPERM, clone, 1,
                                          ctypes.byref(flags)) != 0:
                raise OSError("seccomp: cannot filter clone's flags")
        process = ArgCmp(0, _SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)  # a clone that is not a thread
        if lib.seccomp_rule_add_array(context, _SCMP_ACT_ERRNO | errno.EPERM, clone, 1,
                                      ctypes.byref(process)) != 0:
            raise OSError("seccomp: cannot filter clone's flags")
        if lib.seccomp_load(context) != 0:
            raise OSError(f"seccomp_load failed: {os.strerror(ctypes.get_errno())}")
    finally:
        lib.seccomp_release(context)
    return f"seccomp ({refused + 1} calls filtered; no new processes)"


def pack_tree(folder: str) -> list[list]:
    """A workspace as data, for a boundary built by someone else (a container, bubblewrap): each
    entry ``[path, kind, payload]``, kind ``d`` (folder), ``f`` (file; payload its bytes as
    latin-1 text) or ``l`` (symbolic link; payload its target, never followed)."""
    entries: list[list] = []
    for parent, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs + names):
            path = os.path.join(parent, name)
            relative = os.path.relpath(path, folder)
            if os.path.islink(path):
                entries.append([relative, "l", os.readlink(path)])
            elif os.path.isdir(path):
                entries.append([relative, "d", ""])
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    entries.append([relative, "f", handle.read().decode("latin-1")])
    return entries


def unpack_tree(entries: list[list], folder: str) -> None:
    """Lay :func:`pack_tree`'s entries down under ``folder`` (each path stays inside it)."""
    root = os.path.realpath(folder)
    for relative, kind, payload in entries:
        path = os.path.normpath(os.path.join(root, relative))
        if not path.startswith(root + os.sep):
            raise OSError(f"a workspace entry outside the workspace: {relative!r}")
        if kind == "d":
            os.makedirs(path, exist_ok=True)
        elif kind == "l":
            os.symlink(payload, path)
        else:
            with open(path, "wb") as handle:
                handle.write(payload.encode("latin-1"))


def _maps(uid: int) -> bool:
    """Whether ``uid`` exists in this process's user namespace."""
    with open("/proc/self/uid_map") as handle:
        for line in handle:
            inside, _, count = (int(field) for field in line.split())
            if inside <= uid < inside + count:
                return True
    return False


def tree_bytes(folder: str) -> int:
    """What a copy of ``folder`` takes on a memory file system: whole pages per entry."""
    total = 0
    for parent, dirs, names in os.walk(folder):
        for name in dirs + names:
            total += -(-os.lstat(os.path.join(parent, name)).st_size // 4096) * 4096 or 4096
    return total


def _bind_readonly(kernel: Kernel, source: str, target: str, extra: int) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()  # noqa: SIM115 - an empty file to mount over
    kernel.mount(source, target, None, MS_BIND)  # not recursive: nothing mounted beneath shows
    kept = os.statvfs(target).f_flag & _KEPT_MOUNT_FLAGS
    kernel.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | extra | kept)


def enter_boundary(kernel: Kernel, job: dict) -> tuple[bool, list[str]]:
    """Move this process into the script's namespaces and root (see the module docstring).

    Returns whether it took a user namespace, and the layers for the report. Its children are
    in the new PID namespace, this process not. Raises :class:`OSError` where the kernel refuses
    a step."""
    import shutil

    uid, gid = os.geteuid(), os.getegid()
    userns = job.get("user_namespace")
    if userns is None:
        userns = not (uid == 0 and _maps(NOBODY))
    kernel.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
                   | (CLONE_NEWUSER if userns else 0))
    if userns:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{NOBODY} {uid} 1"),
                           ("gid_map", f"{NOBODY} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    kernel.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here shows outside
    root = job["root"]
    os.umask(0o022)
    kernel.mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    # the writable folders first, the read-only mounts on top: a virtual environment under /tmp
    # (a checkout cloned there) then shows inside the script's /tmp instead of colliding with it
    owner = "" if userns else f",uid={NOBODY},gid={NOBODY}"
    scratch = job["scratch_mb"] << 20
    os.mkdir(root + WORKSPACE)
    kernel.mount("tmpfs", root + WORKSPACE, "tmpfs", MS_NOSUID | MS_NODEV,
                 f"mode=0755,size={tree_bytes(job['source']) + scratch}{owner}")
    shutil.copytree(job["source"], root + WORKSPACE, symlinks=True, dirs_exist_ok=True)
    if not userns:
        for parent, dirs, names in os.walk(root + WORKSPACE):
            for name in dirs + names:
                os.lchown(os.path.join(parent, name), NOBODY, NOBODY)
    os.mkdir(root + TMP)
    kernel.mount("tmpfs", root + TMP, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={scratch}{owner}")
    for path in job["mounts"]:
        if os.path.islink(path):  # /lib -> usr/lib on a merged /usr
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(os.readlink(path), root + path)
        elif os.path.exists(path):
            _bind_readonly(kernel, path, root + path, MS_NODEV)
    for device in DEVICES:
        _bind_readonly(kernel, f"/dev/{device}", f"{root}/dev/{device}", MS_NOEXEC)
    kernel.mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    kernel.sethostname("sandbox")
    kernel.pivot_root(root)
    os.chdir(WORKSPACE)
    spaces = "user, mount, pid, net, ipc, uts" if userns else "mount, pid, net, ipc, uts"
    return userns, [f"namespaces ({spaces})", "netns", "pivot-root"]


def become_nobody(kernel: Kernel, userns: bool) -> list[str]:
    """Become ``nobody`` with no capabilities, for good (``no_new_privs``)."""
    if not userns:
        os.setgroups([])  # a user namespace denies setgroups; it has no other group anyway
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    kernel.drop_capabilities()
    kernel.no_new_privs()
    outside = f"uid {NOBODY} (user namespace)" if userns else f"uid {NOBODY}"
    return [outside, "no-capabilities", "no-new-privs"]


def fork_in_namespace() -> None:
    """Return only in a grandchild: PID 2 of the new PID namespace, under a minimal init (PID 1
    ignores signals it has no handler for, the CPU limit's among them). This process mirrors
    how the grandchild ended and never returns."""
    read, write = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read)
        child = os.fork()
        if child == 0:
            os.close(write)
            return
        _, status = os.waitpid(child, 0)
        os.write(write, struct.pack("i", status))
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(init, 0)
    reported = os.read(read, 4)
    if len(reported) == 4:
        status = struct.unpack("i", reported)[0]
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


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
    values = {"cpu": 0.0, "memory-mb": 0.0, "file-mb": 0.0, "processes": 0.0, "netns": 1.0}
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
    # the folders of installed plugins (a kind of yours the checks look up), wherever they lie
    sys.path[1:1] = [folder for folder in os.environ.get(PLUGIN_PATH, "").split(os.pathsep) if folder]
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
        view = View(DirectoryStore(job["root"]), submitted=job.get("submitted") is True)
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
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    job = read_message(sys.stdin.buffer)
    if job is None:
        raise SystemExit(2)
    try:
        kernel = Kernel()
        if job.get("boundary") == "provided":  # a container or bubblewrap built it: check, fill it
            userns, layers = False, provided_boundary(job)
        else:
            userns, layers = enter_boundary(kernel, job)
    except Exception as exc:  # noqa: BLE001 - any failure means: refuse, never run unconfined
        sys.stdout.write(json.dumps({"refused": f"{type(exc).__name__}: {exc}"}) + "\n")
        sys.stdout.flush()
        os._exit(REFUSED)
    if job.get("boundary") != "provided":  # a provider's own init already stands at PID 1
        fork_in_namespace()
    limit(options["cpu"], int(options["memory-mb"]), int(options["file-mb"]), int(options["processes"]))
    layers += ["rlimits"]
    if job.get("boundary") == "provided":
        kernel.drop_capabilities()
        kernel.no_new_privs()
        layers += [f"uid {os.geteuid()}", "no-capabilities", "no-new-privs"]
    else:
        layers += become_nobody(kernel, userns)
    if job.get("seccomp", True):
        layers.append(install_seccomp())
    layers.append("minimal-env")
    os.environ.update(HOME=TMP, TMPDIR=TMP)
    sys.dont_write_bytecode = True
    if job["audit_hook"]:
        install_hook(write_roots=[WORKSPACE, TMP], read_roots=job["read_roots"])
        layers.append("audit-hook")
    sys.stdout.write(json.dumps({"isolation": layers}) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # the code's output goes to the log the parent reads back, size-limited
    code = compile(job["code"], "<check script>", "exec")
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    del job, kernel
    exec(code, namespace)  # noqa: S102 - this is the sandbox


def provided_boundary(job: dict) -> list[str]:
    """Inside a boundary a provider built (its own namespaces, ``nobody``, an empty writable
    ``/workspace``): refuse unless it is so, then lay the workspace down."""
    if os.geteuid() != NOBODY:
        raise OSError(f"the provider left the script running as uid {os.geteuid()}, not {NOBODY}")
    if os.getcwd() != WORKSPACE or os.listdir(WORKSPACE):
        raise OSError(f"the provider did not start the script in an empty {WORKSPACE}")
    unpack_tree(job["workspace"], WORKSPACE)
    return [f"{job['provider']} (its own namespaces and root)"]


def main() -> None:
    mode, options = sys.argv[1], _options(sys.argv[2:])
    {"worker": worker, "script": script}[mode](options)


if __name__ == "__main__":
    main()
