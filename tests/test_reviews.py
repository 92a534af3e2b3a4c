"""The reviews admit clean packs and catch one planted defect of each kind, naming it."""

from __future__ import annotations

import copy
import json

import pytest

from interlock.core.io import dumps
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.controls import control_problems
from interlock.review.coverage import coverage_problems
from interlock.review.critic import critic_problems, public_solution
from interlock.review.stage import review_pack
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.graph import build_graph, graph_rows, graphs_from_rows
from interlock.synthesis.packs import REQUEST_PATH, pack_rows
from interlock.synthesis.stage import build_pack


def test_clean_packs_pass_every_review(tasks):
    for domain, _, graph, pack in tasks:
        verdict = review_pack(graph, pack)["verdicts"][0]
        assert verdict["admitted"], (domain.id, verdict["reasons"])


def test_every_domain_compiles_alike_from_its_graph_rows_and_passes_its_controls(catalog):
    """What the packs stage compiles is the graph read back from its Parquet rows: every domain's
    task compiles to the same pack from those rows as from the graph built in memory, and the
    compiled checks pass their controls (option tables whose first column repeats included)."""
    for domain in catalog.domains:
        pool = "rft" if domain.split == "train" else "benchmark"
        blueprint = make_blueprint(domain, pool, 0, TaskSize(2, 2, 1, 1), stable_seed(3, domain.id))
        graph = build_graph(blueprint, domain)
        [read_back] = graphs_from_rows(graph_rows(graph), source="test")
        pack = build_pack(read_back, domain)
        assert pack_rows(pack) == pack_rows(build_pack(graph, domain)), domain.id
        assert control_problems(pack) == [], domain.id


def test_public_solver_reproduces_the_oracle(tasks):
    """The critic's public-only solution writes the same files as the oracle's graph-following one."""
    from interlock.synthesis.oracle import oracle_calls, replay
    for domain, _, graph, pack in tasks:
        _, oracle_final = replay(pack.files, oracle_calls(graph, domain))
        _, public_final = public_solution(pack.public_files())
        assert _records(public_final.contents) == _records(oracle_final.contents), domain.id


def _records(files: dict[str, str]) -> dict[str, list[str]]:
    """File contents up to line order (a solver may record cases in any order) and, in JSONL,
    up to the order of a record's keys."""
    return {path: sorted(dumps(json.loads(line)) if path.endswith(".jsonl") else line
                         for line in text.splitlines()) for path, text in files.items()}


def _planted(tasks, kind: str):
    """A deep copy of a task whose pack realizes at least one positive-only effect."""
    for domain, _, graph, pack in tasks:
        if any(n.subkind == kind for n in graph.of_kind("effect")):
            return domain, graph, copy.deepcopy(pack)
    pytest.skip(f"no sample task with a {kind} effect")


def _effect(graph):
    return next(n for n in graph.of_kind("effect"))


def test_coverage_catches_a_realization_dropped_from_the_contract(tasks):
    graph, pack = tasks[0][2], copy.deepcopy(tasks[0][3])
    effect = _effect(graph)
    pack.contract = [item for item in pack.contract if effect.node_id not in item["node_ids"]]
    problems = coverage_problems(graph, pack)
    assert [p["relation"] for p in problems] == ["realization"]
    assert f"effect {effect.node_id} is not in the contract" in problems[0]["problem"]


def test_coverage_catches_a_coupling_left_out_of_the_rubric(tasks):
    graph, pack = tasks[1][2], copy.deepcopy(tasks[1][3])
    hyper = graph.hyperedges[0]
    dropped = [c.criterion_id for c in pack.rubric if hyper.hyperedge_id in c.node_ids]
    pack.rubric = [c for c in pack.rubric if c.criterion_id not in dropped]
    problems = coverage_problems(graph, pack)
    assert problems and all(p["relation"] == "coupling" for p in problems)
    assert problems[0]["ref"] == hyper.hyperedge_id and hyper.kind in problems[0]["problem"]


def test_coverage_and_critic_catch_an_evidence_record_removed_from_the_workspace(tasks):
    domain, _, graph, pack = tasks[2]
    pack = copy.deepcopy(pack)
    record = next(n for n in graph.of_kind("evidence") if n.subkind == "record" and not n.distractor)
    lines = pack.files[domain.case.table].splitlines(keepends=True)
    pack.files[domain.case.table] = "".join(line for line in lines if not line.startswith(record.ref + ","))
    problems = coverage_problems(graph, pack)
    assert [p["ref"] for p in problems] == [record.node_id]
    assert record.ref in problems[0]["problem"] and domain.case.table in problems[0]["problem"]
    assert critic_problems(pack), "a decision on a record the solver cannot see is not derivable"


