"""Task similarity for recursive synthesis: MinHash signatures of real compiled tasks, their
estimates against exact Jaccard, nearest neighbours (exact and LSH) against brute force, and the
per-round summaries."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import interlock
from interlock.core.config import compose_params
from interlock.core.types import TaskSize
from interlock.recursive.similarity import (
    SimilarityIndex,
    TaskSignature,
    jaccard,
    minhash,
    nearest_neighbours,
    similarity,
    similarity_summary,
    structural_shingles,
    tail_share,
    task_signature,
    textual_shingles,
)
from interlock.synthesis.blueprints import generate_blueprints
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack

from helpers.repo import REPO

SIZE = TaskSize(4, 2, 2, 1)


@pytest.fixture(scope="module")
def blueprints(catalog):
    """Three rft blueprints in each of four training domains."""
    return list(generate_blueprints(catalog, seed=1, train_domains=4, heldout_domains=0,
                                    tasks_per_domain={"demo": 0, "rft": 3, "dev": 0, "benchmark": 0},
                                    size=SIZE))


def compiled(blueprint, catalog):
    domain = catalog[blueprint.domain_id]
    graph = build_graph(blueprint, domain)
    return graph, compile_pack(graph, domain)


@pytest.fixture(scope="module")
def tasks(blueprints, catalog):
    return [compiled(b, catalog) for b in blueprints]


@pytest.fixture(scope="module")
def signatures(tasks):
    return [task_signature(graph, pack) for graph, pack in tasks]


def twin(blueprint):
    """The same task under another id, with one more closed record to ignore."""
    extra = {**blueprint.distractor_rows[0], "id": blueprint.distractor_rows[0]["id"] + "7"}
    return replace(blueprint, task_id=blueprint.task_id + ".twin",
                   distractor_rows=[*blueprint.distractor_rows, extra])


@pytest.fixture(scope="module")
def twins(blueprints, catalog):
    """Signatures of every task followed by its twin's: task i's twin is at i + len(blueprints)."""
    built = [compiled(b, catalog) for b in blueprints] + [compiled(twin(b), catalog) for b in blueprints]
    return [task_signature(graph, pack) for graph, pack in built]


def brute_force(signatures, **weights):
    """The nearest neighbour of each task by comparing every pair, ties to the lower index."""
    best = []
    for i, a in enumerate(signatures):
        found, value = None, -1.0
        for j, b in enumerate(signatures):
            if j != i and (v := similarity(a, b, **weights)) > value:
                found, value = j, v
        best.append((found, max(value, 0.0)))
    return best


def perturbed_copies(signatures, keeps, seed):
    """Copies of the signatures, the k-th round of them with each sketch value kept with
    probability ``keeps[k]`` (else replaced by a random one), ids ``t<k>``."""
    rng = np.random.default_rng(seed)

    def perturbed(values, keep):
        values = values.copy()
        hit = rng.random(len(values)) > keep
        values[hit] = rng.integers(0, 2**63, int(hit.sum()), dtype=np.uint64)
        return values

    return [TaskSignature(f"t{k}", perturbed(s.structural, keep), perturbed(s.textual, keep))
            for k, keep in enumerate(keeps) for s in signatures]


def test_a_task_is_identical_to_itself_and_to_itself_renamed(blueprints, signatures, catalog):
    assert similarity(signatures[0], signatures[0]) == 1.0
    renamed = task_signature(*compiled(replace(blueprints[0], task_id="renamed.rft.9999"), catalog))
    assert renamed.task_id == "renamed.rft.9999"
    assert np.array_equal(renamed.structural, signatures[0].structural)
    assert np.array_equal(renamed.textual, signatures[0].textual)


def test_signatures_are_deterministic_and_independent_of_python_hashing(tasks, signatures):
    graph, pack = tasks[0]
    again = task_signature(graph, pack)
    assert again.structural.dtype == np.uint64 and again.structural.shape == (64,)
    assert np.array_equal(again.structural, signatures[0].structural)
    assert np.array_equal(again.textual, signatures[0].textual)
    other_seed = task_signature(graph, pack, seed=1, num_perm=32)
    assert other_seed.num_perm == 32 and not np.array_equal(other_seed.structural, again.structural[:32])
    with pytest.raises(ValueError, match="different seeds"):
        similarity(again, other_seed)
    # another process, with another string-hash seed, computes the same sketch
    code = ("from interlock.recursive.similarity import minhash; "
            "print(minhash(['pending case a', 'p-1 rule b', 'x y z'], seed=3).tobytes().hex())")
    env = {**os.environ, "PYTHONHASHSEED": "12345",
           "PYTHONPATH": str(Path(interlock.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == minhash(["pending case a", "p-1 rule b", "x y z"], seed=3).tobytes().hex()


def test_structural_shingles_count_repeated_features_and_name_no_ids(tasks):
    graph, _ = tasks[0]
    shingles = structural_shingles(graph)
    assert len(shingles) == len(set(shingles))
    pending = "('evidence', 'record', False)"
    assert [s for s in shingles if s.startswith(pending)] == [f"{pending}#{i}" for i in range(4)]
    assert sum(s.startswith("('decision.solution'") for s in shingles) == len(graph.of_kind("decision"))
    names = {graph.task_id} | {n.node_id for n in graph.nodes} | {n.ref for n in graph.nodes}
    assert not any(name in s.split("#")[0] for name in names for s in shingles)


def test_textual_shingles_are_word_trigrams_of_request_and_evidence_files(tasks):
    graph, pack = tasks[0]
    shingles = textual_shingles(graph, pack)
    assert "call submit when" in shingles  # the request
    assert any(s.startswith("p 1 ") for s in shingles)  # the policy
    record = next(n for n in graph.of_kind("evidence") if n.subkind == "record")
    assert any(str(record.attrs["row"]["id"]).lower().replace("-", " ") in s for s in shingles)  # the table
    assert all(len(s.split()) == 3 and s == s.lower() and s.isascii() for s in shingles)


def test_tasks_of_one_domain_are_more_alike_than_tasks_of_different_domains(blueprints, signatures):
    same, different = [], []
    for (a, sa), (b, sb) in itertools.combinations(zip(blueprints, signatures, strict=True), 2):
        (same if a.domain_id == b.domain_id else different).append(similarity(sa, sb))
    assert len(same) == 12 and len(different) == 54
    assert np.mean(same) > np.mean(different) + 0.3
    assert min(same) > max(different)


def test_minhash_estimates_the_exact_jaccard_of_real_tasks(tasks, signatures):
    errors = {"structural": [], "textual": []}
    for (i, (ga, pa)), (j, (gb, pb)) in itertools.combinations(enumerate(tasks), 2):
        a, b = signatures[i], signatures[j]
        errors["structural"].append(np.mean(a.structural == b.structural)
                                    - jaccard(structural_shingles(ga), structural_shingles(gb)))
        errors["textual"].append(np.mean(a.textual == b.textual)
                                 - jaccard(textual_shingles(ga, pa), textual_shingles(gb, pb)))
    for name, e in errors.items():
        e = np.abs(e)
        assert e.mean() < 0.07, name  # one sketch of 64 values: standard error <= 0.0625
        assert e.max() < 0.25, name


def test_jaccard_and_similarity_weights():
    assert jaccard({1, 2, 3}, {2, 3, 4}) == 0.5
    assert jaccard(set(), set()) == 1.0 and jaccard({1}, set()) == 0.0
    a = TaskSignature("a", minhash(["x"]), minhash(["p q r"]))
    b = TaskSignature("b", minhash(["x"]), minhash(["s t u"]))
    assert similarity(a, b) == 0.5
    assert similarity(a, b, structural_weight=1.0, textual_weight=0.0) == 1.0
    assert similarity(a, b, structural_weight=1.0, textual_weight=3.0) == 0.25
    with pytest.raises(ValueError):
        similarity(a, b, structural_weight=0.0, textual_weight=0.0)


def test_exact_nearest_neighbours_agree_with_brute_force(twins, blueprints):
    result = nearest_neighbours(twins)
    assert result == brute_force(twins)
    weighted = nearest_neighbours(twins, structural_weight=0.2, textual_weight=0.8)
    assert weighted == brute_force(twins, structural_weight=0.2, textual_weight=0.8)
    half = len(blueprints)
    assert [j for j, _ in result] == [i + half for i in range(half)] + list(range(half))


def test_lsh_nearest_neighbours_find_every_near_duplicate(twins, blueprints):
    result = nearest_neighbours(twins, exact_below=0)
    brute = brute_force(twins)
    half = len(blueprints)
    for i, ((j, value), (best, best_value)) in enumerate(zip(result, brute, strict=True)):
        assert j == (i + half) % len(twins) == best  # each near duplicate finds its twin
        assert value == best_value == similarity(twins[i], twins[j]) > 0.85


def test_lsh_on_a_larger_pool_matches_exact_where_near_duplicates_exist(signatures):
    """300 perturbed copies of the real tasks (each value kept with probability 0.93): every
    task's best match is a near duplicate, and LSH finds the same as comparing every pair."""
    pool = perturbed_copies(signatures, [0.93] * 25, seed=0)
    assert len(pool) == 300
    lsh = nearest_neighbours(pool)
    assert lsh == nearest_neighbours(pool, exact_below=len(pool) + 1)
    assert min(value for _, value in lsh) > 0.8


