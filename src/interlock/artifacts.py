"""Read what the pipeline wrote, one task at a time, without loading whole artifact sets.

The stages stream whole tables; a reader (the CLI, a notebook) usually wants one task or a
summary. Single-task reads push a ``task_id`` filter down into Parquet, so only the row groups
whose statistics can hold that task are decoded; summaries read only the columns they need,
one row group at a time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from interlock import schemas
from interlock.errors import InterlockError
from interlock.graph import CompletionGraph, graphs_from_rows
from interlock.io import open_table, read_rows
from interlock.packs import TaskPack, packs_from_rows


class MissingArtifacts(InterlockError):
    """An artifact the reader needs has not been produced yet."""


class UnknownTask(InterlockError):
    """No task with this id in the artifacts."""


@dataclass(frozen=True)
class Artifacts:
    """The artifact layout under one data directory (``data/`` by default)."""

    root: Path

    @property
    def domains(self) -> Path:
        return self.root / "domains.parquet"

    @property
    def blueprints(self) -> Path:
        return self.root / "blueprints.parquet"

    @property
    def graphs(self) -> Path:
        return self.root / "graphs"

    @property
    def packs(self) -> Path:
        return self.root / "packs"

    @property
    def review(self) -> Path:
        return self.root / "review"

    @property
    def verdicts(self) -> Path:
        return self.review / "verdicts.parquet"

    @property
    def trajectories(self) -> Path:
        """The rollouts of the starting policy on the admitted ``rft`` tasks."""
        return self.root / "rollouts" / "trajectories.parquet"

    @property
    def judgements(self) -> Path:
        """Both judges' verdicts on the rollouts (``agent``, ``text``, ``collateral``)."""
        return self.root / "judge" / "rollouts"

    @property
    def accepted(self) -> Path:
        """The rollouts whose every mandatory criterion passed under the chosen judge."""
        return self.root / "accepted" / "trajectories.parquet"

    @property
    def training_set(self) -> Path:
        """What RFT trains on: the accepted trajectories of the chosen domain breadth."""
        return self.root / "training_set" / "trajectories.parquet"

    @property
    def demos(self) -> Path:
        """Reference demonstrations: the oracle's trajectories on the admitted ``demo`` tasks."""
        return self.root / "demos" / "trajectories.parquet"

    @property
    def evaluation(self) -> Path:
        """Every evaluated model's rollouts and per-task results on the evaluation pools."""
        return self.root / "evaluation"

    @property
    def base_model(self) -> Path:
        """The backbone checkpoint (safetensors, tokenizer, chat template, manifest.parquet)."""
        return self.model("base")

    def model(self, name: str) -> Path:
        """A checkpoint under ``models/``: ``base``, or a fine-tuned one such as ``demo_sft``."""
        return self.root / "models" / name

    def require(self, path: Path) -> Path:
        """``path``, or a :class:`MissingArtifacts` error that says how to make it."""
        if not self.root.is_dir():
            raise MissingArtifacts(f"no data directory {self.root}; run `dvc repro` first "
                                   "(or pass --data DIR)")
        if not path.exists():
            raise MissingArtifacts(f"{path} does not exist; run `dvc repro` first")
        return path

    # ------------------------------------------------------------------------- summaries

    def domain_rows(self) -> list[dict]:
        return read_rows(self.require(self.domains), schemas.DOMAINS)

    def task_rows(self) -> list[dict]:
        """One row per task: ids, pool, and the size of its graph (decisions, effects, evidence,
        couplings), with ``admitted`` (True/False) when the review verdicts exist, else None."""
        graphs = self.require(self.graphs)
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
        if self.verdicts.exists():
            for batch in _iter_columns(self.verdicts, schemas.REVIEW_TABLES["verdicts"],
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
        """The completion graph of one task, re-validated as it is loaded."""
        rows = _task_tables(self.require(self.graphs), schemas.GRAPH_TABLES, task_id)
        return next(graphs_from_rows(rows, str(self.graphs)))

    def pack(self, task_id: str) -> TaskPack:
        """The task pack (workspace, request, contract, rubric, checks, reference) of one task."""
        rows = _task_tables(self.require(self.packs), schemas.PACK_TABLES, task_id)
        return packs_from_rows(rows, str(self.packs))[0]

    def verdict(self, task_id: str) -> dict | None:
        """The review verdict of one task, or None if the review has not run."""
        if not self.verdicts.exists():
            return None
        rows = _filtered(self.verdicts, schemas.REVIEW_TABLES["verdicts"], task_id)
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
