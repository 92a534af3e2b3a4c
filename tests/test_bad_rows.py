"""Every stage that reads rows someone else wrote fails a bad row with a reason naming the row and
field, and finishes the others; fields the judge can re-derive are re-derived, the others checked.

The bad rows are :data:`~interlock.testing.forgeries.ROW_FORGERIES` (JSON nested thousands deep, a
message without a role, a call without a function, arguments that are text, files as a list,
content as a number, ...), a rollout id two rows hold, a task of no pack, and the labels only the
rollouts stage knows (:data:`~interlock.testing.forgeries.PLAN_FORGERIES`: the policy, the token
counts, the attempt and seed), each beside honest rows that must be judged and accepted as ever.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core import schemas
from interlock.core.io import read_rows, write_row_groups
from interlock.judging.judges import JudgeContext
from interlock.judging.stage import run_accept, run_judge
from interlock.judging.verdicts import BAD_ROW
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.runs import RolloutPlan, episode_seed
from interlock.rollout.trajectory import BadRow, Trajectory, iter_rows
from interlock.testing.forgeries import PLAN_FORGERIES, ROW_FORGERIES
from interlock.training.examples import read_training_items

from helpers.artifacts import write_packs
from helpers.episodes import oracle_turns, play_turns

PLAN = RolloutPlan(policy="tiny/demo_sft", attempts=2, seed=7, limits=RolloutLimits(), max_context=4096)


@pytest.fixture(scope="module")
def honest(contexts, tmp_path_factory) -> list[Trajectory]:
    """The oracle on every fixture task, labelled as :data:`PLAN`'s rollouts stage labels it."""
    plans = {f"{c.task_id}.a0": (c, oracle_turns(c)) for c in contexts}
    made = play_turns(plans, tmp_path_factory.mktemp("honest"), PLAN.limits, policy=PLAN.policy)
    return [dataclasses.replace(t, seed=episode_seed(PLAN.seed, t.task_id, 0)) for t in made]


def _as(row: dict, attempt: int) -> dict:
    """The row as another attempt of its task (its own rollout id and seed)."""
    return {**row, "attempt": attempt, "rollout_id": f"{row['task_id']}.a{attempt}",
            "seed": episode_seed(PLAN.seed, row["task_id"], attempt)}


@pytest.mark.parametrize("name", ROW_FORGERIES)
def test_a_row_no_engine_writes_is_a_bad_row_naming_its_place(name, honest) -> None:
    forge, field = ROW_FORGERIES[name]
    row = forge(honest[0].to_row())
    with pytest.raises(BadRow) as caught:
        Trajectory.from_row(row, "rollouts.parquet", 12)
    error = caught.value
    assert field in error.field and "rollouts.parquet" in str(error) and "row 12" in str(error), str(error)
    assert Trajectory.from_row(honest[0].to_row(), "rollouts.parquet", 12) == honest[0]  # the twin


