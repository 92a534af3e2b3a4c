"""The synthesis stages as library functions: each streams its inputs by row group and writes
its outputs atomically. Stage scripts under ``stages/`` only read params and call these.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from interlock import schemas
from interlock.agents.backends import TaskContext
from interlock.blueprints import Blueprint, PoolCheck, TaskSize, generate_blueprints
from interlock.catalog import Catalog, Domain, check_catalog, load_catalog
from interlock.errors import InterlockError
from interlock.graph import CompletionGraph, build_graph, graph_rows, graphs_from_rows
from interlock.io import (
    batched,
    count_rows,
    dumps,
    iter_aligned,
    iter_row_groups,
    read_rows,
    write_json,
    write_row_groups,
    write_table,
    write_table_set,
)
from interlock.oracle import oracle_calls, replay
from interlock.packs import TaskPack, compile_pack, pack_rows, packs_from_rows
from interlock.reviews.controls import control_problems
from interlock.reviews.coverage import coverage_problems
from interlock.reviews.critic import critic_problems

if TYPE_CHECKING:
    from interlock.reviews.execution import ExecutionGate


def _progress(total: int, stage: str) -> tqdm:
    return tqdm(total=total, desc=stage, unit="task", mininterval=1.0, dynamic_ncols=True)


# ----------------------------------------------------------------------------- domains

def domain_row(domain: Domain) -> dict:
    return {"domain_id": domain.id, "name": domain.name, "area": domain.area, "split": domain.split,
            "signature": domain.signature, "decision_kind": domain.decision.kind,
            "coupling_kinds": list(domain.couplings), "effect_kinds": [e.kind for e in domain.effects],
            "case_table": domain.case.table, "policy_file": domain.policy.file,
            "summary": domain.summary.strip(), "spec": dumps(domain.model_dump(mode="json"))}


def run_domains(out: Path, catalog_path: Path | None = None) -> Catalog:
    catalog = load_catalog(catalog_path) if catalog_path else load_catalog()
    write_table(out, [domain_row(d) for d in catalog.domains], schemas.DOMAINS)
    return catalog


def load_domains(path: Path) -> Catalog:
    """The catalog as the ``domains`` stage wrote it (so later stages depend on the artifact)."""
    domains = []
    for row in read_rows(path, schemas.DOMAINS):
        try:
            domains.append(Domain.model_validate_json(row["spec"]))
        except ValueError as exc:
            raise InterlockError(f"invalid domain spec ({exc})", file=str(path), item=row["domain_id"],
                                 field="spec") from None
    check_catalog(domains, str(path))
    return Catalog(domains, str(path))


# ----------------------------------------------------------------------------- blueprints

def run_blueprints(domains_path: Path, out: Path, *, seed: int, train_domains: int, heldout_domains: int,
                   tasks_per_domain: dict[str, int], size: TaskSize, row_group_tasks: int) -> Counter:
    """Generate, check pool disjointness as they stream, and write in row groups."""
    catalog = load_domains(domains_path)
    total = (train_domains * sum(tasks_per_domain[p] for p in ("demo", "rft", "dev"))
             + heldout_domains * tasks_per_domain["benchmark"])
    check = PoolCheck(catalog, str(out))
    counts: Counter = Counter()
    with write_row_groups(out, schemas.BLUEPRINTS) as writer, _progress(total, "blueprints") as bar:
        stream = generate_blueprints(catalog, seed=seed, train_domains=train_domains,
                                     heldout_domains=heldout_domains, tasks_per_domain=tasks_per_domain,
                                     size=size)
        for batch in batched(stream, row_group_tasks):
            rows = [b.to_row() for b in batch]
            for row in rows:
                check.add(row["task_id"], row["domain_id"], row["pool"], row["fingerprint"], row["skeleton"])
                counts[row["pool"]] += 1
            writer.write(rows)
            bar.update(len(batch))
    return counts


def iter_blueprints(path: Path, catalog: Catalog) -> Iterator[list[Blueprint]]:
    """Blueprints by row group, each re-checked for pool disjointness as it is read."""
    check = PoolCheck(catalog, str(path))
    for rows in iter_row_groups(path, schemas.BLUEPRINTS):
        for row in rows:
            check.add(row["task_id"], row["domain_id"], row["pool"], row["fingerprint"], row["skeleton"])
        yield [Blueprint.from_row(row, str(path)) for row in rows]


# ----------------------------------------------------------------------------- graphs

def run_graphs(domains_path: Path, blueprints_path: Path, out: Path) -> int:
    catalog = load_domains(domains_path)
    return _map_to_tables(
        iter_blueprints(blueprints_path, catalog), out, schemas.GRAPH_TABLES,
        lambda blueprint: graph_rows(build_graph(blueprint, catalog[blueprint.domain_id])),
        total=count_rows(blueprints_path, schemas.BLUEPRINTS), stage="graphs")


def _map_to_tables(batches: Iterator[list], out: Path, table_schemas: dict, to_rows: Callable[[object], dict],
                   *, total: int, stage: str) -> int:
    """Turn every item of every batch into table rows; one aligned row group per batch."""
    count = 0
    with write_table_set(out, table_schemas) as tables, _progress(total, stage) as bar:
        for batch in batches:
            rows: dict[str, list[dict]] = {name: [] for name in table_schemas}
            for item in batch:
                for name, table_rows in to_rows(item).items():
                    rows[name] += table_rows
            tables.write(rows)
            count += len(batch)
            bar.update(len(batch))
    return count


def iter_graphs(folder: Path) -> Iterator[list[CompletionGraph]]:
    for group in iter_aligned(folder, schemas.GRAPH_TABLES):
        yield list(graphs_from_rows(group, str(folder)))


# ----------------------------------------------------------------------------- packs

def build_pack(graph: CompletionGraph, domain: Domain) -> TaskPack:
    """Compile a graph and attach the oracle's trajectory as its reference solution."""
    pack = compile_pack(graph, domain)
    steps, _ = replay(pack.files, oracle_calls(graph, domain))
    pack.reference = [{"step": s["step"], "tool": s["tool"],
                       "arguments": dumps(s["arguments"], sort_keys=False),
                       "observation": s["observation"]} for s in steps]
    return pack


