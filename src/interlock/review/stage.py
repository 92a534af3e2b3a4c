"""The ``review`` stage: source coverage, the public-input critic and the controls on every task,
then the execution gate (a judged validation rollout per statically admitted task); the verdicts
and the admitted tasks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from interlock.core import schemas
from interlock.core.config import Params
from interlock.core.errors import InterlockError
from interlock.core.io import count_rows, write_table_set
from interlock.core.paths import Paths
from interlock.core.runner import task_progress
from interlock.core.tracking import StageReport
from interlock.judging.agent import AgentJudge
from interlock.review.execution import ExecutionGate
from interlock.review.static import review_pack
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.solvers import solver_backend
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.tasks import TaskContext, iter_graphs, iter_packs, load_domains


def kill_rates(rows: list[dict]) -> dict[str, dict]:
    """Mutants and the share the checks failed on, by criterion kind; ``never_binds``: mandatory
    criteria no single decision change can fail (see :data:`NEVER_BINDS`)."""
    mutants, killed, slack = Counter(), Counter(), Counter()
    for row in rows:
        if row["killed"] is None:
            slack[row["kind"]] += 1
        else:
            mutants[row["kind"]] += 1
            killed[row["kind"]] += row["killed"]
    return {kind: {"mutants": mutants[kind], "killed": killed[kind], "never_binds": slack[kind],
                   "kill_rate": round(killed[kind] / mutants[kind], 4) if mutants[kind] else None}
            for kind in sorted(mutants | slack)}


def run_review(graphs_dir: Path, packs_dir: Path, out: Path, *, catalog: Catalog,
               gate: ExecutionGate | None = None) -> dict:
    """Write the review reports and the admitted tasks; return summary metrics: per pool, and the
    mutation controls' kill rates by criterion kind (``mutants``).

    Without a ``gate`` the review is static (coverage, critic, controls, mutation controls); with
    one, every statically admitted task also needs a cleanly judged validation rollout."""
    total = count_rows(packs_dir / "tasks.parquet", schemas.PACK_TABLES["tasks"])
    summary: dict[str, Counter] = {}
    mutation_rows: list[dict] = []
    with write_table_set(out, schemas.REVIEW_TABLES) as tables, task_progress(total, "review") as bar:
        for graphs, packs in zip(iter_graphs(graphs_dir), iter_packs(packs_dir), strict=True):
            if [g.task_id for g in graphs] != [p.task_id for p in packs]:
                raise InterlockError("graphs and packs are not aligned by task", file=str(packs_dir))
            rows: dict[str, list[dict]] = {name: [] for name in schemas.REVIEW_TABLES}
            for graph, pack in zip(graphs, packs, strict=True):
                for name, table_rows in review_pack(graph, pack, catalog[pack.domain_id]).items():
                    rows[name] += table_rows
            mutation_rows += [{k: m[k] for k in ("kind", "killed")} for m in rows["mutations"]]
            if gate is not None:
                _execution_gate(gate, catalog, graphs, packs, rows)
            for verdict in rows["verdicts"]:
                pool = summary.setdefault(verdict["pool"], Counter())
                pool["tasks"] += 1
                for key in ("admitted", "coverage_ok", "critic_ok", "leaks_ok", "controls_ok", "mutations_ok",
                            "execution_ok", "validation_passed"):
                    pool[key] += int(bool(verdict[key]))
            rows["admitted"] = [{k: v[k] for k in ("task_id", "domain_id", "pool")}
                                for v in rows["verdicts"] if v["admitted"]]
            tables.write(rows)
            bar.update(len(packs))
    pools = {pool: dict(sorted(counts.items())) for pool, counts in sorted(summary.items())}
    return {**pools, "mutants": kill_rates(mutation_rows)}


def _execution_gate(gate: ExecutionGate, catalog: Catalog, graphs: list[CompletionGraph],
                    packs: list[TaskPack], rows: dict[str, list[dict]]) -> None:
    """Validate the statically admitted tasks of one batch; update their verdicts in place."""
    static = {v["task_id"] for v in rows["verdicts"] if v["admitted"]}
    contexts = [TaskContext(p.task_id, p, g, catalog[p.domain_id])
                for g, p in zip(graphs, packs, strict=True) if p.task_id in static]
    validations = gate.validate(contexts)
    for verdict in rows["verdicts"]:
        validation = validations.get(verdict["task_id"])
        if validation is None:
            continue
        verdict["execution_ok"] = not validation.problems
        verdict["validation_passed"] = validation.passed
        verdict["reasons"] = sorted(verdict["reasons"] + [f"execution: {p}" for p in validation.problems])
        verdict["admitted"] = not verdict["reasons"]
        rows["validation"].append(validation.trajectory.to_row())
        rows["validation_verdicts"] += validation.judgement.verdicts


def review(params: Params, paths: Paths) -> StageReport:
    solver, policy, runtime = solver_backend(params.scale.validation.solver, params, paths.base_model, "base")
    limits = RolloutLimits.of(params.scale.rollouts, params.backbone.generation)
    with AgentJudge(episode=limits.episode) as judge:
        gate = ExecutionGate(solver, judge, policy=policy, seed=params.seed, limits=limits)
        summary = run_review(paths.graphs, paths.packs, paths.review, catalog=load_domains(paths.domains),
                             gate=gate)
    for pool, counts in summary.items():
        if pool == "mutants":
            continue
        print(f"review: {pool}: {counts['admitted']} of {counts['tasks']} admitted "
              f"({counts['validation_passed']} validation rollouts passed)")
    return StageReport(metrics=summary, config={"runtime": runtime})
