"""Kinds round-trip through their text, intended solutions satisfy every coupling, and graphs
refuse broken structure when built."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from interlock.core.config import compose_params
from interlock.core.errors import InterlockError
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.graph import (
    CompletionGraph,
    Edge,
    Hyperedge,
    build_graph,
    graph_rows,
    graphs_from_rows,
)
from interlock.synthesis.oracle import oracle_calls

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_every_rule_clause_and_instruction_parses_back(catalog):
    """The critic relies on parsing exactly what the generators wrote."""
    for domain in catalog.domains:
        blueprint = make_blueprint(domain, "rft" if domain.split == "train" else "benchmark", 0,
                                   TaskSize(4, 4, 2, 2), stable_seed(1, domain.id))
        graph = build_graph(blueprint, domain)
        for clause in (n for n in graph.of_kind("evidence") if n.subkind == "clause"):
            rule = clause.attrs["rule"]
            if clause.ref == "P-1":
                kind = DECISION_KINDS[domain.decision.kind]
            else:
                kind = COUPLING_KINDS[clause.attrs["coupling"]]
            assert kind.parse(clause.attrs["text"]) == rule, (domain.id, clause.ref)
        for spec in domain.effects:
            kind = EFFECT_KINDS[spec.kind]
            words = kind.words(domain, spec)
            parsed = kind.parse(kind.render(words))
            assert parsed is not None and all(words[k] == v for k, v in parsed.items()), domain.id


def test_intended_solutions_satisfy_their_couplings_and_the_couplings_bind(catalog):
    binding = 0
    total = 0
    for domain in catalog.domains[:60]:
        for index in range(5):
            graph = build_graph(make_blueprint(domain, "rft", index, TaskSize(6, 2, 2, 1),
                                               stable_seed(2, domain.id, index)), domain)
            for hyper in graph.hyperedges:
                outcomes = [CompletionGraph.outcome(graph.by_id[m]) for m in hyper.members]
                assert COUPLING_KINDS[hyper.kind].holds(outcomes, hyper.params)
                total += 1
                binding += any(graph.by_id[m].attrs["basis"] == graph.by_id[hyper.clause].ref
                               for m in hyper.members)
    assert binding / total > 0.3, "couplings should usually change at least one decision"


def _sample_graph(catalog):
    domain = catalog.domains[0]
    return build_graph(make_blueprint(domain, "rft", 0, TaskSize(4, 2, 2, 1), 11), domain)


def _drop_edges(graph, kind, node):
    graph.edges = [e for e in graph.edges if not (e.kind == kind and node in (e.source, e.target))]


@pytest.mark.parametrize("tamper, field", [
    (lambda g: g.nodes.append(g.nodes[0]), "node_id"),
    (lambda g: g.edges.append(Edge("G99", "grounding", "E1", "missing")), "target"),
    (lambda g: g.edges.append(Edge("G99", "realization", "E1", "F1")), "kind"),
    (lambda g: _drop_edges(g, "realization", "D1"), "edges"),
    (lambda g: _drop_edges(g, "grounding", "D2"), "edges"),
    (lambda g: setattr(g, "hyperedges", [
        dataclasses.replace(g.hyperedges[0], members=g.hyperedges[0].members[:1])]), "members"),
])
def test_broken_graphs_are_refused_naming_task_and_field(catalog, tamper, field):
    graph = _sample_graph(catalog)
    tamper(graph)
    graph.__post_init__()
    with pytest.raises(InterlockError) as error:
        graph.validate("graphs")
    assert error.value.item == graph.task_id and error.value.field == field


def test_a_constraint_the_intended_solution_violates_is_refused(catalog):
    domain = next(d for d in catalog.domains if d.couplings[0] == "count_cap")
    graph = build_graph(make_blueprint(domain, "rft", 0, TaskSize(6, 2, 1, 0), 5), domain)
    hyper = graph.hyperedges[0]
    graph.hyperedges = [Hyperedge(hyper.hyperedge_id, "count_cap", hyper.clause, {**hyper.params, "k": 0},
                                  hyper.members)]
    with pytest.raises(InterlockError, match="violated by the intended solution"):
        graph.validate()


def test_graphs_round_trip_through_their_tables(tasks):
    for _, _, graph, _ in tasks:
        rows = graph_rows(graph)
        (loaded,) = graphs_from_rows(rows, "memory")
        assert loaded == graph


def _mean_oracle_calls(catalog, scale: str) -> float:
    size = TaskSize(**compose_params(CONF, [f"scale={scale}"])["scale"]["task_size"])
    return statistics.mean(
        len(oracle_calls(build_graph(make_blueprint(d, "rft", 0, size, stable_seed(3, d.id)), d), d))
        for d in catalog.split("train"))


def test_paper_tasks_take_at_least_25_tool_calls_and_default_tasks_stay_small(catalog):
    assert _mean_oracle_calls(catalog, "paper") >= 25
    assert _mean_oracle_calls(catalog, "default") <= 11