def run_packs(domains_path: Path, graphs_dir: Path, out: Path) -> int:
    catalog = load_domains(domains_path)
    return _map_to_tables(
        iter_graphs(graphs_dir), out, schemas.PACK_TABLES,
        lambda graph: pack_rows(build_pack(graph, catalog[graph.domain_id])),
        total=count_rows(graphs_dir / "tasks.parquet", schemas.GRAPH_TABLES["tasks"]), stage="packs")


def iter_packs(folder: Path) -> Iterator[list[TaskPack]]:
    for group in iter_aligned(folder, schemas.PACK_TABLES):
        yield packs_from_rows(group, str(folder))


# ----------------------------------------------------------------------------- review

def review_pack(graph: CompletionGraph, pack: TaskPack) -> dict[str, list[dict]]:
    """Both reviews and the controls for one task; the verdict admits it only if all are clean."""
    coverage = coverage_problems(graph, pack)
    critic = critic_problems(pack)
    controls = control_problems(pack)
    reasons = sorted({p["problem"] for p in coverage} | {p["problem"] for p in critic}
                     | {f"control {p['control']} of {p['criterion_id'] or 'reference'}: {p['evidence']}"
                        for p in controls})
    t = pack.task_id
    return {
        "coverage": [{"task_id": t, **p} for p in coverage],
        "critic": [{"task_id": t, **p} for p in critic],
        "controls": [{"task_id": t, **p} for p in controls],
        "verdicts": [{"task_id": t, "domain_id": pack.domain_id, "pool": pack.pool,
                      "coverage_ok": not coverage, "critic_ok": not critic, "controls_ok": not controls,
                      "execution_ok": None, "validation_passed": None,
                      "admitted": not reasons, "reasons": reasons}],
    }


def run_review(graphs_dir: Path, packs_dir: Path, out: Path, *, catalog: Catalog | None = None,
               gate: ExecutionGate | None = None) -> dict:
    """Write the review reports and the admitted tasks; return summary metrics.

    Without a ``gate`` the review is static (coverage, critic, controls); with one, every
    statically admitted task also needs a cleanly judged validation rollout."""
    total = count_rows(packs_dir / "tasks.parquet", schemas.PACK_TABLES["tasks"])
    summary: dict[str, Counter] = {}
    with write_table_set(out, schemas.REVIEW_TABLES) as tables, _progress(total, "review") as bar:
        for graphs, packs in zip(iter_graphs(graphs_dir), iter_packs(packs_dir), strict=True):
            if [g.task_id for g in graphs] != [p.task_id for p in packs]:
                raise InterlockError("graphs and packs are not aligned by task", file=str(packs_dir))
            rows: dict[str, list[dict]] = {name: [] for name in schemas.REVIEW_TABLES}
            for graph, pack in zip(graphs, packs, strict=True):
                for name, table_rows in review_pack(graph, pack).items():
                    rows[name] += table_rows
            if gate is not None:
                _execution_gate(gate, catalog, graphs, packs, rows)
            for verdict in rows["verdicts"]:
                pool = summary.setdefault(verdict["pool"], Counter())
                pool["tasks"] += 1
                for key in ("admitted", "coverage_ok", "critic_ok", "controls_ok", "execution_ok",
                            "validation_passed"):
                    pool[key] += int(bool(verdict[key]))
            rows["admitted"] = [{k: v[k] for k in ("task_id", "domain_id", "pool")}
                                for v in rows["verdicts"] if v["admitted"]]
            tables.write(rows)
            bar.update(len(packs))
    return {pool: dict(sorted(counts.items())) for pool, counts in sorted(summary.items())}


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


class StageTimer:
    """Wall time of a stage, written to a metrics file that no later stage reads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> StageTimer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            write_json(self.path, {"seconds": round(time.perf_counter() - self.start, 3)})
