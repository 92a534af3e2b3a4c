"""Which operating-system boundaries this machine can build for model-written checks, as the
set-up probed and recorded them.

Each sandbox provider (:mod:`interlock.judging.sandboxes`) builds one: ``bubblewrap`` (the
distribution's ``bwrap``, where installed), ``namespaces`` (this project's own, built with the
kernel's namespaces and ``pivot_root``: root directly, anyone else through a user namespace), and
the container engines ``podman`` and ``docker`` (for clusters where unprivileged user namespaces
are disabled but a container engine is offered). Containers and hardened kernels may refuse any
of that, so :func:`~interlock.judging.sandbox.probe_boundary` builds the real thing once, runs a
small script in it, and answers with a :class:`Mode`:

- the provider's name: the boundary is built (the detail lists its layers);
- ``unavailable``: it cannot be (the detail says why). :func:`~interlock.judging.sandbox.run_script`
  then refuses every model-written check with that reason; it never runs one with less.

The set-up (``make venv``, ``python -m interlock.judging.sandbox``) writes the answers into the
virtual environment (:data:`RECORD`, so a fresh clone probes again). A record made for another
kernel release or user does not count.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD = Path(sys.prefix) / "interlock-sandbox.json"
NAMESPACES, UNAVAILABLE = "namespaces", "unavailable"
#: every provider, in the order ``auto`` takes them for a user other than root: the most widely
#: audited boundary first, then this project's own, then the container engines (slower to start:
#: a second or more per script)
PROVIDERS = ("bubblewrap", NAMESPACES, "podman", "docker")


def preference() -> tuple[str, ...]:
    """The order ``auto`` takes providers in here: for root, this project's own first (it drops to
    the real ``nobody``; bubblewrap keeps root's uid outside its user namespace)."""
    if os.geteuid() == 0:
        return (NAMESPACES, *(name for name in PROVIDERS if name != NAMESPACES))
    return PROVIDERS


def _here() -> tuple[str, int]:
    return platform.release(), os.geteuid()


@dataclass(frozen=True)
class Mode:
    name: str  # the provider that builds the boundary, or UNAVAILABLE
    detail: str  # how the boundary is built, or why it cannot be
    kernel: str = field(default_factory=lambda: _here()[0])  # where it was probed: kernel release
    euid: int = field(default_factory=lambda: _here()[1])  # and user

    @property
    def available(self) -> bool:
        return self.name != UNAVAILABLE


def _read(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded(provider: str, path: Path | None = None) -> Mode | None:
    """The mode recorded for ``provider`` on this kernel and user (at :data:`RECORD` unless
    ``path``); None where there is none."""
    try:
        mode = Mode(**_read(path or RECORD)[provider])
    except (KeyError, TypeError):
        return None
    return mode if (mode.kernel, mode.euid) == _here() else None


def write(provider: str, mode: Mode, path: Path | None = None) -> Path:
    """Record ``provider``'s mode beside the others (written whole to a temporary file, then renamed)."""
    target = path or RECORD
    record = {name: entry for name, entry in _read(target).items() if isinstance(entry, dict)}
    record[provider] = asdict(mode)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    partial.replace(target)
    return target
