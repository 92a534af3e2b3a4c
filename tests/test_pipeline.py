"""The whole pipeline as a real `dvc repro` in a temporary git repository at the smoke scale."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import BIN
from conftest import run as _run

from interlock import schemas
from interlock.errors import InterlockError
from interlock.io import read_rows
from interlock.pipeline import run_graphs

ARTIFACTS = ["domains.parquet", "blueprints.parquet", "graphs", "packs", "review", "models", "demos",
             "rollouts", "rollout_timings.parquet", "judge", "accepted", "training_set", "evaluation",
             "evaluation_timings.parquet"]
#: measured, so different every run; no stage reads them
MEASURED = {"rollout_timings.parquet", "evaluation_timings.parquet"}


def _snapshot(data: Path) -> dict[str, bytes]:
    return {p.relative_to(data).as_posix(): p.read_bytes() for p in sorted(data.rglob("*"))
            if p.is_file() and p.name != ".gitignore" and p.name not in MEASURED}


def test_dvc_repro_writes_every_artifact(smoke_repo):
    data = smoke_repo / "data"
    for name in ARTIFACTS:
        assert (data / name).exists(), name
    verdicts = read_rows(data / "review" / "verdicts.parquet", schemas.REVIEW_TABLES["verdicts"])
    pools = {v["pool"] for v in verdicts}
    assert pools == {"demo", "rft", "dev", "benchmark"}
    assert all(v["admitted"] for v in verdicts), [v["reasons"] for v in verdicts if not v["admitted"]]
    metrics = json.loads((smoke_repo / "metrics" / "review.json").read_text())
    assert metrics["rft"]["tasks"] == 4 * 2 and metrics["rft"]["admitted"] == 8
    assert (smoke_repo / "dvc.lock").exists()


def test_repro_after_repro_does_nothing(smoke_repo):
    out = _run([str(BIN / "dvc"), "repro"], smoke_repo)
    assert "Running stage" not in out
    status = _run([str(BIN / "dvc"), "status"], smoke_repo)
    assert "up to date" in status


def test_stages_write_identical_bytes_when_forced(smoke_repo):
    before = _snapshot(smoke_repo / "data")
    _run([str(BIN / "dvc"), "repro", "--force"], smoke_repo)
    assert _snapshot(smoke_repo / "data") == before


def test_the_domains_choice_reaches_only_the_sample_stage(smoke_repo):
    """A breadth sweep re-runs sample and what follows it (train, evaluate), never synthesis,
    rollouts or judging: of the stages whose own inputs change, `sample` is the only one."""
    params = yaml.safe_load((smoke_repo / "params.yaml").read_text())
    params["domains"] = {"name": "d4", "count": 4}
    (smoke_repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        status = json.loads(_run([str(BIN / "dvc"), "status", "--json"], smoke_repo, stdout_only=True))
        assert set(status) == {"sample"}
        assert "domains" in json.dumps(status["sample"])
    finally:
        _run(["git", "checkout", "params.yaml"], smoke_repo)


def test_a_corrupted_input_stops_with_its_name_and_leaves_outputs_whole(smoke_repo, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(smoke_repo / "data", data)
    before = _snapshot(data / "graphs")
    blueprints = data / "blueprints.parquet"
    raw = blueprints.read_bytes()
    blueprints.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InterlockError) as error:
        run_graphs(data / "domains.parquet", blueprints, data / "graphs")
    assert str(blueprints) in str(error.value)
    assert _snapshot(data / "graphs") == before
    assert sorted(p.name for p in data.iterdir() if p.name != ".gitignore") == sorted(ARTIFACTS)


def test_stage_script_reports_bad_params_in_one_line(smoke_repo, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(smoke_repo, work, ignore=shutil.ignore_patterns(".git", ".dvc"))
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["scale"]["task_size"]["decisions"] = 1
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "stages/blueprints.py"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "params.yaml" in done.stderr and "decisions" in done.stderr
    assert "Traceback" not in done.stderr
    assert pq.ParquetFile(work / "data" / "blueprints.parquet").metadata.num_rows > 0


def test_every_model_is_a_checkpoint_and_the_fine_tunings_trained(smoke_repo):
    from interlock.models.checkpoint import read_manifest, verify_checkpoint
    from interlock.training.trainer import read_training

    models = smoke_repo / "data" / "models"
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == ["base", "demo_sft", "rft"]
    checkpoints = [models / "base", models / "demo_sft", *sorted((models / "rft").iterdir())]
    for checkpoint in checkpoints:
        assert verify_checkpoint(checkpoint) == [], checkpoint
    demo = read_training(models / "demo_sft")
    demos = read_rows(smoke_repo / "data" / "demos" / "trajectories.parquet", schemas.TRAJECTORIES)
    assert demo["examples"] == len(demos) > 0 and demo["steps"] > 0
    assert {d["pool"] for d in demos} == {"demo"}
    metrics = json.loads((smoke_repo / "metrics" / "train.json").read_text())
    data = smoke_repo / "data"
    accepted = read_rows(data / "accepted" / "trajectories.parquet", schemas.TRAJECTORIES)
    training_set = read_rows(data / "training_set" / "trajectories.parquet", schemas.TRAJECTORIES)
    assert training_set == accepted  # domains=all: every accepted trajectory, nothing resampled
    sample = json.loads((smoke_repo / "metrics" / "sample.json").read_text())
    assert sample["breadth"] is None and sample["trajectories"] == len(accepted)
    assert metrics["trained"] == bool(accepted) and metrics["examples"] == len(accepted)
    # one checkpoint per seed; with nothing to train on, one untrained copy stands for them all
    seeds = sorted(p.name for p in (models / "rft").iterdir())
    assert seeds == ([f"seed-{k}" for k in range(metrics["seeds"])] if accepted else ["seed-0"])
    assert sorted(metrics["by_seed"]) == seeds
    assert read_manifest(models / "rft" / "seed-0")["origin"].endswith("demo_sft")


def test_every_stage_with_numbers_logged_an_offline_wandb_run(smoke_repo):
    from interlock.config import load_params
    from interlock.tracking import read_offline_run

    runs = {}
    for folder in sorted((smoke_repo / "wandb").glob("offline-run-*")):
        run = read_offline_run(folder)
        runs.setdefault(run["job_type"], run)
    assert {"review", "demos", "demo_sft", "rollouts", "judge", "accept", "sample", "train",
            "evaluate"} <= set(runs)
    params = load_params(smoke_repo / "params.yaml").model_dump(mode="json")
    for stage, run in runs.items():
        assert (run["name"], run["group"], run["config"]) == (f"workspace-{stage}", "workspace", params)
    accept = json.loads((smoke_repo / "metrics" / "accept.json").read_text())
    assert runs["accept"]["summary"]["rollouts"] == accept["rollouts"]
    demo_sft = json.loads((smoke_repo / "metrics" / "demo_sft.json").read_text())
    assert runs["demo_sft"]["summary"]["steps"] == demo_sft["steps"]
    assert len(runs["demo_sft"]["tables"]["loss"]) == demo_sft["steps"]


def test_dvc_metrics_and_plots_show_read_what_the_stages_declared(smoke_repo):
    metrics = json.loads(_run([str(BIN / "dvc"), "metrics", "show", "--json"], smoke_repo, stdout_only=True))
    files = next(iter(metrics.values()))["data"]
    assert {"metrics/evaluate.json", "metrics/train.json", "metrics/demo_sft.json"} <= set(files)
    plots = json.loads(_run([str(BIN / "dvc"), "plots", "show", "--json"], smoke_repo, stdout_only=True))
    declared = {"metrics/plots/demo_sft_loss.tsv", "metrics/plots/train_loss/seed-0.tsv",
                "metrics/plots/accept_by_domain.tsv", "metrics/plots/evaluate_models.tsv",
                "metrics/plots/evaluate_domains.tsv"}
    assert declared <= set(plots["data"]) and not plots.get("errors")


def test_artifacts_round_trip_through_a_dvc_remote(smoke_repo, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(smoke_repo, clone, ignore=shutil.ignore_patterns("wandb"))
    remote = tmp_path / "remote"
    _run([str(BIN / "dvc"), "remote", "add", "--local", "-d", "store", str(remote)], clone)
    _run([str(BIN / "dvc"), "push"], clone)
    before = _snapshot(clone / "data")
    shutil.rmtree(clone / "data")
    shutil.rmtree(clone / ".dvc" / "cache")
    _run([str(BIN / "dvc"), "pull"], clone)
    assert _snapshot(clone / "data") == before
    assert "up to date" in _run([str(BIN / "dvc"), "status"], clone)
