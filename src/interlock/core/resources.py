"""Package data (``src/interlock/resources/``): files the library reads that are not code, such as
the domain catalog.

Every read goes through :func:`resource`, so the stage runner can check that a stage reading a
resource declares it as a dependency in ``dvc.yaml`` (an import is a code dependency; a resource
is data, and only the stages that read it depend on it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

RESOURCES = Path(__file__).resolve().parents[1] / "resources"

_guard: Callable[[Path], None] | None = None


def resource(name: str) -> Path:
    """The path of one resource, checked against the running stage's declared dependencies."""
    path = RESOURCES / name
    if _guard is not None:
        _guard(path)
    return path


@contextlib.contextmanager
def guarded(check: Callable[[Path], None]) -> Iterator[None]:
    """Call ``check`` on every resource read while the block runs (the stage runner's guard)."""
    global _guard
    previous, _guard = _guard, check
    try:
        yield
    finally:
        _guard = previous
