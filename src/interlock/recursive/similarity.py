"""How alike the tasks of a pool are: MinHash signatures, similarity and nearest neighbours.

Recursive synthesis rewrites verified tasks round after round, and the later rounds grow a
high-similarity tail: children too close to each other or to their parents, which add tasks to
the pool but little to learn from. The rounds watch that tail with the measures here.

A task's signature keeps two MinHash sketches apart: one of its graph's *structure* (what each
decision is grounded by, realized in and coupled with, the couplings, the distractors; no ids,
no words), one of its *text* (word 3-shingles of the request, the policy and the tables the
evidence lives in). Similarity is a weighted mean of their estimated Jaccard similarities, and
:func:`nearest_neighbours` finds each task's closest other task by LSH banding (exactly, by
comparing all pairs, in a small pool). Hashing is by blake2b and a fixed mixer, never Python's
``hash()``, so a signature is the same in every process.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from interlock.synthesis.graph import RULE_CLAUSE, CompletionGraph
from interlock.synthesis.packs import TaskPack

#: below this many tasks :func:`nearest_neighbours` compares all pairs
EXACT_BELOW = 200
_EMPTY = np.iinfo(np.uint64).max
_WORD = re.compile(r"[a-z0-9]+")
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True, eq=False)
class TaskSignature:
    """The MinHash sketches of one task (read-only ``uint64`` arrays of ``num_perm`` values)."""

    task_id: str
    structural: np.ndarray
    textual: np.ndarray
    seed: int = 0

    @property
    def num_perm(self) -> int:
        return len(self.structural)


def structural_shingles(graph: CompletionGraph) -> list[str]:
    """The graph's structural features, free of ids and words, as a multiset: a feature seen n
    times is emitted as ``feature#0`` ... ``feature#n-1``."""
    coupled: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for hyper in graph.hyperedges:
        for member in hyper.members:
            coupled[member].append((hyper.kind, len(hyper.members)))
    features: list[tuple] = [("effects_per_decision", graph.effects_per_decision),
                             ("decisions", len(graph.of_kind("decision"))),
                             ("couplings", len(graph.hyperedges))]
    for decision in graph.of_kind("decision"):
        d, a = decision.node_id, decision.attrs
        grounds = tuple(sorted(Counter(n.subkind for n in graph.sources(d, "grounding")).items()))
        effects = tuple(sorted(Counter(n.subkind for n in graph.targets(d, "realization")).items()))
        couplings = tuple(sorted(coupled[d]))
        solution = (a["fallback"], a["basis"] == RULE_CLAUSE, a["amount"] is not None)
        features += [("decision", decision.subkind, grounds, effects, couplings),
                     ("decision.grounds", decision.subkind, grounds),
                     ("decision.effects", decision.subkind, effects),
                     ("decision.couplings", decision.subkind, couplings),
                     ("decision.solution", decision.subkind, solution)]
    for hyper in graph.hyperedges:
        ref = graph.by_id[hyper.clause].ref
        numbers = tuple(sorted((k, v) for k, v in hyper.params.items()
                               if isinstance(v, int | float) and not isinstance(v, bool)))
        binds = sum(graph.by_id[m].attrs["basis"] == ref for m in hyper.members)
        features += [("coupling", hyper.kind, len(hyper.members)),
                     ("coupling.params", hyper.kind, numbers),
                     ("coupling.decides", hyper.kind, binds)]
    for node in graph.nodes:
        if node.kind == "evidence":
            features.append(("evidence", node.subkind, node.distractor))
        if node.distractor:
            features.append(("distractor", node.kind, node.subkind))
    counts = Counter(repr(f) for f in features)
    return sorted(f"{f}#{i}" for f, n in counts.items() for i in range(n))


def task_text(graph: CompletionGraph, pack: TaskPack) -> list[str]:
    """The task's text: its request, then the workspace files its evidence lives in (the policy,
    the case table, any option table), by path."""
    paths = sorted({n.attrs["path"] for n in graph.of_kind("evidence")} & set(pack.files))
    return [pack.request] + [pack.files[p] for p in paths]


def textual_shingles(graph: CompletionGraph, pack: TaskPack) -> set[str]:
    """Word 3-shingles (lowercase ASCII words and numbers) of :func:`task_text`, per document."""
    shingles: set[str] = set()
    for text in task_text(graph, pack):
        words = _WORD.findall(text.lower())
        if 0 < len(words) < 3:
            shingles.add(" ".join(words))
        shingles.update(" ".join(words[i:i + 3]) for i in range(len(words) - 2))
    return shingles


def minhash(shingles: Iterable[str], *, num_perm: int = 64, seed: int = 0) -> np.ndarray:
    """The MinHash sketch of a set of shingles: for each of ``num_perm`` seeded bijections of a
    stable 64-bit hash, the least value over the set (all ones for the empty set)."""
    digests = b"".join(hashlib.blake2b(s.encode(), digest_size=8).digest() for s in set(shingles))
    if not digests:
        sketch = np.full(num_perm, _EMPTY, dtype=np.uint64)
    else:
        hashes = np.frombuffer(digests, dtype="<u8").astype(np.uint64)
        sketch = _mix(hashes[:, None] ^ _permutation_keys(num_perm, seed)[None, :]).min(axis=0)
    sketch.flags.writeable = False
    return sketch


