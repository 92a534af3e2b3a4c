"""The ``namespaces`` provider: the boundary the sandboxed child builds itself with the kernel's
namespaces (see ``_child.enter_boundary``): no package needed, root or unprivileged user
namespaces."""

from __future__ import annotations

from pathlib import Path

from interlock.judging import sandbox
from interlock.judging.sandbox import Limits, ScriptResult, run_in_scratch, script_command


class Namespaces:
    name = "namespaces"

    def unusable(self) -> str | None:
        return None if Path("/proc/self/ns/user").exists() else "this kernel has no namespaces"

    def run(self, code: str, workspace_dir: Path | str, limits: Limits,
            base: Path | str | None) -> ScriptResult:
        def prepare(scratch: Path) -> tuple[list[str], dict]:
            (scratch / "root").mkdir()
            return script_command(limits), {
                "code": code, "source": str(Path(workspace_dir).resolve()), "root": str(scratch / "root"),
                "mounts": sandbox.read_only_mounts(), "read_roots": sandbox.python_roots(),
                "scratch_mb": limits.scratch_mb, "audit_hook": sandbox.AUDIT_HOOK,
                "user_namespace": sandbox.USER_NAMESPACE, "seccomp": sandbox.SECCOMP}

        return run_in_scratch(base, limits, prepare)
