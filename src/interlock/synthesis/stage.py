"""The synthesis stages ``domains``, ``blueprints`` and ``graphs``, and the template compiler's
side of ``packs`` (:func:`run_packs`): each streams its inputs by row group and writes its outputs
atomically; the scripts under ``stages/`` call the stage functions at the end of this module. The
``packs`` stage itself is :mod:`interlock.synthesis.authors.stage`, apart because it may ask model
authors, and so imports the model backends, which the first three stages must not depend on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from interlock.core import schemas
from interlock.core.config import Params
from interlock.core.io import batched, count_rows, dumps, write_row_groups, write_table, write_table_set
from interlock.core.paths import Paths
from interlock.core.runner import task_progress
from interlock.core.types import TRAIN_POOLS, TaskSize
from interlock.synthesis.blueprints import PoolCheck, generate_blueprints
from interlock.synthesis.catalog import Catalog, Domain, load_catalog
from interlock.synthesis.graph import build_graph, graph_rows
from interlock.synthesis.packs import compile_pack, pack_rows
from interlock.synthesis.tasks import iter_blueprints, iter_graphs, load_domains

# ----------------------------------------------------------------------------- domains

def domain_row(domain: Domain) -> dict:
    return {"domain_id": domain.id, "name": domain.name, "area": domain.area, "split": domain.split,
            "signature": domain.signature, "decision_kind": domain.decision.kind,
            "coupling_kinds": list(domain.couplings), "effect_kinds": [e.kind for e in domain.effects],
            "case_table": domain.case.table, "policy_file": domain.policy.file,
            "summary": domain.summary.strip(), "spec": dumps(domain.model_dump(mode="json"))}


def run_domains(out: Path, catalog_path: Path | None = None) -> Catalog:
    catalog = load_catalog(catalog_path)
    write_table(out, [domain_row(d) for d in catalog.domains], schemas.DOMAINS)
    return catalog


# ----------------------------------------------------------------------------- blueprints

def run_blueprints(domains_path: Path, out: Path, *, seed: int, train_domains: int, heldout_domains: int,
                   tasks_per_domain: dict[str, int], size: TaskSize, row_group_tasks: int) -> Counter:
    """Generate, check pool disjointness as they stream, and write in row groups."""
    catalog = load_domains(domains_path)
    total = sum(count * (train_domains if pool in TRAIN_POOLS else heldout_domains)
                for pool, count in tasks_per_domain.items())
    check = PoolCheck(catalog, str(out))
    counts: Counter = Counter()
    with write_row_groups(out, schemas.BLUEPRINTS) as writer, task_progress(total, "blueprints") as bar:
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
    with write_table_set(out, table_schemas) as tables, task_progress(total, stage) as bar:
        for batch in batches:
            rows: dict[str, list[dict]] = {name: [] for name in table_schemas}
            for item in batch:
                for name, table_rows in to_rows(item).items():
                    rows[name] += table_rows
            tables.write(rows)
            count += len(batch)
            bar.update(len(batch))
    return count


# ----------------------------------------------------------------------------- packs

def run_packs(domains_path: Path, graphs_dir: Path, out: Path) -> int:
    catalog = load_domains(domains_path)
    return _map_to_tables(
        iter_graphs(graphs_dir), out, schemas.PACK_TABLES,
        lambda graph: pack_rows(compile_pack(graph, catalog[graph.domain_id], made_by_domain=True)),
        total=count_rows(graphs_dir / "tasks.parquet", schemas.GRAPH_TABLES["tasks"]), stage="packs")


# ----------------------------------------------------------------------------- the stages

def domains(params: Params, paths: Paths) -> None:
    catalog = run_domains(paths.domains)
    print(f"domains: {len(catalog.split('train'))} train, {len(catalog.split('heldout'))} held-out")


def blueprints(params: Params, paths: Paths) -> None:
    scale = params.scale
    counts = run_blueprints(
        paths.domains, paths.blueprints, seed=params.seed, train_domains=scale.train_domains,
        heldout_domains=scale.heldout_domains, tasks_per_domain=scale.tasks_per_domain,
        size=scale.task_size.build(), row_group_tasks=scale.row_group_tasks)
    print("blueprints: " + ", ".join(f"{pool} {n}" for pool, n in sorted(counts.items())))


def graphs(params: Params, paths: Paths) -> None:
    print(f"graphs: {run_graphs(paths.domains, paths.blueprints, paths.graphs)}")