def test_lsh_reports_a_task_without_candidates_as_having_no_neighbour():
    lonely = [TaskSignature(f"t{k}", minhash([f"s{k}"]), minhash([f"w{k} a b"])) for k in range(3)]
    assert nearest_neighbours(lonely, exact_below=0) == [(None, 0.0)] * 3
    assert nearest_neighbours(lonely) == [(1, 0.0), (0, 0.0), (0, 0.0)]  # exact: ties to the lower index
    with pytest.raises(ValueError, match="bands"):
        nearest_neighbours(lonely, exact_below=0, bands=5)


def test_the_index_finds_what_nearest_neighbours_find_above_a_similarity(signatures):
    """Each perturbed copy queried against the ones before it: the index answers the closest at
    or above the threshold, exactly as comparing every pair does, and nothing below it."""
    pool = perturbed_copies(signatures, (1.0, 0.97, 0.9, 0.6), seed=1)
    index = SimilarityIndex()
    found = 0
    for i, signature in enumerate(pool):
        answer = index.closest(signature, 0.9)
        values = [similarity(signature, other) for other in pool[:i]]
        best = max(values, default=0.0)
        expected = (values.index(best), best) if best >= 0.9 else (None, 0.0)
        assert answer == expected, i
        found += answer[0] is not None
        index.add(signature)
    assert len(index) == len(pool) and found >= len(signatures)  # the near copies find their originals
    # every task's nearest neighbour, kept as tasks were added, is what comparing them all says
    assert index.nearest() == nearest_neighbours(pool, exact_below=len(pool) + 1)
    assert index.closest(pool[0], 1.0) == (0, 1.0)  # ties (original, exact copy) to the lower index
    with pytest.raises(ValueError, match="different seeds or sizes"):
        index.add(TaskSignature("other", minhash(["a"], num_perm=32), minhash(["b"], num_perm=32)))
    with pytest.raises(ValueError, match="bands"):
        SimilarityIndex(bands=5).add(pool[0])


