"""The structure review: a pack's rubric and checks are exactly what its graph compiles to over
the pack's own files. A criterion the graph makes mandatory that is missing or optional, a check
loosened (a realization field dropped, the guard's documents, appends, tables or files changed),
or a criterion the graph does not make is refused, naming the criterion; the compiled pack, and
the same pack read back from its rows, is admitted."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from interlock.review.static import review_pack
from interlock.review.structure import structure_problems
from interlock.synthesis.packs import Criterion, pack_rows, packs_from_rows


def _criterion(pack, kind: str) -> Criterion:
    return next(c for c in pack.rubric if c.kind == kind)


def _refused(tasks, change) -> list[tuple[str, list[dict]]]:
    """Each fixture task with ``change`` made to a copy of its pack (returning the criterion id it
    touched), and the structure review's rows about that criterion."""
    found = []
    for domain, _, graph, pack in tasks:
        changed = copy.deepcopy(pack)
        criterion_id = change(changed, domain)
        found.append((criterion_id, [p for p in structure_problems(graph, changed, domain)
                                     if p["ref"] == criterion_id]))
    return found


def test_every_compiled_pack_and_its_rows_read_back_are_admitted(tasks) -> None:
    for domain, _, graph, pack in tasks:
        [read_back] = packs_from_rows(pack_rows(pack), source="test")
        assert structure_problems(graph, pack, domain) == [] == structure_problems(graph, read_back, domain)


def test_each_criterion_made_optional_or_mandatory_against_the_graph_is_refused(tasks) -> None:
    """Every criterion of every fixture task, its necessity flipped, one at a time."""
    for domain, _, graph, pack in tasks:
        for position, criterion in enumerate(pack.rubric):
            changed = copy.deepcopy(pack)
            changed.rubric[position] = dataclasses.replace(criterion, mandatory=not criterion.mandatory)
            [problem] = structure_problems(graph, changed, domain)
            said = "optional" if criterion.mandatory else "mandatory"
            assert problem["ref"] == criterion.criterion_id
            assert f"is {said}; the graph makes it" in problem["problem"]


def _drop_a_realization_field(pack, domain) -> str:
    criterion = _criterion(pack, "realization")
    spec = pack.checks[criterion.criterion_id]
    fields = spec.get("expect") or spec.get("lines")
    fields.pop(next(iter(fields)))
    return criterion.criterion_id


def _case_table_as_a_document(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    pack.checks[guard.criterion_id]["documents"].append(domain.case.table)
    return guard.criterion_id


def _policy_as_a_document(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    pack.checks[guard.criterion_id]["documents"].append(domain.policy.file)
    return guard.criterion_id


def _case_table_left_out_of_the_tables(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    del pack.checks[guard.criterion_id]["tables"][domain.case.table]
    return guard.criterion_id


def _a_column_made_mutable(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    table = pack.checks[guard.criterion_id]["tables"][domain.case.table]
    row = next(iter(table["rows"]))
    table["mutable"][row] = sorted({*table["mutable"].get(row, []), "id", "status"})
    return guard.criterion_id


def _a_file_left_out_of_the_digests(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    del pack.checks[guard.criterion_id]["files"][domain.policy.file]
    return guard.criterion_id


def _an_append_widened(pack, domain) -> str:
    guard = _criterion(pack, "no_collateral")
    appends = pack.checks[guard.criterion_id]["appends"]
    target = next(iter(appends.values()))
    target["records"]["ANY"] = ["case_id"]
    return guard.criterion_id


def _coupling_member_dropped(pack, domain) -> str:
    criterion = _criterion(pack, "coupling")
    members = pack.checks[criterion.criterion_id]["members"]
    members.pop(next(iter(members)))
    return criterion.criterion_id


@pytest.mark.parametrize("change, differs", [
    (_drop_a_realization_field, ("expect", "lines")),
    (_case_table_as_a_document, ("documents",)),
    (_policy_as_a_document, ("documents",)),
    (_case_table_left_out_of_the_tables, ("tables",)),
    (_a_column_made_mutable, ("tables",)),
    (_a_file_left_out_of_the_digests, ("files",)),
    (_an_append_widened, ("appends",)),
    (_coupling_member_dropped, ("members",)),
])
def test_a_check_loosened_against_the_graph_is_refused_naming_what_differs(tasks, change, differs) -> None:
    for criterion_id, problems in _refused(tasks, change):
        [problem] = problems
        assert f"the check of criterion {criterion_id}" in problem["problem"], problem
        assert any(key in problem["problem"].rsplit(" in ", 1)[1] for key in differs), problem


@pytest.mark.parametrize("kind", ["realization", "no_collateral", "submit", "coupling", "primary"])
def test_a_criterion_the_graph_makes_left_out_is_refused(tasks, kind) -> None:
    for domain, _, graph, pack in tasks:
        changed = copy.deepcopy(pack)
        dropped = _criterion(changed, kind)
        changed.rubric.remove(dropped)
        problems = structure_problems(graph, changed, domain)
        assert [p["ref"] for p in problems] == [dropped.criterion_id]
        said = problems[0]["problem"]
        assert "mandatory criterion the graph makes" in said and said.endswith("is missing from the rubric")


def test_a_criterion_the_graph_does_not_make_is_refused(tasks) -> None:
    """A criterion over nodes no relation ties (a grounding criterion on another decision's clause
    that waives it), and a second copy of a compiled one."""
    for domain, _, graph, pack in tasks:
        changed = copy.deepcopy(pack)
        primary = _criterion(changed, "primary")
        invented = dataclasses.replace(primary, criterion_id="C900", kind="grounding", mandatory=False)
        twin = dataclasses.replace(primary, criterion_id="C901")
        changed.rubric += [invented, twin]
        changed.checks.update({"C900": changed.checks[primary.criterion_id],
                               "C901": changed.checks[primary.criterion_id]})
        problems = {p["ref"]: p["problem"] for p in structure_problems(graph, changed, domain)}
        assert set(problems) == {"C900", "C901"}
        assert problems["C900"].endswith("is one the graph does not make")
        assert problems["C901"].endswith("is one the graph does not make twice")


def test_a_reweighed_criterion_is_refused(tasks) -> None:
    for criterion_id, problems in _refused(tasks, _reweigh_the_submit):
        said = f"criterion {criterion_id} (submit) weighs 0.0; the graph makes it 1.0"
        assert [p["problem"] for p in problems] == [said]


def _reweigh_the_submit(pack, domain) -> str:
    position, criterion = next((i, c) for i, c in enumerate(pack.rubric) if c.kind == "submit")
    pack.rubric[position] = dataclasses.replace(criterion, weight=0.0)
    return criterion.criterion_id


def test_the_review_refuses_a_pack_with_the_case_table_as_a_document_under_coverage(tasks) -> None:
    domain, _, graph, pack = tasks[0]
    changed = copy.deepcopy(pack)
    guard = _case_table_as_a_document(changed, domain)
    verdict = review_pack(graph, changed, domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["coverage_ok"]
    assert any(f"criterion {guard}" in reason and "documents" in reason for reason in verdict["reasons"])
    assert review_pack(graph, pack, domain)["verdicts"][0]["admitted"]
