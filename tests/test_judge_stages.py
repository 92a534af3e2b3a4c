"""The `judge` and `accept` stages, run as their scripts on a small rollout pool with known truth.

The pool is made by the rollout engine playing four scripted solvers on each test task (the
oracle; a noisy solver that skips every effect and claims success; success claimed without any
work; the work plus collateral damage), so every verdict is known.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from interlock import schemas
from interlock.agents.backends import TaskContext
from interlock.config import write_params
from interlock.io import read_rows, write_row_groups, write_table_set
from interlock.judges.run import run_accept, run_judge
from interlock.packs import pack_rows
from interlock.rollouts import scripted_rollouts

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("oracle", "noisy", "claim_only", "collateral_damage")


def _write_pool(data: Path, tasks: list, policies: tuple[str, ...] = POLICIES) -> list[dict]:
    """The tasks' packs, and their scripted rollouts in two row groups."""
    with write_table_set(data / "packs", schemas.PACK_TABLES) as tables:
        rows: dict[str, list[dict]] = {name: [] for name in schemas.PACK_TABLES}
        for _, _, _, pack in tasks:
            for name, table_rows in pack_rows(pack).items():
                rows[name] += table_rows
        tables.write(rows)
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    with tempfile.TemporaryDirectory() as workdir:
        made = scripted_rollouts(contexts, policies, seed=0, workdir=Path(workdir), skip_effect=1.0,
                                 ignore_coupling=0.0)
    trajectories = [t.to_row() for t in made]
    half = len(trajectories) // 2
    # the same rollouts stand in for the review's validation pool (the judges' calibration pool)
    for path in (data / "rollouts" / "trajectories.parquet", data / "review" / "validation.parquet"):
        with write_row_groups(path, schemas.TRAJECTORIES) as writer:
            for group in (trajectories[:half], trajectories[half:]):
                if group:
                    writer.write(group)
    return trajectories


