"""W&B tracking: real offline runs, read back from their ``.wandb`` files (no mocked wandb).

Each ``wandb.init`` costs about a second (it starts W&B's service process), so the file makes
three runs in all and checks everything it can on each.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from interlock.analysis.wandb_runs import read_offline_run
from interlock.core import runner
from interlock.core.config import Params, TrackingConfig, load_params
from interlock.core.errors import InterlockError
from interlock.core.runner import run_stage
from interlock.core.tracking import (
    StageReport,
    flatten_metrics,
    log_stage,
    repository_root,
    tracking_mode,
    wandb_dir,
)

from helpers.repo import command_timeout

REPO = Path(__file__).resolve().parents[1]
#: what a stage's environment may carry in from the outside, cleared for every test here
TRACKING_ENV = ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLED", "DVC_ROOT", "DVC_EXP_NAME", "DVC_STAGE")
#: enough summary keys that the summary record spans several 32 KiB blocks of the log
MANY = 3000


def _params(**tracking) -> Params:
    params = load_params(REPO / "params.yaml")
    config = params.tracking.model_copy(update={"mode": "offline", "group": None, "dir": None, **tracking})
    return params.model_copy(update={"tracking": config})


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TRACKING_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


REPORT = StageReport(
    metrics={"rft": {"admitted": 32, "tasks": 32, "acceptance": 0.25}, "nothing_accepted": False,
             "message": "not a number", "per_accepted": {"turns": None}, "episodes": 64,
             "many": {f"k{i:04d}": i / 7 for i in range(MANY)}},
    tables={"by_domain": [{"domain_id": "payroll_close", "rollouts": 4, "accepted": 1, "acceptance": 0.25},
                          {"domain_id": "donor_stewardship", "rollouts": 4, "accepted": 0,
                           "acceptance": 0.0}]},
)


@pytest.fixture(scope="module")
def experiment_run(tmp_path_factory):
    """One offline run as a queued DVC experiment's `accept` stage would make it."""
    root = tmp_path_factory.mktemp("repo")
    params = _params()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _clean_env(monkeypatch)
        monkeypatch.setenv("DVC_EXP_NAME", "sly-mole")
        monkeypatch.setenv("DVC_STAGE", "accept")
        start = time.perf_counter()
        run_dir = log_stage(params, "accept", REPORT, cwd=root)
        seconds = time.perf_counter() - start
    return root, params, run_dir, seconds


def test_offline_run_is_written_under_the_repository(experiment_run):
    root, _, run_dir, seconds = experiment_run
    assert run_dir.parent == root / "wandb"
    assert run_dir.name.startswith("offline-run-")
    assert list(run_dir.glob("run-*.wandb"))
    print(f"log_stage: {seconds:.2f} s")  # shown with -s; about 1 s on 2 cores
    assert seconds < 15


def test_offline_run_reads_back_names_and_config(experiment_run):
    _, params, run_dir, _ = experiment_run
    run = read_offline_run(run_dir)
    assert run["project"] == params.tracking.project
    assert run["group"] == "sly-mole"  # tracking.group unset: the DVC experiment is the study
    assert run["name"] == "sly-mole-accept"
    assert run["job_type"] == "accept"
    assert run["config"] == params.model_dump(mode="json")


def test_offline_run_reads_back_flattened_numbers_and_tables(experiment_run):
    _, _, run_dir, _ = experiment_run
    run = read_offline_run(run_dir)
    summary = run["summary"]
    assert summary["rft/admitted"] == 32
    assert summary["rft/acceptance"] == 0.25
    assert summary["nothing_accepted"] is False
    assert summary["episodes"] == 64
    assert "message" not in summary and "per_accepted/turns" not in summary  # numbers only
    assert all(summary[f"many/k{i:04d}"] == pytest.approx(i / 7) for i in range(MANY))
    assert run["tables"] == {"by_domain": REPORT.tables["by_domain"]}
    assert (run_dir / "run-{}.wandb".format(run["id"])).stat().st_size > 3 * 32768  # several blocks


def test_a_torn_log_reads_back_what_came_before(experiment_run, tmp_path):
    _, _, run_dir, _ = experiment_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    log = next(copy.glob("run-*.wandb"))
    log.write_bytes(log.read_bytes()[:40000])  # a killed stage: the log ends mid-record
    run = read_offline_run(copy)
    assert run["name"] == "sly-mole-accept"


def test_a_folder_without_a_log_is_refused(tmp_path):
    with pytest.raises(InterlockError, match="transaction log"):
        read_offline_run(tmp_path)