_KEYS = st.sampled_from(["role", "content", "tool_calls", "name", "type", "function", "arguments", "file",
                         "record", "before", "after", "x"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                     | st.sampled_from(["assistant", "user", "tool", "function", "submit", "\ud800"]),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
                     max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(column=st.sampled_from(sorted(schemas.TRAJECTORIES.names)), value=_JSON,
       as_text=st.booleans(), index=st.integers(0, 40))
def test_whatever_a_row_holds_reading_it_never_fails_but_as_a_bad_row(honest, column, value, as_text,
                                                                      index) -> None:
    """Any value in any column (its JSON text, or the value itself), or in any place of the
    messages: the row reads as a trajectory that writes back as it read, or as a bad row."""
    row = honest[index % len(honest)].to_row()
    row[column] = json.dumps(value) if as_text else value
    if column == "messages" and not as_text:
        messages = json.loads(honest[0].to_row()["messages"])
        messages[index % len(messages)] = value
        row[column] = json.dumps(messages)
    try:
        trajectory = Trajectory.from_row(row, "t.parquet", 0)
    except BadRow as error:
        assert error.field and error.reason
        return
    assert Trajectory.from_row(trajectory.to_row(), "t.parquet", 0) == trajectory


@pytest.fixture(scope="module")
def judged(tasks, honest, tmp_path_factory):
    """A rollouts table: the honest rows, each bad row and each relabelled one as its own attempt
    of the first task, a row whose id another holds too, and a row of a task of no pack; judged by
    both judges, then accepted under each."""
    root = tmp_path_factory.mktemp("bad-rows")
    write_packs(root / "packs", [pack for *_, pack in tasks])
    base = honest[0].to_row()
    rows = [t.to_row() for t in honest]
    attempt = 1
    for forge, _ in [*ROW_FORGERIES.values(), *PLAN_FORGERIES.values()]:
        rows.append(forge(_as(base, attempt)))
        attempt += 1
    rows += [_as(base, attempt), _as(base, attempt)]  # one id, two rows
    rows.append({**_as(base, 0), "task_id": "no_such.rft.0000", "rollout_id": "no_such.rft.0000.a0"})
    table = root / "trajectories.parquet"
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write(rows[:5])
        writer.write(rows[5:])
    metrics = run_judge(table, [root / "packs"], root / "judge", context=JudgeContext(workers=1),
                        progress=False)
    plan = dataclasses.replace(PLAN, attempts=attempt + 1)
    accepted = {judge: run_accept(table, root / "judge", [root / "packs"],
                                  root / f"accepted-{judge}.parquet", judge=judge, plan=plan)[0]
                for judge in ("agent", "text")}
    return root, rows, metrics, accepted


def test_the_judge_stage_finishes_and_fails_each_bad_row_with_its_reason(judged, honest) -> None:
    root, rows, metrics, _ = judged
    bad = metrics["bad_rows"]
    assert bad["count"] == len(ROW_FORGERIES) + 3  # the two rows of one id, the row of no task
    assert {e["field"].rsplit(".", 1)[-1] for e in bad["examples"]} >= {"messages", "content", "arguments"}
    assert all(e["file"].endswith("trajectories.parquet") and e["row"] is not None for e in bad["examples"])
    for judge in ("agent", "text"):
        verdicts = read_rows(root / "judge" / f"{judge}.parquet", schemas.VERDICTS)
        by_rollout: dict[str, list[dict]] = {}
        for verdict in verdicts:
            by_rollout.setdefault(verdict["rollout_id"], []).append(verdict)
        for trajectory in honest:  # the honest rows are judged as ever
            assert all(v["passed"] for v in by_rollout[trajectory.rollout_id]), trajectory.rollout_id
        failed = [v for vs in by_rollout.values() for v in vs if v["evidence"].startswith(BAD_ROW)]
        assert failed and not any(v["passed"] for v in failed)
        assert all("row " in v["evidence"] for v in failed)


def test_accept_keeps_the_honest_rows_and_refuses_the_rest_with_their_reasons(judged, honest) -> None:
    root, rows, _, accepted = judged
    for judge, metrics in accepted.items():
        kept = read_rows(root / f"accepted-{judge}.parquet", schemas.TRAJECTORIES)
        assert sorted(r["rollout_id"] for r in kept) == sorted(t.rollout_id for t in honest), judge
        assert metrics["accepted"] == len(honest) and metrics["by_policy"] == {
            PLAN.policy: {"rollouts": len(honest), "accepted": len(honest), "acceptance": 1.0}}
        bad = metrics["bad_rows"]
        assert bad["count"] == len(ROW_FORGERIES) + len(PLAN_FORGERIES) + 3


def test_the_relabelled_rows_are_refused_each_for_its_label(judged) -> None:
    """The labels the judge cannot re-derive: each relabelled row (an honest episode) is refused by
    ``accept`` for its own field, with the plan's value in the reason."""
    root, rows, _, _ = judged
    plan = dataclasses.replace(PLAN, attempts=len(rows))
    for name, (forge, field) in PLAN_FORGERIES.items():
        row = forge(_as(rows[0], 1))
        assert plan.problem(Trajectory.from_row(row, "t", 0))[0] == field, name
        assert plan.problem(Trajectory.from_row(_as(rows[0], 1), "t", 0)) is None  # the twin


def test_reading_a_training_set_refuses_its_bad_rows_and_keeps_the_rest(honest, tmp_path) -> None:
    good = [{**t.to_row(), "source": "policy", "weight": 1.0, "loss_from_message": 0} for t in honest]
    bad = [{**good[0], "rollout_id": "w.a0", "weight": float("nan")},
           {**good[0], "rollout_id": "l.a0", "loss_from_message": -1},
           {**good[0], "rollout_id": "s.a0", "source": "oracle"},
           {**ROW_FORGERIES["arguments_as_text"][0](good[0]), "rollout_id": "a.a0"}]
    table = tmp_path / "training.parquet"
    with write_row_groups(table, schemas.TRAINING_SET) as writer:
        writer.write([*good, *bad])
    items = list(read_training_items(table))
    assert [i.trajectory for i in items if not isinstance(i, BadRow)] == honest
    refused = [i for i in items if isinstance(i, BadRow)]
    assert [(e.rollout_id, e.field.rsplit(".", 1)[-1]) for e in refused] == [
        ("w.a0", "weight"), ("l.a0", "loss_from_message"), ("s.a0", "source"), ("a.a0", "arguments")]
    assert all(e.row is not None and str(table) in str(e) for e in refused)


def test_rows_of_a_table_are_numbered_over_its_row_groups(honest, tmp_path) -> None:
    table = tmp_path / "t.parquet"
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write([t.to_row() for t in honest[:2]])
        writer.write([ROW_FORGERIES["count_missing"][0](honest[2].to_row())])
    rows = [row for group in iter_rows(table) for row in group]
    assert [row.index for row in rows] == [0, 1, 2] and isinstance(rows[2].parsed, BadRow)
    assert rows[2].parsed.row == 2 and rows[2].parsed.field == "turns"
