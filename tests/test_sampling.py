"""The training set of a domain breadth: fixed count, stratified, nested, seeded, never short."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import dumps, read_rows, write_row_groups, write_table
from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.tasks import TaskContext
from interlock.training.sampling import allocate, choose_training_set, domain_order, run_sampling

from helpers.config import defaults

MASK = defaults().intervention.mask  # which turns a correction trains on, as conf/ declares it

DOMAINS = [f"dom{i:02d}" for i in range(16)]
#: the training-set columns of an accepted trajectory
POLICY = {"source": "policy", "weight": 1.0, "loss_from_message": 0}


def _pool(per_domain: dict[str, int]) -> list[tuple[str, str]]:
    return [(f"{d}.rft.{i:04d}.a0", d) for d, n in per_domain.items() for i in range(n)]


def test_allocate_shares_evenly_and_refills_from_the_domains_that_have_more() -> None:
    assert allocate({"a": 9, "b": 9, "c": 9}, ["a", "b", "c"], 7) == {"a": 3, "b": 2, "c": 2}
    # "a" holds only one: the other two share what it cannot give
    assert allocate({"a": 1, "b": 9, "c": 9}, ["a", "b", "c"], 9) == {"a": 1, "b": 4, "c": 4}
    assert allocate({"a": 1, "b": 2, "c": 9}, ["a", "b", "c"], 12) == {"a": 1, "b": 2, "c": 9}
    with pytest.raises(ValueError):
        allocate({"a": 1, "b": 2}, ["a", "b"], 4)


def test_breadths_hold_the_count_fixed_and_smaller_breadths_nest_in_larger_ones() -> None:
    accepted = _pool(dict.fromkeys(DOMAINS, 5))
    sets = {b: choose_training_set(accepted, DOMAINS, breadth=b, trajectories=16, seed=3) for b in (4, 8, 16)}
    for breadth, chosen in sets.items():
        assert len(chosen.rollout_ids) == 16 and len(chosen.domains) == breadth
        counts = Counter(r.split(".")[0] for r in chosen.rollout_ids)
        assert set(counts) == set(chosen.domains)
        assert max(counts.values()) - min(counts.values()) <= 1  # stratified
        assert dict(counts) == dict(chosen.per_domain)
    assert set(sets[4].domains) < set(sets[8].domains) < set(sets[16].domains)
    assert list(sets[8].domains[:4]) == list(sets[4].domains)
    again = choose_training_set(accepted, DOMAINS, breadth=8, trajectories=16, seed=3)
    assert again == sets[8]
    other = choose_training_set(accepted, DOMAINS, breadth=8, trajectories=16, seed=4)
    assert other.rollout_ids != sets[8].rollout_ids


def test_domains_without_an_accepted_trajectory_are_passed_over() -> None:
    order = domain_order(DOMAINS, seed=3)
    empty = set(order[:2])  # the first two in the seeded order accepted nothing
    accepted = _pool({d: 0 if d in empty else 3 for d in DOMAINS})
    chosen = choose_training_set(accepted, DOMAINS, breadth=4, trajectories=8, seed=3)
    assert list(chosen.domains) == order[2:6]


def test_a_breadth_the_pool_cannot_fill_is_an_error_that_says_so() -> None:
    few_domains = _pool({d: 4 for d in DOMAINS[:6]})
    with pytest.raises(InterlockError, match=r"breadth 8 cannot be filled: only 6 of the 16 training"):
        choose_training_set(few_domains, DOMAINS, breadth=8, trajectories=8, seed=0)
    with pytest.raises(InterlockError, match=r"cannot be filled at 20 trajectories: its 4 domains hold 16"):
        choose_training_set(few_domains, DOMAINS, breadth=4, trajectories=20, seed=0)
    with pytest.raises(InterlockError, match=r"breadth 32 needs 32 training domains"):
        choose_training_set(few_domains, DOMAINS, breadth=32, trajectories=4, seed=0)


def test_all_takes_every_accepted_trajectory() -> None:
    accepted = _pool({"a": 3, "b": 0, "c": 1})
    chosen = choose_training_set(accepted, ["a", "b", "c"], breadth=None, trajectories=None, seed=0)
    assert chosen.rollout_ids == {r for r, _ in accepted}
    assert set(chosen.domains) == {"a", "c"} and dict(chosen.per_domain) == {"a": 3, "c": 1}


@pytest.fixture(scope="module")
def base_row(tasks) -> dict:
    """One real trajectory row (relabelled by the tables built from it)."""
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks[:1]]
    with tempfile.TemporaryDirectory() as workdir:
        return scripted_rollouts(contexts, ("oracle",), seed=0, workdir=Path(workdir))[0].to_row()


def _relabel(row: dict, d: int, i: int) -> dict:
    return {**row, "rollout_id": f"dom{d}.rft.{i:04d}.a0", "domain_id": f"dom{d}",
            "task_id": f"dom{d}.rft.{i:04d}"}


def _write_halves(path: Path, rows: list[dict], schema) -> None:
    with write_row_groups(path, schema) as writer:
        writer.write(rows[: len(rows) // 2])
        writer.write(rows[len(rows) // 2:])


def _intervention(original: dict, *, kept: bool, weight: float = 0.5, prefix: int = 2,
                  corrected: bool = True) -> dict:
    """An interventions row for a rejected rollout; its correction is the original relabelled."""
    fixed = {**original, "rollout_id": original["rollout_id"] + ".rti"}
    return {"rollout_id": original["rollout_id"], "task_id": original["task_id"],
            "domain_id": original["domain_id"], "turn": 0, "failure": "criterion", "failed_criteria": ["c1"],
            "critic_note": "fix it", "prefix_messages": prefix,
            "corrected": dumps(fixed) if corrected else None, "verified": corrected,
            "verdict": "pass" if corrected else None, "nll": 1.0, "weight": weight if kept else 0.0,
            "kept": kept, "reason": "kept" if kept else "filtered", "source": "rti"}


@pytest.fixture(scope="module")
def tables(base_row, tmp_path_factory) -> tuple[Path, Path]:
    """A rollout table over 8 domains and its accepted table (real trajectory rows, relabelled)."""
    rollouts, accepted = [], []
    for d in range(8):
        for i in range(4):
            relabelled = _relabel(base_row, d, i)
            rollouts.append(relabelled)
            if i <= d % 3:  # 1 to 3 accepted per domain
                accepted.append(relabelled)
    root = tmp_path_factory.mktemp("sampling")
    _write_halves(root / "rollouts.parquet", rollouts, schemas.TRAJECTORIES)
    _write_halves(root / "accepted.parquet", accepted, schemas.TRAJECTORIES)
    return root / "accepted.parquet", root / "rollouts.parquet"


def test_run_sampling_writes_the_chosen_rows_whole(tables, tmp_path: Path) -> None:
    accepted, rollouts = tables
    out = tmp_path / "training_set" / "trajectories.parquet"
    metrics = run_sampling(accepted, rollouts, out, breadth=4, trajectories=6, seed=1, mask=MASK)
    rows = read_rows(out, schemas.TRAINING_SET)
    source = {r["rollout_id"]: r for r in read_rows(accepted, schemas.TRAJECTORIES)}
    assert len(rows) == metrics["trajectories"] == 6
    assert all(row == {**source[row["rollout_id"]], **POLICY} for row in rows)
    assert metrics["by_source"] == {"policy": 6, "rti": 0} and metrics["domains_made_trainable"] == 0
    assert metrics["domains"] == 4 and metrics["training_domains"] == 8 and metrics["accepted"] == len(source)
    assert sum(metrics["per_domain"].values()) == 6
    first = out.read_bytes()
    run_sampling(accepted, rollouts, out, breadth=4, trajectories=6, seed=1, mask=MASK)
    assert out.read_bytes() == first  # deterministic: a re-run writes the same bytes
    everything = run_sampling(accepted, rollouts, out, breadth=None, trajectories=None, seed=1, mask=MASK)
    assert everything["trajectories"] == len(source) and everything["breadth"] is None


def test_an_unfillable_breadth_leaves_the_previous_training_set_whole(tables, tmp_path: Path) -> None:
    accepted, rollouts = tables
    out = tmp_path / "trajectories.parquet"
    run_sampling(accepted, rollouts, out, breadth=2, trajectories=2, seed=1, mask=MASK)
    before = out.read_bytes()
    with pytest.raises(InterlockError, match="cannot be filled"):
        run_sampling(accepted, rollouts, out, breadth=8, trajectories=100, seed=1, mask=MASK)
    assert out.read_bytes() == before


# --- kept corrections of rollout-time intervention ----------------------------------------------

def test_corrections_share_the_pool_a_domain_with_only_corrections_is_eligible() -> None:
    order = domain_order(DOMAINS, seed=3)
    accepted = _pool({d: 0 if d == order[0] else 3 for d in DOMAINS})
    corrections = [(f"{order[0]}.rft.{i:04d}.a0.rti", order[0]) for i in range(2)]
    without = choose_training_set(accepted, DOMAINS, breadth=4, trajectories=8, seed=3)
    with_rti = choose_training_set(accepted, DOMAINS, breadth=4, trajectories=8, seed=3,
                                   corrections=corrections)
    assert list(without.domains) == order[1:5] and list(with_rti.domains) == order[:4]
    assert len(without.rollout_ids) == len(with_rti.rollout_ids) == 8
    assert {r for r, _ in corrections} <= with_rti.rollout_ids
    everything = choose_training_set(accepted, DOMAINS, breadth=None, trajectories=None, seed=3,
                                     corrections=corrections)
    assert everything.rollout_ids == {r for r, _ in accepted + corrections}
    with pytest.raises(InterlockError, match=r"hold 5 \(3 accepted, 2 kept corrections\)"):
        choose_training_set(accepted, DOMAINS, breadth=2, trajectories=6, seed=3, corrections=corrections)
    with pytest.raises(InterlockError, match="have an accepted trajectory or a kept correction"):
        choose_training_set(corrections, DOMAINS, breadth=2, trajectories=2, seed=3, corrections=corrections)


@pytest.fixture
def rti_tables(base_row, tmp_path: Path) -> tuple[Path, Path, Path]:
    """Rollouts over 6 domains of 4 tasks; the first domain in the seeded order accepted nothing and
    has two kept corrections; every other domain accepted tasks 0-1 and has one kept and one unkept
    correction (tasks 2 and 3). Corrections are written in reverse id order."""
    first = domain_order([f"dom{d}" for d in range(6)], seed=1)[0]
    rollouts, accepted, interventions = [], [], []
    for d in range(6):
        for i in range(4):
            row = _relabel(base_row, d, i)
            rollouts.append(row)
            if row["domain_id"] == first:
                interventions.append(_intervention(row, kept=i < 2, weight=0.25 + i / 10, prefix=3,
                                                   corrected=i != 3))
            elif i < 2:
                accepted.append(row)
            else:
                interventions.append(_intervention(row, kept=i == 2, weight=0.75, prefix=2))
    interventions.reverse()
    _write_halves(tmp_path / "rollouts.parquet", rollouts, schemas.TRAJECTORIES)
    _write_halves(tmp_path / "accepted.parquet", accepted, schemas.TRAJECTORIES)
    _write_halves(tmp_path / "interventions.parquet", interventions, schemas.INTERVENTIONS)
    return tmp_path / "accepted.parquet", tmp_path / "rollouts.parquet", tmp_path / "interventions.parquet"


def test_all_takes_every_kept_correction_after_the_accepted_rows(rti_tables, tmp_path: Path) -> None:
    accepted, rollouts, interventions = rti_tables
    out = tmp_path / "training_set" / "trajectories.parquet"
    metrics = run_sampling(accepted, rollouts, out, breadth=None, trajectories=None, seed=1,
                           interventions=interventions, mask="corrected")
    rows = read_rows(out, schemas.TRAINING_SET)
    source = read_rows(accepted, schemas.TRAJECTORIES)
    kept = {r["rollout_id"]: r for r in read_rows(interventions, schemas.INTERVENTIONS) if r["kept"]}
    assert len(rows) == metrics["trajectories"] == len(source) + 2 + 5
    assert rows[:len(source)] == [{**row, **POLICY} for row in source]  # the accepted table's order
    fixes = rows[len(source):]
    assert [r["rollout_id"] for r in fixes] == sorted(r + ".rti" for r in kept)  # then by rollout id
    for row in fixes:
        original = kept[row["rollout_id"].removesuffix(".rti")]
        assert row["source"] == "rti" and row["weight"] == original["weight"]
        assert row["loss_from_message"] == original["prefix_messages"]
        assert {k: row[k] for k in schemas.TRAJECTORIES.names} == json.loads(original["corrected"])
    assert metrics["by_source"] == {"policy": 10, "rti": 7} and metrics["corrections"] == 7
    first = domain_order([f"dom{d}" for d in range(6)], seed=1)[0]
    assert metrics["per_domain_by_source"][first] == {"policy": 0, "rti": 2}
    assert metrics["per_domain"][first] == 2
    assert metrics["domains_made_trainable"] == 1 and metrics["tasks_made_trainable"] == 7
    assert metrics["rti_weight"] == pytest.approx(0.25 + 0.35 + 5 * 0.75)

    run_sampling(accepted, rollouts, out, breadth=None, trajectories=None, seed=1,
                 interventions=interventions, mask="all")
    assert {r["loss_from_message"] for r in read_rows(out, schemas.TRAINING_SET)} == {0}
    for missing in (None, tmp_path / "absent.parquet"):
        plain = run_sampling(accepted, rollouts, out, breadth=None, trajectories=None, seed=1,
                             interventions=missing, mask=MASK)
        assert plain["by_source"] == {"policy": 10, "rti": 0} and plain["domains"] == 5


def test_a_breadth_draws_from_both_sources_at_the_same_count(rti_tables, tmp_path: Path) -> None:
    accepted, rollouts, interventions = rti_tables
    out = tmp_path / "trajectories.parquet"
    first = domain_order([f"dom{d}" for d in range(6)], seed=1)[0]
    without = run_sampling(accepted, rollouts, out, breadth=3, trajectories=6, seed=1, mask=MASK)
    assert first not in without["per_domain"] and without["domains_made_trainable"] == 0
    with_rti = run_sampling(accepted, rollouts, out, breadth=3, trajectories=6, seed=1,
                            interventions=interventions, mask="corrected")
    assert without["trajectories"] == with_rti["trajectories"] == 6  # the matched comparison
    assert list(with_rti["per_domain"])[0] == first and with_rti["per_domain"][first] == 2
    assert with_rti["domains_made_trainable"] == 1 and with_rti["tasks_made_trainable"] >= 2
    assert with_rti["by_source"]["rti"] >= 2
    assert sum(with_rti["by_source"].values()) == 6
    rows = read_rows(out, schemas.TRAINING_SET)
    assert Counter(r["source"] for r in rows) == Counter(with_rti["by_source"])
    unkept = {r["rollout_id"] + ".rti" for r in read_rows(interventions, schemas.INTERVENTIONS)
              if not r["kept"]}
    assert not unkept & {r["rollout_id"] for r in rows}
    first_bytes = out.read_bytes()
    run_sampling(accepted, rollouts, out, breadth=3, trajectories=6, seed=1, interventions=interventions,
                 mask="corrected")
    assert out.read_bytes() == first_bytes  # deterministic: a re-run writes the same bytes
    larger = run_sampling(accepted, rollouts, out, breadth=5, trajectories=10, seed=1,
                          interventions=interventions, mask="corrected")
    assert list(larger["per_domain"])[:3] == list(with_rti["per_domain"])  # still nested


def test_an_inconsistent_correction_is_left_out_with_its_reason(base_row, tmp_path: Path) -> None:
    """A kept correction the intervene stage would not write is refused, its row and field named,
    and the rest of the training set is still written."""
    rows = [_relabel(base_row, 0, i) for i in range(2)]
    _write_halves(tmp_path / "rollouts.parquet", rows, schemas.TRAJECTORIES)
    _write_halves(tmp_path / "accepted.parquet", rows[:1], schemas.TRAJECTORIES)
    wrong_id = {**_intervention(rows[1], kept=True), "corrected": dumps({**rows[1], "rollout_id": "x"})}
    cases = {"expected 'dom0.rft.0001.a0.rti'": wrong_id,
             "no corrected trajectory": _intervention(rows[1], kept=True, corrected=False),
             "positive weight": _intervention(rows[1], kept=True, weight=0.0),
             "prefix_messages 999": _intervention(rows[1], kept=True, prefix=999),
             "not in the rollouts table": _intervention(_relabel(base_row, 5, 0), kept=True)}
    for message, row in cases.items():
        write_table(tmp_path / "interventions.parquet", [row], schemas.INTERVENTIONS)
        metrics = run_sampling(tmp_path / "accepted.parquet", tmp_path / "rollouts.parquet",
                               tmp_path / "out.parquet", breadth=None, trajectories=None, seed=0,
                               interventions=tmp_path / "interventions.parquet", mask=MASK)
        bad = metrics["bad_rows"]
        assert bad["count"] == 1 and message in bad["examples"][0]["reason"], (message, bad)
        example = bad["examples"][0]
        assert example["field"] and example["file"] == str(tmp_path / "interventions.parquet")
        assert metrics["by_source"] == {"policy": 1, "rti": 0}
        assert [r["rollout_id"] for r in read_rows(tmp_path / "out.parquet", schemas.TRAINING_SET)] == \
            [rows[0]["rollout_id"]]
