"""W&B tracking: real offline runs (no mocked wandb), checked through what W&B documents: the
run's folder and its ``.wandb`` log where ``wandb sync`` looks for them, and the live run's public
``Run`` properties (``id``, ``name``, ``group``, ``job_type``, ``config``, the summary's keys),
which :func:`~interlock.core.tracking.log_stage` returns. Offline, W&B 0.31 writes no ``config.yaml`` or
``wandb-summary.json`` (only its private transaction log holds them) and ``wandb.Api`` needs a
server, so nothing here reads a run back from disk.

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
from pathlib import Path

import pytest
import yaml

from interlock.core import runner
from interlock.core.config import Params, load_params
from interlock.core.errors import InterlockError
from interlock.core.runner import run_stage
from interlock.core.tracking import (
    LoggedRun,
    StageReport,
    _table,
    flatten_metrics,
    log_stage,
    repository_root,
    tracking_mode,
    wandb_dir,
)

from helpers.config import defaults
from helpers.repo import command_timeout

REPO = Path(__file__).resolve().parents[1]
#: what a stage's environment may carry in from the outside, cleared for every test here
TRACKING_ENV = ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLED", "DVC_ROOT", "DVC_EXP_NAME", "DVC_STAGE")
#: enough summary keys that a large summary is seen to arrive whole
MANY = 500


def _params(**tracking) -> Params:
    params = load_params(REPO / "params.yaml")
    config = params.tracking.model_copy(update={"mode": "offline", "group": None, "dir": None, **tracking})
    return params.model_copy(update={"tracking": config})


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TRACKING_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def _offline_folder(run: LoggedRun) -> None:
    """The folder W&B documents for an offline run: ``offline-run-<time>-<id>``, holding the
    run's ``.wandb`` log, which ``wandb sync`` uploads."""
    assert run.dir.name.startswith("offline-run-") and run.dir.name.endswith(f"-{run.id}")
    assert (run.dir / f"run-{run.id}.wandb").stat().st_size > 0


REPORT = StageReport(
    metrics={"rft": {"admitted": 32, "tasks": 32, "acceptance": 0.25}, "nothing_accepted": False,
             "message": "not a number", "per_accepted": {"turns": None}, "episodes": 64,
             "many": {f"k{i:04d}": i / 7 for i in range(MANY)}},
    tables={"by_domain": [{"domain_id": "payroll_close", "rollouts": 4, "accepted": 1, "acceptance": 0.25},
                          {"domain_id": "donor_stewardship", "rollouts": 4, "accepted": 0,
                           "acceptance": 0.0}]},
    config={"runtime": {"backend": "transformers", "dtype": "auto", "resolved_dtype": "bfloat16"}},
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
        run = log_stage(params, "accept", REPORT, cwd=root)
    return root, params, run


def test_offline_run_is_written_under_the_repository(experiment_run):
    root, _, run = experiment_run
    assert run.dir.parent == root / "wandb"
    _offline_folder(run)


def test_offline_run_carries_names_and_config(experiment_run):
    _, params, run = experiment_run
    assert run.project == params.tracking.project
    assert run.group == "sly-mole"  # tracking.group unset: the DVC experiment is the study
    assert run.name == "sly-mole-accept"
    assert run.job_type == "accept"
    # the composed params, and beside them what the stage resolved as it ran
    assert run.config == {**params.model_dump(mode="json"), **REPORT.config}
    assert run.config["runtime"]["resolved_dtype"] == "bfloat16"


def test_offline_run_carries_flattened_numbers_and_tables(experiment_run):
    """Every number (and boolean) of the report under its flattened key, a key per table, and
    nothing else: no strings, no None, no key that a table's rows stand for."""
    _, _, run = experiment_run
    numbers = {"rft/admitted", "rft/tasks", "rft/acceptance", "nothing_accepted", "episodes",
               *(f"many/k{i:04d}" for i in range(MANY))}
    assert run.summary_keys == numbers | {"by_domain"}


def test_a_report_config_key_may_not_hide_a_metric():
    with pytest.raises(ValueError, match="runtime"):
        StageReport({"runtime": 1}, config={"runtime": {"backend": "transformers"}})


def test_a_report_table_becomes_a_wandb_table_of_every_rows_keys():
    table = _table([{"x": 1}, {"y": 2, "x": 3}, {}])
    assert table.columns == ["x", "y"]
    assert table.data == [[1, None], [3, 2], [None, None]]


def test_study_group_wins_and_workspace_is_the_default(tmp_path, monkeypatch):
    _clean_env(monkeypatch)
    report = StageReport({"rft": {"admitted": 3}}, tables={"empty": [], "ragged": [{"x": 1}, {"y": 2}]})
    run = log_stage(_params(group="domains-sweep", dir=str(tmp_path / "elsewhere")), "review", report,
                    cwd=tmp_path / "repo")
    assert run.dir.parent == tmp_path / "elsewhere" / "wandb"
    _offline_folder(run)
    assert (run.group, run.name, run.job_type) == ("domains-sweep", "workspace-review", "review")
    assert run.summary_keys == {"rft/admitted", "empty", "ragged"}


def test_run_stage_in_a_queued_temp_workspace_logs_to_the_original_repository(tmp_path, monkeypatch, capsys):
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

    runtime = {"backend": "llamacpp", "dtype": "float32", "resolved_dtype": None, "gguf": "Q8_0"}
    run_stage("judge", lambda params, paths: StageReport({"calibration": {"accepted": 5}},
                                                         config={"runtime": runtime}))
    assert (work / "metrics" / "timing" / "judge.json").is_file()
    assert json.loads((work / "metrics" / "judge.json").read_text()) == {"calibration": {"accepted": 5},
                                                                         "runtime": runtime}
    shutil.rmtree(repo / ".dvc" / "tmp")  # the queue cleans the temp workspace up
    (run_dir,) = (repo / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("run-*.wandb")
    assert run_dir.name.endswith(log.name.removeprefix("run").removesuffix(".wandb"))
    assert f"judge: W&B run written to {run_dir}" in capsys.readouterr().out


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
    offline = defaults().tracking.replace(project="p")
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
    config = defaults().tracking.replace(project="p")
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
