"""Validation of a rewrite's child, on fresh in-memory copies of its workspace.

Static: the child's graph must be what its domain makes of its evidence (compiling checks it),
and it must pass everything a synthesized task passes (coverage, the public-input critic, the leak
review, the controls and the mutation controls: :func:`interlock.review.stage.review_pack`), and
conform to its contract (the actual difference from the parent is what the contract declares, no
more). Oracle execution: the child's reference passes every criterion and the untouched workspace
fails every fail-to-pass criterion (the controls), and the parent's reference solution, replayed
on the child's workspace, passes every criterion the contract leaves unchanged and, where the
operator claims to add a requirement, fails a mandatory criterion the contract adds or changes.
Every check is a program on memory: nothing here runs code a model wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from interlock.core.errors import InterlockError
from interlock.recursive.contract import (
    Facts,
    TransformationContract,
    conformance_problems,
    criterion_key,
    element_keys,
    facts_diff,
    task_facts,
)
from interlock.recursive.operators import Rewrite
from interlock.review.controls import reference_calls, submitted
from interlock.review.static import review_pack
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Domain
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.graph import CompletionGraph, build_graph
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import TaskPack, compile_pack


@dataclass(frozen=True)
class Task:
    """A verified task as a parent: its blueprint, graph and pack."""

    blueprint: Blueprint
    graph: CompletionGraph
    pack: TaskPack

    @cached_property
    def facts(self) -> dict[str, Facts]:
        """What conformance compares (computed once for a parent drawn many times)."""
        return task_facts(self.graph, self.pack)


@dataclass(frozen=True)
class Checked:
    """A candidate after validation: the child as a task (None where it could not be compiled),
    its completed contract and every reason it is refused (none: validated)."""

    child: Blueprint
    task: Task | None
    contract: TransformationContract
    reasons: tuple[str, ...]

    @property
    def validated(self) -> bool:
        return not self.reasons


def compile_task(blueprint: Blueprint, domain: Domain) -> Task:
    """A blueprint compiled as any task is, its graph checked against its domain."""
    graph = build_graph(blueprint, domain)
    return Task(blueprint, graph, compile_pack(graph, domain))


def validate(parent: Task, rewrite: Rewrite, domain: Domain) -> Checked:
    contract = rewrite.contract.complete(parent.graph)
    try:
        child = compile_task(rewrite.child, domain)
    except InterlockError as exc:
        return Checked(rewrite.child, None, contract, (f"compile: {exc}",))
    reasons = list(review_pack(child.graph, child.pack, domain)["verdicts"][0]["reasons"])
    actual = facts_diff(parent.facts, child.facts)
    reasons += [f"conformance: {p}" for p in conformance_problems(contract, actual)]
    reasons += [f"oracle: {p}" for p in parent_solution_problems(parent.pack, child, contract)]
    return Checked(rewrite.child, child, contract, tuple(reasons))


def parent_solution_problems(parent: TaskPack, child: Task, contract: TransformationContract) -> list[str]:
    """The parent's reference solution replayed on the child's initial workspace: it must pass
    every criterion the contract leaves unchanged, and where the operator claims to add a
    requirement it must fail at least one mandatory criterion the contract adds or changes."""
    steps, final = replay(child.pack.files, reference_calls(parent))
    view, keys = View(final, submitted=submitted(steps)), element_keys(child.graph)
    criteria = contract.changes["criteria"]
    claimed = {*criteria.added, *criteria.changed}
    problems, asked_more = [], False
    for criterion in child.pack.rubric:
        key = criterion_key(criterion.kind, [keys.get(i, i) for i in criterion.node_ids])
        passed, evidence = run_check(child.pack.checks[criterion.criterion_id], view)
        if key in claimed:
            asked_more |= criterion.mandatory and not passed
        elif not passed:
            problems.append(f"the parent's solution fails {key}, which the contract leaves unchanged: "
                            f"{evidence}")
    if contract.adds_requirement and not asked_more:
        problems.append("the child asks nothing new: the parent's solution passes every mandatory criterion "
                        "the contract adds or changes")
    return problems
