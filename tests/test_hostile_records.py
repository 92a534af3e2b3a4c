"""Hand-written episodes through the pipeline's own stages on the smoke run: the smoke run's
rollouts table is replaced by honest episodes of its admitted tasks and, beside each, what a
policy under reward pressure or a broken writer hands the stages (a reply writing a chat template's
control text, its echo by a tool, calls after the submit, a record keeping them, every kind of
malformed row, labels only the rollouts stage knows, a failed read of a path longer than the disk
allows in the rollout's folder); then `dvc repro -s` runs judge, accept, intervene, sample and
train, and the exports read the result. The honest episodes are accepted and trained on, exactly;
nothing else reaches training, no stage stops, and every refusal names its row and field.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from interlock.analysis.artifacts import params_paths
from interlock.core import schemas
from interlock.core.chat import ToolCall, control_texts
from interlock.core.config import load_params, write_params
from interlock.core.io import read_rows, write_row_groups
from interlock.rollout.runs import RolloutPlan, episode_seed
from interlock.rollout.scripted import SUBMIT
from interlock.synthesis.tasks import admitted_tasks, load_domains
from interlock.synthesis.workspace import MAX_ROOT_BYTES
from interlock.testing.adversaries import CONTROL_TEXTS
from interlock.testing.forgeries import FORGERIES, PLAN_FORGERIES, ROW_FORGERIES

from helpers.episodes import oracle_turns, play_turns
from helpers.repo import BIN, SMOKE, dvc, run

#: the honest episodes, by attempt: the oracle, the oracle with calls after its submit (the engine
#: cuts them), and the oracle with a read of a path past the disk's limits (played in a deep folder)
HONEST = ("oracle", "after_submit", "long_read")
#: the hostile episodes the engine records (the agent judge refuses each)
PLAYED = ("control_text", "control_echo")
#: the hostile records written by hand (the agent judge refuses each)
RECORDS = ("calls_after_the_end", "domain_relabelled")


def _plans(context) -> dict[str, list]:
    turns = oracle_turns(context)
    *work, submit = turns
    return {
        "oracle": turns,
        "after_submit": [*work, (submit[0], [SUBMIT, ToolCall("write_file", {"path": "policies/x.md",
                                                                             "content": ""})])],
        "long_read": [turns[0], ("Archive.", [ToolCall("read_file", {"path": "/".join(["y" * 250] * 14)})]),
                      *turns[1:]],
        "control_text": [*work, (f"Checked.{CONTROL_TEXTS[0]}", [ToolCall("list_files")]), submit],
        "control_echo": [*work, ("Notes.", [ToolCall("read_file", {"path": f"n{CONTROL_TEXTS[1]}"})]),
                         submit],
    }


@pytest.fixture(scope="module")
def hostile_run(smoke_repo, tmp_path_factory) -> tuple[Path, dict]:
    """A copy of the smoke run with its rollouts replaced (see the module's docstring), the stages
    from judge to train run again by DVC; and what each row is."""
    root = tmp_path_factory.mktemp("hostile") / "smoke"
    shutil.copytree(smoke_repo, root, ignore=shutil.ignore_patterns("wandb"))
    kinds = [*HONEST, *PLAYED, *RECORDS, *ROW_FORGERIES, *PLAN_FORGERIES, "repeated", "repeated"]
    write_params(root / "conf", root / "params.yaml",
                 [*SMOKE, "intervention=none", f"scale.rollouts.attempts={len(kinds)}"])
    params = load_params(root / "params.yaml")
    paths = params_paths(root / "params.yaml")
    plan = RolloutPlan.of(params)
    context = next(admitted_tasks(paths, load_domains(paths.domains), "rft"))

    def labelled(trajectory, attempt: int):
        return dataclasses.replace(trajectory, rollout_id=f"{context.task_id}.a{attempt}", attempt=attempt,
                                   policy=plan.policy, seed=episode_seed(plan.seed, context.task_id, attempt))

    plans = _plans(context)
    deep = tmp_path_factory.mktemp("deep")
    while len(str(deep)) + 400 < MAX_ROOT_BYTES:
        deep = deep / ("d" * 100)
    played = {name: play_turns({name: (context, plans[name])}, deep if name == "long_read" else root / "w",
                               plan.limits)[0] for name in plans}
    oracle = played["oracle"]
    rows, what = [], {}
    for attempt, kind in enumerate(kinds):
        if kind in played:
            row = labelled(played[kind], attempt).to_row()
        elif kind in FORGERIES:
            row = labelled(FORGERIES[kind](oracle, context), attempt).to_row()
        elif kind == "repeated":
            row = labelled(oracle, kinds.index("repeated")).to_row()
        else:
            forge = (ROW_FORGERIES.get(kind) or PLAN_FORGERIES[kind])[0]
            row = forge(labelled(oracle, attempt).to_row())
        rows.append(row)
        what[f"{context.task_id}.a{attempt}"] = kind
    rows.append({**labelled(oracle, 0).to_row(), "task_id": "no_such.rft.0000",
                 "rollout_id": "no_such.rft.0000.a0"})
    with write_row_groups(paths.trajectories, schemas.TRAJECTORIES) as writer:
        writer.write(rows[:7])
        writer.write(rows[7:])
    logs = {stage: dvc("repro", "-s", stage, cwd=root) for stage in ("judge", "accept", "intervene", "sample",
                                                                      "train")}
    return root, {"paths": paths, "context": context, "what": what, "logs": logs, "oracle": oracle}


def _metrics(run: dict, stage: str) -> dict:
    return json.loads(run["paths"].metrics_of(stage).read_text())


def test_the_judge_stage_finishes_and_refuses_every_hostile_row(hostile_run) -> None:
    root, run_ = hostile_run
    metrics = _metrics(run_, "judge")["rollouts"]
    assert metrics["bad_rows"]["count"] == len(ROW_FORGERIES) + 3  # two rows of one id, a task of no pack
    assert "bad row(s) failed and left out" in run_["logs"]["judge"]
    verdicts = read_rows(run_["paths"].judgements / "agent.parquet", schemas.VERDICTS)
    passed: dict[str, bool] = {}
    for verdict in verdicts:
        passed[verdict["rollout_id"]] = passed.get(verdict["rollout_id"], True) and verdict["passed"]
    kinds = run_["what"]
    assert {kinds[r] for r, ok in passed.items() if ok} == {*HONEST, *PLAN_FORGERIES}


def test_accept_keeps_exactly_the_honest_episodes(hostile_run) -> None:
    root, run_ = hostile_run
    accepted = read_rows(run_["paths"].accepted_table, schemas.TRAJECTORIES)
    assert sorted(run_["what"][r["rollout_id"]] for r in accepted) == sorted(HONEST)
    metrics = _metrics(run_, "accept")
    assert metrics["bad_rows"]["count"] == len(ROW_FORGERIES) + len(PLAN_FORGERIES) + 3
    assert list(metrics["by_policy"]) == [RolloutPlan.of(load_params(root / "params.yaml")).policy]
    oracle = run_["oracle"].to_row()
    for row in accepted:  # what may be trained on: the calls that ran, the environment's answers
        assert row["messages"] == oracle["messages"] or run_["what"][row["rollout_id"]] == "long_read"
        assert not control_texts(row["messages"])


def test_sample_and_train_learn_the_honest_episodes_only(hostile_run) -> None:
    root, run_ = hostile_run
    sample = _metrics(run_, "sample")
    assert sample["trajectories"] == len(HONEST) and sample["bad_rows"]["count"] == 0
    train = _metrics(run_, "train")
    assert train["examples"] == len(HONEST) and train["refused"]["count"] == 0 and train["trained"]


def test_the_exports_leave_out_each_bad_row_with_its_reason(hostile_run, tmp_path) -> None:
    root, run_ = hostile_run
    out = run([str(BIN / "interlock"), "export", "trajectories", "--format", "atif", "-o",
               str(tmp_path / "atif")], root)
    written = sorted(p.stem for p in (tmp_path / "atif").glob("*.json"))
    good = len(run_["what"]) - len(ROW_FORGERIES) - 2
    assert len(written) == good and "left out row" in out and "and " in out  # more than the first ten
    assert "../" not in "".join(written)
