"""`interlock run-queue` on a real DVC queue: a one-stage pipeline in a git repository, its
experiments queued with `dvc exp run --queue`. DVC's worker can stop with experiments still queued
(treeverse/dvc#10562, seen on CI); here it is stopped on purpose (`dvc queue stop`), and the sweep
must still finish, each experiment with its own result."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from interlock.analysis import cli
from interlock.analysis.queue import FAILED, QUEUED, RUNNING, SUCCESS, queue_status, run_queue
from interlock.core.errors import InterlockError

from helpers.repo import BIN, GIT_USER, command_timeout, dvc, user_env
from helpers.repo import run as _run

#: the stage: its parameter, squared, after a pause long enough for `dvc queue stop` to land mid-run
STAGE = """\
import json, time
from pathlib import Path
import yaml
value = yaml.safe_load(Path("params.yaml").read_text())["value"]
if value < 0:
    raise SystemExit(f"value {value}: expected a non-negative number")
time.sleep(2)
Path("result.json").write_text(json.dumps({"square": value * value}))
"""
PIPELINE = {"stages": {"square": {"cmd": "python square.py", "deps": ["square.py"], "params": ["value"],
                                  "metrics": [{"result.json": {"cache": False}}]}}}


@pytest.fixture
def repo(tmp_path) -> Iterator[Path]:
    """A one-stage pipeline, committed with its baseline run (value 1); no worker left running after."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "square.py").write_text(STAGE)
    (root / "dvc.yaml").write_text(yaml.safe_dump(PIPELINE))
    (root / "params.yaml").write_text("value: 1\n")
    _run(["git", "init", "-q"], root)
    dvc("init", "-q", cwd=root)
    dvc("repro", cwd=root)
    _run(["git", *GIT_USER, "add", "-A"], root)
    _run(["git", *GIT_USER, "commit", "-qm", "baseline"], root)
    yield root
    dvc("queue", "stop", "--kill", cwd=root, check=False)


def _queue(repo: Path, *values: int) -> None:
    for value in values:
        dvc("exp", "run", "--queue", "-n", f"v{value}".replace("-", "m"), "-S", f"value={value}", cwd=repo)


def _squares(repo: Path) -> dict[str, int]:
    """Each finished experiment's result, as git holds it at the experiment's commit."""
    import dvc.api

    found = {}
    for row in dvc.api.exp_show(repo=str(repo)):
        if row.get("Experiment") and row.get("State") in (None, SUCCESS):
            found[row["Experiment"]] = row["square"]
    return found


def test_the_queue_runs_to_the_end_though_its_worker_stops_early(repo, tmp_path) -> None:
    """The worker is stopped while the first experiment runs: DVC lets that one finish and leaves the
    rest queued with no worker, the state CI found an hour later. `interlock run-queue` starts it
    again and every experiment ends with its own result."""
    _queue(repo, 2, 3, 4)
    log = tmp_path / "run-queue.log"
    with log.open("w") as sink:  # a file, not a pipe: the worker it starts outlives it and would hold a pipe
        runner = subprocess.Popen([str(BIN / "interlock"), "run-queue", "--grace", "5"], cwd=repo,
                                  env=user_env(), stdout=sink, stderr=subprocess.STDOUT)
    try:
        listed = []
        while not any(entry.status in (RUNNING, SUCCESS) for entry in listed):  # the worker took one
            assert runner.poll() is None, log.read_text()
            listed = queue_status(repo) or []
        dvc("queue", "stop", cwd=repo)  # warm shutdown: the running experiment ends, the rest stay queued
        runner.wait(timeout=command_timeout())
    finally:
        runner.kill()
    out = log.read_text()
    assert runner.returncode == 0, out
    assert "worker stopped with" in out and "started it again" in out
    assert "3 experiments succeeded: v2, v3, v4" in out
    assert _squares(repo) == {"v2": 4, "v3": 9, "v4": 16}
    assert [entry.status for entry in queue_status(repo)] == [SUCCESS] * 3


def test_a_failed_experiment_is_named_and_the_rest_still_run(repo, capsys) -> None:
    _queue(repo, -1, 5)
    assert cli.main(["run-queue", "--repo", str(repo)]) == 1
    said = capsys.readouterr()
    assert "1 experiments succeeded: v5" in said.out
    assert "1 experiments failed: vm1" in said.err and "dvc queue logs" in said.err
    assert _squares(repo) == {"v5": 25}
    assert sorted(entry.status for entry in queue_status(repo)) == [FAILED, SUCCESS]


def test_an_empty_queue_starts_no_worker(repo, capsys) -> None:
    assert cli.main(["run-queue", "--repo", str(repo)]) == 0
    assert "no experiment is queued" in capsys.readouterr().out
    assert queue_status(repo) == []


def test_a_worker_that_never_runs_anything_is_reported(repo, monkeypatch) -> None:
    """A worker that never takes an experiment (here: none is started) is started again once, then
    the queue's owner is told where to look, rather than waiting forever."""
    _queue(repo, 6)
    monkeypatch.setattr("interlock.analysis.queue.start_worker", lambda repo: None)
    restarts = []
    with pytest.raises(InterlockError, match="stopped twice without ending an experiment"):
        run_queue(repo, grace=0.5, poll=0.2, progress=False, on_restart=restarts.append)
    assert [[entry.status for entry in waiting] for waiting in restarts] == [[QUEUED]]


def test_a_queue_that_does_not_end_in_time_names_what_is_left(repo, monkeypatch, capsys) -> None:
    _queue(repo, 7)
    monkeypatch.setattr("interlock.analysis.queue.start_worker", lambda repo: None)  # nothing runs it
    assert cli.main(["run-queue", "--repo", str(repo), "--grace", "3600", "--timeout", "1"]) == 1
    assert "did not finish in 1 s: v7 still to run" in capsys.readouterr().err


def test_a_folder_that_is_no_dvc_repository_is_refused(tmp_path, capsys) -> None:
    assert cli.main(["run-queue", "--repo", str(tmp_path)]) == 1
    assert "not the root of a DVC repository" in capsys.readouterr().err
