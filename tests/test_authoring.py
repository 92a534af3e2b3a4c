"""The authoring guide's hand-built task (``docs/examples/hand_built_task.py``) compiles, with its
reference solution, and is admitted; the likely mistakes in a hand-built graph fail at compile time
with one error naming the task, the node and the attribute."""

from __future__ import annotations

import dataclasses
import json
import runpy
from collections.abc import Callable
from pathlib import Path

import pytest

from interlock.core.errors import InterlockError
from interlock.review.static import review_pack
from interlock.synthesis.graph import CompletionGraph, Edge, graph_rows, graphs_from_rows
from interlock.synthesis.packs import compile_pack, pack_rows, scripted_workspace

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "hand_built_task.py"


@pytest.fixture(scope="module")
def example() -> dict:
    """The example's variables, as running it leaves them."""
    return runpy.run_path(str(EXAMPLE))


def test_the_guides_example_compiles_with_its_reference_and_is_admitted(example) -> None:
    graph, pack = example["graph"], example["pack"]
    assert pack.task_id == graph.task_id and pack.reference
    assert [s["tool"] for s in pack.reference][-1] == "submit"
    verdict = review_pack(graph, pack, example["domain"])["verdicts"][0]
    assert verdict["admitted"], verdict["reasons"]
    assert example["verdict"] == verdict


def test_a_hand_built_graph_round_trips_through_its_tables(example) -> None:
    """Stored and read back, it compiles to the same pack (its attributes come back with their keys
    sorted, so the reference's tool-call arguments may list theirs in another order)."""
    [loaded] = graphs_from_rows(graph_rows(example["graph"]), source="memory")
    pack = compile_pack(loaded, example["domain"])
    rows, expected = pack_rows(pack), pack_rows(example["pack"])
    for table in (rows, expected):
        for step in table["reference_solutions"]:
            step["arguments"] = json.loads(step["arguments"])
    assert rows == expected


def _node(graph: CompletionGraph, node_id: str, change: Callable[[dict], None] | None = None,
          **fields: object) -> CompletionGraph:
    """The graph with one node changed: its attrs by ``change``, its other fields by ``fields``."""
    nodes = []
    for node in graph.nodes:
        if node.node_id == node_id:
            attrs = {k: dict(v) if isinstance(v, dict) else v for k, v in node.attrs.items()}
            if change is not None:
                change(attrs)
            node = dataclasses.replace(node, attrs=attrs, **fields)
        nodes.append(node)
    return dataclasses.replace(graph, nodes=nodes)


def _edges(graph: CompletionGraph, keep: Callable[[Edge], bool]) -> CompletionGraph:
    return dataclasses.replace(graph, edges=[e for e in graph.edges if keep(e)])


def _without(graph: CompletionGraph, node_id: str) -> CompletionGraph:
    """The graph without one node and its edges."""
    return dataclasses.replace(graph, nodes=[n for n in graph.nodes if n.node_id != node_id],
                               edges=[e for e in graph.edges if node_id not in (e.source, e.target)])


def _hyperedge(graph: CompletionGraph, **fields: object) -> CompletionGraph:
    return dataclasses.replace(graph, hyperedges=[dataclasses.replace(graph.hyperedges[0], **fields)])


def _set(path: str, value: object) -> Callable[[dict], None]:
    """Set (or, for ``...``, delete) one attribute, ``a.b`` reaching into a nested mapping."""
    *outer, name = path.split(".")

    def change(attrs: dict) -> None:
        for key in outer:
            attrs[key] = attrs = dict(attrs[key])
        if value is ...:
            del attrs[name]
        else:
            attrs[name] = value
    return change


