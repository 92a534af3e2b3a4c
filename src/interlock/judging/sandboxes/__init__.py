"""Sandbox providers: the operating-system boundaries model-written checks run behind, one
interface, several ways to build it (as Inspect AI's sandbox environments are).

A provider is a class with :class:`SandboxProvider`'s two methods, registered by one line in the
entry-point group ``interlock.sandboxes`` (:mod:`interlock.core.registry`). It builds a boundary
that shows the script only its own copy of the workspace at ``/workspace`` (writable, bounded), an
empty ``/tmp``, the interpreter and its libraries (read-only), as the unprivileged ``nobody``,
with no network, no ``/proc`` of the judge, and no way to signal anything outside; then it runs
the sandboxed child (``_child.py script``), which applies the resource limits, the seccomp filter
and the audit hook itself, the same under every provider. ``tests/test_boundary.py`` runs one
escape suite against every provider this machine has, and says which it skipped and why.

- ``namespaces`` (:mod:`.namespaces`): this project's own boundary, built by the child with the
  kernel's namespaces and ``pivot_root`` (no package needed; root, or unprivileged user
  namespaces);
- ``bubblewrap`` (:mod:`.bubblewrap`): the distribution's ``bwrap`` (Flatpak's sandbox);
- ``podman`` and ``docker`` (:mod:`.container`): a container from a local image with Python, with
  the engine's own memory, process-count and CPU limits (cgroups) on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the typed config looks providers up here: importing the package stays free
    from interlock.judging.sandbox import Limits, ScriptResult


class SandboxProvider(Protocol):
    name: str

    def unusable(self) -> str | None:
        """Why this provider cannot run here at all (its program or engine missing), cheaply; None
        if it may (the probe then builds its boundary for real)."""

    def run(self, code: str, workspace_dir: Path | str, limits: Limits,
            base: Path | str | None) -> ScriptResult:
        """Run ``code`` on a copy of ``workspace_dir`` behind the boundary (scratch folders under
        ``base``); never raises for what the script does."""
