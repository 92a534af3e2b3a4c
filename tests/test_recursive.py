"""Recursive synthesis: every operator rewrites a real verified task into a child that validates and
asks more of an agent (or only distracts), its transformation contract is exact (conformance names
every change planted behind its back, down to the row of a table, and every declared change that did
not happen), contracts and children round-trip as data, rewrites are deterministic per seed, and an
operator that cannot apply says why. The rounds grow a pool deterministically, refuse duplicates and
near duplicates of other pools' tasks, and draw parents by novelty; the grow stage writes aligned
tables whose children re-validate from their rows and join the rft tasks to roll out."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from interlock.core import schemas
from interlock.core.config import Params, SynthesisConfig, load_params, write_params
from interlock.core.errors import InterlockError
from interlock.core.io import dumps, iter_row_groups, loads, read_rows, write_table
from interlock.core.paths import Paths
from interlock.core.registry import EFFECT_KINDS, OPERATORS
from interlock.core.types import INDIST_POOL, TaskSize
from interlock.recursive import rounds
from interlock.recursive.contract import (
    DECLARED_FACETS,
    FACETS,
    Delta,
    TransformationContract,
    conformance_problems,
    criterion_key,
    element_keys,
    file_facts,
    task_diff,
)
from interlock.recursive.declaration import derive
from interlock.recursive.operators import NotApplicable, Rewrite
from interlock.recursive.similarity import similarity, tail_share
from interlock.recursive.stage import PLOT_COLUMNS, run_grow, seed_pool
from interlock.recursive.validation import Task, compile_task, validate
from interlock.review.controls import reference_calls, run_reference, submitted
from interlock.review.static import review_pack
from interlock.synthesis.blueprints import Blueprint, generate_blueprints, make_blueprint, sample_subject
from interlock.synthesis.catalog import Catalog, Domain, load_catalog
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import CompletionGraph, graph_rows
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import REQUEST_PATH, Criterion, TaskPack, pack_rows
from interlock.synthesis.stage import run_blueprints, run_domains, run_graphs, run_packs
from interlock.synthesis.tasks import (
    admitted_ids,
    admitted_tasks,
    iter_blueprints,
    iter_graphs,
    iter_packs,
    load_domains,
    rollout_ids,
)
from interlock.synthesis.workspace import parse_csv

from helpers.config import defaults
from helpers.repo import REPO

#: the rounds' refusal of a near duplicate: every pool but rft, the evaluation pools among them
NEAR_DUPLICATE = ("duplicate: the child is a near duplicate (the same up to words) of a demo, dev, indist "
                  "or benchmark task")

#: the parents: 10 decisions in 2 groups (add_coupling needs a group of 4+), one effect of each
#: domain's several (add_effect needs one more to add)
SIZE = TaskSize(10, 1, 2, 2)
SEED = 5
#: how many parents (of distinct domains) each operator is tried on
PER_OPERATOR = 3
DISTRACTORS = sorted(name for name, op in OPERATORS.items() if not op.adds_requirement)


@dataclass(frozen=True)
class Pool:
    blueprints: list[Blueprint]
    domains: dict[str, Domain]
    tasks: dict[str, Task]

    def partner(self, blueprint: Blueprint) -> Blueprint:
        return next(b for b in self.blueprints if b.domain_id == blueprint.domain_id and b is not blueprint)

    def parents(self, name: str, blueprint: Blueprint) -> list[Blueprint]:
        return [blueprint] if OPERATORS[name].arity == 1 else [blueprint, self.partner(blueprint)]


@dataclass(frozen=True)
class Applied:
    """One operator applied to one parent (and its partner, for join)."""

    name: str
    parents: list[Blueprint]
    parent: Task
    domain: Domain
    rewrite: Rewrite

    def again(self, seed: int, task_id: str = "child") -> Rewrite:
        return OPERATORS[self.name].rewrite(self.parents, self.domain, task_id, seed)


@pytest.fixture(scope="module")
def pool(catalog) -> Pool:
    blueprints = list(generate_blueprints(
        catalog, seed=1, train_domains=16, heldout_domains=0,
        tasks_per_domain={"demo": 0, "rft": 2, "dev": 0, "benchmark": 0}, size=SIZE))
    domains = {d.id: d for d in catalog.domains}
    return Pool(blueprints, domains, {b.task_id: compile_task(b, domains[b.domain_id]) for b in blueprints})


@pytest.fixture(scope="module")
def applied(pool):
    """name -> the operator applied to the first PER_OPERATOR parents (of distinct domains) it
    applies to, computed once per operator."""
    cache: dict[str, list[Applied]] = {}

    def get(name: str) -> list[Applied]:
        if name not in cache:
            found, seen = [], set()
            for blueprint in pool.blueprints:
                if blueprint.domain_id in seen or len(found) == PER_OPERATOR:
                    continue
                parents, domain = pool.parents(name, blueprint), pool.domains[blueprint.domain_id]
                try:
                    rewrite = OPERATORS[name].rewrite(parents, domain, f"{blueprint.task_id}.{name}", SEED)
                except NotApplicable:
                    continue
                seen.add(blueprint.domain_id)
                found.append(Applied(name, parents, pool.tasks[blueprint.task_id], domain, rewrite))
            assert found, f"{name} applies to no parent of the pool"
            cache[name] = found
        return cache[name]
    return get


# ----------------------------------------------------------------------------- helpers

def keyed_results(parent: TaskPack, child: Task) -> dict[str, tuple[Criterion, bool, str]]:
    """The parent's reference solution replayed on the child's initial workspace: each child
    criterion (by stable key) with whether it passes."""
    steps, final = replay(child.pack.files, reference_calls(parent))
    view, keys = View(final, submitted=submitted(steps)), element_keys(child.graph)
    results = {}
    for criterion in child.pack.rubric:
        key = criterion_key(criterion.kind, [keys.get(i, i) for i in criterion.node_ids])
        assert key not in results, f"two criteria share the key {key}"
        passed, evidence = run_check(child.pack.checks[criterion.criterion_id], view)
        results[key] = (criterion, passed, evidence)
    return results


def declared_cases(contract: TransformationContract) -> set[str]:
    """Every case id (or option id) some declared node key names."""
    nodes = contract.changes["nodes"]
    return {key.split("/", 1)[0].rsplit(":", 1)[-1] for key in [*nodes.added, *nodes.removed, *nodes.changed]}


def untouched_case(contract: TransformationContract, child: Blueprint) -> str:
    """A pending case of the child that the contract says nothing about."""
    named = declared_cases(contract)
    return next(r["id"] for r in child.cases if r["id"] not in named)


def other_subject(row: dict, domain: Domain) -> str:
    rng = random.Random(row["id"])
    subject = row[domain.case.subject]
    while subject == row[domain.case.subject]:
        subject = sample_subject(rng, domain)
    return subject


def edit_case(blueprint: Blueprint, case_id: str, **fields) -> Blueprint:
    return replace(blueprint, cases=[{**r, **fields} if r["id"] == case_id else r for r in blueprint.cases])


def problems_of(parent: Task, child_pack: TaskPack, child: Task,
                contract: TransformationContract) -> list[str]:
    return conformance_problems(contract, task_diff((parent.graph, parent.pack), (child.graph, child_pack)))


def criterion_of(child: Task, key: str) -> Criterion:
    keys = element_keys(child.graph)
    return next(c for c in child.pack.rubric
                if criterion_key(c.kind, [keys.get(i, i) for i in c.node_ids]) == key)


def without(contract: TransformationContract, facet: str, part: str, key: str) -> TransformationContract:
    delta = contract.changes[facet]
    kept = {p: [k for k in getattr(delta, p) if not (p == part and k == key)]
            for p in ("added", "removed", "changed")}
    return replace(contract, changes={**contract.changes, facet: Delta.of(**kept)})


def with_extra(contract: TransformationContract, facet: str, part: str, key: str) -> TransformationContract:
    delta = contract.changes[facet]
    parts = {p: list(getattr(delta, p)) for p in ("added", "removed", "changed")}
    parts[part].append(key)
    return replace(contract, changes={**contract.changes, facet: Delta.of(**parts)})


# ----------------------------------------------------------------------------- 1. every operator

@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_child_validates_and_parent_solution_meets_the_contract(name, applied):
    """The child validates; replayed directly, the parent's reference solution passes every
    criterion the completed contract leaves unchanged and, where the operator adds a requirement,
    fails a mandatory criterion the contract adds or changes."""
    op = OPERATORS[name]
    for case in applied(name):
        checked = validate(case.parent, case.rewrite, case.domain)
        assert checked.validated, (case.parent.blueprint.task_id, name, "\n".join(checked.reasons))

        child = compile_task(case.rewrite.child, case.domain)
        contract = case.rewrite.contract.complete(case.parent.graph)
        assert contract == checked.contract
        reference = run_reference(child.pack)
        assert all(passed for passed, _ in reference.results.values()), reference.results

        criteria = contract.changes["criteria"]
        claimed = {*criteria.added, *criteria.changed}
        results = keyed_results(case.parent.pack, child)
        assert set(criteria.added) <= results.keys(), "a criterion the contract adds is missing"
        failed_unchanged = {key: evidence for key, (_, passed, evidence) in results.items()
                            if key not in claimed and not passed}
        assert not failed_unchanged, (case.parent.blueprint.task_id, name, failed_unchanged)
        asked_more = [key for key, (criterion, passed, _) in results.items()
                      if key in claimed and criterion.mandatory and not passed]
        if op.adds_requirement:
            assert asked_more, (case.parent.blueprint.task_id, name, "the parent's solution passes all of",
                                sorted(claimed))
            assert contract.adds_requirement
        else:
            assert not contract.adds_requirement


@pytest.mark.parametrize("name", DISTRACTORS)
def test_a_distractor_asks_nothing_new_of_the_parent_solution(name, applied):
    """A distractor only adds something to ignore: nothing is added to the rubric or the
    deliverables, and the parent's solution passes every mandatory criterion of the child."""
    for case in applied(name):
        contract = case.rewrite.contract.complete(case.parent.graph)
        assert not contract.changes["criteria"].added and not contract.changes["deliverables"].added
        results = keyed_results(case.parent.pack, compile_task(case.rewrite.child, case.domain))
        failed = {key: evidence for key, (criterion, passed, evidence) in results.items()
                  if criterion.mandatory and not passed}
        assert not failed, (case.parent.blueprint.task_id, name, failed)


