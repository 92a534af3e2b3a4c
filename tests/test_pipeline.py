"""The synthesis stages as a real `dvc repro` in a temporary git repository at the smoke scale."""

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

from interlock import schemas
from interlock.config import write_params
from interlock.errors import InterlockError
from interlock.io import read_rows
from interlock.pipeline import run_graphs

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ARTIFACTS = ["domains.parquet", "blueprints.parquet", "graphs", "packs", "review", "models",
             "rollouts", "rollout_timings.parquet", "judge", "accepted"]
#: measured, so different every run; no stage reads it
MEASURED = {"rollout_timings.parquet"}


def _run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _snapshot(data: Path) -> dict[str, bytes]:
    return {p.relative_to(data).as_posix(): p.read_bytes() for p in sorted(data.rglob("*"))
            if p.is_file() and p.name != ".gitignore" and p.name not in MEASURED}


@pytest.fixture(scope="session")
def smoke_repo(tmp_path_factory) -> Path:
    """A copy of the repository's tracked files, at the smoke scale, after one `dvc repro`."""
    root = tmp_path_factory.mktemp("smoke") / "repo"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (REPO / name).is_file() and not name.startswith(("data/", "metrics/")) and name != "dvc.lock":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    write_params(root / "conf", root / "params.yaml", ["scale=smoke", "domains=d4"])
    _run(["git", "init", "-q"], root)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], root)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "smoke"], root)
    _run([str(BIN / "dvc"), "repro"], root)
    return root


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


def test_the_domains_choice_changes_nothing_synthesis_produces(smoke_repo):
    params = yaml.safe_load((smoke_repo / "params.yaml").read_text())
    params["domains"] = {"name": "d8", "count": 8}
    (smoke_repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        assert "up to date" in _run([str(BIN / "dvc"), "status"], smoke_repo)
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
