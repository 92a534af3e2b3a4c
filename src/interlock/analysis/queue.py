"""Run the queued DVC experiments (a sweep) to the end.

``dvc queue start`` returns at once, and its worker can stop with experiments still queued
(treeverse/dvc#10562, treeverse/dvc-task#77; seen on CI: two of a sweep's four run, the worker
gone, the other two queued an hour later). :func:`run_queue` starts the worker, follows the queue
until every experiment it saw queued has ended, and starts the worker again whenever experiments
wait and none has run for ``grace`` seconds, so a sweep either finishes or says why not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from interlock.core.errors import InterlockError

QUEUED, RUNNING, SUCCESS, FAILED = "Queued", "Running", "Success", "Failed"
ENDED = (SUCCESS, FAILED)


@dataclass(frozen=True)
class QueueEntry:
    """One experiment task as ``dvc queue status`` lists it."""

    rev: str
    name: str
    status: str

    @property
    def label(self) -> str:
        return self.name or self.rev[:7]


@dataclass(frozen=True)
class QueueRun:
    """The experiments :func:`run_queue` saw end, by name."""

    succeeded: tuple[str, ...]
    failed: tuple[str, ...]


def require_dvc_root(repo: Path) -> None:
    """Refuse a folder that is no DVC repository's root (else DVC takes the path for a URL to clone,
    or searches the folders above)."""
    if not (repo / ".dvc").is_dir():
        raise InterlockError("not the root of a DVC repository (no .dvc folder)", file=str(repo))


@contextmanager
def _celery_queue(repo: Path | str) -> Iterator:
    """The repository's experiment queue, opened afresh: a worker writes it as we read."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    require_dvc_root(Path(repo))
    try:
        with Repo(str(repo)) as dvc_repo:
            yield dvc_repo.experiments.celery_queue
    except DvcException as exc:
        raise InterlockError(f"DVC's experiment queue: {exc}", file=str(repo)) from None


def queue_status(repo: Path | str) -> list[QueueEntry] | None:
    """The queue's tasks as ``dvc queue status`` lists them; ``None`` when DVC read a task's info
    file while its worker was writing it (a poll to try again, not a failure of the queue)."""
    with _celery_queue(repo) as queue:
        try:
            listed = queue.status()
        except json.JSONDecodeError:
            return None
    return [QueueEntry(rev=row["rev"], name=row.get("name") or "", status=row["status"]) for row in listed]


def start_worker(repo: Path | str) -> None:
    """``dvc queue start`` (one worker, unless DVC sees one running), with this interpreter's bin
    folder first on PATH, as ``make repro`` runs the pipeline: the worker starts ``dvc`` from PATH and
    the stages call ``python``."""
    require_dvc_root(Path(repo))
    bin_dir = Path(sys.executable).parent
    dvc = bin_dir / "dvc" if (bin_dir / "dvc").exists() else Path(shutil.which("dvc") or "dvc")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    # a file, not a pipe, for what it says: the worker it starts inherits the handle and outlives it
    with tempfile.TemporaryFile("w+") as said:
        done = subprocess.run([str(dvc), "queue", "start"], cwd=repo, env=env, stdin=subprocess.DEVNULL,
                              stdout=said, stderr=said, check=False)
        if done.returncode != 0:
            said.seek(0)
            raise InterlockError(f"`dvc queue start` failed (exit {done.returncode}): {said.read()[-2000:]}",
                                 file=str(repo))


def run_queue(repo: Path | str, *, grace: float = 60.0, poll: float = 3.0, timeout: float | None = None,
              progress: bool = True,
              on_restart: Callable[[list[QueueEntry]], None] | None = None) -> QueueRun:
    """Start DVC's queue worker and wait until every experiment queued or running (now or while it
    waits) has ended; with none queued, start nothing. When experiments are queued and none has run
    for ``grace`` seconds, the worker is gone: start it again (``on_restart`` hears which experiments
    waited). An experiment that leaves the listing without ending (``dvc queue remove``) is let go
    after ``grace`` seconds. Raises :class:`InterlockError` when the worker stops twice without
    ending an experiment, or after ``timeout`` seconds, naming what had not ended."""
    repo = Path(repo)
    watched: dict[str, QueueEntry] = {}
    ended: dict[str, QueueEntry] = {}
    missing_since: dict[str, float] = {}
    ended_at_restart, started = -1, False
    start = idle_since = time.monotonic()
    bar = tqdm(desc="experiments", unit="exp", total=0, disable=not progress)
    try:
        while True:
            now = time.monotonic()
            listed = queue_status(repo)
            if listed is not None:
                by_rev = {entry.rev: entry for entry in listed}
                watched.update((e.rev, e) for e in listed if e.status in (QUEUED, RUNNING))
                for rev in watched.keys() - ended.keys():
                    entry = by_rev.get(rev)
                    if entry is None:
                        if now - missing_since.setdefault(rev, now) >= grace:
                            del watched[rev]  # removed from the queue: nothing left to wait for
                        continue
                    missing_since.pop(rev, None)
                    if entry.status in ENDED:
                        ended[rev] = entry
                bar.total, bar.n = len(watched), len(ended)
                bar.refresh()
                waiting = sorted((watched[rev] for rev in watched.keys() - ended.keys()),
                                 key=lambda entry: entry.label)
                if not waiting:
                    break
                if not started:
                    start_worker(repo)
                    started, idle_since = True, now
                elif any(entry.status == RUNNING for entry in listed):
                    idle_since = now
                elif now - idle_since >= grace and any(entry.status == QUEUED for entry in waiting):
                    if len(ended) == ended_at_restart:
                        raise InterlockError(
                            f"the DVC queue worker in {repo} stopped twice without ending an experiment; "
                            f"its log: `dvc queue logs {waiting[0].label}`")
                    if on_restart is not None:
                        on_restart(waiting)
                    start_worker(repo)
                    ended_at_restart, idle_since = len(ended), now
            if timeout is not None and now - start >= timeout:
                left = ", ".join(sorted(watched[rev].label for rev in watched.keys() - ended.keys()))
                raise InterlockError(f"the DVC queue in {repo} did not finish in {timeout:.0f} s: "
                                     f"{left or 'nothing read'} still to run (`dvc queue status`)")
            time.sleep(poll)
    finally:
        bar.close()
    in_order = sorted(ended.values(), key=lambda e: e.label)
    return QueueRun(succeeded=tuple(e.label for e in in_order if e.status == SUCCESS),
                    failed=tuple(e.label for e in in_order if e.status == FAILED))
