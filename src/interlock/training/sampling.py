"""The training set of one domain-breadth choice: a fixed number of accepted trajectories,
stratified across a fixed number of training domains, so that a breadth sweep changes breadth
and nothing else (the paper holds 8,957 trajectories fixed while the domain count varies).

- Which domains: the training domains enter in a seeded order that does not depend on the
  breadth, so a smaller breadth's domains are the first ones of a larger breadth's (d4 inside d8
  inside d16). A domain with no accepted trajectory cannot be a training domain and is passed
  over.
- How many from each: as even as the pool allows. Each domain gets an equal share (the
  remainder goes to the domains first in the order); a domain holding fewer than its share gives
  what it has and the rest is shared out again among the domains that still have some.
- Which trajectories: a seeded sample within each domain.

A breadth the pool cannot fill, too few domains with accepted trajectories or too few
trajectories in the chosen ones, is an error that says so; never a silently smaller set.
The ``all`` choice (breadth ``None``) takes every accepted trajectory as it is: the main
pipeline's default, where no ablation holds the count fixed.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import iter_row_groups, open_table, write_row_groups
from interlock.core.seeds import stable_seed


@dataclass(frozen=True)
class TrainingSet:
    """The chosen rollouts and where they came from."""

    breadth: int | None  # None: every accepted trajectory (the ``all`` choice)
    domains: tuple[str, ...]  # the domains trained on, in the seeded order
    rollout_ids: frozenset[str]
    per_domain: Mapping[str, int]


def domain_order(domains: Sequence[str], seed: int) -> list[str]:
    """Every training domain in a seeded order that is the same for every breadth."""
    return sorted(set(domains), key=lambda d: (stable_seed(seed, "breadth-order", d), d))


def allocate(available: Mapping[str, int], domains: Sequence[str], total: int) -> dict[str, int]:
    """Share ``total`` out over ``domains`` as evenly as ``available`` allows (water-filling:
    whatever a small domain cannot give is shared out again among the others)."""
    if sum(available.get(d, 0) for d in domains) < total:
        raise ValueError("not enough to fill")
    shares = dict.fromkeys(domains, 0)
    left = total
    while left:
        open_domains = [d for d in domains if shares[d] < available.get(d, 0)]
        each, extra = divmod(left, len(open_domains))
        for index, domain in enumerate(open_domains):
            give = min(each + (index < extra), available[domain] - shares[domain])
            shares[domain] += give
            left -= give
    return shares


def choose_training_set(accepted: Sequence[tuple[str, str]], training_domains: Sequence[str], *,
                        breadth: int | None, trajectories: int | None, seed: int) -> TrainingSet:
    """Pick the training set from ``accepted`` (rollout id, domain id) pairs.

    ``training_domains`` are all the domains that were rolled out (with or without an accepted
    trajectory); ``breadth`` and ``trajectories`` are None for the ``all`` choice."""
    by_domain: dict[str, list[str]] = defaultdict(list)
    for rollout_id, domain_id in accepted:
        by_domain[domain_id].append(rollout_id)
    if breadth is None:
        order = [d for d in domain_order(training_domains, seed) if by_domain.get(d)]
        return TrainingSet(None, tuple(order), frozenset(r for r, _ in accepted),
                           {d: len(by_domain[d]) for d in order})
    if trajectories is None:
        raise InterlockError("a domain breadth needs a fixed trajectory count",
                             item="scale", field="breadth_trajectories")
    if breadth > len(set(training_domains)):
        raise InterlockError(f"breadth {breadth} needs {breadth} training domains; the rollouts cover "
                             f"{len(set(training_domains))}", item="domains", field="count")
    eligible = [d for d in domain_order(training_domains, seed) if by_domain.get(d)]
    if len(eligible) < breadth:
        raise InterlockError(
            f"breadth {breadth} cannot be filled: only {len(eligible)} of the {len(set(training_domains))} "
            f"training domains have an accepted trajectory", item="domains", field="count")
    chosen = eligible[:breadth]
    available = {d: len(by_domain[d]) for d in chosen}
    try:
        shares = allocate(available, chosen, trajectories)
    except ValueError:
        raise InterlockError(
            f"breadth {breadth} cannot be filled at {trajectories} trajectories: its {breadth} domains "
            f"hold {sum(available.values())} accepted", item="scale", field="breadth_trajectories") from None
    picked: set[str] = set()
    for domain in chosen:
        pool = sorted(by_domain[domain])
        picked.update(random.Random(stable_seed(seed, "breadth-sample", domain)).sample(pool, shares[domain]))
    return TrainingSet(breadth, tuple(chosen), frozenset(picked), shares)


def run_sampling(accepted: Path, rollouts: Path, out: Path, *, breadth: int | None,
                 trajectories: int | None, seed: int) -> dict:
    """Write the training set (TRAJECTORIES schema, in the accepted table's order); return its
    metrics."""
    training_domains = [d for batch in open_table(rollouts, schemas.TRAJECTORIES).iter_batches(
        columns=["domain_id"]) for d in batch.column(0).to_pylist()]
    pairs = [(row["rollout_id"], row["domain_id"])
             for rows in iter_row_groups(accepted, schemas.TRAJECTORIES) for row in rows]
    chosen = choose_training_set(pairs, training_domains, breadth=breadth, trajectories=trajectories,
                                 seed=seed)
    kept: Counter = Counter()
    with write_row_groups(out, schemas.TRAJECTORIES) as writer:
        for rows in iter_row_groups(accepted, schemas.TRAJECTORIES):
            rows = [row for row in rows if row["rollout_id"] in chosen.rollout_ids]
            kept.update(row["domain_id"] for row in rows)
            if rows:
                writer.write(rows)
    count = sum(kept.values())
    scope = "every accepted trajectory" if breadth is None else f"breadth {breadth}"
    return {
        "breadth": breadth, "trajectories": count, "accepted": len(pairs),
        "training_domains": len(set(training_domains)), "domains": len(chosen.domains),
        "per_domain": {d: kept[d] for d in chosen.domains},
        "nothing_to_train": count == 0,
        "message": (f"{scope}: {count} of {len(pairs)} accepted trajectories from "
                    f"{len(chosen.domains)} domains" if count else
                    f"{scope}: nothing to train on (no accepted trajectory)"),
    }
