"""The training set of one domain-breadth choice: a fixed number of trajectories, stratified across
a fixed number of training domains, so that a breadth sweep changes breadth and nothing else (the
paper holds 8,957 trajectories fixed while the domain count varies).

The pool is the accepted trajectories (source ``policy``) and, under rollout-time intervention,
the kept corrections of rejected rollouts (source ``rti``, from the ``intervene`` stage's table);
with ``intervention=none`` that table is empty and the pool is the accepted trajectories alone.

- Which domains: the training domains enter in a seeded order that does not depend on the
  breadth, so a smaller breadth's domains are the first ones of a larger breadth's (d4 inside d8
  inside d16). A domain with nothing in the pool (no accepted trajectory and no kept correction)
  cannot be a training domain and is passed over.
- How many from each: as even as the pool allows. Each domain gets an equal share (the
  remainder goes to the domains first in the order); a domain holding fewer than its share gives
  what it has and the rest is shared out again among the domains that still have some.
- Which trajectories: a seeded sample within each domain, drawn from accepted trajectories and
  kept corrections together (so ``intervention=none`` and ``rti`` at one breadth train on sets of
  the same size: the matched comparison).

A breadth the pool cannot fill, too few domains with something to train on or too few
trajectories in the chosen ones, is an error that says so; never a silently smaller set.
The ``all`` choice (breadth ``None``) takes every accepted trajectory and every kept correction:
the main pipeline's default, where no ablation holds the count fixed (the unmatched comparison:
intervention also means more data).

The written table (``TRAINING_SET`` schema) holds the chosen accepted rows in the accepted table's
order (source ``policy``, weight 1, loss from message 0), then the chosen corrections ordered by
rollout id (source ``rti``, the intervention row's weight, loss from its ``prefix_messages`` under
``mask=corrected``, from message 0 under ``mask=all``).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import iter_row_groups, loads, open_table, write_row_groups
from interlock.core.seeds import stable_seed
from interlock.rollout.trajectory import BadRow, BadRows, Trajectory, iter_rows

SOURCES = ("policy", "rti")
MASKS = ("corrected", "all")
#: the suffix of a corrected trajectory's rollout id (``T1.a0`` -> ``T1.a0.rti``)
CORRECTION_SUFFIX = ".rti"
#: corrections per written row group
ROW_GROUP = 256


@dataclass(frozen=True)
class TrainingSet:
    """The chosen rollouts and where they came from."""

    breadth: int | None  # None: every accepted trajectory and kept correction (the ``all`` choice)
    domains: tuple[str, ...]  # the domains trained on, in the seeded order
    rollout_ids: frozenset[str]
    per_domain: Mapping[str, int]


@dataclass(frozen=True)
class Correction:
    """A kept correction as the training set needs it (its trajectory is read again when written)."""

    rollout_id: str  # the corrected trajectory's id (the original's + ``.rti``)
    task_id: str
    domain_id: str
    weight: float
    prefix_messages: int


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
                        breadth: int | None, trajectories: int | None, seed: int,
                        corrections: Sequence[tuple[str, str]] = ()) -> TrainingSet:
    """Pick the training set from ``accepted`` and ``corrections`` (rollout id, domain id) pairs,
    one pool: a domain is eligible if it has either, and the seeded sample within a domain draws
    from both (the ids must be distinct).

    ``training_domains`` are all the domains that were rolled out (with or without an accepted
    trajectory); ``breadth`` and ``trajectories`` are None for the ``all`` choice."""
    pool = [*accepted, *corrections]
    by_domain: dict[str, list[str]] = defaultdict(list)
    for rollout_id, domain_id in pool:
        by_domain[domain_id].append(rollout_id)
    what = "an accepted trajectory or a kept correction" if corrections else "an accepted trajectory"
    if breadth is None:
        order = [d for d in domain_order(training_domains, seed) if by_domain.get(d)]
        return TrainingSet(None, tuple(order), frozenset(r for r, _ in pool),
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
            f"training domains have {what}", item="domains", field="count")
    chosen = eligible[:breadth]
    available = {d: len(by_domain[d]) for d in chosen}
    try:
        shares = allocate(available, chosen, trajectories)
    except ValueError:
        corrected_ids = {r for r, _ in corrections}
        held = sum(available.values())
        fixes = sum(r in corrected_ids for d in chosen for r in by_domain[d])
        holding = (f"{held} ({held - fixes} accepted, {fixes} kept corrections)" if corrections
                   else f"{held} accepted")
        raise InterlockError(
            f"breadth {breadth} cannot be filled at {trajectories} trajectories: its {breadth} domains "
            f"hold {holding}", item="scale", field="breadth_trajectories") from None
    picked: set[str] = set()
    for domain in chosen:
        candidates = sorted(by_domain[domain])
        picked.update(random.Random(stable_seed(seed, "breadth-sample", domain)).sample(
            candidates, shares[domain]))
    return TrainingSet(breadth, tuple(chosen), frozenset(picked), shares)


def _kept_rows(interventions: Path) -> Iterator[tuple[dict, dict | InterlockError]]:
    """(intervention row, its corrected TRAJECTORIES row, or why it is none) for every kept
    correction."""
    source = str(interventions)
    for rows in iter_row_groups(interventions, schemas.INTERVENTIONS):
        for row in rows:
            if row["kept"] is not True:
                continue
            try:
                yield row, _corrected(row, source)
            except InterlockError as exc:
                yield row, exc


def _corrected(row: dict, source: str) -> dict:
    """A kept intervention row's corrected trajectory row, checked against the row."""
    original = row["rollout_id"]
    if row["corrected"] is None:
        raise InterlockError("a kept intervention has no corrected trajectory", file=source, item=original,
                             field="corrected")
    corrected = loads(row["corrected"], file=source, item=original, field="corrected")
    if not isinstance(corrected, dict) or set(corrected) != set(schemas.TRAJECTORIES.names):
        raise InterlockError("the corrected trajectory is not a trajectory row", file=source, item=original,
                             field="corrected")
    expected = {"rollout_id": f"{original}{CORRECTION_SUFFIX}", "task_id": row["task_id"],
                "domain_id": row["domain_id"]}
    for name, value in expected.items():
        if corrected[name] != value:
            raise InterlockError(f"the corrected trajectory's {name} is {str(corrected[name])[:80]!r}, "
                                 f"expected {str(value)[:80]!r}", file=source, item=original,
                                 field="corrected")
    return corrected


