"""The container providers, ``podman`` and ``docker``: for clusters where unprivileged user
namespaces are disabled (so neither ``namespaces`` nor ``bubblewrap`` can build a boundary) but a
container engine is offered. Each script runs in a fresh container of a local image with Python
(``INTERLOCK_SANDBOX_IMAGE``, default ``python:3.11-slim``; never pulled at judging time: load or
pull it beforehand): no network, a read-only root, every capability dropped,
``no-new-privileges``, ``nobody``, ``/workspace`` and ``/tmp`` as small memory-backed file
systems, and the engine's cgroup limits on memory (no swap), process count and CPU on top of the
child's own limits, seccomp filter (beside the engine's default profile) and audit hook.

The script sees the image's interpreter, not this one: a check may use only the standard
library, which is all the judges' checks use."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from interlock.judging._child import NOBODY, TMP, WORKSPACE, tree_bytes
from interlock.judging.sandbox import (
    CHILD,
    CHILD_INSIDE,
    Limits,
    ScriptResult,
    provided_job,
    run_in_scratch,
    script_command,
)

IMAGE_ENV = "INTERLOCK_SANDBOX_IMAGE"
DEFAULT_IMAGE = "python:3.11-slim"


class Container:
    """A container engine with docker's command line (podman's is the same)."""

    name = "container"
    program = "docker"

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get(IMAGE_ENV, DEFAULT_IMAGE)
        self.path = shutil.which(self.program)

    def unusable(self) -> str | None:
        if not self.path:
            return f"{self.program} is not installed"
        missing_image = f"no local image {self.image} (set {IMAGE_ENV})"
        for check, what in ((["info", "--format", "{{.ID}}"], "its engine does not answer"),
                            (["image", "inspect", self.image], missing_image)):
            try:
                done = subprocess.run([self.path, *check], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"{what}: {exc}"
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or [""])[-1]
                return f"{what}: {last}"[:300]
        return None

    def command(self, workspace_dir: Path, limits: Limits) -> list[str]:
        scratch = limits.scratch_mb << 20
        room = tree_bytes(str(workspace_dir)) + scratch
        return [self.path, "run", "--rm", "-i", "--network", "none", "--read-only", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--user", f"{NOBODY}:{NOBODY}",
                "--pids-limit", str(limits.processes), "--memory", f"{limits.memory_mb + 64}m",
                "--memory-swap", f"{limits.memory_mb + 64}m", "--cpus", "1",
                "--hostname", "sandbox", "--init",
                "--tmpfs", f"{WORKSPACE}:rw,size={room},mode=0755,uid={NOBODY},gid={NOBODY}",
                "--tmpfs", f"{TMP}:rw,size={scratch},mode=1777",
                "--volume", f"{CHILD}:{CHILD_INSIDE}:ro", "--workdir", WORKSPACE,
                "--env", f"HOME={TMP}", "--env", f"TMPDIR={TMP}", "--env", "PYTHONDONTWRITEBYTECODE=1",
                self.image, *script_command(limits, interpreter="python3", child=CHILD_INSIDE)]

    def run(self, code: str, workspace_dir: Path | str, limits: Limits,
            base: Path | str | None) -> ScriptResult:
        # the image's interpreter reads its own standard library, wherever the image keeps it
        job = {**provided_job(self.name, code, workspace_dir), "read_roots": ["/usr", "/lib", "/lib64"]}
        return run_in_scratch(base, limits, lambda scratch: (self.command(Path(workspace_dir), limits), job),
                              signals_as_status=True)


class Docker(Container):
    name = program = "docker"


class Podman(Container):
    name = program = "podman"