def test_coverage_catches_a_clause_missing_from_the_policy(tasks):
    domain, _, graph, pack = tasks[3]
    pack = copy.deepcopy(pack)
    clause = graph.clause(graph.by_id[graph.hyperedges[0].clause].ref)
    pack.files[domain.policy.file] = pack.files[domain.policy.file].replace(clause.attrs["text"], "")
    problems = coverage_problems(graph, pack)
    assert any(p["ref"] == clause.node_id and clause.ref in p["problem"] for p in problems)


def test_critic_catches_a_criterion_that_needs_a_private_value(tasks):
    """A check expecting a value that only the private evidence index holds is not derivable."""
    domain, _, graph, pack = tasks[0]
    pack = copy.deepcopy(pack)
    secret = "ACCT-PRIVATE-7731"
    pack.evidence_index.append({"node_id": "E999", "path": "(private)", "locator": "note",
                                "ref": "reserve-account", "expected": f'"{secret}"'})
    target = next(c for c in pack.rubric if c.kind == "realization")
    spec = pack.checks[target.criterion_id]
    field = next(iter(spec.get("expect") or spec.get("lines")))
    (spec.get("expect") or spec.get("lines"))[field] = secret
    problems = critic_problems(pack)
    assert [p["criterion_id"] for p in problems] == [target.criterion_id]
    assert "not derivable from public material" in problems[0]["problem"]


def test_critic_catches_a_deliverable_the_request_never_asks_for(tasks):
    domain, graph, pack = _planted(tasks, "notification")
    lines = pack.request.splitlines(keepends=True)
    dropped = next(line for line in lines if "append a record to" in line and "(the " in line
                   and any(e.file in line for e in domain.effects if e.kind == "notification"))
    pack.request = "".join(line for line in lines if line != dropped)
    pack.files[REQUEST_PATH] = pack.request
    problems = critic_problems(pack)
    notified = {c.criterion_id for c in pack.rubric if c.kind == "realization"
                and any(graph.by_id[n].subkind == "notification" for n in c.node_ids if n in graph.by_id)}
    guards = {c.criterion_id for c in pack.rubric if c.guard}  # the request file itself changed
    assert notified and {p["criterion_id"] for p in problems} - guards == notified


def test_critic_catches_a_hidden_condition(tasks):
    """A policy parameter changed in public text but not in the rubric: criteria disagree."""
    domain, _, graph, pack = next(t for t in tasks if t[0].decision.kind == "limit_approval")
    pack = copy.deepcopy(pack)
    rule = graph.clause("P-1").attrs["text"]
    limit = str(graph.clause("P-1").attrs["rule"]["limit"])
    pack.files[domain.policy.file] = pack.files[domain.policy.file].replace(
        rule, rule.replace(f"at most {limit};", "at most 0;"))
    problems = critic_problems(pack)
    positive = [d for d in graph.of_kind("decision") if not d.attrs["fallback"]]
    assert positive and problems, "approvals no public reading supports must be reported"


def test_controls_catch_a_check_that_passes_without_work(tasks):
    domain, _, graph, pack = copy.deepcopy(tasks[4])
    target = next(c for c in pack.rubric if c.kind == "primary")
    case_id = graph.by_id[target.node_ids[0]].attrs["case_id"]
    pack.checks[target.criterion_id] = {"op": "record", "path": domain.case.table, "format": "csv",
                                        "key_field": "id", "key": case_id, "expect": {}}
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(target.criterion_id, "initial")]


def test_controls_catch_a_check_that_fails_on_the_oracle(tasks):
    _, _, graph, pack = copy.deepcopy(tasks[5])
    target = next(c for c in pack.rubric if c.kind == "primary")
    pack.checks[target.criterion_id]["expect"]["outcome"] = "something-else"
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(target.criterion_id, "oracle")]
    assert "something-else" in problems[0]["evidence"]


def test_controls_catch_a_guard_blind_to_collateral_damage(tasks):
    _, _, _, pack = copy.deepcopy(tasks[6])
    guard = next(c for c in pack.rubric if c.guard)
    pack.checks[guard.criterion_id]["documents"].append(REQUEST_PATH)  # as if a decision wrote it
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(guard.criterion_id, "collateral")]


def test_verdict_lists_every_reason(tasks):
    domain, _, graph, pack = copy.deepcopy(tasks[0])
    effect = _effect(graph)
    pack.contract = [item for item in pack.contract if effect.node_id not in item["node_ids"]]
    verdict = review_pack(graph, pack)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["coverage_ok"] and verdict["critic_ok"]
    assert any(effect.node_id in reason for reason in verdict["reasons"])