def task_signature(graph: CompletionGraph, pack: TaskPack, *, num_perm: int = 64,
                   seed: int = 0) -> TaskSignature:
    """The signature of one compiled task (deterministic given ``num_perm`` and ``seed``)."""
    return TaskSignature(graph.task_id, minhash(structural_shingles(graph), num_perm=num_perm, seed=seed),
                         minhash(textual_shingles(graph, pack), num_perm=num_perm, seed=seed), seed)


def jaccard(a: Collection, b: Collection) -> float:
    """The exact Jaccard similarity of two sets (1.0 for two empty sets)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a or b else 1.0


def similarity(a: TaskSignature, b: TaskSignature, *, structural_weight: float = 0.5,
               textual_weight: float = 0.5) -> float:
    """Estimated similarity of two tasks: the weighted mean of the structural and textual
    Jaccard estimates (the share of equal sketch values)."""
    _check_compatible([a, b])
    s = np.count_nonzero(a.structural == b.structural) / a.num_perm
    t = np.count_nonzero(a.textual == b.textual) / a.num_perm
    return float(_combine(s, t, structural_weight, textual_weight))


def nearest_neighbours(signatures: Sequence[TaskSignature], *, bands: int = 16,
                       exact_below: int = EXACT_BELOW, structural_weight: float = 0.5,
                       textual_weight: float = 0.5) -> list[tuple[int | None, float]]:
    """Each task's most similar other task (its index, lowest on ties) and their similarity.

    Below ``exact_below`` tasks every pair is compared, so the answer is exact. Otherwise LSH
    banding finds the candidates: each of ``bands`` bands takes ``r = num_perm // bands`` rows of
    the structural sketch and as many of the textual one, and tasks that agree on a whole band are
    compared. A pair of structural and textual similarity ``s``, ``t`` is then found with
    probability ``1 - (1 - (s*t)**r)**bands`` (with the defaults: 0.9999 at s = t = 0.9, 0.6 at
    0.7): near duplicates almost surely, pairs far apart rarely. A task with no candidate has no
    near neighbour and is reported as ``(None, 0.0)``, as is the only task of a pool of one."""
    index = SimilarityIndex(bands=bands, exact_below=len(signatures) if len(signatures) < exact_below else 1,
                            structural_weight=structural_weight, textual_weight=textual_weight)
    for signature in signatures:
        index.add(signature)
    return index.nearest()


class SimilarityIndex:
    """A pool's signatures, added one at a time, with every task's nearest neighbour kept up to
    date, and queries for the closest task to a new one.

    While the index holds fewer than ``exact_below`` tasks a new task is compared with all of
    them; after that with the tasks it shares an LSH band with (the banding
    :func:`nearest_neighbours` describes), so an add or a query costs its bucket mates, never the
    pool, and memory is a row of
    each sketch and a bucket entry per band per task. Near duplicates are found almost surely
    either way. Ties go to the lower index. :func:`nearest_neighbours` is this index built over a
    whole pool at once.
    The rounds keep one per pool: the novelty gate asks it about each validated child, and each
    round's report and the novelty weights read its nearest neighbours without comparing the
    whole pool again."""

    def __init__(self, *, bands: int = 16, exact_below: int = EXACT_BELOW, structural_weight: float = 0.5,
                 textual_weight: float = 0.5) -> None:
        self.bands = bands
        self.exact_below = exact_below
        self.weights = (structural_weight, textual_weight)
        self._buckets: list[dict[bytes, list[int]]] = [defaultdict(list) for _ in range(bands)]
        self._first: TaskSignature | None = None
        self._size = 0
        self._structural = self._textual = np.empty((0, 0), dtype=np.uint64)
        self._best = np.empty(0, dtype=np.int64)  # each task's nearest neighbour (-1: none yet)
        self._best_similarity = np.empty(0)

    def __len__(self) -> int:
        return self._size

    def add(self, signature: TaskSignature) -> None:
        """Index one more task and update every nearest neighbour it changes."""
        if self._first is None:
            self._first = signature
            width = signature.num_perm
            self._structural = self._textual = np.empty((0, width), dtype=np.uint64)
        _check_compatible([self._first, signature])
        found, similarities = self._scored(signature)
        new = self._size
        if self._size == len(self._best):
            self._grow()
        self._structural[new], self._textual[new] = signature.structural, signature.textual
        self._best[new], self._best_similarity[new] = -1, -1.0
        if len(found):
            closer = similarities > self._best_similarity[found]  # equal: the lower index stays
            self._best[found[closer]] = new
            self._best_similarity[found[closer]] = similarities[closer]
            self._best[new], self._best_similarity[new] = self._top(found, similarities)
        for buckets, key in zip(self._buckets, self._keys(signature), strict=True):
            buckets[key].append(new)
        self._size += 1

    def nearest(self) -> list[tuple[int | None, float]]:
        """Each task's nearest neighbour and their similarity, ``(None, 0.0)`` where it has none."""
        return [(None, 0.0) if j < 0 else (int(j), float(v))
                for j, v in zip(self._best[:self._size], self._best_similarity[:self._size], strict=True)]

    def closest(self, signature: TaskSignature, at_least: float) -> tuple[int | None, float]:
        """The indexed task most similar to ``signature`` (lowest index on ties) if that
        similarity is at least ``at_least``; otherwise ``(None, 0.0)``."""
        if self._first is None:
            return None, 0.0
        _check_compatible([self._first, signature])
        found, similarities = self._scored(signature)
        if not len(found) or similarities.max() < at_least:
            return None, 0.0
        return self._top(found, similarities)

    def _scored(self, signature: TaskSignature) -> tuple[np.ndarray, np.ndarray]:
        """The tasks a new one is compared with, and its similarity to each."""
        if self._size < self.exact_below:
            found = np.arange(self._size)
        else:
            mates = [buckets.get(key, ()) for buckets, key in zip(self._buckets, self._keys(signature),
                                                                  strict=True)]
            found = np.unique(np.fromiter((i for m in mates for i in m), dtype=np.int64))
        num_perm = signature.num_perm
        s = (self._structural[found] == signature.structural).sum(axis=1) / num_perm
        t = (self._textual[found] == signature.textual).sum(axis=1) / num_perm
        return found, _combine(s, t, *self.weights)

    @staticmethod
    def _top(found: np.ndarray, similarities: np.ndarray) -> tuple[int, float]:
        top = similarities.max()
        return int(found[similarities == top].min()), float(top)

    def _grow(self) -> None:
        """Double the rows kept (amortized constant time an add)."""
        rows = max(64, 2 * len(self._best))
        width = self._structural.shape[1]
        for name in ("_structural", "_textual"):
            grown = np.empty((rows, width), dtype=np.uint64)
            grown[:self._size] = getattr(self, name)[:self._size]
            setattr(self, name, grown)
        self._best = np.resize(self._best, rows)
        self._best_similarity = np.resize(self._best_similarity, rows)

    def _keys(self, signature: TaskSignature) -> list[bytes]:
        rows = _band_rows(signature.num_perm, self.bands)
        return [signature.structural[band * rows:(band + 1) * rows].tobytes()
                + signature.textual[band * rows:(band + 1) * rows].tobytes() for band in range(self.bands)]


