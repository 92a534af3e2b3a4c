"""Parquet in and out: fixed schemas, row-group streaming, and writes that never half-land.

Every artifact directory is written as a set of tables whose row group *i* holds the same
tasks, so a later stage streams them side by side with bounded memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from interlock.core.errors import InterlockError


def dumps(value: object, *, sort_keys: bool = True) -> str:
    """Canonical JSON, so the same content always gives the same bytes. ``sort_keys=False``
    keeps the order things were written in (tool-call arguments as the model wrote them)."""
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)


def canonical(value: object) -> object:
    """``value`` as its canonical JSON reads back (keys sorted at every level, tuples as lists):
    what a record stored through :func:`dumps` will be, so code given it behaves the same before
    and after."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value


def fingerprint(*parts: object) -> str:
    """A short hash of JSON-able parts: names a run's configuration (work folders are reused only
    while it is the same)."""
    return hashlib.sha256(dumps(list(parts)).encode()).hexdigest()[:16]


def loads(text: str, *, file: str, item: str, field: str) -> object:
    try:
        return json.loads(text)
    except RecursionError:
        raise InterlockError("JSON nested too deeply to read", file=file, item=item, field=field) from None
    except (TypeError, ValueError) as exc:
        raise InterlockError(f"not valid JSON ({exc})", file=file, item=item, field=field) from None


@contextlib.contextmanager
def atomic_output(path: Path | str) -> Iterator[Path]:
    """Yield a temporary sibling path; it replaces ``path`` (file or folder) only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


class RowGroupWriter:
    """Appends one row group per ``write`` to a Parquet file with a fixed schema."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.schema = schema
        self._writer = pq.ParquetWriter(path, schema, compression="zstd")

    def write(self, rows: list[dict]) -> None:
        table = pa.Table.from_pylist(rows, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))

    def close(self) -> None:
        self._writer.close()


class TableSet:
    """Writers for named tables in one folder; each ``write`` adds one aligned row group to each."""

    def __init__(self, folder: Path, schemas: dict[str, pa.Schema]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._writers = {name: RowGroupWriter(folder / f"{name}.parquet", schema)
                         for name, schema in schemas.items()}

    def write(self, rows: dict[str, list[dict]]) -> None:
        for name, writer in self._writers.items():
            writer.write(rows.get(name, []))

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


@contextlib.contextmanager
def write_table_set(folder: Path | str, schemas: dict[str, pa.Schema]) -> Iterator[TableSet]:
    """Write a folder of aligned tables atomically."""
    with atomic_output(folder) as tmp:
        tables = TableSet(tmp, schemas)
        try:
            yield tables
        finally:
            tables.close()


@contextlib.contextmanager
def write_row_groups(path: Path | str, schema: pa.Schema) -> Iterator[RowGroupWriter]:
    """Write one table by row groups, atomically."""
    with atomic_output(path) as tmp:
        writer = RowGroupWriter(tmp, schema)
        try:
            yield writer
        finally:
            writer.close()


def write_table(path: Path | str, rows: Iterable[dict], schema: pa.Schema) -> None:
    """Write one small table atomically."""
    with atomic_output(path) as tmp:
        pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), tmp, compression="zstd")


def open_table(path: Path | str, schema: pa.Schema) -> pq.ParquetFile:
    """Open a Parquet artifact and check it has exactly the expected schema."""
    path = Path(path)
    try:
        handle = pq.ParquetFile(path)
        actual = handle.schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise InterlockError(f"cannot read Parquet ({exc})", file=str(path)) from None
    for field in schema:
        if field.name not in actual.names:
            raise InterlockError(f"column missing{_version_note(schema, actual)}", file=str(path),
                                 field=field.name)
        if not actual.field(field.name).type.equals(field.type):
            raise InterlockError(
                f"column has type {actual.field(field.name).type}, expected {field.type}",
                file=str(path), field=field.name)
    extra = set(actual.names) - set(schema.names)
    if extra:
        raise InterlockError("unexpected columns", file=str(path), field=",".join(sorted(extra)))
    return handle


def _version_note(expected: pa.Schema, actual: pa.Schema) -> str:
    """Where a schema carries a version (``interlock.schema`` metadata) the table does not: which
    one each is, and what to do."""
    key = b"interlock.schema"
    want = (expected.metadata or {}).get(key)
    have = (actual.metadata or {}).get(key)
    if want is None or want == have:
        return ""
    written = have.decode(errors="replace") if have else "an older version"
    return (f" (written as {written}, this version reads {want.decode()}: run the stage that writes it "
            "again)")


def count_rows(path: Path | str, schema: pa.Schema) -> int:
    return open_table(path, schema).metadata.num_rows


def read_rows(path: Path | str, schema: pa.Schema) -> list[dict]:
    return [row for group in iter_row_groups(path, schema) for row in group]


def iter_row_groups(path: Path | str, schema: pa.Schema) -> Iterator[list[dict]]:
    handle = open_table(path, schema)
    for index in range(handle.num_row_groups):
        try:
            yield handle.read_row_group(index).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise InterlockError(f"corrupted row group {index} ({exc})", file=str(path)) from None


def iter_aligned(folder: Path | str, schemas: dict[str, pa.Schema]) -> Iterator[dict[str, list[dict]]]:
    """Row group *i* of every table in a set, together."""
    folder = Path(folder)
    handles = {name: open_table(folder / f"{name}.parquet", schema) for name, schema in schemas.items()}
    counts = {name: handle.num_row_groups for name, handle in handles.items()}
    if len(set(counts.values())) > 1:
        raise InterlockError(f"tables are not aligned by row group: {counts}", file=str(folder))
    for index in range(next(iter(counts.values()), 0)):
        group = {}
        for name, handle in handles.items():
            try:
                group[name] = handle.read_row_group(index).to_pylist()
            except (OSError, pa.ArrowException) as exc:
                raise InterlockError(f"corrupted row group {index} ({exc})",
                                     file=str(folder / f"{name}.parquet")) from None
        yield group


def batched(items: Iterable, size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_json(path: Path | str, data: object) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_tsv(path: Path | str, rows: list[dict], columns: list[str]) -> None:
    """A plots TSV (header only when there are no rows), written atomically."""
    with atomic_output(path) as tmp:
        lines = ["\t".join(columns)] + ["\t".join(str(row[c]) for c in columns) for row in rows]
        tmp.write_text("\n".join(lines) + "\n")
