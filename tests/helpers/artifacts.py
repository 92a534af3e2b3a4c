"""Small artifacts and processes the tests build the same way in many files."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from interlock.core import schemas
from interlock.core.io import write_table_set
from interlock.synthesis.packs import TaskPack, pack_rows

from helpers.repo import command_timeout


def write_packs(path: Path, packs: Iterable[TaskPack]) -> None:
    """The packs artifact (``paths.packs``) of these packs, in one row group."""
    rows: dict[str, list[dict]] = {name: [] for name in schemas.PACK_TABLES}
    for pack in packs:
        for name, table_rows in pack_rows(pack).items():
            rows[name] += table_rows
    with write_table_set(path, schemas.PACK_TABLES) as tables:
        tables.write(rows)


def apply_changes(initial: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """The files ``changes`` make of ``initial`` (a trajectory's ``final_files``: content where a
    file was created or changed, None where deleted): the final workspace the trajectory records."""
    files = dict(initial)
    for path, text in changes.items():
        if text is None:
            files.pop(path, None)
        else:
            files[path] = text
    return files


@contextmanager
def loaded_script(path: Path, name: str) -> Iterator[ModuleType]:
    """A script (a benchmark, an exported verifier) loaded as module ``name`` for the block; it is
    registered in ``sys.modules`` meanwhile, where its dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def kill_when_parts_are_written(target: Callable, args: tuple, parts: Path, count: int = 3) -> list[Path]:
    """Run ``target(*args)`` in a forked process and kill it (SIGKILL) once ``parts`` holds
    ``count`` part files (or after :func:`~helpers.repo.command_timeout`); the part files left on
    disk."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    deadline = time.monotonic() + command_timeout()
    while len(list(parts.glob("part-*.parquet"))) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    return list(parts.glob("part-*.parquet"))