def _band_rows(num_perm: int, bands: int) -> int:
    """Rows per band: ``bands`` must divide the sketch length."""
    if bands < 1 or num_perm % bands:
        raise ValueError(f"bands must divide num_perm ({num_perm}), not {bands}")
    return num_perm // bands


def tail_share(similarities: Iterable[float], threshold: float) -> float:
    """The share of similarities at or above ``threshold`` (0.0 for none)."""
    values = np.asarray(list(similarities), dtype=float)
    return float(np.mean(values >= threshold)) if len(values) else 0.0


def similarity_summary(values: Iterable[float], threshold: float) -> dict:
    """Count, mean, median, 90th percentile, maximum and the share at or above ``threshold``
    (``tail_share``) of per-task similarities, for a round's metrics (all 0.0 when empty)."""
    data = np.asarray(list(values), dtype=float)
    if not len(data):
        return {"count": 0, "mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0, "threshold": threshold,
                "tail_share": 0.0}
    return {"count": len(data), "mean": float(data.mean()), "median": float(np.median(data)),
            "p90": float(np.percentile(data, 90)), "max": float(data.max()), "threshold": threshold,
            "tail_share": tail_share(data, threshold)}


def _combine(s, t, structural_weight: float, textual_weight: float):
    """The weighted mean of structural and textual estimates (scalars or arrays alike)."""
    if structural_weight < 0 or textual_weight < 0 or structural_weight + textual_weight <= 0:
        raise ValueError("weights must be non-negative, not both zero")
    return (structural_weight * s + textual_weight * t) / (structural_weight + textual_weight)


def _check_compatible(signatures: Sequence[TaskSignature]) -> None:
    shapes = {(s.seed, len(s.structural), len(s.textual)) for s in signatures}
    if len(shapes) > 1:
        raise ValueError(f"signatures of different seeds or sizes cannot be compared: {sorted(shapes)}")


@lru_cache(maxsize=8)
def _permutation_keys(num_perm: int, seed: int) -> np.ndarray:
    """One 64-bit key per permutation, from blake2b of (seed, index)."""
    keys = b"".join(hashlib.blake2b(f"minhash:{seed}:{i}".encode(), digest_size=8).digest()
                    for i in range(num_perm))
    return np.frombuffer(keys, dtype="<u8").astype(np.uint64)


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a bijection of 64-bit values that scatters every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))