def _stage(root: Path, name: str) -> str:
    done = subprocess.run([sys.executable, f"stages/{name}.py"], cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def project(tasks, tmp_path_factory) -> Path:
    """A working copy with the stage scripts, params.yaml and a rollout pool under data/."""
    root = tmp_path_factory.mktemp("judging")
    shutil.copytree(REPO / "stages", root / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    write_params(REPO / "conf", root / "params.yaml", ["scale=smoke", "domains=d4"])
    _write_pool(root / "data", tasks)
    return root


def test_the_judge_stage_writes_both_judges_verdicts_deterministically(project: Path, tasks) -> None:
    out = _stage(project, "judge")
    assert "judge: rollouts: agent:" in out and "judge: calibration: text:" in out
    judge_dir = project / "data" / "judge" / "rollouts"
    first = _snapshot(judge_dir)
    assert set(first) == {"agent.parquet", "text.parquet", "collateral.parquet"}
    _stage(project, "judge")
    assert _snapshot(judge_dir) == first  # no timings, no temp paths: same bytes
    trajectories = read_rows(project / "data" / "rollouts" / "trajectories.parquet", schemas.TRAJECTORIES)
    criteria = sum(len(pack.rubric) for _, _, _, pack in tasks) * 4
    for name in ("agent", "text"):
        rows = read_rows(judge_dir / f"{name}.parquet", schemas.VERDICTS)
        assert len(rows) == criteria and {r["judge"] for r in rows} == {name}
        assert {r["rollout_id"] for r in rows} == {t["rollout_id"] for t in trajectories}
        assert pq.ParquetFile(judge_dir / f"{name}.parquet").num_row_groups == 2  # aligned
    collateral = read_rows(judge_dir / "collateral.parquet", schemas.COLLATERAL)
    assert {r["rollout_id"].split("-")[0] for r in collateral} == {"collateral_damage"}
    metrics = json.loads((project / "metrics" / "judge.json").read_text())
    assert metrics["calibration"]["judges"]["agent"]["rollouts"] == len(trajectories)
    metrics = metrics["rollouts"]
    agent, text = metrics["judges"]["agent"], metrics["judges"]["text"]
    assert agent["vs_truth"]["all"]["trajectories"]["false_accepts"] == 0
    assert text["vs_truth"]["noisy"]["trajectories"]["false_accept_rate"] == 1.0
    assert text["vs_truth"]["oracle"]["trajectories"]["false_reject_rate"] == 0.0
    for judge in (agent, text):
        assert judge["seconds"] > 0 and judge["output_tokens"] == 0
        assert judge["seconds_per_criterion"] > 0 and "by_kind" in judge
    assert metrics["sandbox"]["network"] == "netns" or metrics["sandbox"]["network"].startswith("sockets")


@pytest.mark.parametrize(("judge", "policies"), [("agent", {"oracle"}), ("text", set(POLICIES))])
def test_the_accept_stage_uses_the_configured_judge(project: Path, tasks, judge: str,
                                                    policies: set[str]) -> None:
    if not (project / "data" / "judge" / "rollouts").exists():
        _stage(project, "judge")
    write_params(REPO / "conf", project / "params.yaml", ["scale=smoke", "domains=d4", f"judge={judge}"])
    assert yaml.safe_load((project / "params.yaml").read_text())["judge"] == {"name": judge}
    out = _stage(project, "accept")
    accepted = read_rows(project / "data" / "accepted" / "trajectories.parquet", schemas.TRAJECTORIES)
    assert {r["policy"] for r in accepted} == policies
    assert len(accepted) == len(tasks) * len(policies)
    metrics = json.loads((project / "metrics" / "accept.json").read_text())
    assert metrics["judge"] == judge and metrics["accepted"] == len(accepted)
    assert not metrics["nothing_accepted"] and f"under the {judge} judge" in out
    assert metrics["per_accepted"]["turns"] > 0 and metrics["per_accepted"]["tool_calls"] > 0
    assert metrics["paper_per_accepted"] == {"turns": 27.6, "tool_calls": 42}
    plot = (project / "metrics" / "plots" / "accept_by_domain.tsv").read_text().splitlines()
    assert plot[0] == "domain_id\trollouts\taccepted\tacceptance"
    assert len(plot) - 1 == len({pack.domain_id for _, _, _, pack in tasks}) == metrics["domains"]


def test_nothing_accepted_is_said_plainly(tasks, tmp_path: Path) -> None:
    data = tmp_path / "data"
    trajectories = _write_pool(data, tasks, ("claim_only", "noisy"))
    run_judge(data / "rollouts" / "trajectories.parquet", data / "packs", data / "judge", workers=1,
              progress=False)
    out = data / "accepted" / "trajectories.parquet"
    metrics, plot = run_accept(data / "rollouts" / "trajectories.parquet", data / "judge", data / "packs",
                               out, judge="agent")
    assert metrics["nothing_accepted"] and metrics["accepted"] == 0
    assert metrics["rollouts"] == len(trajectories)
    assert metrics["message"].startswith("nothing accepted")
    assert metrics["per_accepted"] == {"turns": None, "tool_calls": None}
    assert pq.read_table(out).num_rows == 0 and pq.read_schema(out).equals(schemas.TRAJECTORIES)
    assert all(row["accepted"] == 0 for row in plot)


def test_a_missing_verdict_is_not_an_accept(tasks, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write_pool(data, tasks, ("oracle",))
    run_judge(data / "rollouts" / "trajectories.parquet", data / "packs", data / "judge", workers=1,
              progress=False)
    verdicts = read_rows(data / "judge" / "agent.parquet", schemas.VERDICTS)
    dropped = verdicts[0]
    kept = [v for v in verdicts if v is not dropped]
    from interlock.io import write_table

    write_table(data / "judge" / "agent.parquet", kept, schemas.VERDICTS)
    metrics, _ = run_accept(data / "rollouts" / "trajectories.parquet", data / "judge", data / "packs",
                            data / "accepted.parquet", judge="agent")
    assert metrics["accepted"] == len(tasks) - 1


# ----------------------------------------------------------------------------- under DVC

def _dvc(root: Path, *args: str) -> str:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([str(bin_dir / "dvc"), *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"dvc {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_switching_the_judge_reruns_only_accept(tasks, tiny_checkpoint, tmp_path: Path) -> None:
    """`dvc repro -s` on the two stages (upstream artifacts are written here, not synthesized)."""
    root = tmp_path / "repo"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    for name in listed:
        if (REPO / name).is_file() and not name.startswith(("data/", "metrics/")) and name != "dvc.lock":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    write_params(root / "conf", root / "params.yaml", ["scale=smoke", "domains=d4"])
    _write_pool(root / "data", tasks)
    shutil.copytree(tiny_checkpoint, root / "data" / "models" / "base")  # a dependency of judge
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "judging"], cwd=root, check=True)

    assert "Running stage 'judge'" in _dvc(root, "repro", "-s", "judge")
    assert "Running stage 'accept'" in _dvc(root, "repro", "-s", "accept")
    verdicts = _snapshot(root / "data" / "judge" / "rollouts")
    assert json.loads((root / "metrics" / "accept.json").read_text())["judge"] == "agent"

    write_params(root / "conf", root / "params.yaml", ["scale=smoke", "domains=d4", "judge=text"])
    assert "changed" not in _dvc(root, "status", "judge")
    status = _dvc(root, "status", "accept")
    assert "params.yaml" in status and "modified:" in status and "judge" in status
    assert "Running stage" not in _dvc(root, "repro", "-s", "judge")
    assert "Running stage 'accept'" in _dvc(root, "repro", "-s", "accept")
    assert _snapshot(root / "data" / "judge" / "rollouts") == verdicts
    metrics = json.loads((root / "metrics" / "accept.json").read_text())
    assert metrics["judge"] == "text" and metrics["accepted"] == 4 * len(tasks)
    assert (root / "metrics" / "plots" / "accept_by_domain.tsv").exists()