MISTAKES = {
    "a missing attribute": (lambda g: _node(g, "D1", _set("basis", ...)), "D1.basis", "lacks 'basis'"),
    "an ill-typed attribute": (lambda g: _node(g, "D1", _set("amount", "400")), "D1.amount", "must be int"),
    "an unknown subkind": (lambda g: _node(g, "F1", subkind="audit_log"), "F1.subkind", "unknown subkind"),
    "a decision not grounded by its case's record":
        (lambda g: _edges(g, lambda e: e.edge_id != "G4"), "D2.grounding", "RFD-102"),
    "a basis that grounds nothing":
        (lambda g: _edges(g, lambda e: e.edge_id != "G6"), "D2.basis", "'P-2' is not a clause"),
    "an outcome the decision kind does not admit":
        (lambda g: _node(g, "D1", _set("outcome", "paid")), "D1.outcome",
         "'paid' is not an outcome limit_approval admits for RFD-101 (it admits: approved (400), rejected)"),
    "an outcome the policy does not give":
        (lambda g: _node(g, "D2", _set("basis", "P-1")), "D2.basis",
         "the policy decides RFD-102 rejected by P-2"),
    "an effect writing outside the workspace's targets":
        (lambda g: _node(g, "F2", _set("realization.path", "payments/refunds.jsonl")), "F2.realization.path",
         "must have path 'payments/payroll_refunds.jsonl'"),
    "an effect writing the wrong value":
        (lambda g: _node(g, "F2", _set("realization.fields", {"case_id": "RFD-101", "payee": "Ana Silva",
                                                               "amount": "500"})),
         "F2.realization.fields", "refund payment file"),
    "an effect the decision does not need":
        (lambda g: _node(g, "F3", subkind="payment_instruction"), "F3.subkind", "not one that decision D2"),
    "an effect the decision needs left out":
        (lambda g: _without(g, "F2"), "D1.realization", "must also reach payment_instruction"),
    "a clause whose text is not its rule":
        (lambda g: _node(g, "E1", _set("text", "Refunds up to 500 are approved.")), "E1.text",
         "must be its rule as the policy states it"),
    "a clause rule in other words than the domain's":
        (lambda g: _node(g, "E1", _set("rule.amount", "amount")), "E1.rule.amount", "'refund_amount'"),
    "a row missing a column of its table":
        (lambda g: _node(g, "E3", _set("row.employee", ...)), "E3.row", "exactly the columns"),
    "a hyperedge over the wrong decisions":
        (lambda g: _hyperedge(g, members=("D2", "D1")), "H1.members",
         "in the order its clause takes them (by requested_on, then id): D1, D2"),
    "a hyperedge that is not what its clause says":
        (lambda g: _hyperedge(g, params={**g.hyperedges[0].params, "cap": 700}), "H1.params",
         "its params must be the rule of its clause P-2"),
    "a coupling clause no hyperedge states":
        (lambda g: dataclasses.replace(g, hyperedges=[]), "E2.coupling", "no hyperedge states it"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_hand_built_mistake_names_task_node_and_attribute(example, mistake) -> None:
    tamper, field, words = MISTAKES[mistake]
    graph = tamper(example["graph"])
    with pytest.raises(InterlockError) as error:
        compile_pack(graph, example["domain"])
    assert error.value.item == graph.task_id
    assert error.value.field == field, str(error.value)
    assert words in error.value.reason and field.split(".")[0] in error.value.reason


def test_a_reference_step_that_fails_is_one_error_naming_the_step(example) -> None:
    """A workspace generator that leaves out a target the oracle writes: one error, not a pack
    the reviews reject."""
    def without_payments(graph: CompletionGraph, domain) -> tuple[dict[str, str], list[dict]]:
        files, index = scripted_workspace(graph, domain)
        return {p: t for p, t in files.items() if p != "payments/payroll_refunds.jsonl"}, index

    with pytest.raises(InterlockError) as error:
        compile_pack(example["graph"], example["domain"], workspace=without_payments)
    assert error.value.item == "payroll_close.hand.0001"
    assert error.value.field.startswith("reference step ")
    assert "append_record" in str(error.value)
    assert "no such file 'payments/payroll_refunds.jsonl'" in str(error.value)


def test_a_wrong_basis_or_path_is_named_with_what_it_must_be(example) -> None:
    """The two mistakes the guide describes: each error names the task, the node's attribute, what
    it must be and what it is."""
    graph = _node(example["graph"], "D2", _set("basis", "P-1"))
    with pytest.raises(InterlockError) as error:
        compile_pack(graph, example["domain"])
    assert (error.value.item, error.value.field) == ("payroll_close.hand.0001", "D2.basis")
    assert "its basis is 'P-2', not 'P-1'" in str(error.value)
    graph = _node(example["graph"], "F2", _set("realization.path", "payments/refunds.jsonl"))
    with pytest.raises(InterlockError) as error:
        compile_pack(graph, example["domain"])
    assert (error.value.item, error.value.field) == ("payroll_close.hand.0001", "F2.realization.path")
    assert "must have path 'payments/payroll_refunds.jsonl', not 'payments/refunds.jsonl'" in str(error.value)