def read_corrections(interventions: Path | None, rolled_out: set[str], mask: str,
                     refused: BadRows | None = None) -> list[Correction]:
    """The kept corrections of the ``intervene`` stage's table (none where there is no table),
    ordered by rollout id; each checked against the rollouts it corrects. One that is not a
    correction the stage writes is left out with its reason (added to ``refused``)."""
    if interventions is None or not Path(interventions).exists():
        return []
    refused = refused if refused is not None else BadRows()
    source = str(interventions)
    found: dict[str, Correction] = {}
    for row, corrected in _kept_rows(Path(interventions)):
        try:
            correction = _correction(row, corrected, rolled_out, mask, source)
        except InterlockError as exc:
            refused.add(exc)
            continue
        if correction.rollout_id in found:
            refused.add(InterlockError("two kept corrections of one rollout", file=source,
                                       item=correction.rollout_id, field="rollout_id"))
            continue
        found[correction.rollout_id] = correction
    return sorted(found.values(), key=lambda c: c.rollout_id)


def _correction(row: dict, corrected: dict | InterlockError, rolled_out: set[str], mask: str,
                source: str) -> Correction:
    if isinstance(corrected, InterlockError):
        raise corrected
    original = row["rollout_id"]
    if original not in rolled_out:
        raise InterlockError("a correction of a rollout that is not in the rollouts table", file=source,
                             item=original, field="rollout_id")
    messages = Trajectory.from_row(corrected, source).messages
    weight, prefix = row["weight"], row["prefix_messages"]
    if weight is None or not math.isfinite(weight) or weight <= 0:
        raise InterlockError(f"a kept correction needs a positive weight, not {weight}", file=source,
                             item=original, field="weight")
    if mask == "corrected" and (prefix is None or not 0 <= prefix <= len(messages)):
        raise InterlockError(f"prefix_messages {prefix} is not within the corrected trajectory's "
                             f"{len(messages)} messages", file=source, item=original, field="prefix_messages")
    return Correction(corrected["rollout_id"], row["task_id"], row["domain_id"], float(weight), prefix or 0)


