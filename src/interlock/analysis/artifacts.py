"""Read what the pipeline wrote, one task at a time, without loading whole artifact sets.

The stages stream whole tables; a reader (the CLI, a notebook) usually wants one task or a
summary. Single-task reads push a ``task_id`` filter down into Parquet, so only the row groups
whose statistics can hold that task are decoded; summaries read only the columns they need,
one row group at a time.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from interlock.core import schemas
from interlock.core.config import load_params
from interlock.core.errors import InterlockError
from interlock.core.io import open_table, read_rows
from interlock.core.paths import MissingArtifacts, Paths
from interlock.synthesis.graph import CompletionGraph, graphs_from_rows
from interlock.synthesis.packs import TaskPack, packs_from_rows

#: the repository whose results a reader reads, when it runs outside it
REPO_ENV = "INTERLOCK_REPO"


class UnknownTask(InterlockError):
    """No task with this id in the artifacts."""


def find_repository(start: Path | str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The repository whose results to read: ``$INTERLOCK_REPO`` if set, else the first of
    ``start`` (default: the working directory) and its parents holding ``params.yaml`` and
    ``dvc.yaml`` (so a notebook finds it from ``notebooks/`` or from the root)."""
    env = os.environ if env is None else env
    if env.get(REPO_ENV):
        root = Path(env[REPO_ENV]).expanduser().resolve()
        if not (root / "params.yaml").is_file():
            raise MissingArtifacts(f"${REPO_ENV}={env[REPO_ENV]} holds no params.yaml", file=str(root))
        return root
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params.yaml").is_file() and (folder / "dvc.yaml").is_file():
            return folder
    raise MissingArtifacts(f"no repository (params.yaml and dvc.yaml) at or above {here}; "
                           f"set ${REPO_ENV} to the checkout whose results to read")


def repository_paths(start: Path | str | None = None, *, data: Path | str | None = None,
                     env: Mapping[str, str] | None = None) -> Paths:
    """The paths of the repository around ``start`` (see :func:`find_repository`), from wherever the
    reader runs; ``data``: its artifacts are in that folder instead."""
    return params_paths(find_repository(start, env) / "params.yaml", data=data)


def params_paths(params_file: Path | str, *, data: Path | str | None = None) -> Paths:
    """The paths a ``params.yaml`` names, taken from the folder it is in; ``data``: the artifacts
    are in that folder instead."""
    params_file = Path(params_file).resolve()
    paths = load_params(params_file).paths.under(params_file.parent)
    return paths if data is None else paths.rebase(data=Path(data).resolve())