def test_a_task_differs_from_itself_in_nothing(pool):
    task = pool.tasks[pool.blueprints[0].task_id]
    diff = task_diff((task.graph, task.pack), (task.graph, task.pack))
    assert not any(diff.values()), diff
    empty = TransformationContract("none", (task.pack.task_id,), task.pack.task_id, "", False,
                                   {facet: Delta() for facet in DECLARED_FACETS})
    completed = empty.complete(task.graph)
    assert not any(completed.changes.values()) and set(completed.changes) == set(FACETS)
    assert conformance_problems(completed, diff) == []


def test_shift_rule_flips_something_the_deliverables_record(pool):
    """Where every shift of the rule only moves amounts that no requested deliverable carries
    (capped or rate payment with one effect), shift_rule says NotApplicable rather than emit a child
    that asks nothing new; where a shift flips something recorded, the child validates."""
    seen = {"validated": 0, "not applicable": 0}
    for blueprint in pool.blueprints:
        domain = pool.domains[blueprint.domain_id]
        if domain.decision.kind not in {"capped_payment", "rate_payment"}:
            continue
        try:
            rewrite = OPERATORS["shift_rule"].rewrite([blueprint], domain, "child", SEED)
        except NotApplicable as exc:
            assert str(exc) == f"no shift of the {domain.decision.kind} rule flips a decision"
            seen["not applicable"] += 1
            continue
        checked = validate(pool.tasks[blueprint.task_id], rewrite, domain)
        assert checked.validated, (blueprint.task_id, checked.reasons)
        seen["validated"] += 1
    assert all(seen.values()), seen  # the pool has payment parents of both kinds


# ----------------------------------------------------------------------------- 2. planted changes

@pytest.mark.parametrize("name", ["add_case", "add_closed_record", "shift_rule", "tighten_coupling", "join"])
def test_an_undeclared_edit_of_the_child_blueprint_fails_conformance(name, applied):
    """Change the subject of a case the contract does not touch, after the operator ran."""
    case = applied(name)[0]
    child = case.rewrite.child
    case_id = untouched_case(case.rewrite.contract, child)
    row = next(r for r in child.cases if r["id"] == case_id)
    planted = edit_case(child, case_id, **{case.domain.case.subject: other_subject(row, case.domain)})
    checked = validate(case.parent, Rewrite(planted, case.rewrite.contract), case.domain)
    conformance = [r for r in checked.reasons if r.startswith("conformance:")]
    assert any(f"record:{case_id}/row.{case.domain.case.subject}" in r for r in conformance), checked.reasons
    assert validate(case.parent, case.rewrite, case.domain).validated


def test_an_undeclared_amount_change_fails_conformance(applied):
    """Change the amount column of an untouched case (it may decide differently too)."""
    case = next(c for name in ("add_closed_record", "add_idle_clause") for c in applied(name)
                if c.domain.case.amount)
    child, column = case.rewrite.child, case.domain.case.amount
    case_id = untouched_case(case.rewrite.contract, child)
    row = next(r for r in child.cases if r["id"] == case_id)
    planted = edit_case(child, case_id, **{column: type(row[column])(int(row[column]) + 1)})
    checked = validate(case.parent, Rewrite(planted, case.rewrite.contract), case.domain)
    assert any(r.startswith("conformance: nodes:") and f"record:{case_id}/row.{column}" in r
               for r in checked.reasons), checked.reasons


@pytest.fixture(scope="module")
def base(applied):
    """add_case applied: the parent, the compiled child, its completed contract and an untouched
    case, with the child conforming as compiled."""
    case = applied("add_case")[0]
    child = compile_task(case.rewrite.child, case.domain)
    contract = case.rewrite.contract.complete(case.parent.graph)
    assert problems_of(case.parent, child.pack, child, contract) == []
    return case, child, contract, untouched_case(contract, case.rewrite.child)


def test_a_planted_extra_criterion_fails_conformance(base):
    case, child, contract, case_id = base
    decision = next(n for n in child.graph.of_kind("decision") if n.attrs["case_id"] == case_id)
    extra = Criterion("C999", "format", (decision.node_id,), True, 1.0, "planted")
    pack = replace(child.pack, rubric=[*child.pack.rubric, extra],
                   checks={**child.pack.checks, "C999": {"op": "no_collateral"}})
    assert problems_of(case.parent, pack, child, contract) == [
        f"criteria: format@decision:{case_id} added, but the contract does not declare it"]


@pytest.mark.parametrize("edit", ["check", "mandatory", "weight", "description"])
def test_a_changed_criterion_fails_conformance(base, edit):
    case, child, contract, case_id = base
    key = f"primary@decision:{case_id}"
    criterion = criterion_of(child, key)
    checks, rubric = dict(child.pack.checks), list(child.pack.rubric)
    if edit == "check":
        spec = dict(checks[criterion.criterion_id])
        spec["expect"] = {"outcome": "something else"}
        checks[criterion.criterion_id] = spec
    else:
        value = {"mandatory": not criterion.mandatory, "weight": criterion.weight + 1,
                 "description": criterion.description + " (planted)"}[edit]
        rubric = [replace(c, **{edit: value}) if c is criterion else c for c in rubric]
    pack = replace(child.pack, rubric=rubric, checks=checks)
    assert problems_of(case.parent, pack, child, contract) == [
        f"criteria: {key} changed, but the contract does not say it may"]


def test_a_removed_criterion_fails_conformance(base):
    case, child, contract, case_id = base
    criterion = next(c for c in child.pack.rubric if c.kind == "realization"
                     and criterion_of(child, f"primary@decision:{case_id}").node_ids[0] == c.node_ids[0])
    key = criterion_key("realization", [element_keys(child.graph)[i] for i in criterion.node_ids])
    pack = replace(child.pack, rubric=[c for c in child.pack.rubric if c is not criterion])
    assert problems_of(case.parent, pack, child, contract) == [
        f"criteria: {key} removed, but the contract does not declare it"]


def test_a_planted_duplicate_criterion_fails_conformance(base):
    """A criterion repeated under another id is a fact of its own (``key#2``), not its twin."""
    case, child, contract, case_id = base
    twin = criterion_of(child, f"primary@decision:{case_id}")
    copy = replace(twin, criterion_id="C999")
    pack = replace(child.pack, rubric=[*child.pack.rubric, copy],
                   checks={**child.pack.checks, "C999": child.pack.checks[twin.criterion_id]})
    assert problems_of(case.parent, pack, child, contract) == [
        f"criteria: primary@decision:{case_id}#2 added, but the contract does not declare it"]


def test_a_planted_duplicate_deliverable_fails_conformance(base):
    case, child, contract, case_id = base
    keys = element_keys(child.graph)
    entry = next(d for d in child.pack.contract if keys.get(d["node_ids"][-1]) == f"decision:{case_id}")
    pack = replace(child.pack, contract=[*child.pack.contract, dict(entry)])
    assert problems_of(case.parent, pack, child, contract) == [
        f"deliverables: decision:{case_id}#2 added, but the contract does not declare it"]


