"""The catalog's template tasks as the reviews meet them in runs: what every review must admit,
every one (its false-positive count), for the tests and the review benchmarks."""

from __future__ import annotations

from interlock.core.seeds import stable_seed
from interlock.core.types import HELDOUT_POOLS, TRAIN_POOLS, TaskSize
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack

#: the sizes the scales and the fixtures use (smoke, default, the fixture, paper)
SIZES = (TaskSize(2, 2, 1, 1), TaskSize(2, 1, 1, 1), TaskSize(4, 3, 2, 2), TaskSize(8, 3, 2, 4))


def template_packs(catalog: Catalog, per_pool: int = 2) -> list[tuple]:
    """(domain, graph, pack) of ``per_pool`` template tasks of every pool of every domain (train
    and held-out), the sizes of :data:`SIZES` taking turns."""
    built = []
    for domain in catalog.domains:
        for pool in TRAIN_POOLS if domain.split == "train" else HELDOUT_POOLS:
            for index in range(per_pool):
                size = SIZES[(index + len(built)) % len(SIZES)]
                seed = stable_seed(20261129, "template", domain.id, pool, index)
                graph = build_graph(make_blueprint(domain, pool, index, size, seed), domain)
                built.append((domain, graph, compile_pack(graph, domain, made_by_domain=True)))
    return built