@dataclass(frozen=True)
class Artifacts:
    """Readers over the artifacts at ``paths`` (one task, or a summary)."""

    paths: Paths

    # ------------------------------------------------------------------------- summaries

    def domain_rows(self) -> list[dict]:
        return read_rows(self.paths.require(self.paths.domains), schemas.DOMAINS)

    def task_rows(self) -> list[dict]:
        """One row per task: ids, pool, and the size of its graph (decisions, effects, evidence,
        couplings), with ``admitted`` (True/False) when the review verdicts exist, else None."""
        graphs = self.paths.require(self.paths.graphs)
        tasks = _read_columns(graphs / "tasks.parquet", schemas.GRAPH_TABLES["tasks"],
                              ["task_id", "domain_id", "pool"])
        kinds: Counter = Counter()
        for batch in _iter_columns(graphs / "nodes.parquet", schemas.GRAPH_TABLES["nodes"],
                                   ["task_id", "kind"]):
            counts = pa.table(batch).group_by(["task_id", "kind"]).aggregate([([], "count_all")])
            for task_id, kind, n in zip(*(counts.column(c).to_pylist() for c in
                                          ("task_id", "kind", "count_all")), strict=True):
                kinds[task_id, kind] += n
        couplings: Counter = Counter()
        for batch in _iter_columns(graphs / "hyperedges.parquet", schemas.GRAPH_TABLES["hyperedges"],
                                   ["task_id"]):
            couplings.update(batch.column(0).to_pylist())
        admitted: dict[str, bool] = {}
        if self.paths.verdicts.exists():
            for batch in _iter_columns(self.paths.verdicts, schemas.REVIEW_TABLES["verdicts"],
                                       ["task_id", "admitted"]):
                admitted.update(zip(*(batch.column(i).to_pylist() for i in (0, 1)), strict=True))
        return [{**row, "decisions": kinds[row["task_id"], "decision"],
                 "effects": kinds[row["task_id"], "effect"],
                 "evidence": kinds[row["task_id"], "evidence"],
                 "couplings": couplings[row["task_id"]],
                 "admitted": admitted.get(row["task_id"]) if admitted else None}
                for row in tasks]

    # ------------------------------------------------------------------------- one task

    def graph(self, task_id: str) -> CompletionGraph:
        """The completion graph of one task (synthesized, or grown by recursive synthesis),
        re-validated as it is loaded."""
        folder = self._folder(task_id, self.paths.graphs, self.paths.grown_graphs, schemas.GRAPH_TABLES)
        return next(graphs_from_rows(_task_tables(folder, schemas.GRAPH_TABLES, task_id), str(folder)))

    def pack(self, task_id: str) -> TaskPack:
        """The task pack (workspace, request, contract, rubric, checks, reference) of one task."""
        folder = self._folder(task_id, self.paths.packs, self.paths.grown_packs, schemas.PACK_TABLES)
        return packs_from_rows(_task_tables(folder, schemas.PACK_TABLES, task_id), str(folder))[0]

    def _folder(self, task_id: str, synthesized: Path, grown: Path, tables: dict[str, pa.Schema]) -> Path:
        """Where a task lives: recursive synthesis's tables where they hold it, else the synthesized."""
        index = grown / "tasks.parquet"
        if index.exists() and _filtered(index, tables["tasks"], task_id):
            return grown
        return self.paths.require(synthesized)

    def lineage(self, task_id: str) -> list[dict]:
        """A grown task's ancestry, the task first and its root (a synthesized task) last: task,
        round, operator, parents, contract. Empty for a task recursive synthesis did not make."""
        if not self.paths.lineage.exists():
            return []
        rows = {r["task_id"]: r for r in read_rows(self.paths.lineage, schemas.LINEAGE)}
        chain, current = [], task_id
        while current in rows:
            chain.append(rows[current])
            current = rows[current]["parents"][0]
        return chain

    def verdict(self, task_id: str) -> dict | None:
        """The review verdict of one task, or None if the review has not run."""
        if not self.paths.verdicts.exists():
            return None
        rows = _filtered(self.paths.verdicts, schemas.REVIEW_TABLES["verdicts"], task_id)
        return rows[0] if rows else None


def _task_tables(folder: Path, table_schemas: dict[str, pa.Schema], task_id: str) -> dict[str, list[dict]]:
    rows = {name: _filtered(folder / f"{name}.parquet", schema, task_id)
            for name, schema in table_schemas.items()}
    if not rows["tasks"]:
        raise UnknownTask(f"unknown task {task_id!r} in {folder}; try `interlock tasks`")
    return rows


def _filtered(path: Path, schema: pa.Schema, task_id: str) -> list[dict]:
    """The rows of one task; row groups whose statistics exclude it are never decoded."""
    open_table(path, schema)  # schema check and a located error for an unreadable file
    try:
        return pq.read_table(path, schema=schema, filters=[("task_id", "==", task_id)]).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise InterlockError(f"cannot read Parquet ({exc})", file=str(path), item=task_id) from None


def _iter_columns(path: Path, schema: pa.Schema, columns: list[str]):
    handle = open_table(path, schema)
    try:
        yield from handle.iter_batches(columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise InterlockError(f"cannot read Parquet ({exc})", file=str(path)) from None


def _read_columns(path: Path, schema: pa.Schema, columns: list[str]) -> list[dict]:
    return [row for batch in _iter_columns(path, schema, columns) for row in batch.to_pylist()]
