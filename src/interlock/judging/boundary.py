"""Whether this machine can build the operating-system boundary model-written checks run behind,
as the set-up probed and recorded it.

The boundary (``_child.enter_boundary``) needs a kernel that lets this user create mount, PID,
network, IPC and UTS namespaces (root directly; anyone else through a user namespace of their
own) and ``pivot_root`` into a fresh root. Containers and hardened kernels may refuse any of
that, so :func:`~interlock.judging.sandbox.probe_boundary` builds the real thing once, runs a
small script in it, and answers with a :class:`Mode`:

- ``namespaces``: the boundary is built (the detail says how: as root dropping to ``nobody``, or
  through a user namespace);
- ``unavailable``: it cannot be (the detail says why). :func:`~interlock.judging.sandbox.run_script`
  then refuses every model-written check with that reason; it never runs one with less.

The set-up (``make venv``, ``python -m interlock.judging.sandbox``) writes the answer into the
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


def _here() -> tuple[str, int]:
    return platform.release(), os.geteuid()


@dataclass(frozen=True)
class Mode:
    name: str  # NAMESPACES or UNAVAILABLE
    detail: str  # how the boundary is built, or why it cannot be
    kernel: str = field(default_factory=lambda: _here()[0])  # where it was probed: kernel release
    euid: int = field(default_factory=lambda: _here()[1])  # and user

    @property
    def available(self) -> bool:
        return self.name == NAMESPACES


def recorded(path: Path | None = None) -> Mode | None:
    """The mode recorded for this kernel and user (at :data:`RECORD` unless ``path``); None where
    there is none."""
    try:
        mode = Mode(**json.loads((path or RECORD).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return mode if (mode.kernel, mode.euid) == _here() else None


def write(mode: Mode, path: Path | None = None) -> Path:
    target = path or RECORD
    target.write_text(json.dumps(asdict(mode), indent=2) + "\n")
    return target
