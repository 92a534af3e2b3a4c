"""The `judge` and `accept` stages, run as their scripts on a small rollout pool with known truth.

The pool is made by the rollout engine playing four scripted solvers on each test task (the
oracle; a noisy solver that skips every effect and claims success; success claimed without any
work; the work plus collateral damage), so every verdict is known.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from interlock.core import schemas
from interlock.core.config import load_params, write_params
from interlock.core.io import read_rows, write_row_groups, write_table
from interlock.core.paths import Paths
from interlock.judging.judges import JudgeContext
from interlock.judging.stage import run_accept, run_judge
from interlock.recursive.stage import run_grow
from interlock.rollout.runs import RolloutPlan, episode_seed, scripted_rollouts
from interlock.synthesis.tasks import TaskContext
from interlock.testing.adversaries import PLANS

from helpers.artifacts import write_packs
from helpers.config import defaults
from helpers.repo import command_timeout, commit, dvc, stages_run, tracked_copy

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("oracle", "noisy", "claim_only", "collateral_damage")


def _write_pool(paths: Paths, tasks: list, policies: tuple[str, ...] = POLICIES, *,
                as_run: bool = True) -> list[dict]:
    """The tasks' packs, and their scripted rollouts in two row groups; recursive synthesis's
    (empty) grown pool, which the judging stages read beside the packs. ``as_run``: each rollout
    labelled as the run's rollouts stage labels its episodes, the scripted solver's index in
    ``policies`` as its attempt (what ``accept`` checks); else by its solver (what the judge's
    per-policy error rates are about)."""
    run_grow(paths, None, defaults("synthesis=base").synthesis, 0)
    write_packs(paths.packs, [pack for *_, pack in tasks])
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]
    with tempfile.TemporaryDirectory() as workdir:
        made = scripted_rollouts(contexts, policies, seed=0, workdir=Path(workdir), skip_effect=1.0,
                                 ignore_coupling=0.0, plans=PLANS)
    plan = RolloutPlan.of(load_params(paths.data.parent / "params.yaml"))  # as _paths wrote it
    if as_run:
        made = [dataclasses.replace(t, rollout_id=f"{t.task_id}.a{policies.index(t.policy)}",
                                    attempt=policies.index(t.policy), policy=plan.policy,
                                    seed=episode_seed(plan.seed, t.task_id, policies.index(t.policy)))
                for t in made]
    trajectories = [t.to_row() for t in made]
    half = len(trajectories) // 2
    # the same rollouts stand in for the review's validation pool (the judges' calibration pool)
    for path in (paths.trajectories, paths.validation):
        with write_row_groups(path, schemas.TRAJECTORIES) as writer:
            for group in (trajectories[:half], trajectories[half:]):
                if group:
                    writer.write(group)
    return trajectories


def _stage(root: Path, name: str) -> str:
    done = subprocess.run([sys.executable, f"stages/{name}.py"], cwd=root, capture_output=True, text=True,
                          timeout=command_timeout())
    assert done.returncode == 0, done.stderr
    return done.stdout


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _paths(root: Path, overrides: list[str]) -> Paths:
    """Write ``root/params.yaml`` (the smoke experiment at breadth d4, an attempt per solver of
    the pool, and ``overrides``); its paths under ``root``."""
    overrides = ["experiment=smoke", "domains.count=4", f"scale.rollouts.attempts={len(POLICIES)}",
                 *overrides]
    write_params(REPO / "conf", root / "params.yaml", overrides)
    return load_params(root / "params.yaml").paths.under(root)


def _project(tasks, root: Path, *, as_run: bool) -> Path:
    """A working copy with the pipeline, the stage scripts, params.yaml and a rollout pool."""
    shutil.copytree(REPO / "stages", root / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "dvc.yaml", root / "dvc.yaml")
    _write_pool(_paths(root, []), tasks, as_run=as_run)
    return root


@pytest.fixture(scope="module")
def project(tasks, tmp_path_factory) -> Path:
    """Its rollouts labelled by their solvers."""
    return _project(tasks, tmp_path_factory.mktemp("judging"), as_run=False)


@pytest.fixture(scope="module")
def run_project(tasks, tmp_path_factory) -> Path:
    """Its rollouts labelled as the run's rollouts stage labels them."""
    return _project(tasks, tmp_path_factory.mktemp("accepting"), as_run=True)


def test_the_judge_stage_writes_both_judges_verdicts_deterministically(project: Path, tasks,
                                                                     network_isolation: str) -> None:
    out = _stage(project, "judge")
    assert "judge: rollouts: agent:" in out and "judge: calibration: text:" in out
    paths = load_params(project / "params.yaml").paths.under(project)
    judge_dir = paths.judgements
    first = _snapshot(judge_dir)
    assert set(first) == {"agent.parquet", "text.parquet", "collateral.parquet"}
    _stage(project, "judge")
    assert _snapshot(judge_dir) == first  # no timings, no temp paths: same bytes
    trajectories = read_rows(paths.trajectories, schemas.TRAJECTORIES)
    criteria = sum(len(pack.rubric) for _, _, _, pack in tasks) * 4
    for name in ("agent", "text"):
        rows = read_rows(judge_dir / f"{name}.parquet", schemas.VERDICTS)
        assert len(rows) == criteria and {r["judge"] for r in rows} == {name}
        assert {r["rollout_id"] for r in rows} == {t["rollout_id"] for t in trajectories}
        assert pq.ParquetFile(judge_dir / f"{name}.parquet").num_row_groups == 2  # aligned
    collateral = read_rows(judge_dir / "collateral.parquet", schemas.COLLATERAL)
    assert {r["rollout_id"].split("-")[0] for r in collateral} == {"collateral_damage"}
    metrics = json.loads(paths.metrics_of("judge").read_text())
    assert metrics["calibration"]["judges"]["agent"]["rollouts"] == len(trajectories)
    metrics = metrics["rollouts"]
    agent, text = metrics["judges"]["agent"], metrics["judges"]["text"]
    assert agent["vs_truth"]["all"]["trajectories"]["false_accepts"] == 0
    assert text["vs_truth"]["noisy"]["trajectories"]["false_accept_rate"] == 1.0
    assert text["vs_truth"]["oracle"]["trajectories"]["false_reject_rate"] == 0.0
    for judge in (agent, text):
        assert judge["seconds"] > 0 and judge["output_tokens"] == 0
        assert judge["seconds_per_criterion"] > 0 and "by_kind" in judge
    assert metrics["sandbox"]["network"].split(" ")[0] == network_isolation


