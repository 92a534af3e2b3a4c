"""The suite's fixture tasks, built the same way in the test process and in the subprocesses
some tests start (a trainer killed with SIGKILL and run again)."""

from __future__ import annotations

from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack
from interlock.synthesis.tasks import TaskContext


def fixture_tasks(catalog: Catalog) -> list[tuple]:
    """(domain, blueprint, graph, pack) for the first domain of every decision kind."""
    built, seen = [], set()
    for domain in catalog.domains:
        if domain.decision.kind in seen:
            continue
        seen.add(domain.decision.kind)
        pool = "rft" if domain.split == "train" else "benchmark"
        blueprint = make_blueprint(domain, pool, 0, TaskSize(4, 3, 2, 2), stable_seed(7, domain.id))
        graph = build_graph(blueprint, domain)
        built.append((domain, blueprint, graph, compile_pack(graph, domain)))
    return built


def contexts_of(tasks: list[tuple]) -> list[TaskContext]:
    """The fixture tasks as the rollout engine and the judges take them."""
    return [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]