def test_study_group_wins_and_workspace_is_the_default(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    run_dir = log_stage(_params(group="domains-sweep", dir=str(tmp_path / "elsewhere")), "review",
                        StageReport({"rft": {"admitted": 3}},
                                    tables={"empty": [], "ragged": [{"x": 1}, {"y": 2}]}),
                        cwd=tmp_path / "repo")
    assert run_dir.parent == tmp_path / "elsewhere" / "wandb"
    run = read_offline_run(run_dir)
    assert (run["group"], run["name"], run["job_type"]) == ("domains-sweep", "workspace-review", "review")
    assert run["summary"] == {"rft/admitted": 3}
    assert run["tables"] == {"empty": [], "ragged": [{"x": 1, "y": None}, {"x": None, "y": 2}]}


def test_run_stage_in_a_queued_temp_workspace_logs_to_the_original_repository(tmp_path, monkeypatch):
    """`dvc queue start` runs each experiment in <repo>/.dvc/tmp/exps/tmpXXXX and deletes it after."""
    _clean_env(monkeypatch)
    repo = tmp_path / "repo"
    work = repo / ".dvc" / "tmp" / "exps" / "tmpk2j8x1"
    work.mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(_params().model_dump(mode="json")))
    shutil.copy2(REPO / "dvc.yaml", work / "dvc.yaml")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DVC_ROOT", str(work))  # as older DVC set it: the temp workspace
    monkeypatch.setenv("DVC_EXP_NAME", "queued-exp")

    run_stage("judge", lambda params, paths: StageReport({"calibration": {"accepted": 5}}))
    assert (work / "metrics" / "timing" / "judge.json").is_file()
    assert json.loads((work / "metrics" / "judge.json").read_text()) == {"calibration": {"accepted": 5}}
    shutil.rmtree(repo / ".dvc" / "tmp")  # the queue cleans the temp workspace up
    (run_dir,) = (repo / "wandb").glob("offline-run-*")
    run = read_offline_run(run_dir)
    assert (run["name"], run["group"], run["summary"]) == ("queued-exp-judge", "queued-exp",
                                                          {"calibration/accepted": 5})


def test_a_tracking_failure_warns_and_keeps_the_stage(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise OSError("No space left on device\nmore detail")

    monkeypatch.setattr(runner, "log_stage", broken)
    assert runner.track(_params(), "rollouts", StageReport({"episodes": 1})) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "warning: rollouts: W&B tracking failed (OSError: No space left on device)" in err


def test_disabled_writes_nothing_and_never_imports_wandb(tmp_path):
    code = ("import sys; from pathlib import Path\n"
            "from interlock.core.config import load_params\n"
            "from interlock.core.tracking import StageReport, log_stage\n"
            f"params = load_params({str(REPO / 'params.yaml')!r})\n"
            "params = params.model_copy(update={'tracking': params.tracking.model_copy("
            "update={'mode': sys.argv[1]})})\n"
            "assert log_stage(params, 'review', StageReport({'a': 1}), cwd=Path.cwd()) is None\n"
            "assert 'wandb' not in sys.modules\n")
    env = {k: v for k, v in os.environ.items() if k not in TRACKING_ENV}
    for mode, extra in (("disabled", {}), ("offline", {"WANDB_MODE": "disabled"})):
        done = subprocess.run([sys.executable, "-c", code, mode], cwd=tmp_path, env=env | extra,
                              capture_output=True, text=True, timeout=command_timeout())
        assert done.returncode == 0, done.stderr
    assert not (tmp_path / "wandb").exists()


def test_mode_env_wins_over_config():
    offline = TrackingConfig(name="offline", mode="offline", project="p")
    assert tracking_mode(offline, {}) == "offline"
    assert tracking_mode(offline, {"WANDB_MODE": "online"}) == "online"
    assert tracking_mode(offline, {"WANDB_MODE": "dryrun"}) == "offline"
    assert tracking_mode(offline, {"WANDB_MODE": "disabled"}) == "disabled"
    assert tracking_mode(offline, {"WANDB_DISABLED": "true"}) == "disabled"
    with pytest.raises(InterlockError, match="WANDB_MODE"):
        tracking_mode(offline, {"WANDB_MODE": "sometimes"})


def test_repository_root_leaves_dvc_temp_workspaces(tmp_path):
    repo = tmp_path / "repo"
    work = repo / ".dvc" / "tmp" / "exps" / "tmpab12" / "sub"
    assert repository_root(work, {}) == repo
    assert repository_root(tmp_path / "x", {"DVC_ROOT": str(work)}) == repo
    assert repository_root(work, {"DVC_ROOT": str(repo)}) == repo  # recent DVC: the parent repo
    assert repository_root(repo / "stages", {"DVC_ROOT": str(repo)}) == repo
    assert repository_root(repo, {}) == repo


def test_wandb_dir_choices(tmp_path):
    config = TrackingConfig(name="offline", mode="offline", project="p")
    repo = tmp_path / "repo"
    assert wandb_dir(config, repo, {}) == repo / "wandb"
    assert wandb_dir(config, repo, {"WANDB_DIR": str(tmp_path / "w")}) == tmp_path / "w" / "wandb"
    chosen = config.model_copy(update={"dir": "runs"})
    assert wandb_dir(chosen, repo / ".dvc" / "tmp" / "exps" / "tmp1", {}) == repo / "runs" / "wandb"
    chosen = config.model_copy(update={"dir": str(tmp_path / "abs")})
    assert wandb_dir(chosen, repo, {"WANDB_DIR": "/ignored"}) == tmp_path / "abs" / "wandb"


def test_flatten_metrics_keeps_numbers_only():
    import numpy as np

    flat = flatten_metrics({"a": {"b": {"c": 1}, "d": "text"}, "e": [1, 2], "f": None, "g": True,
                            "h": np.float32(0.5), "i": np.int64(3), "j": float("nan")})
    assert math.isnan(flat.pop("j"))
    assert flat == {"a/b/c": 1, "g": True, "h": 0.5, "i": 3}
    assert type(flat["i"]) is int
