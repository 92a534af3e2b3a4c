"""The whole pipeline as a real `dvc repro` in a temporary git repository at the smoke scale."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from interlock.core import schemas
from interlock.core.config import load_params
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.review.scripted_author import FAULTS
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.stage import run_graphs
from interlock.training.examples import table_schema

from helpers.repo import BIN, command_timeout, stages_run, tree_digest
from helpers.repo import run as _run

ARTIFACTS = ["domains.parquet", "blueprints.parquet", "graphs", "packs", "author_timings.parquet", "review",
             "grown", "models", "demos", "rollouts", "rollout_timings.parquet", "judge", "accepted",
             "interventions", "training_set", "evaluation", "evaluation_timings.parquet"]
#: measured, so different every run (the authors' seconds: with model authors); no stage reads them
#: but for the review's cost summary
MEASURED = {"author_timings.parquet", "rollout_timings.parquet", "evaluation_timings.parquet"}


def _snapshot(data: Path) -> dict[str, str]:
    """Path -> content hash of every artifact (compared, a failure names the files that differ)."""
    return {path: digest for path, digest in tree_digest(data).items()
            if Path(path).name != ".gitignore" and Path(path).name not in MEASURED}


def _differing(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def test_dvc_repro_writes_every_artifact(smoke_repo):
    data = smoke_repo / "data"
    for name in ARTIFACTS:
        assert (data / name).exists(), name
    verdicts = read_rows(data / "review" / "verdicts.parquet", schemas.REVIEW_TABLES["verdicts"])
    pools = {v["pool"] for v in verdicts}
    assert pools == {"demo", "rft", "dev", "benchmark", "indist"}
    assert all(v["admitted"] for v in verdicts), [v["reasons"] for v in verdicts if not v["admitted"]]
    metrics = json.loads((smoke_repo / "metrics" / "review.json").read_text())
    assert metrics["rft"]["tasks"] == 4 * 2 and metrics["rft"]["admitted"] == 8
    faults = metrics["author_faults"]  # the reviews against the scripted author's mistakes, each run
    assert faults["domains"] == 4 and faults["classes"]["clean"]["refused"] == 0
    recall = {name: row["recall"] for name, row in faults["classes"].items() if name != "clean"}
    assert recall == dict.fromkeys(FAULTS, 1.0)
    assert (smoke_repo / "dvc.lock").exists()


def test_repro_after_repro_does_nothing(smoke_copy):
    assert stages_run(_run([str(BIN / "dvc"), "repro"], smoke_copy)) == []
    status = _run([str(BIN / "dvc"), "status"], smoke_copy)
    assert "up to date" in status


def test_stages_write_identical_bytes_when_forced(smoke_copy):
    before = _snapshot(smoke_copy / "data")
    stages = yaml.safe_load((smoke_copy / "dvc.yaml").read_text())["stages"]
    forced = _run([str(BIN / "dvc"), "repro", "--force"], smoke_copy)
    assert len(stages_run(forced)) == len(stages)
    assert _differing(before, _snapshot(smoke_copy / "data")) == []


def test_the_domains_choice_reaches_only_the_sample_stage(smoke_copy):
    """A breadth sweep re-runs sample and what follows it (train, evaluate), never synthesis,
    rollouts or judging: of the stages whose own inputs change, `sample` is the only one."""
    params = yaml.safe_load((smoke_copy / "params.yaml").read_text())
    params["domains"] = {"count": 4}
    (smoke_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = json.loads(_run([str(BIN / "dvc"), "status", "--json"], smoke_copy, stdout_only=True))
    assert set(status) == {"sample"}
    assert "domains" in json.dumps(status["sample"])


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
    assert _differing(before, _snapshot(data / "graphs")) == []
    assert sorted(p.name for p in data.iterdir() if p.name != ".gitignore") == sorted(ARTIFACTS)


def test_stage_script_reports_bad_params_in_one_line(smoke_repo, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(smoke_repo, work, ignore=shutil.ignore_patterns(".git", ".dvc"))
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["scale"]["task_size"]["decisions"] = 1
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "stages/blueprints.py"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=command_timeout())
    assert done.returncode == 1
    assert "params.yaml" in done.stderr and "decisions" in done.stderr
    assert "Traceback" not in done.stderr
    assert pq.ParquetFile(work / "data" / "blueprints.parquet").metadata.num_rows > 0


def _evaluated_models(repo: Path) -> list[str]:
    """``eval.models`` less those the run trained none of (``rl`` unless train=grpo), in order."""
    left_out = json.loads((repo / "metrics" / "evaluate.json").read_text())["not_evaluated"]
    return [m for m in load_params(repo / "params.yaml").eval.models if m not in left_out]


def test_every_model_is_a_checkpoint_and_the_fine_tunings_trained(smoke_repo):
    from interlock.models.checkpoint import read_manifest, untrained_reason, verify_checkpoint
    from interlock.training.trainer import read_training

    models = smoke_repo / "data" / "models"
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == ["base", "demo_sft", "rft", "rl"]
    assert untrained_reason(models / "rl")  # train=full: the rl stage's note, no checkpoint
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
    training_set = read_rows(data / "training_set" / "trajectories.parquet", schemas.TRAINING_SET)
    kept = [r for r in read_rows(data / "interventions" / "interventions.parquet", schemas.INTERVENTIONS)
            if r["kept"]]
    policy = [r for r in training_set if r["source"] == "policy"]
    corrections = [r for r in training_set if r["source"] == "rti"]
    # no breadth: every accepted trajectory as it was, then every kept correction with its weight
    assert [{k: r[k] for k in schemas.TRAJECTORIES.names} for r in policy] == accepted
    assert {(r["weight"], r["loss_from_message"]) for r in policy} <= {(1.0, 0)}
    assert sorted((r["rollout_id"], r["weight"], r["loss_from_message"]) for r in corrections) == sorted(
        (k["rollout_id"] + ".rti", k["weight"], k["prefix_messages"]) for k in kept)
    sample = json.loads((smoke_repo / "metrics" / "sample.json").read_text())
    assert sample["breadth"] is None and sample["trajectories"] == len(accepted) + len(kept)
    assert sample["by_source"] == {"policy": len(accepted), "rti": len(kept)}
    assert metrics["trained"] == bool(training_set) and metrics["examples"] == len(training_set)
    assert metrics["by_source"] == {"policy": len(accepted), "rti": len(kept)}
    # one checkpoint per seed; with nothing to train on, one untrained copy stands for them all
    seeds = sorted(p.name for p in (models / "rft").iterdir())
    assert seeds == ([f"seed-{k}" for k in range(metrics["seeds"])] if accepted else ["seed-0"])
    assert sorted(metrics["by_seed"]) == seeds
    assert read_manifest(models / "rft" / "seed-0")["origin"].endswith("demo_sft")


#: what training reads or writes (tasks, rollouts, verdicts, corrections, what RFT trains on) and
#: recursive synthesis's children: no indist task may appear in any of them
TRAINING_SIDE = ["demos", "rollouts", "judge/rollouts", "accepted", "interventions", "training_set", "grown"]


def test_indist_tasks_are_evaluated_and_stay_out_of_everything_training_touches(smoke_repo):
    """The in-distribution pool's tasks come from the training domains, are admitted and evaluated
    on every model, and appear nowhere that training (demos, rollouts, judging, acceptance,
    intervention, the training set) or recursive synthesis reads or writes."""

    data = smoke_repo / "data"
    admitted = read_rows(data / "review" / "admitted.parquet", schemas.REVIEW_TABLES["admitted"])
    indist = {r["task_id"] for r in admitted if r["pool"] == "indist"}
    domains = {r["domain_id"]: r["split"] for r in read_rows(data / "domains.parquet", schemas.DOMAINS)}
    assert len(indist) == 4 and {domains[t.split(".")[0]] for t in indist} == {"train"}
    tables = [path for folder in TRAINING_SIDE for path in sorted((data / folder).rglob("*.parquet"))]
    assert len(tables) > len(TRAINING_SIDE)
    for path in tables:
        columns = pq.read_schema(path).names
        for column in ("task_id", "parents"):
            if column in columns:
                values = pq.read_table(path, columns=[column]).column(column).to_pylist()
                seen = {v for value in values for v in (value if column == "parents" else [value])}
                assert not seen & indist, f"{path}: {sorted(seen & indist)}"
    results = read_rows(data / "evaluation" / "results.parquet", schemas.EVAL_RESULTS)
    models = _evaluated_models(smoke_repo)
    for model in models:
        assert {r["task_id"] for r in results if r["model"] == model and r["pool"] == "indist"} == indist
    summary = json.loads((smoke_repo / "metrics" / "evaluate.json").read_text())["summary"]
    assert set(summary) == set(load_params(smoke_repo / "params.yaml").eval.pools)
    assert summary["indist"]["tasks"] == 4 and set(summary["indist"]["deltas"]) == set(models[1:])


def test_every_stage_with_numbers_logged_an_offline_wandb_run(smoke_repo):
    """One offline W&B run per stage that wrote its metrics file, seen as W&B documents an offline
    run: a folder ``offline-run-<time>-<id>`` under ``wandb/`` holding its ``run-<id>.wandb`` log,
    which ``wandb sync`` uploads. What a run holds is not read back from disk (offline, only W&B's
    private log has it; tests/test_tracking.py checks it on the live run): the metrics files are
    the record."""
    stages = set(yaml.safe_load((smoke_repo / "dvc.yaml").read_text())["stages"])
    reported = {path.stem for path in (smoke_repo / "metrics").glob("*.json")} & stages
    assert {"review", "demos", "demo_sft", "rollouts", "judge", "accept", "sample", "train",
            "evaluate"} <= reported
    folders = sorted((smoke_repo / "wandb").glob("offline-run-*"))
    ids = {folder.name.rsplit("-", 1)[-1] for folder in folders}
    assert len(folders) == len(ids) == len(reported)  # one run each, and one execution each
    for folder in folders:
        assert (folder / f"run-{folder.name.rsplit('-', 1)[-1]}.wandb").stat().st_size > 0


def test_dvc_metrics_and_plots_show_read_what_the_stages_declared(smoke_repo):
    metrics = json.loads(_run([str(BIN / "dvc"), "metrics", "show", "--json"], smoke_repo, stdout_only=True))
    files = next(iter(metrics.values()))["data"]
    assert {"metrics/evaluate.json", "metrics/train.json", "metrics/demo_sft.json"} <= set(files)
    plots = json.loads(_run([str(BIN / "dvc"), "plots", "show", "--json"], smoke_repo, stdout_only=True))
    declared = {"metrics/plots/demo_sft_loss.tsv", "metrics/plots/train_loss/seed-0.tsv",
                "metrics/plots/accept_by_domain.tsv", "metrics/plots/evaluate_models.tsv",
                "metrics/plots/evaluate_domains.tsv"}
    assert declared <= set(plots["data"]) and not plots.get("errors")


def test_artifacts_round_trip_through_a_dvc_remote(smoke_copy, tmp_path):
    clone = smoke_copy
    remote = tmp_path / "remote"
    _run([str(BIN / "dvc"), "remote", "add", "--local", "-d", "store", str(remote)], clone)
    _run([str(BIN / "dvc"), "push"], clone)
    before = _snapshot(clone / "data")
    shutil.rmtree(clone / "data")
    shutil.rmtree(clone / ".dvc" / "cache")
    _run([str(BIN / "dvc"), "pull"], clone)
    assert _differing(before, _snapshot(clone / "data")) == []
    assert "up to date" in _run([str(BIN / "dvc"), "status"], clone)


# ----------------------------------------------------------------------------- the BFCL pool

def test_the_smoke_run_evaluates_the_bfcl_pool_and_plots_it(smoke_repo):
    """The opt-in BFCL pool runs end to end at the smoke scale: its first tasks, every model (each
    RFT seed), graded by BFCL's checker, summarized with intervals and plotted."""
    from interlock.analysis.report import read_plot
    from interlock.evaluation.bfcl import load_tasks

    params = load_params(smoke_repo / "params.yaml")
    size = params.scale.evaluation.bfcl_tasks
    assert "bfcl" in params.eval.pools and size == 2
    pool = json.loads((smoke_repo / "metrics" / "evaluate.json").read_text())["pools"]["bfcl"]
    assert pool["tasks"] == size
    for model in _evaluated_models(smoke_repo):
        entry = pool["models"][model]
        assert entry["episodes"] == size * params.scale.evaluation.attempts * entry["seeds"]
        assert sum(entry["finish_reasons"].values()) == entry["episodes"]
        assert {"pass_rate", "score", "criterion_pass_rate", "mean_turns"} <= set(entry)
        assert not {"primary_pass_rate", "completion_gap_rate"} & set(entry)  # no such notion in BFCL
        assert entry["pass_rate"]["low"] <= entry["pass_rate"]["value"] <= entry["pass_rate"]["high"]
    assert set(pool["deltas"]) == set(_evaluated_models(smoke_repo)[1:])
    results = read_rows(smoke_repo / "data" / "evaluation" / "results.parquet", schemas.EVAL_RESULTS)
    ids = [task.task_id for task in load_tasks(size)]
    assert sorted({r["task_id"] for r in results if r["pool"] == "bfcl"}) == sorted(ids)
    verdicts = read_rows(smoke_repo / "data" / "evaluation" / "verdicts.parquet", schemas.VERDICTS)
    assert {v["judge"] for v in verdicts if v["task_id"] in ids} == {"bfcl"}
    # the tiny model acts: no episode ends for the window, and each is handed BFCL's later user turns
    turns = {task.task_id: len(task.user_turns) for task in load_tasks(size)}
    episodes = [Trajectory.from_row(row, "evaluation") for row in
                read_rows(smoke_repo / "data" / "evaluation" / "trajectories.parquet", schemas.TRAJECTORIES)
                if row["pool"] == "bfcl"]
    users = {t.rollout_id: sum(m.role == "user" for m in t.messages) for t in episodes}
    assert episodes and all(t.finish_reason != "context" for t in episodes)
    assert any(users[t.rollout_id] > 1 for t in episodes)
    assert all(users[t.rollout_id] == turns[t.task_id] for t in episodes if t.finish_reason == "no_tool_call")
    for plot in ("evaluate_models", "evaluate_domains"):
        assert "bfcl" in set(read_plot(smoke_repo / "metrics" / "plots" / f"{plot}.tsv")["pool"])


