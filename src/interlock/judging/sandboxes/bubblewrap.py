"""The ``bubblewrap`` provider: the distribution's ``bwrap`` builds the boundary (new user, mount,
PID, network, IPC, UTS and cgroup namespaces, no nested user namespaces; an empty read-only root
holding only the interpreter, its libraries and four harmless devices; ``/workspace`` and ``/tmp`` as small
memory-backed file systems; ``nobody``, no capabilities, ``no_new_privs``; dies with the judge).
The child then lays the workspace copy down and applies the same limits, seccomp filter and audit
hook as under every provider. ``apt-get install bubblewrap`` (the set-up does, where it may).

Started by root, the script is ``nobody`` only inside its user namespace: outside it keeps
root's uid (without any capability there, behind read-only mounts), where the ``namespaces``
provider drops to the real ``nobody``; so ``auto`` prefers ``namespaces`` for root."""

from __future__ import annotations

import shutil
from pathlib import Path

from interlock.judging import sandbox
from interlock.judging._child import DEVICES, NOBODY, TMP, WORKSPACE, tree_bytes
from interlock.judging.sandbox import (
    CHILD,
    CHILD_INSIDE,
    Limits,
    ScriptResult,
    provided_job,
    run_in_scratch,
    script_command,
)


class Bubblewrap:
    name = "bubblewrap"

    def __init__(self, program: str = "bwrap") -> None:
        self.program = shutil.which(program)

    def unusable(self) -> str | None:
        return None if self.program else "bwrap is not installed (apt-get install bubblewrap)"

    def command(self, workspace_dir: Path, limits: Limits) -> list[str]:
        scratch = limits.scratch_mb << 20
        argv = [self.program, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL",
                "--hostname", "sandbox",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
                "--setenv", "HOME", TMP, "--setenv", "TMPDIR", TMP,
                "--setenv", "PYTHONDONTWRITEBYTECODE", "1"]
        # the writable folders first, the read-only mounts on top: a virtual environment under /tmp
        # (a checkout cloned there) then shows inside the script's /tmp instead of colliding with it
        room = tree_bytes(str(workspace_dir)) + scratch
        argv += ["--perms", "0755", "--size", str(room), "--tmpfs", WORKSPACE,
                 "--perms", "1777", "--size", str(scratch), "--tmpfs", TMP]
        for path in sandbox.read_only_mounts():
            if Path(path).is_symlink():  # /lib -> usr/lib on a merged /usr
                argv += ["--symlink", str(Path(path).readlink()), path]
            elif Path(path).exists():
                argv += ["--ro-bind", path, path]
        for device in DEVICES:
            argv += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
        argv += ["--ro-bind", str(CHILD), CHILD_INSIDE, "--remount-ro", "/", "--chdir", WORKSPACE, "--"]
        return argv + script_command(limits, child=CHILD_INSIDE)

    def run(self, code: str, workspace_dir: Path | str, limits: Limits,
            base: Path | str | None) -> ScriptResult:
        return run_in_scratch(base, limits, lambda scratch: (
            self.command(Path(workspace_dir), limits), provided_job(self.name, code, workspace_dir)),
            signals_as_status=True)
