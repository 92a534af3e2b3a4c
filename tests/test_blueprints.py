"""Blueprints are seeded, split into disjoint pools, and near duplicates across pools are refused."""

from __future__ import annotations

import dataclasses

import pytest

from interlock.core.errors import InterlockError
from interlock.core.types import INDIST_POOL, TaskSize
from interlock.synthesis.blueprints import Blueprint, check_pools, generate_blueprints, select_domains

POOL_SIZES = {"demo": 2, "rft": 2, "dev": 1, "benchmark": 2, INDIST_POOL: 1}


@pytest.fixture(scope="module")
def blueprints(catalog):
    return list(generate_blueprints(catalog, seed=5, train_domains=16, heldout_domains=8,
                                    tasks_per_domain=POOL_SIZES, size=TaskSize(3, 2, 1, 1)))


def test_generation_is_deterministic_and_pools_come_from_the_right_split(catalog, blueprints):
    again = list(generate_blueprints(catalog, seed=5, train_domains=16, heldout_domains=8,
                                     tasks_per_domain=POOL_SIZES, size=TaskSize(3, 2, 1, 1)))
    assert [b.to_row() for b in again] == [b.to_row() for b in blueprints]
    assert len(blueprints) == 16 * 6 + 8 * 2
    for b in blueprints:
        assert (catalog[b.domain_id].split == "heldout") == (b.pool == "benchmark")
    check_pools(blueprints, catalog, "memory")


def test_the_indist_pool_is_drawn_last_and_leaves_every_other_pool_as_it_was(catalog, blueprints):
    """Unseen tasks of every training domain, drawn after every other pool: the blueprints of a
    run without them (``indist: 0``) are, row for row, the first ones of a run with them."""
    without = list(generate_blueprints(catalog, seed=5, train_domains=16, heldout_domains=8,
                                       tasks_per_domain={**POOL_SIZES, INDIST_POOL: 0},
                                       size=TaskSize(3, 2, 1, 1)))
    assert [b.to_row() for b in blueprints[:len(without)]] == [b.to_row() for b in without]
    assert INDIST_POOL not in {b.pool for b in without}
    indist = blueprints[len(without):]
    assert {b.pool for b in indist} == {INDIST_POOL}
    assert [b.domain_id for b in indist] == [d.id for d in select_domains(catalog, "train", 16, seed=5)]
    assert [b.task_id for b in indist] == [f"{b.domain_id}.indist.0000" for b in indist]
    assert {b.skeleton for b in indist}.isdisjoint({b.skeleton for b in without})


def test_an_indist_task_cannot_come_from_a_held_out_domain(catalog, blueprints):
    task = next(b for b in blueprints if b.pool == "benchmark")
    moved = dataclasses.replace(task, task_id="moved", pool=INDIST_POOL)
    with pytest.raises(InterlockError, match="not allowed for a heldout domain"):
        check_pools([moved], catalog, "blueprints.parquet")


def test_a_different_seed_gives_different_tasks(catalog, blueprints):
    other = list(generate_blueprints(catalog, seed=6, train_domains=16, heldout_domains=8,
                                     tasks_per_domain=POOL_SIZES, size=TaskSize(3, 2, 1, 1)))
    assert {b.fingerprint for b in other}.isdisjoint({b.fingerprint for b in blueprints})


def test_larger_breadth_extends_smaller_breadth(catalog):
    small = select_domains(catalog, "train", 4, seed=1)
    large = select_domains(catalog, "train", 16, seed=1)
    assert large[:4] == small
    with pytest.raises(InterlockError, match="train domains"):
        select_domains(catalog, "train", len(catalog.split("train")) + 1, seed=1)


def test_a_task_shared_between_pools_is_refused(catalog, blueprints):
    task = next(b for b in blueprints if b.pool == "demo")
    shared = dataclasses.replace(task, task_id=task.task_id.replace(".demo.0", ".rft.9"), pool="rft")
    with pytest.raises(InterlockError) as error:
        check_pools([*blueprints, shared], catalog, "blueprints.parquet")
    assert error.value.item == shared.task_id and error.value.field == "fingerprint"
    assert "already in pool 'demo'" in str(error.value)


def test_a_renamed_training_task_in_the_benchmark_is_a_near_duplicate(catalog, blueprints):
    """Changing every word (names, ids, domain) leaves the skeleton: still refused."""
    task = next(b for b in blueprints if b.pool == "rft")
    heldout = next(b.domain_id for b in blueprints if b.pool == "benchmark")
    renamed_cases = [{k: (f"X{v}" if isinstance(v, str) and v[:2] != "20" else v) for k, v in row.items()}
                     for row in task.cases]
    copy = dataclasses.replace(task, task_id=f"{heldout}.benchmark.9999", domain_id=heldout,
                               pool="benchmark", cases=renamed_cases)
    assert copy.fingerprint != task.fingerprint and copy.skeleton == task.skeleton
    with pytest.raises(InterlockError) as error:
        check_pools([*blueprints, copy], catalog, "blueprints.parquet")
    assert error.value.field == "skeleton" and "near duplicate" in str(error.value)


def test_a_training_domain_cannot_feed_the_benchmark(catalog, blueprints):
    task = next(b for b in blueprints if b.pool == "dev")
    moved = dataclasses.replace(task, task_id="moved", pool="benchmark")
    with pytest.raises(InterlockError, match="not allowed for a train domain"):
        check_pools([moved], catalog, "blueprints.parquet")


def test_rows_round_trip_and_edits_are_detected(blueprints):
    row = blueprints[0].to_row()
    assert Blueprint.from_row(row, "b.parquet").to_row() == row
    edited = {**row, "cases": row["cases"].replace("pending", "closed", 1)}
    with pytest.raises(InterlockError) as error:
        Blueprint.from_row(edited, "b.parquet")
    assert error.value.item == row["task_id"] and error.value.field == "fingerprint"


@pytest.mark.parametrize("size", [(3, 2, 2, 1), (2, 0, 1, 0), (30, 2, 1, 0), (2, 1, 0, 0)])
def test_impossible_task_sizes_are_refused(size):
    with pytest.raises(InterlockError):
        TaskSize(*size)
