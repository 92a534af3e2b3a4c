"""Bad input stops with an error naming the file, item and field; outputs never half-land.

Covers Parquet artifacts (missing, mistyped, extra columns; truncated or corrupted files),
blueprint rows (malformed JSON fields, edited fingerprints), graph rows (dangling edges,
unrealized decisions, one-member hyperedges), params.yaml, and the atomic writers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from interlock.core import schemas
from interlock.core.config import load_params
from interlock.core.errors import InterlockError
from interlock.core.io import (
    atomic_output,
    iter_aligned,
    iter_row_groups,
    open_table,
    read_rows,
    write_row_groups,
    write_table,
    write_table_set,
)
from interlock.core.types import TaskSize
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.graph import CompletionGraph, Edge, Hyperedge, Node, graph_rows, graphs_from_rows

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = pa.schema([("task_id", pa.string()), ("n", pa.int32()), ("spec", pa.string())])


def _rows(group: int, count: int = 50) -> list[dict]:
    return [{"task_id": f"t{group}-{i}", "n": i, "spec": f"spec {group} {i} " * 4} for i in range(count)]


def _write_valid(path: Path, groups: int = 3) -> list[dict]:
    rows = []
    with write_row_groups(path, SCHEMA) as writer:
        for group in range(groups):
            writer.write(_rows(group))
            rows += _rows(group)
    return rows


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), hidden ones included."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- Parquet input

def test_valid_parquet_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    rows = _write_valid(path)
    assert read_rows(path, SCHEMA) == rows
    assert [len(g) for g in iter_row_groups(path, SCHEMA)] == [50, 50, 50]


@pytest.mark.parametrize("reader", [open_table, read_rows, lambda p, s: list(iter_row_groups(p, s))])
def test_missing_column_names_file_and_column(tmp_path: Path, reader) -> None:
    path = tmp_path / "missing.parquet"
    pq.write_table(pa.table({"task_id": ["a"], "spec": ["x"]}), path)
    with pytest.raises(InterlockError) as info:
        reader(path, SCHEMA)
    assert info.value.file == str(path) and info.value.field == "n"
    assert str(path) in str(info.value) and "n" in str(info.value) and "missing" in str(info.value)


def test_wrong_column_type_names_file_column_and_types(tmp_path: Path) -> None:
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"task_id": ["a"], "n": pa.array([1], pa.int64()), "spec": ["x"]}), path)
    with pytest.raises(InterlockError) as info:
        read_rows(path, SCHEMA)
    message = str(info.value)
    assert info.value.field == "n"
    assert str(path) in message and "int64" in message and "int32" in message


def test_string_where_number_expected_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"task_id": ["a"], "n": ["1"], "spec": ["x"]}), path)
    with pytest.raises(InterlockError) as info:
        read_rows(path, SCHEMA)
    assert info.value.field == "n" and str(path) in str(info.value)


def test_extra_column_names_file_and_column(tmp_path: Path) -> None:
    path = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"task_id": ["a"], "n": pa.array([1], pa.int32()), "spec": ["x"],
                             "sneaky": [True]}), path)
    with pytest.raises(InterlockError) as info:
        read_rows(path, SCHEMA)
    assert info.value.field == "sneaky"
    assert str(path) in str(info.value) and "sneaky" in str(info.value)


def test_real_artifact_schema_is_enforced(tmp_path: Path) -> None:
    # The blueprint schema with one column dropped: the error names that column.
    path = tmp_path / "blueprints.parquet"
    columns = {f.name: pa.array([], f.type) for f in schemas.BLUEPRINTS if f.name != "skeleton"}
    pq.write_table(pa.table(columns), path)
    with pytest.raises(InterlockError) as info:
        open_table(path, schemas.BLUEPRINTS)
    assert info.value.field == "skeleton" and str(path) in str(info.value)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.0])
def test_truncated_parquet_names_file(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.parquet"
    _write_valid(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(InterlockError) as info:
        read_rows(path, SCHEMA)
    assert info.value.file == str(path) and str(path) in str(info.value)


def test_file_cut_by_three_bytes_names_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.parquet"
    _write_valid(path)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(InterlockError) as info:
        read_rows(path, SCHEMA)
    assert str(path) in str(info.value)


def test_not_a_parquet_file_names_file(tmp_path: Path) -> None:
    path = tmp_path / "text.parquet"
    path.write_text("task_id,n,spec\na,1,x\n")
    with pytest.raises(InterlockError) as info:
        open_table(path, SCHEMA)
    assert str(path) in str(info.value)


def test_missing_file_names_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.parquet"
    with pytest.raises(InterlockError) as info:
        open_table(path, SCHEMA)
    assert str(path) in str(info.value)


def test_corrupted_middle_names_file_and_row_group(tmp_path: Path) -> None:
    # The footer is intact (the file opens), but a row group's pages are zeroed.
    path = tmp_path / "mid.parquet"
    _write_valid(path)
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(1).column(2)
    start, length = column.data_page_offset, column.total_compressed_size
    data = bytearray(path.read_bytes())
    data[start:start + length] = bytes(length)
    path.write_bytes(bytes(data))
    open_table(path, SCHEMA)  # the schema still reads
    groups = iter_row_groups(path, SCHEMA)
    assert len(next(groups)) == 50  # row group 0 is fine
    with pytest.raises(InterlockError) as info:
        next(groups)
    assert str(path) in str(info.value) and "row group 1" in str(info.value)


def test_corrupted_table_in_a_set_names_that_table(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    table_schemas = {"a": SCHEMA, "b": SCHEMA}
    with write_table_set(folder, table_schemas) as tables:
        for group in range(2):
            tables.write({"a": _rows(group), "b": _rows(group + 10)})
    assert [sorted(g) for g in iter_aligned(folder, table_schemas)] == [["a", "b"], ["a", "b"]]
    path = folder / "b.parquet"
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset:column.data_page_offset + column.total_compressed_size] = bytes(
        column.total_compressed_size)
    path.write_bytes(bytes(data))
    with pytest.raises(InterlockError) as info:
        list(iter_aligned(folder, table_schemas))
    assert str(path) in str(info.value)


def test_misaligned_table_set_names_folder(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    with write_row_groups(folder / "a.parquet", SCHEMA) as writer:
        writer.write(_rows(0))
        writer.write(_rows(1))
    with write_row_groups(folder / "b.parquet", SCHEMA) as writer:
        writer.write(_rows(0))
    with pytest.raises(InterlockError) as info:
        list(iter_aligned(folder, {"a": SCHEMA, "b": SCHEMA}))
    assert str(folder) in str(info.value) and "aligned" in str(info.value)


# ----------------------------------------------------------------------------- blueprints

def _blueprint() -> Blueprint:
    cases = [
        {"id": "C-1001", "employee": "Ana Okafor", "team": "north", "filed_on": "2026-10-03",
         "amount": 420, "status": "pending"},
        {"id": "C-1002", "employee": "Ben Moreau", "team": "north", "filed_on": "2026-10-05",
         "amount": 150, "status": "pending"},
    ]
    return Blueprint("payroll.rft.0000", "payroll", "rft", 17, TaskSize(2, 1, 1, 0), cases, [],
                     {"limit": 500}, [{"group": "north", "kind": "total_cap",
                                       "members": ["C-1001", "C-1002"], "params": {"cap": 450}}])


def test_blueprint_row_round_trips_through_parquet(tmp_path: Path) -> None:
    blueprint = _blueprint()
    path = tmp_path / "blueprints.parquet"
    write_table(path, [blueprint.to_row()], schemas.BLUEPRINTS)
    [row] = read_rows(path, schemas.BLUEPRINTS)
    again = Blueprint.from_row(row, str(path))
    assert again == blueprint and again.fingerprint == blueprint.fingerprint


@pytest.mark.parametrize("field", ["cases", "options", "params", "groups", "distractor_rows",
                                   "distractor_clauses"])
@pytest.mark.parametrize("bad", ['{"id": "C-1001", ', "not json", None])
def test_blueprint_malformed_json_field_names_task_and_field(field: str, bad: str | None) -> None:
    row = {**_blueprint().to_row(), field: bad}
    with pytest.raises(InterlockError) as info:
        Blueprint.from_row(row, "data/blueprints.parquet")
    error = info.value
    assert (error.file, error.item, error.field) == ("data/blueprints.parquet", "payroll.rft.0000", field)
    assert "data/blueprints.parquet" in str(error) and "payroll.rft.0000" in str(error)
    assert field in str(error)


@pytest.mark.parametrize("field", ["fingerprint", "skeleton"])
def test_blueprint_edited_digest_names_task_and_field(field: str) -> None:
    row = {**_blueprint().to_row(), field: "0" * 24}
    with pytest.raises(InterlockError) as info:
        Blueprint.from_row(row, "data/blueprints.parquet")
    assert (info.value.item, info.value.field) == ("payroll.rft.0000", field)
    assert "payroll.rft.0000" in str(info.value) and field in str(info.value)


def test_blueprint_content_edited_by_hand_is_caught() -> None:
    row = _blueprint().to_row()
    cases = json.loads(row["cases"])
    cases[0]["amount"] = 425  # valid JSON, but the stored fingerprint no longer matches
    row["cases"] = json.dumps(cases)
    with pytest.raises(InterlockError) as info:
        Blueprint.from_row(row, "bp.parquet")
    assert info.value.item == "payroll.rft.0000" and info.value.field == "fingerprint"


def test_blueprint_bad_size_names_task_and_field() -> None:
    row = {**_blueprint().to_row(), "decisions": 1}
    with pytest.raises(InterlockError) as info:
        Blueprint.from_row(row, "bp.parquet")
    assert (info.value.file, info.value.item, info.value.field) == ("bp.parquet", "payroll.rft.0000",
                                                                    "decisions")


# ----------------------------------------------------------------------------- graphs

def _graph() -> CompletionGraph:
    def evidence(node_id: str, subkind: str, ref: str) -> Node:
        return Node(node_id, "evidence", subkind, ref, f"{subkind} {ref}", {"path": "policy.md"})

    def decision(node_id: str, case: str) -> Node:
        return Node(node_id, "decision", "limit_approval", case, f"decide {case}",
                    {"case_id": case, "outcome": "approved", "amount": 100, "fallback": False,
                     "basis": "P-1"})

    nodes = [evidence("E1", "clause", "P-1"), evidence("E2", "clause", "P-2"),
             evidence("E3", "record", "C-1"), evidence("E4", "record", "C-2"),
             decision("D1", "C-1"), decision("D2", "C-2"),
             Node("F1", "effect", "audit_note", "C-1", "note", {"realization": {}}),
             Node("F2", "effect", "audit_note", "C-2", "note", {"realization": {}})]
    edges = [Edge("G1", "grounding", "E3", "D1"), Edge("G2", "grounding", "E1", "D1"),
             Edge("G3", "grounding", "E4", "D2"), Edge("G4", "grounding", "E1", "D2"),
             Edge("R1", "realization", "D1", "F1"), Edge("R2", "realization", "D2", "F2")]
    return CompletionGraph("payroll.rft.0001", "payroll", "rft", 1, nodes, edges,
                           [Hyperedge("H1", "total_cap", "E2", {"cap": 200}, ("D1", "D2"))]).validate()


def _tables() -> dict[str, list[dict]]:
    return graph_rows(_graph())


def _load(tables: dict[str, list[dict]]) -> list[CompletionGraph]:
    return list(graphs_from_rows(tables, "data/graphs"))


def _graph_error(tables: dict[str, list[dict]]) -> InterlockError:
    with pytest.raises(InterlockError) as info:
        _load(tables)
    error = info.value
    assert error.file == "data/graphs" and error.item == "payroll.rft.0001"
    assert "data/graphs" in str(error) and "payroll.rft.0001" in str(error)
    return error


def test_graph_rows_round_trip() -> None:
    [graph] = _load(_tables())
    original = _graph()
    assert graph.nodes == original.nodes and graph.edges == original.edges
    assert graph.hyperedges == original.hyperedges


def test_graph_dangling_edge_target_names_task_and_field() -> None:
    tables = _tables()
    tables["edges"][0]["target"] = "D9"
    error = _graph_error(tables)
    assert error.field == "target" and "D9" in str(error) and "G1" in str(error)


def test_graph_dangling_edge_source_names_task_and_field() -> None:
    tables = _tables()
    tables["edges"][0]["source"] = "E9"
    error = _graph_error(tables)
    assert error.field == "source" and "E9" in str(error)


def test_graph_decision_without_realization_names_task_and_field() -> None:
    tables = _tables()
    tables["edges"] = [e for e in tables["edges"] if e["edge_id"] != "R2"]
    tables["nodes"] = [n for n in tables["nodes"] if n["node_id"] != "F2"]
    error = _graph_error(tables)
    assert error.field == "edges" and "D2" in str(error) and "realized" in str(error)


def test_graph_decision_without_grounding_names_task_and_field() -> None:
    tables = _tables()
    tables["edges"] = [e for e in tables["edges"] if e["target"] != "D1"]
    error = _graph_error(tables)
    assert error.field == "edges" and "D1" in str(error) and "grounded" in str(error)


def test_graph_one_member_hyperedge_names_task_and_field() -> None:
    tables = _tables()
    tables["hyperedge_members"] = tables["hyperedge_members"][:1]
    error = _graph_error(tables)
    assert error.field == "members" and "H1" in str(error)


def test_graph_hyperedge_over_one_decision_twice_is_refused() -> None:
    tables = _tables()
    tables["hyperedge_members"][1]["node_id"] = tables["hyperedge_members"][0]["node_id"]
    assert _graph_error(tables).field == "members"


def test_graph_violated_coupling_names_task_and_field() -> None:
    tables = _tables()
    tables["hyperedges"][0]["params"] = json.dumps({"cap": 150})  # 100 + 100 > 150
    error = _graph_error(tables)
    assert error.field == "params" and "H1" in str(error)


def test_graph_malformed_attrs_names_task_node_and_field() -> None:
    tables = _tables()
    tables["nodes"][4]["attrs"] = "{broken"
    error = _graph_error(tables)
    assert error.field == "nodes[D1].attrs"


def test_graph_malformed_hyperedge_params_names_field() -> None:
    tables = _tables()
    tables["hyperedges"][0]["params"] = "[1,"
    assert _graph_error(tables).field == "hyperedges.params"


def test_graph_duplicate_node_id_is_refused() -> None:
    tables = _tables()
    tables["nodes"][3]["node_id"] = "E3"
    error = _graph_error(tables)
    assert error.field == "node_id" and "E3" in str(error)


def test_graph_missing_task_row_is_refused() -> None:
    tables = _tables()
    tables["tasks"] = []
    assert _graph_error(tables).field == "tasks"


# ----------------------------------------------------------------------------- params.yaml

def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


def _write_params(tmp_path: Path, params: object) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


def test_committed_params_load(tmp_path: Path) -> None:
    params = load_params(_write_params(tmp_path, _params()))
    assert params.scale.task_size.build().decisions == _params()["scale"]["task_size"]["decisions"]


def _set(params: dict, dotted: str, value: object) -> dict:
    *parents, last = dotted.split(".")
    target = params
    for part in parents:
        target = target[part]
    target[last] = value
    return params


def _drop(params: dict, dotted: str) -> dict:
    *parents, last = dotted.split(".")
    target = params
    for part in parents:
        target = target[part]
    del target[last]
    return params


@pytest.mark.parametrize(("change", "field"), [
    (lambda p: _set(p, "scale.task_size.decisions", 1), "scale.task_size.decisions"),
    (lambda p: _set(p, "scale.name", "enormous"), "scale.name"),
    (lambda p: _set(p, "scale.train_domains", 0), "scale.train_domains"),
    (lambda p: _set(p, "seed", "not a number"), "seed"),
    (lambda p: _set(p, "scale.row_group_tasks", "many"), "scale.row_group_tasks"),
    (lambda p: _set(p, "scale.bogus", 3), "scale.bogus"),
    (lambda p: _drop(p, "seed"), "seed"),
    (lambda p: _drop(p, "scale.task_size.couplings"), "scale.task_size.couplings"),
    (lambda p: _drop(p, "domains"), "domains"),
    (lambda p: _drop(p, "scale.tasks_per_domain.rft"), "scale"),
])
def test_bad_params_name_file_and_field(tmp_path: Path, change, field: str) -> None:
    path = _write_params(tmp_path, change(_params()))
    with pytest.raises(InterlockError) as info:
        load_params(path)
    assert info.value.file == str(path) and info.value.field == field
    assert str(path) in str(info.value) and field in str(info.value)


def test_inconsistent_task_size_names_file_and_field(tmp_path: Path) -> None:
    params = _params()
    params["scale"]["task_size"].update(decisions=3, couplings=2)  # 2 couplings need 4 decisions
    path = _write_params(tmp_path, params)
    with pytest.raises(InterlockError) as info:
        load_params(path)
    assert info.value.file == str(path) and info.value.field == "decisions"
    assert "task_size" in str(info.value)


@pytest.mark.parametrize("text", ["scale: [unclosed\n", "- just\n- a list\n", ""])
def test_unusable_params_file_names_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InterlockError) as info:
        load_params(path)
    assert str(path) in str(info.value)


def test_missing_params_file_names_file(tmp_path: Path) -> None:
    with pytest.raises(InterlockError) as info:
        load_params(tmp_path / "absent.yaml")
    assert str(tmp_path / "absent.yaml") in str(info.value)


# ----------------------------------------------------------------------------- atomic writes

class Boom(RuntimeError):
    pass


def _leftovers(parent: Path, *keep: str) -> list[str]:
    return sorted(name for name in os.listdir(parent) if name not in keep)


def test_write_table_set_failure_keeps_previous_output(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    with write_table_set(folder, {"a": SCHEMA, "b": SCHEMA}) as tables:
        tables.write({"a": _rows(0), "b": _rows(1)})
    before = _snapshot(folder)
    assert sorted(before) == ["a.parquet", "b.parquet"]
    with pytest.raises(Boom), write_table_set(folder, {"a": SCHEMA, "c": SCHEMA}) as tables:
        tables.write({"a": _rows(5), "c": _rows(6)})
        raise Boom
    assert _snapshot(folder) == before
    assert _leftovers(tmp_path, "graphs") == []


def test_write_table_set_bad_rows_keep_previous_output(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    with write_table_set(folder, {"a": SCHEMA}) as tables:
        tables.write({"a": _rows(0)})
    before = _snapshot(folder)
    with pytest.raises((pa.ArrowException, TypeError)), write_table_set(folder, {"a": SCHEMA}) as tables:
        tables.write({"a": _rows(1)})
        tables.write({"a": [{"task_id": "x", "n": "not an int", "spec": "s"}]})
    assert _snapshot(folder) == before
    assert _leftovers(tmp_path, "graphs") == []


def test_write_table_set_success_replaces_whole_folder(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    with write_table_set(folder, {"a": SCHEMA, "b": SCHEMA}) as tables:
        tables.write({"a": _rows(0), "b": _rows(1)})
    with write_table_set(folder, {"a": SCHEMA}) as tables:
        tables.write({"a": _rows(7)})
    assert sorted(os.listdir(folder)) == ["a.parquet"]
    assert read_rows(folder / "a.parquet", SCHEMA) == _rows(7)
    assert _leftovers(tmp_path, "graphs") == []


def test_write_table_set_failure_without_previous_output_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(Boom), write_table_set(tmp_path / "new", {"a": SCHEMA}) as tables:
        tables.write({"a": _rows(0)})
        raise Boom
    assert os.listdir(tmp_path) == []


def test_write_row_groups_failure_keeps_previous_output(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    rows = _write_valid(path, groups=2)
    before = path.read_bytes()
    with pytest.raises(Boom), write_row_groups(path, SCHEMA) as writer:
        writer.write(_rows(9))
        raise Boom
    assert path.read_bytes() == before and read_rows(path, SCHEMA) == rows
    assert _leftovers(tmp_path, "t.parquet") == []


def test_write_row_groups_failure_without_previous_output_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(Boom), write_row_groups(tmp_path / "t.parquet", SCHEMA) as writer:
        writer.write(_rows(0))
        raise Boom
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_atomic_output_failure_keeps_previous_output(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "out"
    if kind == "file":
        path.write_bytes(b"previous")
    else:
        path.mkdir()
        (path / "inner.txt").write_bytes(b"previous")
    before = _snapshot(tmp_path)
    with pytest.raises(Boom), atomic_output(path) as tmp:
        assert tmp.parent != path.parent and tmp.parent.parent == path.parent
        if kind == "file":
            tmp.write_bytes(b"half-written")
        else:
            tmp.mkdir()
            (tmp / "inner.txt").write_bytes(b"half-written")
        raise Boom
    assert _snapshot(tmp_path) == before
    assert _leftovers(tmp_path, "out") == []


def test_atomic_output_success_replaces_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("old")
    with atomic_output(path) as tmp:
        tmp.write_text("new")
        assert path.read_text() == "old"  # nothing lands before the block ends
    assert path.read_text() == "new"
    assert _leftovers(tmp_path, "out.json") == []
