"""The synthesized tasks, read back: the catalog as the ``domains`` stage wrote it, blueprints,
graphs and packs by row group, and the admitted tasks of a pool with everything a scripted
policy may know about them (:class:`TaskContext`)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import iter_aligned, iter_row_groups, read_rows
from interlock.core.paths import Paths
from interlock.core.seeds import stable_seed
from interlock.synthesis.blueprints import Blueprint, PoolCheck
from interlock.synthesis.catalog import Catalog, Domain, check_catalog
from interlock.synthesis.graph import CompletionGraph, graphs_from_rows
from interlock.synthesis.packs import TaskPack, packs_from_rows


@dataclass(frozen=True)
class TaskContext:
    """A compiled task and what it was compiled from: what a scripted policy may know about it
    (models see only the workspace and the request)."""

    task_id: str
    pack: TaskPack
    graph: CompletionGraph | None = None
    domain: Domain | None = None


def load_domains(path: Path) -> Catalog:
    """The catalog as the ``domains`` stage wrote it (so later stages depend on the artifact)."""
    domains = []
    for row in read_rows(path, schemas.DOMAINS):
        try:
            domains.append(Domain.model_validate_json(row["spec"]))
        except ValueError as exc:
            raise InterlockError(f"invalid domain spec ({exc})", file=str(path), item=row["domain_id"],
                                 field="spec") from None
    check_catalog(domains, str(path))
    return Catalog(domains, str(path))


def iter_blueprints(path: Path, catalog: Catalog) -> Iterator[list[Blueprint]]:
    """Blueprints by row group, each re-checked for pool disjointness as it is read."""
    check = PoolCheck(catalog, str(path))
    for rows in iter_row_groups(path, schemas.BLUEPRINTS):
        for row in rows:
            check.add(row["task_id"], row["domain_id"], row["pool"], row["fingerprint"], row["skeleton"])
        yield [Blueprint.from_row(row, str(path)) for row in rows]


def iter_graphs(folder: Path) -> Iterator[list[CompletionGraph]]:
    for group in iter_aligned(folder, schemas.GRAPH_TABLES):
        yield list(graphs_from_rows(group, str(folder)))


def iter_packs(folder: Path) -> Iterator[list[TaskPack]]:
    for group in iter_aligned(folder, schemas.PACK_TABLES):
        yield packs_from_rows(group, str(folder))


def _admitted_rows(paths: Paths) -> list[dict]:
    return read_rows(paths.require(paths.admitted), schemas.REVIEW_TABLES["admitted"])


def grown(paths: Paths) -> bool:
    """Whether recursive synthesis wrote children (the ``grow`` stage; none where it never ran)."""
    return (paths.grown_packs / "tasks.parquet").exists()


def pack_folders(paths: Paths) -> list[Path]:
    """Where compiled tasks live: the synthesized packs, then recursive synthesis's children."""
    return [paths.packs, *([paths.grown_packs] if grown(paths) else [])]


def _grown_rows(paths: Paths) -> list[dict]:
    if not grown(paths):
        return []
    return read_rows(paths.grown_packs / "tasks.parquet", schemas.PACK_TABLES["tasks"])


def admitted_ids(paths: Paths, pool: str) -> list[str]:
    """The tasks of one pool that may be rolled out, in order: the ones the review admitted, then
    (``rft`` only) every validated child of recursive synthesis."""
    ids = [r["task_id"] for r in _admitted_rows(paths) if r["pool"] == pool]
    if pool != "rft":  # children are rft tasks only; other pools never read the grown pool
        return ids
    return ids + [r["task_id"] for r in _grown_rows(paths) if r["pool"] == pool]


def admitted_tasks(paths: Paths, catalog: Catalog, pool: str,
                   chosen: set[str] | None = None) -> Iterator[TaskContext]:
    """The tasks of one pool that may be rolled out (:func:`admitted_ids`), or those of them in
    ``chosen``, streamed with their packs and graphs."""
    allowed = set(admitted_ids(paths, pool)) if chosen is None else chosen & set(admitted_ids(paths, pool))
    folders = [(paths.graphs, paths.packs)]
    if pool == "rft" and grown(paths):
        folders.append((paths.grown_graphs, paths.grown_packs))
    for graphs_dir, packs_dir in folders:
        for graphs, packs in zip(iter_graphs(graphs_dir), iter_packs(packs_dir), strict=True):
            for graph, pack in zip(graphs, packs, strict=True):
                if pack.task_id in allowed:
                    yield TaskContext(pack.task_id, pack, graph, catalog[pack.domain_id])


def rollout_ids(paths: Paths, *, matched: bool, seed: int) -> list[str]:
    """The ``rft`` tasks the starting policy rolls out: all of them, or (``matched``) as many as
    the review admitted, drawn by seed from the grown pool (the same tasks where nothing grew), so
    ``synthesis=base,rst`` compares runs of one rollout count."""
    ids = admitted_ids(paths, "rft")
    base = sum(r["pool"] == "rft" for r in _admitted_rows(paths))
    if not matched or len(ids) <= base:
        return ids
    keep = set(random.Random(stable_seed(seed, "rollout-tasks")).sample(ids, base))
    return [t for t in ids if t in keep]
