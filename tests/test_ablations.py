"""The two ablations as DVC experiments at the smoke scale: a breadth sweep and a judge sweep run
through the real DVC queue, then `interlock collect` compares them."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from interlock.analysis.ablations import ablation_frame, plot_breadth, plot_judges, read_experiments

from helpers.repo import BIN, user_env
from helpers.repo import run as _run

REPO = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]


def _dvc(repo: Path, *args: str) -> str:
    return _run([str(BIN / "dvc"), *args], repo)


def _wait_for_the_queue(repo: Path, timeout: float = 900) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _dvc(repo, "queue", "status")
        if not any(word in status for word in ("Queued", "Running")):
            return status
        time.sleep(3)
    pytest.fail(f"the DVC queue did not finish in {timeout} s:\n{status}")


@pytest.fixture(scope="module")
def swept(smoke_repo, tmp_path_factory) -> Iterator[Path]:
    """A copy of the smoke run, committed, with both sweeps queued and run by `dvc queue start`."""
    repo = tmp_path_factory.mktemp("sweeps") / "repo"
    shutil.copytree(smoke_repo, repo, ignore=shutil.ignore_patterns("wandb"))
    _run([*GIT, "add", "-A"], repo)
    _run([*GIT, "commit", "-qm", "the smoke run"], repo)
    # `dvc exp run -S` composes conf/ from its defaults plus the overrides: the experiment is one of them.
    # The breadth sweep uses the text judge: the agent judge accepts the smoke scale's noisy
    # solver in only 3 of its 4 domains, too few for d4 (an error that says so; see test_sampling).
    # The judge sweep holds the trajectory count with a breadth, as the README's command does: 2
    # trajectories from 2 domains (the agent judge's first two domains hold 3 accepted at the smoke
    # scale).
    sweeps = (("domains=d2,d4", ("judge=text",), "breadth"),
              ("judge=agent,text", ("domains=d2", "scale.breadth_trajectories=2"), "judge"))
    for sweep, fixed, group in sweeps:
        _dvc(repo, "exp", "run", "--queue", "-S", "experiment=smoke", "-S", sweep,
             *(arg for setting in fixed for arg in ("-S", setting)), "-S", f"tracking.group={group}")
    # the worker it starts lives on after the command: give it no pipe to hold open
    subprocess.run([str(BIN / "dvc"), "queue", "start"], cwd=repo, env=user_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120, check=True)
    try:
        status = _wait_for_the_queue(repo)
        assert "Failed" not in status, status
        yield repo
    finally:  # a worker left behind would keep running experiments after the tests
        _run([str(BIN / "dvc"), "queue", "stop", "--kill"], repo, check=False)


def test_a_breadth_sweep_holds_the_trajectory_count_and_reruns_only_what_follows_sampling(swept) -> None:
    experiments = read_experiments(swept, "breadth")
    assert sorted(e.breadth for e in experiments) == [2, 4]
    counts = {e.breadth: e.metrics["sample"]["trajectories"] for e in experiments}
    assert counts[2] == counts[4] > 0  # only breadth changes
    assert {e.breadth: e.metrics["sample"]["domains"] for e in experiments} == {2: 2, 4: 4}
    for experiment in experiments:
        log = _dvc(swept, "queue", "logs", experiment.name)
        # accept too where the judge differs from the baseline's (once: then DVC's run cache has it)
        ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
        assert {"sample", "train", "evaluate"} <= ran <= {"accept", "sample", "train", "evaluate"}, log


def test_a_judge_sweep_trains_each_judges_accepted_set(swept) -> None:
    experiments = {e.judge: e for e in read_experiments(swept, "judge")}
    assert set(experiments) == {"agent", "text"}
    accepted = {judge: e.metrics["accept"]["accepted"] for judge, e in experiments.items()}
    # the credulous text judge accepts what the executable agent judge rejects
    assert accepted["text"] > accepted["agent"]
    # matched settings: each judge's accepted set sampled to the same count, trained alike
    sampled = {judge: e.metrics["sample"]["trajectories"] for judge, e in experiments.items()}
    assert sampled["agent"] == sampled["text"] == experiments["agent"].params["scale"]["breadth_trajectories"]
    for key in ("examples", "steps", "seeds"):
        assert experiments["agent"].metrics["train"][key] == experiments["text"].metrics["train"][key], key


def test_every_run_of_a_sweep_shares_its_wandb_group(swept) -> None:
    """W&B compares a sweep through its group: each experiment's stage runs, written offline from
    DVC's temporary workspaces into the repository's wandb/ folder, carry the sweep's group and the
    experiment's name."""
    from interlock.analysis.wandb_runs import read_offline_run

    runs = [read_offline_run(folder) for folder in sorted((swept / "wandb").glob("offline-run-*"))]
    for group in ("breadth", "judge"):
        for experiment in read_experiments(swept, group):
            own = [run for run in runs if run["name"].startswith(f"{experiment.name}-")]
            assert {"sample", "train", "evaluate"} <= {run["job_type"] for run in own}, experiment.name
            assert {run["group"] for run in own} == {group}
            assert {run["name"] for run in own} == {f"{experiment.name}-{run['job_type']}" for run in own}
            assert all(run["config"]["tracking"]["group"] == group for run in own)


def test_collect_writes_one_comparison_table_and_both_pictures(swept, tmp_path) -> None:
    out = tmp_path / "report"
    printed = _run([str(BIN / "interlock"), "collect", "--repo", str(swept), "--group", "breadth",
                    "-o", str(out)], swept)
    assert "benchmark task pass rate, 2 experiments" in printed
    table = pd.read_csv(out / "ablations.tsv", sep="\t")
    frame = ablation_frame(read_experiments(swept, "breadth"))
    assert len(table) == len(frame) and set(table["experiment"]) == set(frame["experiment"])
    rft = table[(table["model"] == "rft") & (table["metric"] == "pass_rate") & (table["pool"] == "benchmark")]
    assert sorted(rft["breadth"]) == [2, 4] and set(rft["seeds"]) == {3}
    assert (rft["low"] <= rft["value"]).all() and (rft["value"] <= rft["high"]).all()
    assert rft["judge_seconds_per_rollout"].notna().all()
    for name in ("breadth.png", "judges.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    everything = ablation_frame(read_experiments(swept))
    assert everything["experiment"].nunique() == 4
    assert len(plot_breadth(everything).axes) == 4 and len(plot_judges(everything).axes) == 1


def test_collect_without_experiments_says_what_to_run(smoke_repo, tmp_path) -> None:
    done = _run([str(BIN / "interlock"), "collect", "--group", "no-such-sweep", "-o", str(tmp_path)],
                smoke_repo, check=False)
    assert "no finished experiment in group 'no-such-sweep'" in done


def test_the_notebook_shows_the_ablations(swept, venv_kernel, tmp_path, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("INTERLOCK_REPO", str(swept))
    notebook = nbformat.read(REPO / "notebooks" / "results.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name=venv_kernel,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cell = next(c for c in notebook.cells if c.get("id") == "ablations")
    assert not [o for o in cell.outputs if o["output_type"] == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    assert html.count("<tr>") >= 4 + 1  # 4 experiments x their models, and the header
    assert sum("image/png" in o.get("data", {}) for o in cell.outputs) == 2
