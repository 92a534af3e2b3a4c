"""The ``review`` stage: source coverage, the public-input critic and the controls on every task,
then the execution gate (a judged validation rollout per statically admitted task); the verdicts
and the admitted tasks."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from interlock.core import schemas
from interlock.core.backend import releasing
from interlock.core.config import GeneratorConfig, Params, PriceConfig
from interlock.core.errors import InterlockError
from interlock.core.io import batched, count_rows, read_rows, write_table_set
from interlock.core.paths import Paths
from interlock.core.runner import task_progress
from interlock.core.tracking import StageReport
from interlock.core.types import TRAIN_POOLS
from interlock.judging.agent import AgentJudge
from interlock.review.author_faults import author_fault_controls
from interlock.review.execution import ExecutionGate
from interlock.review.model_critic import agreement, model_critic_rows
from interlock.review.static import review_pack, unwritten_verdict
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.solvers import solver_backend
from interlock.synthesis.authors.agents import Call, author_backend, settings_of
from interlock.synthesis.catalog import Catalog, Domain
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
               gate: ExecutionGate | None = None, authored: bool = False) -> dict:
    """Write the review reports and the admitted tasks; return summary metrics: per pool, and the
    mutation controls' kill rates by criterion kind (``mutants``).

    Without a ``gate`` the review is static (coverage, critic, controls, mutation controls); with
    one, every statically admitted task also needs a cleanly judged validation rollout.
    ``authored``: model authors wrote the packs (``generator=llm``); a task they left unwritten
    (``unwritten`` beside the packs) is rejected with their reason."""
    total = count_rows(graphs_dir / "tasks.parquet", schemas.GRAPH_TABLES["tasks"])
    unwritten = ({r["task_id"]: r["reason"] for r in read_rows(packs_dir / "unwritten.parquet",
                                                               schemas.AUTHORING_TABLES["unwritten"])}
                 if authored else {})
    summary: dict[str, Counter] = {}
    mutation_rows: list[dict] = []
    with write_table_set(out, schemas.REVIEW_TABLES) as tables, task_progress(total, "review") as bar:
        for graphs, packs in zip(iter_graphs(graphs_dir), iter_packs(packs_dir), strict=True):
            by_id = {p.task_id: p for p in packs}
            if [p.task_id for p in packs] != [g.task_id for g in graphs if g.task_id in by_id] or any(
                    g.task_id not in by_id and g.task_id not in unwritten for g in graphs):
                raise InterlockError("graphs and packs are not aligned by task", file=str(packs_dir))
            rows: dict[str, list[dict]] = {name: [] for name in schemas.REVIEW_TABLES}
            for graph in graphs:
                pack = by_id.get(graph.task_id)
                if pack is None:
                    rows["verdicts"].append(unwritten_verdict(graph.task_id, graph.domain_id, graph.pool,
                                                              unwritten[graph.task_id]))
                    continue
                reviewed = review_pack(graph, pack, catalog[pack.domain_id], authored=authored)
                for name, table_rows in reviewed.items():
                    rows[name] += table_rows
            mutation_rows += [{k: m[k] for k in ("kind", "killed")} for m in rows["mutations"]]
            if gate is not None:
                _execution_gate(gate, catalog, [g for g in graphs if g.task_id in by_id], packs, rows)
            for verdict in rows["verdicts"]:
                pool = summary.setdefault(verdict["pool"], Counter())
                pool["tasks"] += 1
                for key in ("admitted", "coverage_ok", "critic_ok", "leaks_ok", "controls_ok", "mutations_ok",
                            "execution_ok", "validation_passed"):
                    pool[key] += int(bool(verdict[key]))
            rows["admitted"] = [{k: v[k] for k in ("task_id", "domain_id", "pool")}
                                for v in rows["verdicts"] if v["admitted"]]
            tables.write(rows)
            bar.update(len(graphs))
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
    solver, policy, runtime = solver_backend(params.solver.validation, params, paths.base_model, "base")
    limits = RolloutLimits.of(params.scale.rollouts, params.backbone.generation)
    authored = params.generator.name == "llm"
    catalog = load_domains(paths.domains)
    with releasing(solver), AgentJudge(episode=limits.episode) as judge:
        gate = ExecutionGate(solver, judge, policy=policy, seed=params.seed, limits=limits)
        summary = run_review(paths.graphs, paths.packs, paths.review, catalog=catalog, gate=gate,
                             authored=authored)
    for pool, counts in summary.items():
        if pool == "mutants":
            continue
        print(f"review: {pool}: {counts['admitted']} of {counts['tasks']} admitted "
              f"({counts['validation_passed']} validation rollouts passed)")
    summary["author_faults"] = faults = author_fault_controls(
        training_domains(paths.graphs, catalog), catalog, size=params.scale.task_size.build(),
        seed=params.seed, settings=settings_of(params.generator, params.seed))
    missed = {name: row["tasks"] - row["by_review"] for name, row in faults["classes"].items()
              if name != "clean" and row["by_review"] < row["tasks"]}
    print(f"review: author-fault controls over {faults['domains']} training domains: "
          f"{len(faults['classes']) - 1 - len(missed)} of {len(faults['classes']) - 1} classes of mistake "
          f"refused by their reviews every time{f' (missed: {missed})' if missed else ''}; "
          f"{faults['classes']['clean']['refused']} clean paraphrases refused")
    tables: dict[str, list[dict]] = {}
    if authored:
        critic_calls: list[Call] = []
        if params.generator.model_critic:
            tables["model_critic"], critic_calls = run_model_critic(
                paths.graphs, paths.packs, params.generator, params.seed)
        summary["authoring"] = authoring_summary(paths.packs, paths.author_timings, paths.review,
                                                 params.generator.price_per_mtok, critic_calls)
        cost = summary["authoring"]["per_admitted_task"]
        print(f"review: the authors{' and the model critic' if critic_calls else ''} spent {cost['calls']} "
              f"calls, {cost['prompt_tokens']} prompt and {cost['completion_tokens']} completion tokens, "
              f"${cost['usd']} per admitted task")
        if params.generator.model_critic:
            summary["authoring"]["model_critic"] = found = agreement(tables["model_critic"], critic_calls)
            print(f"review: the model critic agrees with the reading critic on {found['agreement']} of "
                  f"{found['answered']} criteria it answered ({found['criteria']} asked)")
    return StageReport(metrics=summary, tables=tables, config={"runtime": runtime})


def training_domains(graphs_dir: Path, catalog: Catalog) -> list[Domain]:
    """The training domains this run's graphs come from, in the catalog's order."""
    used = {row["domain_id"] for row in read_rows(graphs_dir / "tasks.parquet", schemas.GRAPH_TABLES["tasks"])
            if row["pool"] in TRAIN_POOLS}
    return [d for d in catalog.split("train") if d.id in used]


def run_model_critic(graphs_dir: Path, packs_dir: Path, generator: GeneratorConfig,
                     seed: int) -> tuple[list[dict], list[Call]]:
    """The model critic (:mod:`interlock.review.model_critic`) on every authored pack, through the
    generators' backend, ``generator.batch_tasks`` tasks asked together."""
    settings = settings_of(generator, seed)
    rows: list[dict] = []
    calls: list[Call] = []
    with releasing(author_backend(generator)) as backend:
        for graphs, packs in zip(iter_graphs(graphs_dir), iter_packs(packs_dir), strict=True):
            by_id = {g.task_id: g for g in graphs}
            for chunk in batched([(by_id[p.task_id], p) for p in packs], generator.batch_tasks):
                made, spent = model_critic_rows(backend, chunk, settings)
                rows += made
                calls += spent
    return rows, calls