@pytest.mark.parametrize(("judge", "policies"), [("agent", {"oracle"}), ("text", set(POLICIES))])
def test_the_accept_stage_uses_the_configured_judge(run_project: Path, tasks, judge: str,
                                                    policies: set[str]) -> None:
    project = run_project
    paths = load_params(project / "params.yaml").paths.under(project)
    if not paths.judgements.exists():
        _stage(project, "judge")
    _paths(project, [f"judge={judge}"])
    assert yaml.safe_load((project / "params.yaml").read_text())["judge"] == {
        "name": judge, "graders": ["agent", "text"], "backed_by": "scripted"}
    out = _stage(project, "accept")
    accepted = read_rows(paths.accepted_table, schemas.TRAJECTORIES)
    assert {POLICIES[r["attempt"]] for r in accepted} == policies
    assert len(accepted) == len(tasks) * len(policies)
    metrics = json.loads(paths.metrics_of("accept").read_text())
    assert metrics["judge"] == judge and metrics["accepted"] == len(accepted)
    assert not metrics["nothing_accepted"] and f"under the {judge} judge" in out
    assert metrics["per_accepted"]["turns"] > 0 and metrics["per_accepted"]["tool_calls"] > 0
    assert metrics["paper_per_accepted"] == {"turns": 27.6, "tool_calls": 42}
    plot = paths.accept_plot.read_text().splitlines()
    assert plot[0] == "domain_id\trollouts\taccepted\tacceptance"
    assert len(plot) - 1 == len({pack.domain_id for _, _, _, pack in tasks}) == metrics["domains"]


def test_nothing_accepted_is_said_plainly(tasks, tmp_path: Path) -> None:
    paths = _paths(tmp_path, [])
    trajectories = _write_pool(paths, tasks, ("claim_only", "noisy"))
    run_judge(paths.trajectories, [paths.packs], paths.judgements, context=JudgeContext(workers=1),
              progress=False)
    out = paths.accepted_table
    metrics, plot = run_accept(paths.trajectories, paths.judgements, [paths.packs], out, judge="agent")
    assert metrics["nothing_accepted"] and metrics["accepted"] == 0
    assert metrics["rollouts"] == len(trajectories)
    assert metrics["message"].startswith("nothing accepted")
    assert metrics["per_accepted"] == {"turns": None, "tool_calls": None}
    assert pq.read_table(out).num_rows == 0 and pq.read_schema(out).equals(schemas.TRAJECTORIES)
    assert all(row["accepted"] == 0 for row in plot)


def test_a_missing_verdict_is_not_an_accept(tasks, tmp_path: Path) -> None:
    paths = _paths(tmp_path, [])
    _write_pool(paths, tasks, ("oracle",))
    run_judge(paths.trajectories, [paths.packs], paths.judgements, context=JudgeContext(workers=1),
              progress=False)
    verdicts = read_rows(paths.judgements / "agent.parquet", schemas.VERDICTS)
    write_table(paths.judgements / "agent.parquet", verdicts[1:], schemas.VERDICTS)  # one verdict dropped
    metrics, _ = run_accept(paths.trajectories, paths.judgements, [paths.packs], paths.accepted_table,
                            judge="agent")
    assert metrics["accepted"] == len(tasks) - 1


# ----------------------------------------------------------------------------- under DVC

def test_switching_the_judge_reruns_only_accept(tasks, tiny_checkpoint, tmp_path: Path) -> None:
    """`dvc repro -s` on the two stages (upstream artifacts are written here, not synthesized)."""
    root = tracked_copy(tmp_path / "repo")
    paths = _paths(root, [])
    _write_pool(paths, tasks)
    # a dependency of judge: the starting policy (a model-backed judge would consult it)
    shutil.copytree(tiny_checkpoint, paths.model(load_params(root / "params.yaml").solver.start))
    commit(root, "judging")

    assert stages_run(dvc("repro", "-s", "judge", cwd=root)) == ["judge"]
    assert stages_run(dvc("repro", "-s", "accept", cwd=root)) == ["accept"]
    verdicts = _snapshot(paths.judgements)
    assert json.loads(paths.metrics_of("accept").read_text())["judge"] == "agent"

    _paths(root, ["judge=text"])
    assert "changed" not in dvc("status", "judge", cwd=root)
    status = dvc("status", "accept", cwd=root)
    assert "params.yaml" in status and "modified:" in status and "judge" in status
    assert stages_run(dvc("repro", "-s", "judge", cwd=root)) == []
    assert stages_run(dvc("repro", "-s", "accept", cwd=root)) == ["accept"]
    assert _snapshot(paths.judgements) == verdicts
    metrics = json.loads(paths.metrics_of("accept").read_text())
    assert metrics["judge"] == "text" and metrics["accepted"] == 4 * len(tasks)
    assert paths.accept_plot.exists()
