"""The static review of one task: source coverage (with the structure review: the rubric and
checks are what the graph compiles to), the public-input critic (with the request's scope: it asks
for exactly the contract), the leak review and the addressed-text review, the controls and the
mutation controls, and the verdict they give together. Programs on memory only (no model, no
rollout), so recursive synthesis validates every child with exactly what admits any task, without
depending on the judges or the rollout engine."""

from __future__ import annotations

from interlock.review.addressed import addressed_problems
from interlock.review.controls import control_problems, run_reference
from interlock.review.coverage import coverage_problems
from interlock.review.critic import critic_problems, support_problems
from interlock.review.leaks import leak_problems
from interlock.review.mutations import mutation_controls
from interlock.review.scope import scope_problems
from interlock.review.structure import structure_problems
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import TaskPack


def review_pack(graph: CompletionGraph, pack: TaskPack, domain: Domain, *,
                authored: bool = False) -> dict[str, list[dict]]:
    """Both reviews, the leak and addressed-text reviews, the controls and the mutation controls
    for one task; the verdict admits it only if all are clean. ``domain``: the task's catalog
    entry (the mutation controls write the effects another outcome would have). ``authored``: model
    authors wrote it (``generator=llm``), so the critic reads what the public material states
    (:func:`~interlock.review.critic.support_problems`) without also solving it by the templates
    that wrote the others (:func:`~interlock.review.critic.critic_problems`)."""
    coverage = coverage_problems(graph, pack, domain) + structure_problems(graph, pack, domain)
    reference = run_reference(pack)
    critic = support_problems(graph, pack) + scope_problems(graph, pack, domain)
    if not authored:
        critic += critic_problems(pack, reference)
    # the leak review's rows and verdict carry the addressed-text review too: both read what the
    # task's text says to whoever reads it
    leaks = leak_problems(graph, pack) + addressed_problems(pack)
    controls = control_problems(pack, reference)
    mutants, unkilled = mutation_controls(graph, pack, domain, reference.final.contents)
    reasons = sorted({p["problem"] for p in [*coverage, *critic, *leaks]}
                     | {f"control {p['control']} of {p['criterion_id'] or 'reference'}: {p['evidence']}"
                        for p in controls}
                     | {f"mutation control: {p['problem']}" for p in unkilled})
    t = pack.task_id
    return {
        "coverage": [{"task_id": t, **p} for p in coverage],
        "critic": [{"task_id": t, **p} for p in critic],
        "leaks": [{"task_id": t, "problem": p["problem"]} for p in leaks],
        "controls": [{"task_id": t, **p} for p in controls],
        "mutations": mutants,
        "verdicts": [{"task_id": t, "domain_id": pack.domain_id, "pool": pack.pool,
                      "coverage_ok": not coverage, "critic_ok": not critic, "leaks_ok": not leaks,
                      "controls_ok": not controls,
                      "mutations_ok": not unkilled, "execution_ok": None, "validation_passed": None,
                      "admitted": not reasons, "reasons": reasons}],
    }


def unwritten_verdict(task_id: str, domain_id: str, pool: str, reason: str) -> dict:
    """The verdict on a task its model authors never made into a pack (``generator=llm``)."""
    return {"task_id": task_id, "domain_id": domain_id, "pool": pool, "coverage_ok": False,
            "critic_ok": False, "leaks_ok": False, "controls_ok": False, "mutations_ok": False,
            "execution_ok": None, "validation_passed": None, "admitted": False,
            "reasons": [f"authoring: {reason}"]}