#: how many of the most common rejection reasons the authoring summary lists, and how much of each
TOP_REASONS, REASON_CHARS = 10, 160
#: the verdict's flags, one per review (False: it refused the task)
REVIEW_FLAGS = ("coverage_ok", "critic_ok", "leaks_ok", "controls_ok", "mutations_ok", "execution_ok")
_DIGITS = re.compile(r"[0-9]+")


def authoring_summary(packs_dir: Path, timings: Path, review_dir: Path, price: PriceConfig,
                      critic_calls: Sequence[Call] = ()) -> dict:
    """What the model authors (and the model critic, role ``critic``, where it ran) cost and what
    came of it: per role, the calls, replies refused and tokens; over every call, the cost of one
    admitted task (``per_admitted_task``: everything spent, rejected tasks' calls included, over
    the tasks admitted); the admission rate and the most
    common reasons tasks were rejected (counted per task, digits read as ``#`` so one reason in
    many tasks counts as one), and how many tasks each review refused (``authoring``: never
    written)."""
    calls = read_rows(packs_dir / "author_calls.parquet", schemas.AUTHORING_TABLES["author_calls"])
    calls += [c.row() for c in critic_calls]
    seconds = sum(r["seconds"] for r in read_rows(timings, schemas.AUTHOR_TIMINGS))
    seconds += sum(c.seconds for c in critic_calls)
    verdicts = read_rows(review_dir / "verdicts.parquet", schemas.REVIEW_TABLES["verdicts"])
    admitted = sum(v["admitted"] for v in verdicts)
    roles: dict[str, Counter] = {}
    for call in calls:
        role = roles.setdefault(call["role"], Counter())
        role.update(calls=1, refused=int(not call["accepted"]), prompt_tokens=call["prompt_tokens"],
                    completion_tokens=call["completion_tokens"])
    prompt = sum(r["prompt_tokens"] for r in calls)
    completion = sum(r["completion_tokens"] for r in calls)
    usd = (prompt * price.prompt + completion * price.completion) / 1e6
    per = max(admitted, 1)
    by_review: Counter = Counter()
    reasons: Counter = Counter()
    for verdict in verdicts:
        if verdict["admitted"]:
            continue
        authoring = [r for r in verdict["reasons"] if r.startswith("authoring: ")]
        by_review.update(["authoring"] if authoring else
                         [flag.removesuffix("_ok") for flag in REVIEW_FLAGS if verdict[flag] is False])
        reasons.update(sorted({_DIGITS.sub("#", r)[:REASON_CHARS] for r in verdict["reasons"]}))
    return {"tasks": len(verdicts), "admitted": admitted,
            "admission_rate": round(admitted / len(verdicts), 4) if verdicts else None,
            "roles": {name: dict(sorted(counts.items())) for name, counts in sorted(roles.items())},
            "per_admitted_task": {"calls": round(len(calls) / per, 3),
                                  "prompt_tokens": round(prompt / per, 1),
                                  "completion_tokens": round(completion / per, 1),
                                  "seconds": round(seconds / per, 3), "usd": round(usd / per, 6)},
            "rejected_by": dict(sorted(by_review.items())),
            "reasons": dict(reasons.most_common(TOP_REASONS))}
