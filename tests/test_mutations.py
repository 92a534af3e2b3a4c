"""The mutation controls alter every field the graph says a deliverable holds, and every field the
contract names must be read by some check: a check that drops any field, or a contract field no
check reads, refuses the task; what the generators compile passes."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from interlock.core.registry import EFFECT_KINDS
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.controls import run_reference
from interlock.review.mutations import mutation_controls
from interlock.review.static import review_pack
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import build_graph
from interlock.synthesis.kinds.effects import REGISTER_PATH
from interlock.synthesis.packs import Criterion, compile_pack
from interlock.synthesis.workspace import MemoryStore


def _compiled(domain, size: TaskSize, seed: int):
    pool = "rft" if domain.split == "train" else "benchmark"
    graph = build_graph(make_blueprint(domain, pool, 0, size, stable_seed(seed, domain.id)), domain)
    return graph, compile_pack(graph, domain, made_by_domain=True)


@pytest.fixture(scope="module")
def by_effect_kind(catalog) -> dict:
    """effect kind -> (domain, graph, pack, the reference's final files, a realization criterion of
    that kind): the first domain holding each kind, every one of its effects requested."""
    found = {}
    for kind in EFFECT_KINDS:
        domain = next(d for d in catalog.domains if any(e.kind == kind for e in d.effects))
        graph, pack = _compiled(domain, TaskSize(4, len(domain.effects), 2, 2), 7)
        criterion = next(c for c in pack.rubric if c.kind == "realization"
                         and graph.by_id[c.node_ids[1]].subkind == kind)
        found[kind] = (domain, graph, pack, run_reference(pack).final.contents, criterion)
    return found


def _with_checks(pack, edit):
    """A copy of ``pack`` whose checks ``edit`` changed (the pack itself is left alone)."""
    checks = copy.deepcopy(pack.checks)
    edit(checks)
    return dataclasses.replace(pack, checks=checks)


def _fields(graph, criterion) -> dict[str, str]:
    return graph.by_id[criterion.node_ids[1]].attrs["realization"]["fields"]


def _dropped(pack, criterion, field):
    def edit(checks):
        spec = checks[criterion.criterion_id]
        del spec["lines" if spec["op"] == "document" else "expect"][field]
    return _with_checks(pack, edit)


#: every field of every effect kind, as the check under test names it (the key field is looked up,
#: never only expected, so dropping it from ``expect`` is no defect: see the twin test)
DROPPED = [(kind, field) for kind, fields in {
    "audit_note": ("basis", "outcome"), "ledger_posting": ("account", "amount"),
    "payment_instruction": ("amount", "payee"), "notification": ("outcome", "to"),
    "schedule_entry": ("date", "SUBJECT"), "document": ("Case", "Outcome"), "status_update": ("status",),
}.items() for field in fields]


@pytest.mark.parametrize(("kind", "field"), DROPPED, ids=[f"{k}-{f}" for k, f in DROPPED])
def test_a_check_that_drops_any_field_is_refused(by_effect_kind, kind, field):
    domain, graph, pack, final, criterion = by_effect_kind[kind]
    fields = _fields(graph, criterion)
    if field == "SUBJECT":  # the schedule's subject column is named by the domain
        field = next(f for f in fields if f not in {"case_id", "date"})
    assert field in fields, (kind, sorted(fields))
    loosened = _dropped(pack, criterion, field)
    if not run_check(loosened.checks[criterion.criterion_id], View(MemoryStore(final)))[0]:
        # a document check holds its file to exactly its lines: without one it fails the reference
        # itself, which the controls refuse (checks.py's strict documents); only a check that still
        # passes there is the mutation controls' to catch
        assert kind == "document", (kind, field)
        return
    rows, problems = mutation_controls(graph, loosened, domain, final)
    survivors = [p["problem"] for p in problems if p["criterion_id"] == criterion.criterion_id]
    assert any("passes on its mutant" in p and f"with {field}=" in p for p in survivors), (field, problems)
    mutant = next(r for r in rows
                  if r["criterion_id"] == criterion.criterion_id and f"with {field}=" in r["mutant"])
    assert mutant["killed"] is False and mutant["kind"] == "realization"
    # the clean twin: the pack as compiled kills the same mutant
    rows, problems = mutation_controls(graph, pack, domain, final)
    assert problems == [], problems
    assert any(r["criterion_id"] == criterion.criterion_id and r["mutant"] == mutant["mutant"] and r["killed"]
               for r in rows)


@pytest.mark.parametrize("field", ["payee", "to"])
def test_the_owners_defect_pays_or_notifies_the_wrong_person(by_effect_kind, field):
    """A check without ``payee`` (``to``) passes a record for the wrong person: refused, both as a
    survivor of its own mutant and as a contract field no check reads (named by deliverable)."""
    kind = {"payee": "payment_instruction", "to": "notification"}[field]
    domain, graph, pack, final, criterion = by_effect_kind[kind]
    _, problems = mutation_controls(graph, _dropped(pack, criterion, field), domain, final)
    deliverable = next(row for row in pack.contract if tuple(row["node_ids"]) == criterion.node_ids)
    assert any(p["criterion_id"] == criterion.criterion_id and f"with {field}=" in p["problem"]
               for p in problems), problems
    contract = [p["problem"] for p in problems if p["criterion_id"] == ""]
    assert any(deliverable["deliverable_id"] in p and repr(field) in p and deliverable["path"] in p
               for p in contract), contract


def test_the_review_refuses_a_check_without_payee(by_effect_kind):
    domain, graph, pack, _, criterion = by_effect_kind["payment_instruction"]
    verdict = review_pack(graph, _dropped(pack, criterion, "payee"), domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["mutations_ok"]
    assert any(r.startswith(f"mutation control: {criterion.criterion_id} (realization) passes on its mutant")
               and "payee=" in r for r in verdict["reasons"]), verdict["reasons"]
    assert review_pack(graph, pack, domain)["verdicts"][0]["mutations_ok"]


@pytest.mark.parametrize("kind", sorted(EFFECT_KINDS))
def test_every_field_and_the_key_is_a_mutant_of_its_own(by_effect_kind, kind):
    """One mutant per field (the key's: the record under another case, or another row updated),
    each named by its field and its altered value, every one killed by the compiled check."""
    domain, graph, pack, final, criterion = by_effect_kind[kind]
    fields = _fields(graph, criterion)
    rows = [r for r in mutation_controls(graph, pack, domain, final)[0]
            if r["criterion_id"] == criterion.criterion_id]
    names = [r["mutant"] for r in rows]
    assert len(names) == len(set(names)) and all(r["killed"] for r in rows), rows
    for field, value in fields.items():
        [name] = [n for n in names if f" with {field}=" in n]
        assert not name.endswith(f" with {field}={value!r}"), name  # really altered
    if kind == "status_update":
        assert any("written to row id=" in n for n in names), names
    spec = pack.checks[criterion.criterion_id]
    extra = 1 if spec["op"] == "record" and spec.get("key_field") not in fields else 0
    assert len(rows) == 1 + len(fields) + extra, names  # and the record not written


@pytest.mark.parametrize("kind", ["ledger_posting", "payment_instruction", "notification", "audit_note"])
def test_dropping_the_key_field_from_expect_is_no_defect(by_effect_kind, kind):
    """The twin of the refusals: a record check finds its record by the key, so the key need not
    be expected too; its mutant (the record written under another case) is still killed."""
    domain, graph, pack, final, criterion = by_effect_kind[kind]
    rows, problems = mutation_controls(graph, _dropped(pack, criterion, "case_id"), domain, final)
    assert problems == [], problems
    assert any(r["criterion_id"] == criterion.criterion_id and "with case_id=" in r["mutant"] and r["killed"]
               for r in rows)


# ----------------------------------------------------------------------------- the contract's fields

def _grounding(pack):
    return next(c for c in pack.rubric if c.kind == "grounding")


def _register_deliverable(pack, criterion):
    return next(row for row in pack.contract if row["kind"] == "register"
                and row["node_ids"][0] == criterion.node_ids[0])


def _without_criterion(pack, criterion):
    checks = {k: copy.deepcopy(v) for k, v in pack.checks.items() if k != criterion.criterion_id}
    return dataclasses.replace(pack, rubric=[c for c in pack.rubric if c != criterion], checks=checks)


def _contract_problems(problems):
    return [p["problem"] for p in problems if p["criterion_id"] == ""]


def test_a_contract_field_no_check_reads_is_refused(tasks):
    domain, _, graph, pack = tasks[0]
    final = run_reference(pack).final.contents
    grounding = _grounding(pack)
    deliverable = _register_deliverable(pack, grounding)
    _, problems = mutation_controls(graph, _without_criterion(pack, grounding), domain, final)
    contract = _contract_problems(problems)
    assert len(problems) == len(contract) == 1, problems
    assert (deliverable["deliverable_id"] in contract[0] and "'basis'" in contract[0]
            and REGISTER_PATH in contract[0]), contract
    assert mutation_controls(graph, pack, domain, final)[1] == []


def test_an_emptied_optional_check_is_refused(tasks):
    """The optional grounding criterion has its mutant too (its weight counts in every score): with
    its ``expect`` emptied it passes it, and the contract's basis is then read by no check."""
    domain, _, graph, pack = tasks[1]
    final = run_reference(pack).final.contents
    grounding = _grounding(pack)
    emptied = _with_checks(pack, lambda checks: checks[grounding.criterion_id]["expect"].clear())
    rows, problems = mutation_controls(graph, emptied, domain, final)
    assert any(p["criterion_id"] == grounding.criterion_id and "with basis=" in p["problem"]
               for p in problems), problems
    deliverable = _register_deliverable(pack, grounding)["deliverable_id"]
    assert any(deliverable in p and "'basis'" in p for p in _contract_problems(problems)), problems
    # the mutation rows (and the kill rates) stay the gating criteria's
    assert {r["criterion_id"] for r in rows} <= {c.criterion_id for c in pack.rubric if c.mandatory}


def test_a_contract_field_one_other_check_reads_is_covered(tasks):
    """Some criterion must kill a contract field's mutant, not a given one: with the grounding
    criterion gone but its primary reading the basis too, nothing is wrong."""
    domain, _, graph, pack = tasks[0]
    final = run_reference(pack).final.contents
    grounding = _grounding(pack)
    decision = graph.by_id[grounding.node_ids[0]]
    primary = next(c for c in pack.rubric if c.kind == "primary" and c.node_ids[0] == decision.node_id)
    reduced = _without_criterion(pack, grounding)
    reduced.checks[primary.criterion_id]["expect"]["basis"] = decision.attrs["basis"]
    assert mutation_controls(graph, reduced, domain, final)[1] == []
    # a criterion of a kind the controls do not know (its check fails everywhere here) is left to
    # its own code: no mutants, no rows, and it kills nothing for the contract
    blind = _without_criterion(pack, grounding)
    blind.rubric.append(Criterion("C99", "novel", grounding.node_ids, True, 1.0, "a check of another kind"))
    blind.checks["C99"] = {"op": "novel"}
    rows, problems = mutation_controls(graph, blind, domain, final)
    assert [p["criterion_id"] for p in problems] == [""] and "'basis'" in problems[0]["problem"], problems
    assert not any(r["criterion_id"] == "C99" for r in rows)


# ----------------------------------------------------------------------------- the whole catalog

def test_every_catalog_pack_passes_its_mutation_controls(catalog):
    """No false problems: every domain, every one of its effects requested, three seeds and sizes;
    every check reached, every field of every realization altered and killed."""
    packs, kinds = 0, set()
    for domain in catalog.domains:
        for seed, size in ((1, TaskSize(2, len(domain.effects), 1, 1)),
                           (2, TaskSize(4, len(domain.effects), 2, 2)),
                           (3, TaskSize(6, len(domain.effects), 3, 3))):
            graph, pack = _compiled(domain, size, seed)
            kinds |= {e.subkind for e in graph.of_kind("effect")}
            rows, problems = mutation_controls(graph, pack, domain, run_reference(pack).final.contents)
            assert problems == [], (domain.id, seed, problems)
            assert all(r["killed"] for r in rows if r["killed"] is not None), domain.id
            for criterion in pack.rubric:
                if criterion.kind != "realization":
                    continue
                names = [r["mutant"] for r in rows if r["criterion_id"] == criterion.criterion_id]
                assert all(any(f" with {f}=" in n for n in names) for f in _fields(graph, criterion)), names
            packs += 1
    assert packs == 3 * len(catalog.domains) and kinds == set(EFFECT_KINDS)