def test_past_its_exact_size_the_index_agrees_with_the_banded_nearest_neighbours(signatures):
    """300 perturbed copies: with every task past the first compared through the bands, the
    nearest neighbours kept as tasks were added are the banded ones; with all compared exactly,
    the exact ones."""
    pool = perturbed_copies(signatures, [0.8] * 25, seed=2)
    banded, exact = SimilarityIndex(exact_below=1), SimilarityIndex(exact_below=len(pool))
    for signature in pool:
        banded.add(signature)
        exact.add(signature)
    assert banded.nearest() == nearest_neighbours(pool, exact_below=0)
    assert exact.nearest() == nearest_neighbours(pool, exact_below=len(pool) + 1)
    assert SimilarityIndex().nearest() == [] and SimilarityIndex().closest(pool[0], 0.0) == (None, 0.0)


def test_empty_and_singleton_pools(signatures):
    assert nearest_neighbours([]) == []
    assert nearest_neighbours(signatures[:1]) == [(None, 0.0)]
    assert nearest_neighbours(signatures[:1], exact_below=0) == [(None, 0.0)]


def test_summary_and_tail_share_of_a_hand_made_list():
    values = [0.03, 0.42, 0.42, 0.97, 1.0]
    assert tail_share(values, 0.9) == 0.4
    assert tail_share(values, 0.42) == 0.8  # at or above
    assert tail_share([], 0.5) == 0.0
    summary = similarity_summary(values, 0.9)
    assert summary == {"count": 5, "mean": pytest.approx(0.568), "median": 0.42,
                       "p90": pytest.approx(0.988), "max": 1.0, "threshold": 0.9, "tail_share": 0.4}
    assert similarity_summary([], 0.9)["count"] == 0


@pytest.mark.parametrize("synthesis", ["rst", "base"])
def test_the_configured_tail_threshold_separates_near_duplicates_from_siblings(synthesis, blueprints,
                                                                              signatures, twins):
    """The tail threshold of both synthesis options (0.95): every task and its near duplicate (one
    more closed record) are in the tail, no two distinct tasks of one domain are."""
    threshold = compose_params(REPO / "conf", [f"synthesis={synthesis}"])["synthesis"]["similarity_threshold"]
    assert threshold == 0.95
    half = len(blueprints)
    near = [similarity(twins[i], twins[i + half]) for i in range(half)]
    siblings = [similarity(sa, sb) for (a, sa), (b, sb) in itertools.combinations(
        zip(blueprints, signatures, strict=True), 2) if a.domain_id == b.domain_id]
    assert tail_share(near, threshold) == 1.0 and tail_share(siblings, threshold) == 0.0
    share = similarity_summary(near + siblings, threshold)["tail_share"]
    assert share == len(near) / (len(near) + len(siblings))
