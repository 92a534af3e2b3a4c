"""The training set of a domain breadth: fixed count, stratified, nested, seeded, never short."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows, write_row_groups
from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.tasks import TaskContext
from interlock.training.sampling import allocate, choose_training_set, domain_order, run_sampling

DOMAINS = [f"dom{i:02d}" for i in range(16)]


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
def tables(tasks, tmp_path_factory) -> tuple[Path, Path]:
    """A rollout table over 8 domains and its accepted table (real trajectory rows, relabelled)."""
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks[:1]]
    with tempfile.TemporaryDirectory() as workdir:
        row = scripted_rollouts(contexts, ("oracle",), seed=0, workdir=Path(workdir))[0].to_row()
    rollouts, accepted = [], []
    for d in range(8):
        for i in range(4):
            relabelled = {**row, "rollout_id": f"dom{d}.rft.{i:04d}.a0", "domain_id": f"dom{d}",
                          "task_id": f"dom{d}.rft.{i:04d}"}
            rollouts.append(relabelled)
            if i <= d % 3:  # 1 to 3 accepted per domain
                accepted.append(relabelled)
    root = tmp_path_factory.mktemp("sampling")
    for name, rows in (("rollouts.parquet", rollouts), ("accepted.parquet", accepted)):
        with write_row_groups(root / name, schemas.TRAJECTORIES) as writer:
            writer.write(rows[: len(rows) // 2])
            writer.write(rows[len(rows) // 2:])
    return root / "accepted.parquet", root / "rollouts.parquet"


def test_run_sampling_writes_the_chosen_rows_whole(tables, tmp_path: Path) -> None:
    accepted, rollouts = tables
    out = tmp_path / "training_set" / "trajectories.parquet"
    metrics = run_sampling(accepted, rollouts, out, breadth=4, trajectories=6, seed=1)
    rows = read_rows(out, schemas.TRAJECTORIES)
    source = {r["rollout_id"]: r for r in read_rows(accepted, schemas.TRAJECTORIES)}
    assert len(rows) == metrics["trajectories"] == 6
    assert all(row == source[row["rollout_id"]] for row in rows)
    assert metrics["domains"] == 4 and metrics["training_domains"] == 8 and metrics["accepted"] == len(source)
    assert sum(metrics["per_domain"].values()) == 6
    first = out.read_bytes()
    run_sampling(accepted, rollouts, out, breadth=4, trajectories=6, seed=1)
    assert out.read_bytes() == first  # deterministic: a re-run writes the same bytes
    everything = run_sampling(accepted, rollouts, out, breadth=None, trajectories=None, seed=1)
    assert everything["trajectories"] == len(source) and everything["breadth"] is None


def test_an_unfillable_breadth_leaves_the_previous_training_set_whole(tables, tmp_path: Path) -> None:
    accepted, rollouts = tables
    out = tmp_path / "trajectories.parquet"
    run_sampling(accepted, rollouts, out, breadth=2, trajectories=2, seed=1)
    before = out.read_bytes()
    with pytest.raises(InterlockError, match="cannot be filled"):
        run_sampling(accepted, rollouts, out, breadth=8, trajectories=100, seed=1)
    assert out.read_bytes() == before