def run_sampling(accepted: Path, rollouts: Path, out: Path, *, breadth: int | None,
                 trajectories: int | None, seed: int, interventions: Path | None = None,
                 mask: str) -> dict:
    """Write the training set (TRAINING_SET schema: the chosen accepted rows in the accepted table's
    order, then the chosen kept corrections by rollout id); return its metrics.

    ``interventions``: the ``intervene`` stage's table (None or a missing file: no corrections);
    ``mask``: ``corrected`` (a correction's loss starts at its first corrected message) or ``all``."""
    if mask not in MASKS:
        raise InterlockError(f"mask must be one of {', '.join(MASKS)}, not {mask!r}", item="intervention",
                             field="mask")
    rollout_ids: set[str] = set()
    training_domains: list[str] = []
    for batch in open_table(rollouts, schemas.TRAJECTORIES).iter_batches(columns=["rollout_id", "domain_id"]):
        rollout_ids.update(batch.column(0).to_pylist())
        training_domains.extend(batch.column(1).to_pylist())
    refused = BadRows()
    pairs, accepted_ids, accepted_tasks = [], set(), set()
    for row in (row for group in iter_rows(accepted) for row in group):
        if isinstance(row.parsed, BadRow):
            refused.add(row.parsed)
        elif row.parsed.rollout_id in accepted_ids:
            refused.add(row.refused(str(accepted), "rollout_id", "another row has this rollout id").parsed)
        else:
            pairs.append((row.parsed.rollout_id, row.parsed.domain_id))
            accepted_ids.add(row.parsed.rollout_id)
            accepted_tasks.add(row.parsed.task_id)
    corrections = read_corrections(interventions, rollout_ids, mask, refused)
    clash = {c.rollout_id for c in corrections} & {r for r, _ in pairs}
    for rollout_id in sorted(clash):
        refused.add(InterlockError("a correction has the id of an accepted trajectory",
                                   file=str(interventions), item=rollout_id, field="rollout_id"))
    corrections = [c for c in corrections if c.rollout_id not in clash]
    chosen = choose_training_set(pairs, training_domains, breadth=breadth, trajectories=trajectories,
                                 seed=seed, corrections=[(c.rollout_id, c.domain_id) for c in corrections])
    picked = [c for c in corrections if c.rollout_id in chosen.rollout_ids]
    kept: dict[str, Counter] = {source: Counter() for source in SOURCES}
    with write_row_groups(out, schemas.TRAINING_SET) as writer:
        taken: set[str] = set()
        for group in iter_rows(accepted):
            rows = [{**row.data, "source": "policy", "weight": 1.0, "loss_from_message": 0} for row in group
                    if isinstance(row.parsed, Trajectory) and row.parsed.rollout_id in chosen.rollout_ids
                    and row.parsed.rollout_id not in taken]
            taken.update(row["rollout_id"] for row in rows)
            kept["policy"].update(row["domain_id"] for row in rows)
            if rows:
                writer.write(rows)
        if picked:
            wanted = {c.rollout_id for c in picked}
            trajectories_of = {corrected["rollout_id"]: corrected
                               for _, corrected in _kept_rows(Path(interventions))
                               if isinstance(corrected, dict) and corrected["rollout_id"] in wanted}
            for start in range(0, len(picked), ROW_GROUP):
                group = picked[start:start + ROW_GROUP]
                writer.write([{**trajectories_of[c.rollout_id], "source": "rti", "weight": c.weight,
                               "loss_from_message": c.prefix_messages if mask == "corrected" else 0}
                              for c in group])
            kept["rti"].update(c.domain_id for c in picked)
    by_source = {source: sum(kept[source].values()) for source in SOURCES}
    count = sum(by_source.values())
    # training domains and tasks with no accepted rollout at all that a chosen correction trains on
    made_trainable_domains = {c.domain_id for c in picked} - {d for _, d in pairs}
    made_trainable_tasks = {c.task_id for c in picked} - accepted_tasks
    scope = "every accepted trajectory" if breadth is None else f"breadth {breadth}"
    if corrections:
        scope = "every accepted trajectory and kept correction" if breadth is None else scope
        what = (f"{by_source['policy']} of {len(pairs)} accepted trajectories and {by_source['rti']} of "
                f"{len(corrections)} kept corrections")
    else:
        what = f"{count} of {len(pairs)} accepted trajectories"
    return {
        "breadth": breadth, "trajectories": count, "accepted": len(pairs),
        "training_domains": len(set(training_domains)), "domains": len(chosen.domains),
        "per_domain": {d: kept["policy"][d] + kept["rti"][d] for d in chosen.domains},
        "nothing_to_train": count == 0,
        "message": (f"{scope}: {what} from {len(chosen.domains)} domains" if count else
                    f"{scope}: nothing to train on (no accepted trajectory or kept correction)"),
        "mask": mask,
        "corrections": len(corrections),
        "by_source": by_source,
        "per_domain_by_source": {d: {source: kept[source][d] for source in SOURCES} for d in chosen.domains},
        "rti_weight": math.fsum(c.weight for c in picked),
        "domains_made_trainable": len(made_trainable_domains),
        "tasks_made_trainable": len(made_trainable_tasks),
        "bad_rows": refused.summary(),
    }
