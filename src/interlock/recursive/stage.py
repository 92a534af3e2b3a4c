"""The ``grow`` stage: recursive synthesis on the review's admitted ``rft`` tasks
(``synthesis=rst``); with ``base``, empty tables.

Writes, under ``paths.grown``: the children's blueprints, graphs and packs (one row group per
round, aligned), their lineage (task, parents, round, operator, contract), every rejection with its
operator and reasons, and one row per round and sampler (candidates, validated, pool, graph size,
reference tool calls, the similarity tail); the similarity plot; metrics (with each round's seconds
per candidate, which no artifact holds: those are the same bytes on every run).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from interlock.core import schemas
from interlock.core.config import Params, SynthesisConfig
from interlock.core.io import read_rows, write_row_groups, write_table, write_table_set, write_tsv
from interlock.core.paths import Paths
from interlock.core.runner import task_progress
from interlock.core.tracking import StageReport
from interlock.recursive.rounds import Candidate, Pool, RoundReport, RoundsConfig, grow_rounds
from interlock.recursive.similarity import similarity_summary
from interlock.recursive.validation import Task, compile_task
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.graph import graph_rows
from interlock.synthesis.packs import pack_rows
from interlock.synthesis.tasks import iter_blueprints, load_domains

PLOT_COLUMNS = ["round", "sampler", "tail_share", "nearest_median", "nearest_p90"]
#: what the metrics keep of each round
BY_ROUND = ("sampler", "round", "candidates", "validated", "pool", "tail_share", "mean_nodes")


def admitted_rft(paths: Paths) -> list[str]:
    """The rft tasks the review admitted (none where it has not run)."""
    if not paths.admitted.exists():
        return []
    rows = read_rows(paths.admitted, schemas.REVIEW_TABLES["admitted"])
    return [r["task_id"] for r in rows if r["pool"] == "rft"]


def seed_pool(paths: Paths, catalog: Catalog) -> tuple[list[Task], list[Blueprint]]:
    """The admitted ``rft`` tasks, compiled (the first parents), and every task of every pool (no
    child may duplicate one)."""
    paths.require(paths.admitted)
    admitted = set(admitted_rft(paths))
    seeds, taken = [], []
    for batch in iter_blueprints(paths.blueprints, catalog):
        for blueprint in batch:
            taken.append(blueprint)
            if blueprint.task_id in admitted:
                seeds.append(compile_task(blueprint, catalog[blueprint.domain_id]))
    return seeds, taken


def round_row(sampler: str, report: RoundReport, pool: int, threshold: float) -> dict:
    nearest = similarity_summary(report.nearest, threshold)
    rejected = Counter()
    for (operator, _), count in report.rejections.items():
        rejected[operator] += count
    return {"sampler": sampler, "round": report.round, "candidates": report.candidates,
            "validated": report.validated, "pool": pool,
            "mean_nodes": float(np.mean(report.nodes)) if report.nodes else 0.0,
            "mean_reference_calls": float(np.mean(report.reference_calls)) if report.reference_calls else 0.0,
            "nearest_median": nearest["median"], "nearest_p90": nearest["p90"],
            "tail_share": nearest["tail_share"],
            "validated_by_operator": json.dumps(dict(sorted(report.validated_by_operator.items()))),
            "rejected_by_operator": json.dumps(dict(sorted(rejected.items())))}


def _children(outcomes: list[Candidate]) -> dict[str, list[dict]]:
    rows: dict = {"blueprints": [], "lineage": [], "rejections": []}
    graphs: dict[str, list[dict]] = {name: [] for name in schemas.GRAPH_TABLES}
    packs: dict[str, list[dict]] = {name: [] for name in schemas.PACK_TABLES}
    for o in outcomes:
        if o.reason:
            reasons = list(o.checked.reasons) if o.checked and o.checked.reasons else [o.reason]
            rows["rejections"].append({"round": o.round, "index": o.index, "task_id": o.child,
                                       "operator": o.operator, "parents": list(o.parents), "kind": o.kind,
                                       "reasons": reasons})
            continue
        task = o.checked.task
        rows["blueprints"].append(task.blueprint.to_row())
        for name, table in graph_rows(task.graph).items():
            graphs[name] += table
        for name, table in pack_rows(task.pack).items():
            packs[name] += table
        rows["lineage"].append({"task_id": o.child, "domain_id": task.blueprint.domain_id, "round": o.round,
                                "operator": o.operator, "parents": list(o.parents),
                                "contract": o.checked.contract.to_json()})
    rows["graphs"], rows["packs"] = graphs, packs
    return rows


def run_grow(paths: Paths, catalog: Catalog | None, config: SynthesisConfig, seed: int) -> dict:
    """Grow the ``rft`` pool; write the children and the reports; return the metrics. With no
    rounds (``synthesis=base``) nothing is read and every table is written empty."""
    seeds, taken = seed_pool(paths, catalog) if config.rounds else ([], [])
    first = len(seeds) if config.rounds else len(admitted_rft(paths))
    total = config.rounds * config.candidates
    round_rows, seconds, rejected = [], [], Counter()
    grown = paths.grown
    with write_row_groups(paths.grown_blueprints, schemas.BLUEPRINTS) as blueprints, \
            write_table_set(paths.grown_graphs, schemas.GRAPH_TABLES) as graphs, \
            write_table_set(paths.grown_packs, schemas.PACK_TABLES) as packs, \
            write_row_groups(paths.lineage, schemas.LINEAGE) as lineage, \
            write_row_groups(grown / "rejections.parquet", schemas.RST_REJECTIONS) as rejections, \
            task_progress(total, f"grow ({config.sampler})") as bar:
        pool = Pool(catalog, seeds, taken)
        rounds = RoundsConfig.of(config, config.sampler, seed)
        for report, outcomes in grow_rounds(pool, rounds, progress=bar.update):
            rows = _children(outcomes)
            blueprints.write(rows["blueprints"])
            graphs.write(rows["graphs"])
            packs.write(rows["packs"])
            lineage.write(rows["lineage"])
            rejections.write(rows["rejections"])
            rejected.update(f"{o}: {k}" for (o, k), n in report.rejections.items() for _ in range(n))
            seconds.append(round(report.seconds / report.candidates, 4) if report.candidates else 0.0)
            round_rows.append(round_row(config.sampler, report, len(pool.members),
                                        config.similarity_threshold))
    if config.compare_with and config.rounds:
        other = Pool(catalog, seeds, taken)
        with task_progress(total, f"grow ({config.compare_with}, report only)") as bar:
            rounds = RoundsConfig.of(config, config.compare_with, seed)
            for report, _ in grow_rounds(other, rounds, progress=bar.update):
                seconds.append(round(report.seconds / report.candidates, 4) if report.candidates else 0.0)
                round_rows.append(round_row(config.compare_with, report, len(other.members),
                                            config.similarity_threshold))
    write_table(grown / "rounds.parquet", round_rows, schemas.RST_ROUNDS)
    write_tsv(paths.grow_similarity_plot, [{k: r[k] for k in PLOT_COLUMNS} for r in round_rows], PLOT_COLUMNS)
    own = [r for r in round_rows if r["sampler"] == config.sampler]
    return {"synthesis": config.name, "seeds": first, "rounds": config.rounds,
            "candidates": sum(r["candidates"] for r in own), "validated": sum(r["validated"] for r in own),
            "pool": own[-1]["pool"] if own else first,
            "rejections": dict(sorted(rejected.items())),
            "tail_share": {r["sampler"]: r["tail_share"] for r in round_rows if r["round"] == config.rounds},
            "by_round": [{**{k: r[k] for k in BY_ROUND}, "seconds_per_candidate": t}
                         for r, t in zip(round_rows, seconds, strict=True)]}


def grow(params: Params, paths: Paths) -> StageReport:
    config = params.synthesis
    metrics = run_grow(paths, load_domains(paths.domains) if config.rounds else None, config, params.seed)
    print(f"grow: synthesis={config.name}: {metrics['validated']} of {metrics['candidates']} candidates "
          f"validated over {config.rounds} rounds; rft pool {metrics['seeds']} -> {metrics['pool']}")
    return StageReport(metrics=metrics)
