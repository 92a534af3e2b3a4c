"""Shared fixtures: the real catalog, one compiled task per decision kind, and the tiny test
backbone, each built once."""

from __future__ import annotations

import pytest

from interlock.blueprints import TaskSize, make_blueprint, stable_seed
from interlock.catalog import load_catalog
from interlock.graph import build_graph
from interlock.pipeline import build_pack


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture(scope="session")
def tasks(catalog):
    """(domain, blueprint, graph, pack) for the first domain of every decision kind."""
    built, seen = [], set()
    for domain in catalog.domains:
        if domain.decision.kind in seen:
            continue
        seen.add(domain.decision.kind)
        pool = "rft" if domain.split == "train" else "benchmark"
        blueprint = make_blueprint(domain, pool, 0, TaskSize(4, 3, 2, 2), stable_seed(7, domain.id))
        graph = build_graph(blueprint, domain)
        built.append((domain, blueprint, graph, build_pack(graph, domain)))
    return built


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tasks):
    """The tiny random test backbone (tokenizer trained on the fixture tasks' text), built once."""
    from interlock.models.tiny import build_tiny, pack_texts

    return build_tiny(tmp_path_factory.mktemp("models") / "tiny", pack_texts(t[3] for t in tasks), seed=7)