def _strings(value) -> list[str]:
    """Every string in a nested structure (keys too), e.g. a decoded trajectory row."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _trajectory_texts(path: Path) -> tuple[str, set[str]]:
    """A trajectories table's text (every string of every row, the JSON columns decoded), and the
    names of the tools its messages call or answer."""
    texts, names = [], set()
    for row in read_rows(path, table_schema(path)):
        trajectory = Trajectory.from_row({k: row[k] for k in schemas.TRAJECTORIES.names}, str(path))
        messages = [m.to_dict() for m in trajectory.messages]
        texts += _strings([row, messages, trajectory.final_files, trajectory.diff])
        names |= {c.name for m in trajectory.messages for c in m.tool_calls}
        names |= {m.name for m in trajectory.messages if m.name}
    return "\n".join(texts), names


def test_no_bfcl_task_text_reaches_a_training_artifact(smoke_repo):
    """BFCL is evaluation only: no user turn of BFCL's tasks (the smoke run's and all 200) and no
    BFCL function name is in the demonstrations, the rollouts, the accepted trajectories or the
    training set, and each fine-tuned checkpoint's training record hashes exactly the table it
    was trained from (so it holds nothing else)."""
    from transformers import AutoTokenizer

    from interlock.evaluation.bfcl import load_tasks
    from interlock.models.checkpoint import seed_checkpoints
    from interlock.synthesis.workspace import TOOL_SPECS
    from interlock.training.examples import encode_trajectories, read_training_items
    from interlock.training.trainer import read_training

    params = load_params(smoke_repo / "params.yaml")
    paths = params.paths.under(smoke_repo)
    tasks = load_tasks()
    smoke_ids = {task.task_id for task in load_tasks(params.scale.evaluation.bfcl_tasks)}
    turns = {turn for task in tasks for turn in task.user_turns}
    assert {turn for task in tasks if task.task_id in smoke_ids for turn in task.user_turns} <= turns
    functions = {name for task in tasks for name in task.functions} - {spec["name"] for spec in TOOL_SPECS}
    # names that read as identifiers (post_tweet, lockDoors), not as words a task may use (sort, mean)
    distinctive = [name for name in functions if "_" in name or name != name.lower()]

    # the detector finds BFCL's text where it belongs: each BFCL episode opens with its first turn
    evaluated, _ = _trajectory_texts(paths.evaluation / "trajectories.parquet")
    assert all(task.user_turns[0] in evaluated for task in tasks if task.task_id in smoke_ids)

    training_tables = {"demos": paths.demos_table, "rollouts": paths.trajectories,
                       "accepted": paths.accepted_table, "training_set": paths.training_table}
    for name, path in training_tables.items():
        text, called = _trajectory_texts(path)
        assert text, name
        assert not [turn for turn in turns if turn in text], name
        assert not called & functions, name
        assert not [f for f in distinctive if re.search(rf"(?<![\w]){re.escape(f)}(?![\w])", text)], name

    # the training records: demo_sft from the demonstrations, every RFT seed from the training set
    trained_from = {"demo_sft": paths.demos_table, "rft": paths.training_table}
    for model, table in trained_from.items():
        for checkpoint in seed_checkpoints(paths.model(model)).values():
            record = read_training(checkpoint)
            assert not [turn for turn in turns if turn in "\n".join(_strings(record))], checkpoint
            tokenizer = AutoTokenizer.from_pretrained(checkpoint)
            examples = encode_trajectories(read_training_items(table), tokenizer,
                                           max_length=params.backbone.max_context)
            assert (record["data_sha256"], record["examples"]) == (examples.sha256(), len(examples.examples))