def _register_step(pack: TaskPack, case_id: str) -> int:
    return next(i for i, s in enumerate(pack.reference) if s["tool"] == "append_record"
                and loads(s["arguments"], file="t", item="t", field="t")["record"].get("case_id") == case_id)


def test_a_changed_reference_step_fails_conformance(base):
    """The register write of an untouched decision records another outcome."""
    case, child, contract, case_id = base
    index = _register_step(child.pack, case_id)
    step = child.pack.reference[index]
    arguments = loads(step["arguments"], file="t", item="t", field="t")
    arguments["record"]["outcome"] = "something else"
    reference = [*child.pack.reference]
    reference[index] = {**step, "arguments": dumps(arguments)}
    problems = problems_of(case.parent, replace(child.pack, reference=reference), child, contract)
    assert f"reference: decision:{case_id} removed, but the contract does not declare it" in problems
    assert any(p.startswith("reference: step:") and "something else" in p and "added" in p for p in problems)
    assert len(problems) == 2, problems


def test_an_extra_or_missing_reference_step_fails_conformance(base):
    case, child, contract, _ = base
    reference = child.pack.reference
    extra = {**reference[1], "step": len(reference), "arguments": dumps({"path": "notes.md"})}
    added = replace(child.pack, reference=[*reference, extra])
    assert problems_of(case.parent, added, child, contract) == [
        "reference: read_file:notes.md added, but the contract does not declare it"]
    again = {**reference[1], "step": len(reference)}  # reading the same file twice
    twice = replace(child.pack, reference=[*reference, again])
    path = loads(reference[1]["arguments"], file="t", item="t", field="t")["path"]
    assert problems_of(case.parent, twice, child, contract) == [
        f"reference: read_file:{path}#2 added, but the contract does not declare it"]
    dropped = replace(child.pack, reference=[s for s in reference if s["tool"] != "submit"])
    assert problems_of(case.parent, dropped, child, contract) == [
        "reference: submit removed, but the contract does not declare it"]


@pytest.mark.xfail(strict=True, reason="known limitation (by design): the reference facet is the multiset "
                   "of steps keyed by their call, not their order, so a reordered reference (submit first) "
                   "still conforms")
def test_a_reordered_reference_fails_conformance(base):
    case, child, contract, _ = base
    reference = sorted(child.pack.reference, key=lambda s: s["tool"] != "submit")
    reordered = replace(child.pack, reference=[{**s, "step": i} for i, s in enumerate(reference)])
    assert reordered.reference[0]["tool"] == "submit"
    assert problems_of(case.parent, reordered, child, contract) != []


def test_an_unexplained_workspace_file_change_fails_conformance(base):
    """A whole file (the policy, which add_case leaves alone) changed, created or removed."""
    case, child, contract, _ = base
    path = case.domain.policy.file
    assert file_facts(path, child.pack.files[path]).keys() == {path}
    assert not any(key.startswith(path) for key in contract.changes["files"].changed)
    files = {**child.pack.files, path: child.pack.files[path] + "\nplanted\n"}
    assert problems_of(case.parent, replace(child.pack, files=files), child, contract) == [
        f"files: {path}/sha changed, but the contract does not declare it"]
    created = {**child.pack.files, "notes.md": "planted\n"}
    assert problems_of(case.parent, replace(child.pack, files=created), child, contract) == [
        "files: notes.md/sha changed, but the contract does not declare it"]
    removed = {p: t for p, t in child.pack.files.items() if p != path}
    assert problems_of(case.parent, replace(child.pack, files=removed), child, contract) == [
        f"files: {path} removed, but the contract does not declare it"]


def _table_text(header: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_an_unexplained_edit_inside_a_declared_file_fails_conformance(base):
    """add_case declares one row of the case table (the new case's): an edit of another row of the
    same table is pinned to that row, and so is a row planted or dropped beside it."""
    case, child, contract, case_id = base
    table = case.domain.case.table
    new_case = next(r["id"] for r in case.rewrite.child.cases
                    if r["id"] not in {c["id"] for c in case.parent.blueprint.cases})
    assert contract.changes["files"] == Delta.of(changed=[f"{table}#{new_case}/sha"])
    header, rows = parse_csv(child.pack.files[table])
    subject = case.domain.case.subject

    def problems(edited: list[dict]) -> list[str]:
        files = {**child.pack.files, table: _table_text(header, edited)}
        return problems_of(case.parent, replace(child.pack, files=files), child, contract)

    assert problems(rows) == []  # the table written back as it was
    row = next(r for r in rows if r["id"] == case_id)
    edited = [{**r, subject: other_subject(row, case.domain)} if r is row else r for r in rows]
    assert problems(edited) == [f"files: {table}#{case_id}/sha changed, but the contract does not declare it"]
    planted = {**row, "id": f"{row['id']}7"}
    assert problems([*rows, planted]) == [
        f"files: {table}#{planted['id']}/sha changed, but the contract does not declare it"]
    assert problems([r for r in rows if r is not row]) == [
        f"files: {table}#{case_id} removed, but the contract does not declare it"]


def test_a_table_that_loses_its_shape_is_one_changed_file(base):
    """A case table that no longer parses (a stray line) is one whole-file fact: every row the
    parent's table had is gone, the file changed, and the declared new row did not happen."""
    case, child, contract, _ = base
    table = case.domain.case.table
    broken = {**child.pack.files, table: child.pack.files[table] + "planted\n"}
    assert file_facts(table, broken[table]).keys() == {table}
    before = file_facts(table, case.parent.pack.files[table])
    (declared,) = contract.changes["files"].changed
    assert problems_of(case.parent, replace(child.pack, files=broken), child, contract) == [
        *(f"files: {key} removed, but the contract does not declare it" for key in sorted(before)),
        f"files: {table}/sha changed, but the contract does not declare it",
        f"files: the contract declares {declared} changed, but it is not"]


def test_file_facts_split_a_table_of_records_by_row():
    """A table with an id column and rows is a fact per row and one for its header; anything else
    (a header-only table, no id column, repeated ids, a malformed row, markdown, jsonl) is one."""
    table = "id,name\nA-1,x\nA-2,y\n"
    facts = file_facts("t/a.csv", table)
    assert facts.keys() == {"t/a.csv#header", "t/a.csv#A-1", "t/a.csv#A-2"}
    edited = file_facts("t/a.csv", "id,name\nA-1,x\nA-2,z\n")
    assert {key for key in facts if facts[key] != edited[key]} == {"t/a.csv#A-2"}
    renamed = file_facts("t/a.csv", "id,label\nA-1,x\nA-2,y\n")
    assert all(facts[key] != renamed[key] for key in facts)  # each row carries its column names
    for path, text in [("t/a.csv", "id,name\n"), ("t/a.csv", "key,name\nA-1,x\n"),
                       ("t/a.csv", "id,name\nA-1,x\nA-1,y\n"), ("t/a.csv", "id,name\nA-1,x\nA-2\n"),
                       ("policies/p.md", table), ("outbox/n.jsonl", '{"id": "A-1"}\n')]:
        assert file_facts(path, text).keys() == {path}, (path, text)
    assert file_facts("t/a.csv", "id,name\n")["t/a.csv"] != file_facts("t/a.csv", "id,label\n")["t/a.csv"]


def test_changed_keys_split_on_the_last_slash():
    delta = Delta.of(changed=["data/t.csv#A-1/sha", "decision:C-1/outcome", "decision:C-1/basis",
                              "REQUEST.md/sha"])
    assert delta.changed_keys() == {"data/t.csv#A-1", "decision:C-1", "REQUEST.md"}
    assert delta.changed_fields("data/t.csv#A-1") == {"sha"}
    assert delta.changed_fields("decision:C-1") == {"outcome", "basis"}
    assert delta.changed_fields("data") == set()


def test_a_declared_change_that_did_not_happen_fails_conformance(base):
    case, _, _, case_id = base
    subject = case.domain.case.subject
    claimed = with_extra(case.rewrite.contract, "nodes", "changed", f"record:{case_id}/row.{subject}")
    checked = validate(case.parent, Rewrite(case.rewrite.child, claimed), case.domain)
    assert checked.reasons == (f"conformance: nodes: the contract declares record:{case_id}/row.{subject} "
                               "changed, but it is not",)
    file = with_extra(case.rewrite.contract, "files", "changed", "notes.md/sha")
    checked = validate(case.parent, Rewrite(case.rewrite.child, file), case.domain)
    assert checked.reasons == (
        "conformance: files: the contract declares notes.md/sha changed, but it is not",)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_each_declared_key_is_needed(name, applied):
    """Remove any one declared key from the contract: conformance reports the change it covered."""
    case = applied(name)[0]
    contract = case.rewrite.contract
    for facet in ("nodes", "edges", "hyperedges", "files", "request"):
        for part in ("added", "removed", "changed"):
            for key in getattr(contract.changes[facet], part):
                less = Rewrite(case.rewrite.child, without(contract, facet, part, key))
                checked = validate(case.parent, less, case.domain)
                conformance = [r for r in checked.reasons if r.startswith("conformance:")]
                label = key.rsplit("/", 1)[0] if facet in {"nodes", "hyperedges", "files"} else key
                assert any(label in r for r in conformance), (name, facet, part, key, checked.reasons)


# ----------------------------------------------------------------------------- 3. data and determinism

@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_contracts_round_trip_through_json(name, applied):
    case = applied(name)[0]
    for contract in (case.rewrite.contract, case.rewrite.contract.complete(case.parent.graph)):
        text = contract.to_json()
        back = TransformationContract.from_json(text)
        assert back == contract
        assert back.to_json() == text
        assert json.loads(text)["operator"] == name


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_same_seed_gives_the_same_child_and_contract(name, applied):
    case = applied(name)[0]
    first, second = case.again(11), case.again(11)
    assert first.child == second.child
    assert first.child.to_row() == second.child.to_row()
    assert first.contract == second.contract and first.contract.to_json() == second.contract.to_json()
    again = case.again(SEED, case.rewrite.child.task_id)
    assert again == case.rewrite


@pytest.mark.parametrize("name", ["add_case", "add_closed_record", "add_coupling", "join"])
def test_another_seed_may_give_another_child(name, applied):
    case = applied(name)[0]
    children = set()
    for seed in range(6):
        try:
            children.add(case.again(seed).child.fingerprint)
        except NotApplicable:
            continue
    assert len(children) > 1, name


def test_add_effect_draws_nothing(applied):
    """add_effect has nothing to draw: every seed gives the same child content."""
    case = applied("add_effect")[0]
    assert len({case.again(seed).child.fingerprint for seed in range(4)}) == 1


# ----------------------------------------------------------------------------- 4. not applicable

def test_add_effect_on_a_task_that_asks_for_every_effect(pool):
    blueprint = pool.blueprints[0]
    domain = pool.domains[blueprint.domain_id]
    full = derive(blueprint, domain, "full", 1, effects_per_decision=len(domain.effects))
    reason = f"already asks for all {len(domain.effects)} effects of {domain.id}"
    with pytest.raises(NotApplicable, match=reason):
        OPERATORS["add_effect"].rewrite([full], domain, "child", SEED)


def test_add_coupling_without_a_group_of_four(pool):
    domain = pool.domains[pool.blueprints[0].domain_id]
    small = make_blueprint(domain, "rft", 7, TaskSize(6, 1, 2, 1), 3)
    assert max(len(g["members"]) for g in small.groups) < 4
    with pytest.raises(NotApplicable, match="no group of four or more cases"):
        OPERATORS["add_coupling"].rewrite([small], domain, "child", SEED)


def test_a_task_cannot_be_joined_with_itself(pool):
    blueprint = pool.blueprints[0]
    with pytest.raises(NotApplicable, match="cannot be joined with itself"):
        OPERATORS["join"].rewrite([blueprint, blueprint], pool.domains[blueprint.domain_id], "child", SEED)


def test_wrong_arity_or_domain_is_not_applicable(pool):
    blueprint = pool.blueprints[0]
    domain = pool.domains[blueprint.domain_id]
    with pytest.raises(NotApplicable, match=r"join takes 2 parent\(s\) of domain"):
        OPERATORS["join"].rewrite([blueprint], domain, "child", SEED)
    with pytest.raises(NotApplicable, match=r"add_case takes 1 parent\(s\) of domain"):
        OPERATORS["add_case"].rewrite([blueprint, pool.partner(blueprint)], domain, "child", SEED)
    stranger = next(b for b in pool.blueprints if b.domain_id != domain.id)
    with pytest.raises(NotApplicable, match=f"of domain {domain.id}"):
        OPERATORS["add_case"].rewrite([stranger], domain, "child", SEED)


# ----------------------------------------------------------------------------- 5. evidence

@pytest.mark.parametrize("name", ["add_case", "add_closed_record"])
def test_the_contract_names_where_new_evidence_lives(name, applied):
    for case in applied(name):
        child = compile_task(case.rewrite.child, case.domain)
        parent = case.parent.blueprint
        parent_rows = {r["id"] for r in [*parent.cases, *parent.distractor_rows]}
        rows = case.rewrite.child.cases if name == "add_case" else case.rewrite.child.distractor_rows
        (new,) = [r for r in rows if r["id"] not in parent_rows]
        assert new["status"] == ("pending" if name == "add_case" else "closed")
        data = json.loads(case.rewrite.contract.to_json())
        evidence = {e["key"]: e for e in data["evidence"]}
        entry = evidence[f"record:{new['id']}"]
        assert (entry["path"], entry["ref"], entry["change"]) == (case.domain.case.table, new["id"], "added")
        assert new["id"] in child.pack.files[entry["path"]]
        assert new["id"] not in case.parent.pack.files[entry["path"]]
        options = [o for o in case.rewrite.child.options if o["case_id"] == new["id"]]
        assert name == "add_case" or not options
        for option in options:
            entry = evidence[f"option:{option['id']}"]
            assert (entry["path"], entry["ref"]) == (case.domain.decision.options.table, option["id"])
            assert option["id"] in child.pack.files[entry["path"]]
        assert len(evidence) == 1 + len(options)
        # each new row, and nothing else, is a changed file fact (a row of its table)
        rows = [(case.domain.case.table, new["id"])]
        rows += [(case.domain.decision.options.table, o["id"]) for o in options]
        assert data["changes"]["files"] == {"added": [], "removed": [],
                                            "changed": sorted(f"{path}#{ref}/sha" for path, ref in rows)}
        for path, ref in rows:
            assert f"{path}#{ref}" in file_facts(path, child.pack.files[path])
            assert f"{path}#{ref}" not in file_facts(path, case.parent.pack.files[path])


def test_add_case_declares_its_options_in_an_option_domain(pool):
    """The new case of an option domain comes with options, each named as evidence."""
    blueprint = next(b for b in pool.blueprints if pool.domains[b.domain_id].decision.options)
    domain = pool.domains[blueprint.domain_id]
    rewrite = OPERATORS["add_case"].rewrite([blueprint], domain, "child", SEED)
    options = [e for e in rewrite.contract.evidence if e["key"].startswith("option:")]
    assert len(options) == 3 and all(e["path"] == domain.decision.options.table for e in options)
    assert validate(pool.tasks[blueprint.task_id], rewrite, domain).validated


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_evidence_entry_names_a_ref_in_its_file(name, applied):
    """Each evidence entry names its file and ref, and the contract declares the file fact it
    changes: the row of a table (``path#ref``), or the whole file (the policy)."""
    for case in applied(name):
        child = compile_task(case.rewrite.child, case.domain)
        changed = set(case.rewrite.contract.changes["files"].changed)
        for entry in case.rewrite.contract.evidence:
            path, ref = entry["path"], entry["ref"]
            assert ref, entry
            assert ref in child.pack.files[path], entry
            facts = file_facts(path, child.pack.files[path])
            key = f"{path}#{ref}" if f"{path}#{ref}" in facts else path
            assert key in facts and f"{key}/sha" in changed, (entry, sorted(changed))
            assert (key == path) == (path == case.domain.policy.file), entry


def test_shift_rule_names_the_rule_clause(applied):
    for case in applied("shift_rule"):
        (entry,) = [e for e in case.rewrite.contract.evidence if e["key"] == "clause:rule"]
        assert (entry["path"], entry["ref"], entry["change"]) == (case.domain.policy.file, "P-1", "changed")
        assert "text" in entry["fields"]


def test_add_effect_declares_the_request_line_and_the_file_it_creates(applied):
    """add_effect's new deliverable file is created header-only: one whole-file fact, declared
    changed (created counts as changed) beside the request."""
    for case in applied("add_effect"):
        child = compile_task(case.rewrite.child, case.domain)
        spec = case.domain.effects[case.parent.blueprint.size.effects_per_decision]
        created = sorted(set(child.pack.files) - set(case.parent.pack.files))
        files = case.rewrite.contract.changes["files"]
        assert files == Delta.of(changed=[f"{REQUEST_PATH}/sha", *(f"{path}/sha" for path in created)])
        kind = EFFECT_KINDS[spec.kind]
        written = kind.header(kind.words(case.domain, spec)) is not None
        assert created == ([spec.file] if written else []), (created, spec)
        for path in created:
            assert file_facts(path, child.pack.files[path]).keys() == {path}
        assert len(case.rewrite.contract.changes["request"].added) == 1


# ----------------------------------------------------------------------------- 6. children are blueprints

@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_a_child_round_trips_as_a_blueprint_row(name, applied):
    for case in applied(name):
        child = case.rewrite.child
        row = json.loads(json.dumps(child.to_row()))
        back = Blueprint.from_row(row, "children")
        assert back == child and back.fingerprint == child.fingerprint and back.skeleton == child.skeleton
        assert (child.task_id, child.seed, child.pool, child.domain_id) == (
            f"{case.parent.blueprint.task_id}.{name}", SEED, case.parent.blueprint.pool, case.domain.id)
        assert child.size == TaskSize(len(child.cases), child.size.effects_per_decision, len(child.groups),
                                      len(child.distractor_rows) + len(child.distractor_clauses))
        members = {m for g in child.groups for m in g["members"]}
        assert members == {r["id"] for r in child.cases}
        assert dataclasses.asdict(child) == dataclasses.asdict(back)


#: decision kinds whose rule parameters are words only (a shift of them keeps the skeleton)
WORD_RULES = {"team_routing", "eligibility_approval"}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_a_child_has_another_fingerprint_than_its_parents(name, applied):
    for case in applied(name):
        assert case.rewrite.child.fingerprint not in {p.fingerprint for p in case.parents}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_a_child_has_another_skeleton_than_its_parents(name, applied):
    cases = [c for c in applied(name) if name != "shift_rule" or c.domain.decision.kind not in WORD_RULES]
    assert cases
    for case in cases:
        assert case.rewrite.child.skeleton not in {p.skeleton for p in case.parents}, case.domain.id


def test_add_effect_child_differs_from_its_parent_only_in_effects(applied):
    case = applied("add_effect")[0]
    child, parent = case.rewrite.child, case.parents[0]
    assert child.size.effects_per_decision == parent.size.effects_per_decision + 1
    assert replace(child, task_id=parent.task_id, seed=parent.seed, size=parent.size) == parent


def test_a_word_only_rule_shift_keeps_the_skeleton_and_joins_the_rft_pool(pool, catalog):
    """A rule shift that changes only words (a team_routing route) keeps the parent's skeleton:
    within rft that is a new task (its content differs), but it would be a near duplicate of a dev
    task with that skeleton, and the rounds refuse it there."""
    blueprint = next(b for b in pool.blueprints if pool.domains[b.domain_id].decision.kind in WORD_RULES)
    domain = pool.domains[blueprint.domain_id]
    rewrite = OPERATORS["shift_rule"].rewrite([blueprint], domain, "child", SEED)
    assert validate(pool.tasks[blueprint.task_id], rewrite, domain).validated
    assert rewrite.child.fingerprint != blueprint.fingerprint
    assert rewrite.child.skeleton == blueprint.skeleton

    seeds = [pool.tasks[blueprint.task_id]]
    within = rounds.attempt(rounds.Pool(catalog, seeds, [blueprint]), OPERATORS["shift_rule"],
                            [rounds.Member.of(blueprint, 0, None)], 1, 0, SEED)
    assert within.reason == "" and within.checked.task.blueprint.skeleton == blueprint.skeleton
    dev = replace(blueprint, task_id=f"{domain.id}.dev.0000", pool="dev")
    across = rounds.attempt(rounds.Pool(catalog, seeds, [blueprint, dev]), OPERATORS["shift_rule"],
                            [rounds.Member.of(blueprint, 0, None)], 1, 0, SEED)
    assert across.checked.validated and across.reason == NEAR_DUPLICATE


# ----------------------------------------------------------------------------- 7. rounds

#: the rounds' seed pool: 6 decisions in 2 groups of 3, one effect, one distractor
ROUND_SIZE = TaskSize(6, 1, 2, 1)
RST = defaults("synthesis=rst").synthesis  # recursive synthesis as conf/ declares it
ROUNDS = rounds.RoundsConfig.of(RST.replace(rounds=2, candidates=6), RST.sampler, seed=0)
REJECTION_KINDS = {"not applicable", "compile", "review", "conformance", "oracle", "duplicate"}


@dataclass(frozen=True)
class Seeds:
    """Real compiled rft tasks of four domains (two each) and every blueprint, dev included."""

    tasks: list[Task]
    taken: list[Blueprint]

    def pool(self, catalog, extra: tuple[Blueprint, ...] = ()) -> rounds.Pool:
        return rounds.Pool(catalog, self.tasks, [*self.taken, *extra])


@dataclass(frozen=True)
class Grown:
    """One run of the rounds: each round's report, outcomes and pool size after it, and the pool."""

    reports: list[rounds.RoundReport]
    outcomes: list[list[rounds.Candidate]]
    sizes: list[int]
    pool: rounds.Pool


def run_rounds(pool: rounds.Pool, config: rounds.RoundsConfig) -> Grown:
    reports, outcomes, sizes = [], [], []
    for report, done in rounds.grow_rounds(pool, config):
        reports.append(report)
        outcomes.append(done)
        sizes.append(len(pool.members))
    return Grown(reports, outcomes, sizes, pool)


def summary(outcome: rounds.Candidate) -> tuple:
    """Everything that makes an outcome what it is, as plain data."""
    return (outcome.round, outcome.index, outcome.operator, outcome.parents, outcome.child, outcome.reason,
            outcome.checked.contract.to_json() if outcome.checked else None,
            outcome.checked.child.fingerprint if outcome.checked else None)


@pytest.fixture(scope="module")
def seeds(catalog) -> Seeds:
    taken = list(generate_blueprints(catalog, seed=3, train_domains=4, heldout_domains=0,
                                     tasks_per_domain={"demo": 0, "rft": 2, "dev": 1, "benchmark": 0},
                                     size=ROUND_SIZE))
    tasks = [compile_task(b, catalog[b.domain_id]) for b in taken if b.pool == "rft"]
    assert len(tasks) == 8 and len(taken) == 12
    return Seeds(tasks, taken)


@pytest.fixture(scope="module")
def grown(seeds, catalog) -> Grown:
    return run_rounds(seeds.pool(catalog), ROUNDS)


def validated_children(run: Grown, round_number: int) -> list[rounds.Candidate]:
    return [o for o in run.outcomes[round_number - 1] if not o.reason]


def test_children_join_the_pool_between_rounds(grown, seeds):
    """Each round's validated children join the pool the next round draws from, with their round,
    parents, operator and contract; round 2 rewrites a round-1 child."""
    start = len(seeds.tasks)
    assert [r.round for r in grown.reports] == [1, 2]
    assert grown.sizes == [start + grown.reports[0].validated,
                           start + grown.reports[0].validated + grown.reports[1].validated]
    assert all(r.validated for r in grown.reports)
    members = {m.blueprint.task_id: m for m in grown.pool.members}
    assert len(members) == len(grown.pool.members) == grown.sizes[-1]
    for member in grown.pool.members[:start]:
        assert (member.round, member.parents, member.operator, member.contract) == (0, (), None, None)
    children = [o for done in grown.outcomes for o in done if not o.reason]
    assert [m.blueprint.task_id for m in grown.pool.members[start:]] == [o.child for o in children]
    for outcome in children:
        member = members[outcome.child]
        assert (member.round, member.parents, member.operator) == (outcome.round, outcome.parents,
                                                                    outcome.operator)
        assert member.blueprint == outcome.checked.task.blueprint and member.blueprint.pool == "rft"
        assert member.signature.task_id == outcome.child
        contract = TransformationContract.from_json(member.contract)
        assert contract == outcome.checked.contract
        assert (contract.operator, contract.parents, contract.child) == (outcome.operator, outcome.parents,
                                                                         outcome.child)
        # a parent was in the pool before the child's round
        assert all(members[p].round < outcome.round for p in outcome.parents)
        assert outcome.child == rounds.child_id(members[outcome.parents[0]].blueprint, outcome.round,
                                                outcome.index)
        assert f".rft.r{outcome.round:02d}." in outcome.child
    first_round = {o.child for o in validated_children(grown, 1)}
    assert any(p in first_round for o in grown.outcomes[1] for p in o.parents), "seed 0 draws a child"
    assert len(grown.pool.fingerprints) == len(seeds.taken) + len(children)


def test_round_reports_count_what_happened(grown):
    for report, done in zip(grown.reports, grown.outcomes, strict=True):
        assert report.candidates == len(done) == ROUNDS.candidates
        assert [o.index for o in done] == list(range(ROUNDS.candidates))
        kept = [o for o in done if not o.reason]
        assert report.validated == len(kept) == len(report.nodes) == len(report.reference_calls)
        assert report.validated_by_operator == Counter(o.operator for o in kept)
        assert report.rejections == Counter((o.operator, o.kind) for o in done if o.reason)
        assert report.nodes == [len(o.checked.task.graph.nodes) for o in kept]
        assert len(report.nearest) == grown.sizes[report.round - 1]  # every task of the pool after it
        assert all(0.0 <= s <= 1.0 for s in report.nearest) and report.seconds > 0
        for outcome in done:
            assert outcome.kind in REJECTION_KINDS | {""}
            assert (outcome.kind == "") == (outcome.reason == "")
            if outcome.kind == "not applicable":
                assert outcome.checked is None
            elif outcome.reason:
                assert outcome.checked.reasons[:1] == (outcome.reason,) or outcome.kind == "duplicate"


def test_rounds_are_deterministic(grown, seeds, catalog):
    again = run_rounds(seeds.pool(catalog), ROUNDS)
    assert [[summary(o) for o in done] for done in again.outcomes] == [
        [summary(o) for o in done] for done in grown.outcomes]
    assert [m.blueprint for m in again.pool.members] == [m.blueprint for m in grown.pool.members]
    assert [m.contract for m in again.pool.members] == [m.contract for m in grown.pool.members]
    other = run_rounds(seeds.pool(catalog), replace(ROUNDS, seed=1))
    assert [[summary(o) for o in done] for done in other.outcomes] != [
        [summary(o) for o in done] for done in grown.outcomes]


def test_rounds_resume_from_a_grown_pool(grown, seeds, catalog):
    """Round 2 run on its own (``first=2``) on the pool round 1 left is the round 2 of one run."""
    pool = seeds.pool(catalog)
    (_, first_round), = rounds.grow_rounds(pool, replace(ROUNDS, rounds=1))
    (report, second_round), = rounds.grow_rounds(pool, replace(ROUNDS, rounds=1), first=2)
    assert report.round == 2
    assert [summary(o) for o in first_round] == [summary(o) for o in grown.outcomes[0]]
    assert [summary(o) for o in second_round] == [summary(o) for o in grown.outcomes[1]]
    assert [m.blueprint for m in pool.members] == [m.blueprint for m in grown.pool.members]


def first_round_again(seeds: Seeds, catalog, extra: tuple[Blueprint, ...]) -> list[rounds.Candidate]:
    """Round 1 rerun with ``extra`` tasks among every pool's (its plan is the same: the taken tasks
    are no parents)."""
    (done,) = run_rounds(seeds.pool(catalog, extra), replace(ROUNDS, rounds=1)).outcomes
    return done


def test_a_child_that_repeats_a_task_is_refused(grown, seeds, catalog):
    child = validated_children(grown, 1)[0]
    blueprint = child.checked.task.blueprint
    done = first_round_again(seeds, catalog, (blueprint,))
    assert blueprint.fingerprint in seeds.pool(catalog, (blueprint,)).fingerprints
    refused = done[child.index]
    assert (refused.child, refused.operator, refused.parents) == (child.child, child.operator, child.parents)
    assert refused.checked.validated and refused.checked.child == blueprint
    assert refused.kind == "duplicate"
    assert refused.reason == "duplicate: the child's content is already a task's"
    assert [summary(o) for o in done if o.index != child.index] == [
        summary(o) for o in grown.outcomes[0] if o.index != child.index]


def test_two_identical_children_of_one_round_are_one_task(seeds, catalog):
    """add_effect draws nothing, so every candidate on a one-task pool writes the same child: the
    first joins the pool, the others repeat it."""
    task = seeds.tasks[0]
    pool = rounds.Pool(catalog, [task], [task.blueprint])
    config = replace(ROUNDS, rounds=1, candidates=3, operators=("add_effect",))
    (done,) = run_rounds(pool, config).outcomes
    assert [o.reason for o in done] == ["", *["duplicate: the child's content is already a task's"] * 2]
    assert len({o.checked.child.fingerprint for o in done}) == 1
    assert len(pool.members) == 2


def words_only(blueprint: Blueprint, catalog, task_id: str, pool: str) -> Blueprint:
    """The task under another name and pool with one case's subject changed: the same skeleton,
    another fingerprint."""
    domain = catalog[blueprint.domain_id]
    row = blueprint.cases[0]
    other = edit_case(blueprint, row["id"], **{domain.case.subject: other_subject(row, domain)})
    copy = replace(other, task_id=task_id, pool=pool)
    assert copy.skeleton == blueprint.skeleton and copy.fingerprint != blueprint.fingerprint
    return copy


@pytest.mark.parametrize("other", ["dev", INDIST_POOL])
def test_a_near_duplicate_of_a_dev_or_indist_task_is_refused(other, grown, seeds, catalog):
    """A child the same up to words as a dev task, or as an indist task (evaluated in-distribution),
    is refused; the same up to words as an rft task, it is a new task (a words-only rewrite within
    rft is allowed)."""
    child = validated_children(grown, 1)[0]
    blueprint = child.checked.task.blueprint
    copy = words_only(blueprint, catalog, f"{blueprint.domain_id}.{other}.9999", other)
    refused = first_round_again(seeds, catalog, (copy,))[child.index]
    assert refused.checked.validated and refused.kind == "duplicate"
    assert refused.reason == NEAR_DUPLICATE
    rft = words_only(blueprint, catalog, f"{blueprint.domain_id}.rft.9999", "rft")
    assert summary(first_round_again(seeds, catalog, (rft,))[child.index]) == summary(child)


def twin_pool(seeds: Seeds, catalog) -> tuple[rounds.Pool, dict[str, int]]:
    """Two tasks of each of two domains, one task alone in a third, and a renamed copy of the
    first task: the indices of ``twin`` (and ``copy``), ``pair`` (a same-domain pair member) and
    ``lonely``."""
    by_domain: dict[str, list[Task]] = {}
    for task in seeds.tasks:
        by_domain.setdefault(task.blueprint.domain_id, []).append(task)
    first, second, third = list(by_domain.values())[:3]
    copy = compile_task(replace(first[0].blueprint, task_id=first[0].blueprint.task_id + ".copy"),
                        catalog[first[0].blueprint.domain_id])
    tasks = [*first, *second, third[0], copy]
    return rounds.Pool(catalog, tasks, [t.blueprint for t in tasks]), {
        "twin": 0, "pair": 2, "lonely": 4, "copy": 5}


def test_novelty_weights_favour_a_task_far_from_its_nearest_neighbour(seeds, catalog):
    pool, at = twin_pool(seeds, catalog)
    nearest = pool.nearest()
    assert nearest[at["twin"]] == (at["copy"], 1.0) and nearest[at["copy"]] == (at["twin"], 1.0)
    weights = rounds.parent_weights(pool, "novelty", 2.0)
    expected = np.array([(1.0 - s) ** 2 for _, s in nearest]) + 1e-3
    assert np.allclose(weights, expected / expected.sum()) and weights.sum() == pytest.approx(1.0)
    assert weights[at["lonely"]] > weights[at["pair"]] > weights[at["twin"]] == weights[at["copy"]] > 0
    sharper = rounds.parent_weights(pool, "novelty", 4.0)
    assert sharper[at["lonely"]] / sharper[at["pair"]] > weights[at["lonely"]] / weights[at["pair"]]
    assert np.allclose(rounds.parent_weights(pool, "uniform", 2.0), 1 / len(pool.members))
    alone = rounds.Pool(catalog, seeds.tasks[:1], [])
    assert rounds.parent_weights(alone, "novelty", 2.0).tolist() == [1.0]


def test_a_join_draws_its_second_parent_from_the_first_ones_domain(seeds, catalog):
    pool, at = twin_pool(seeds, catalog)
    config = replace(ROUNDS, rounds=1, candidates=40, sampler="novelty", operators=("join",), seed=2)
    plan = rounds.plan_round(pool, config, 1)
    assert [index for index, _, _ in plan] == list(range(40))
    assert all(operator is OPERATORS["join"] for _, operator, _ in plan)
    lonely = pool.members[at["lonely"]]
    counts = Counter(len(parents) for _, _, parents in plan)
    assert counts[2] and counts[1], counts  # the lonely task has no partner
    for _, _, parents in plan:
        if parents[0] is lonely:
            assert len(parents) == 1
            continue
        first, second = parents
        assert second is not first and second.blueprint.domain_id == first.blueprint.domain_id
    assert plan == rounds.plan_round(pool, config, 1)
    assert [[m.blueprint.task_id for m in p] for _, _, p in plan] != [
        [m.blueprint.task_id for m in p] for _, _, p in rounds.plan_round(pool, config, 2)]
    one = rounds.plan_round(pool, replace(config, operators=("add_case",)), 1)
    assert all(len(parents) == 1 for _, _, parents in one)


def test_a_join_without_a_partner_is_not_applicable(seeds, catalog):
    pool, at = twin_pool(seeds, catalog)
    outcome = rounds.attempt(pool, OPERATORS["join"], [pool.members[at["lonely"]]], 1, 0, 0)
    assert outcome.checked is None and outcome.kind == "not applicable"
    assert outcome.reason.startswith("not applicable: join takes 2 parent(s) of domain")


def test_the_novelty_gate_refuses_children_close_to_the_pool_and_keeps_the_tail_from_growing(seeds, catalog):
    """With the novelty sampler no validated child joins within the threshold of a pool task, so
    the tail can only shrink: its share in the grown pool is at most the seeds'. The uniform
    sampler has no gate, and refuses no child for its novelty."""
    threshold = 0.9
    config = replace(ROUNDS, rounds=3, candidates=24, sampler="novelty", similarity_threshold=threshold)
    assert config.gate == threshold and replace(config, sampler="uniform").gate is None
    pool = seeds.pool(catalog)
    seed_tail = tail_share([s for _, s in pool.nearest()], threshold)
    run = run_rounds(pool, config)
    refused = [o for done in run.outcomes for o in done if o.kind == "novelty"]
    assert refused, "no child was refused for its novelty: the test no longer tests the gate"
    for outcome in refused:
        closest = outcome.reason.split(" similar to ")[1].split(" ")[0]
        index = [m.blueprint.task_id for m in run.pool.members].index(closest)
        assert similarity(outcome.signature, run.pool.members[index].signature) >= threshold
    members = run.pool.members
    for k, member in enumerate(members):
        if member.round:  # a child: below the threshold from every task before it
            assert max(similarity(member.signature, m.signature) for m in members[:k]) < threshold
    assert tail_share([s for _, s in run.pool.nearest()], threshold) <= seed_tail
    uniform = run_rounds(seeds.pool(catalog), replace(config, sampler="uniform"))
    assert not any(o.kind == "novelty" for done in uniform.outcomes for o in done)


def test_rounds_config_rejects_unknown_samplers_and_operators():
    with pytest.raises(ValueError, match="sampler must be one of uniform, novelty"):
        replace(ROUNDS, sampler="greedy")
    with pytest.raises(ValueError, match="unknown operator"):
        replace(ROUNDS, operators=("add_effect", "delete_everything"))


# ----------------------------------------------------------------------------- 8. the grow stage

STAGE_ROUNDS, STAGE_CANDIDATES = 2, 4


@dataclass(frozen=True)
class Stage:
    """A tiny artifacts folder (domains, blueprints, the review's admitted table) after the grow
    stage: its params, paths, catalog, metrics and the rft tasks the review admitted."""

    params: Params
    paths: Paths
    catalog: Catalog
    metrics: dict
    admitted_rft: list[str]
    refused_rft: str


def build_artifacts(root: Path, synthesis: str) -> tuple[Params, Paths, Catalog, list[str], str]:
    """domains -> blueprints (3 training domains, 1 held out) -> graphs -> packs, and an admitted
    table the way the review writes it: every task (of every pool, indist too) but one rft task (the
    review's refusal)."""
    write_params(REPO / "conf", root / "params.yaml", ["experiment=smoke", f"synthesis={synthesis}"])
    params = load_params(root / "params.yaml")
    paths = params.paths.under(root)
    run_domains(paths.domains)
    run_blueprints(paths.domains, paths.blueprints, seed=params.seed, train_domains=3, heldout_domains=1,
                   tasks_per_domain={"demo": 1, "rft": 3, "dev": 1, "benchmark": 1, INDIST_POOL: 1},
                   size=ROUND_SIZE,
                   row_group_tasks=4)
    run_graphs(paths.domains, paths.blueprints, paths.graphs)
    run_packs(paths.domains, paths.graphs, paths.packs)
    catalog = load_domains(paths.domains)
    blueprints = [b for batch in iter_blueprints(paths.blueprints, catalog) for b in batch]
    refused = next(b.task_id for b in blueprints if b.pool == "rft")
    rows = [{"task_id": b.task_id, "domain_id": b.domain_id, "pool": b.pool} for b in blueprints
            if b.task_id != refused]
    write_table(paths.admitted, rows, schemas.REVIEW_TABLES["admitted"])
    return params, paths, catalog, [r["task_id"] for r in rows if r["pool"] == "rft"], refused


def grow_stage_run(root: Path, synthesis: str) -> Stage:
    params, paths, catalog, admitted, refused = build_artifacts(root, synthesis)
    config = params.synthesis
    if synthesis == "rst":
        config = config.model_copy(update={"rounds": STAGE_ROUNDS, "candidates": STAGE_CANDIDATES})
    metrics = run_grow(paths, catalog, config, params.seed)
    return Stage(params, paths, catalog, metrics, admitted, refused)


@pytest.fixture(scope="module")
def stage(tmp_path_factory) -> Stage:
    return grow_stage_run(tmp_path_factory.mktemp("grow"), "rst")


def row_groups(path: Path) -> int:
    return pq.ParquetFile(path).num_row_groups


def grown_tasks(stage: Stage) -> list[list[tuple[Blueprint, CompletionGraph, TaskPack]]]:
    """The grown children read back, round by round (row group by row group), aligned."""
    paths = stage.paths
    return [list(zip(b, g, p, strict=True)) for b, g, p in zip(
        iter_blueprints(paths.grown_blueprints, stage.catalog), iter_graphs(paths.grown_graphs),
        iter_packs(paths.grown_packs), strict=True)]


def test_grow_writes_aligned_tables_one_row_group_per_round(stage):
    paths = stage.paths
    tables = [paths.grown_blueprints, paths.lineage, paths.grown / "rejections.parquet",
              *(paths.grown_graphs / f"{name}.parquet" for name in schemas.GRAPH_TABLES),
              *(paths.grown_packs / f"{name}.parquet" for name in schemas.PACK_TABLES)]
    assert {path.name: row_groups(path) for path in tables} == {path.name: STAGE_ROUNDS for path in tables}
    groups = grown_tasks(stage)
    lineage = list(iter_row_groups(paths.lineage, schemas.LINEAGE))
    assert len(groups) == len(lineage) == STAGE_ROUNDS
    for number, (tasks, rows) in enumerate(zip(groups, lineage, strict=True), 1):
        for blueprint, graph, pack in tasks:
            assert blueprint.task_id == graph.task_id == pack.task_id
            assert f".rft.r{number:02d}." in blueprint.task_id and blueprint.pool == pack.pool == "rft"
        assert [b.task_id for b, _, _ in tasks] == [r["task_id"] for r in rows]
        assert all(r["round"] == number for r in rows)
    ids = [b.task_id for tasks in groups for b, _, _ in tasks]
    assert len(ids) == len(set(ids)) == stage.metrics["validated"] > 0


def test_every_grown_task_revalidates_from_its_rows(stage):
    """Each child, read back, is what its blueprint compiles to, passes the reviews, and validates
    again against its parent with the contract its lineage row recorded."""
    batches = iter_blueprints(stage.paths.blueprints, stage.catalog)
    originals = {b.task_id: b for batch in batches for b in batch}
    children = {b.task_id: b for tasks in grown_tasks(stage) for b, _, _ in tasks}
    lineage = {r["task_id"]: r for r in read_rows(stage.paths.lineage, schemas.LINEAGE)}
    for tasks in grown_tasks(stage):
        for blueprint, graph, pack in tasks:
            domain = stage.catalog[blueprint.domain_id]
            again = compile_task(blueprint, domain)
            assert graph_rows(again.graph) == graph_rows(graph)
            assert pack_rows(again.pack) == pack_rows(pack)
            assert review_pack(graph, pack, domain)["verdicts"][0]["reasons"] == []
            row = lineage[blueprint.task_id]
            contract = TransformationContract.from_json(row["contract"])
            assert (contract.operator, list(contract.parents), contract.child) == (
                row["operator"], row["parents"], blueprint.task_id)
            first = row["parents"][0]
            parent = compile_task(originals.get(first) or children[first], domain)
            checked = validate(parent, Rewrite(blueprint, contract), domain)
            assert checked.validated, (blueprint.task_id, checked.reasons)


def test_lineage_names_existing_parents_and_rejections_have_kinds(stage):
    paths = stage.paths
    lineage = read_rows(paths.lineage, schemas.LINEAGE)
    seen = set(stage.admitted_rft)
    for number in range(1, STAGE_ROUNDS + 1):
        rows = [r for r in lineage if r["round"] == number]
        for row in rows:
            assert row["parents"] and set(row["parents"]) <= seen, row["parents"]
            assert len(row["parents"]) == OPERATORS[row["operator"]].arity
            assert {p.split(".")[0] for p in row["parents"]} == {row["domain_id"]}
        seen |= {r["task_id"] for r in rows}
    assert stage.refused_rft not in {p for r in lineage for p in r["parents"]}
    rejections = read_rows(paths.grown / "rejections.parquet", schemas.RST_REJECTIONS)
    assert len(rejections) + len(lineage) == STAGE_ROUNDS * STAGE_CANDIDATES
    assert rejections, "some candidate is refused"
    for row in rejections:
        assert row["kind"] in REJECTION_KINDS and row["reasons"] and row["operator"] in OPERATORS
        assert row["reasons"][0].startswith(row["kind"]) or row["kind"] in {"review", "duplicate"}
        assert row["task_id"] not in seen
    # every candidate of every round is either a child or a rejection (a child's id ends in its index)
    candidates = sorted([(r["round"], r["index"]) for r in rejections]
                        + [(r["round"], int(r["task_id"].rsplit(".", 1)[1])) for r in lineage])
    assert candidates == [(n, i) for n in range(1, STAGE_ROUNDS + 1) for i in range(STAGE_CANDIDATES)]


def test_rounds_table_reports_both_samplers_and_the_plot(stage):
    paths, config = stage.paths, stage.params.synthesis
    assert (config.sampler, config.compare_with) == ("uniform", "novelty")
    rows = read_rows(paths.grown / "rounds.parquet", schemas.RST_ROUNDS)
    assert [(r["sampler"], r["round"]) for r in rows] == [
        (s, n) for s in ("uniform", "novelty") for n in range(1, STAGE_ROUNDS + 1)]
    seeds = len(stage.admitted_rft)
    for sampler in ("uniform", "novelty"):
        own = [r for r in rows if r["sampler"] == sampler]
        assert all(r["candidates"] == STAGE_CANDIDATES for r in own)
        assert [r["pool"] for r in own] == [seeds + sum(r["validated"] for r in own[:n + 1])
                                           for n in range(len(own))]
        for r in own:
            assert sum(json.loads(r["validated_by_operator"]).values()) == r["validated"]
            assert sum(json.loads(r["rejected_by_operator"]).values()) == r["candidates"] - r["validated"]
            assert 0.0 <= r["tail_share"] <= 1.0 and r["nearest_median"] <= r["nearest_p90"] <= 1.0
    uniform = [r for r in rows if r["sampler"] == "uniform"]
    lineage = read_rows(paths.lineage, schemas.LINEAGE)
    assert [r["validated"] for r in uniform] == [sum(x["round"] == n for x in lineage)
                                                for n in range(1, STAGE_ROUNDS + 1)]
    metrics = stage.metrics
    assert (metrics["seeds"], metrics["rounds"]) == (seeds, STAGE_ROUNDS)
    assert metrics["pool"] == uniform[-1]["pool"]
    assert metrics["validated"] == len(lineage) and metrics["candidates"] == STAGE_ROUNDS * STAGE_CANDIDATES
    assert set(metrics["tail_share"]) == {"uniform", "novelty"}
    plot = paths.grow_similarity_plot.read_text().splitlines()
    assert plot[0].split("\t") == PLOT_COLUMNS and len(plot) == 1 + len(rows)
    assert [line.split("\t")[:2] for line in plot[1:]] == [[str(r["round"]), r["sampler"]] for r in rows]


def test_the_grown_tasks_are_rft_tasks_to_roll_out(stage):
    paths, seed = stage.paths, stage.params.seed
    children = [r["task_id"] for r in read_rows(paths.lineage, schemas.LINEAGE)]
    ids = admitted_ids(paths, "rft")
    assert ids == [*stage.admitted_rft, *children] and stage.refused_rft not in ids
    assert admitted_ids(paths, "dev") == [t for t in admitted_ids(paths, "dev") if ".dev." in t]
    assert not set(children) & set(admitted_ids(paths, "dev"))
    matched = rollout_ids(paths, matched=True, seed=seed)
    assert len(matched) == len(stage.admitted_rft) < len(ids)
    assert set(matched) <= set(ids) and matched == [t for t in ids if t in set(matched)]
    assert matched == rollout_ids(paths, matched=True, seed=seed)
    assert rollout_ids(paths, matched=False, seed=seed) == ids
    loaded = [t.task_id for t in admitted_tasks(paths, stage.catalog, "rft")]
    assert sorted(loaded) == sorted(ids)


def test_grow_with_base_synthesis_writes_empty_tables(tmp_path):
    base = grow_stage_run(tmp_path, "base")
    paths = base.paths
    assert base.params.synthesis.rounds == 0
    assert base.metrics["validated"] == base.metrics["candidates"] == 0
    assert base.metrics["pool"] == base.metrics["seeds"] == len(base.admitted_rft)
    tables = {paths.grown_blueprints: schemas.BLUEPRINTS, paths.lineage: schemas.LINEAGE,
              paths.grown / "rejections.parquet": schemas.RST_REJECTIONS,
              paths.grown / "rounds.parquet": schemas.RST_ROUNDS,
              **{paths.grown_graphs / f"{n}.parquet": s for n, s in schemas.GRAPH_TABLES.items()},
              **{paths.grown_packs / f"{n}.parquet": s for n, s in schemas.PACK_TABLES.items()}}
    for path, schema in tables.items():
        assert path.exists() and read_rows(path, schema) == [], path
    assert paths.grow_similarity_plot.read_text().splitlines() == ["\t".join(PLOT_COLUMNS)]
    assert admitted_ids(paths, "rft") == base.admitted_rft
    assert rollout_ids(paths, matched=True, seed=base.params.seed) == base.admitted_rft
    assert rollout_ids(paths, matched=False, seed=base.params.seed) == base.admitted_rft


def test_comparing_a_sampler_with_itself_is_refused(stage):
    """Growing the compared pool with the same sampler would report each round twice under one name."""
    data = {**stage.params.synthesis.model_dump(), "rounds": 1, "candidates": 2, "compare_with": "uniform",
            "sampler": "uniform"}
    with pytest.raises(InterlockError, match="compare_with") as caught:
        SynthesisConfig.model_validate(data)
    assert caught.value.field == "synthesis.compare_with"


def test_an_empty_pool_grows_rounds_without_candidates():
    """Where the review admitted no rft task there is nothing to rewrite: each round reports zero
    candidates instead of failing the stage."""
    empty = rounds.Pool(load_catalog(None), [], [])
    reports = list(rounds.grow_rounds(empty, replace(ROUNDS, candidates=5)))
    assert [(r.round, r.candidates, r.validated) for r, _ in reports] == [(1, 0, 0), (2, 0, 0)]
    assert all(outcomes == [] for _, outcomes in reports)


@pytest.mark.parametrize("text", ['{"operator": "add_case"}', "[]", '{"operator": 1, "parents": 5}',
                                  "not json"])
def test_a_malformed_contract_is_a_clear_error(text):
    with pytest.raises(InterlockError) as caught:
        TransformationContract.from_json(text, source="data/grown/lineage.parquet", item="x.rft.r01.00001")
    error = caught.value
    assert (error.file, error.item, error.field) == ("data/grown/lineage.parquet", "x.rft.r01.00001",
                                                     "contract")


def test_only_the_rft_pool_reads_the_grown_tasks(stage):
    """Children are rft tasks: the demo, dev, indist and benchmark pools (demos, evaluation) never
    read the grown pool, whose stage they do not depend on; an admitted indist task is never a
    seed, a parent or a child."""
    admitted = read_rows(stage.paths.admitted, schemas.REVIEW_TABLES["admitted"])
    for pool in ("demo", "dev", INDIST_POOL, "benchmark"):
        assert admitted_ids(stage.paths, pool) == [r["task_id"] for r in admitted if r["pool"] == pool]
    indist = set(admitted_ids(stage.paths, INDIST_POOL))
    assert len(indist) == 3 and indist.isdisjoint(stage.admitted_rft)
    seeds, taken = seed_pool(stage.paths, stage.catalog)
    assert indist.isdisjoint(t.blueprint.task_id for t in seeds) and indist <= {b.task_id for b in taken}
    lineage = read_rows(stage.paths.lineage, schemas.LINEAGE)
    assert lineage and indist.isdisjoint(p for r in lineage for p in r["parents"])
    grown = iter_blueprints(stage.paths.grown_blueprints, stage.catalog)
    assert {b.pool for batch in grown for b in batch} == {"rft"}
    assert any(".r01." in t for t in admitted_ids(stage.paths, "rft"))
