"""Rounds of recursive synthesis: round r draws parents from the tasks validated before it,
rewrites each with a seeded operator, validates the child, and adds the survivors to the pool the
next round draws from.

Only ``rft`` tasks are parents and children stay ``rft`` (so demonstrations, and the warm start,
are the same with and without RST); a join takes two parents of one domain; a child that
duplicates any task of any pool (its content, or its content up to words) is refused like any
other rejection, and so, with the novelty sampler, is one too similar to a task of the pool.
The pool keeps blueprints and similarity signatures only: a parent's graph and pack are
recompiled when it is drawn, so memory grows with the number of tasks by a few kilobytes each,
not by their compiled packs.
"""

from __future__ import annotations

import pickle
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from interlock.core.registry import OPERATORS
from interlock.core.seeds import stable_seed
from interlock.core.types import POOLS
from interlock.recursive.operators import NotApplicable, Operator
from interlock.recursive.similarity import SimilarityIndex, TaskSignature, task_signature
from interlock.recursive.validation import Checked, Task, compile_task, validate

if TYPE_CHECKING:
    from interlock.core.config import SynthesisConfig
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Catalog

SAMPLERS = ("uniform", "novelty")
#: the first word of a rejection's reason; anything else is one of the reviews' or controls' reasons
REJECTION_KINDS = ("not applicable", "compile", "conformance", "oracle", "duplicate", "novelty")
#: the pools no child may be a near duplicate of: all but rft, the pool the children join
GUARDED_POOLS = tuple(pool for pool in POOLS if pool != "rft")
NEAR_DUPLICATE = ("duplicate: the child is a near duplicate (the same up to words) of a "
                  f"{', '.join(GUARDED_POOLS[:-1])} or {GUARDED_POOLS[-1]} task")


@dataclass(frozen=True)
class RoundsConfig:
    """``rounds`` of ``candidates`` rewrites each; ``operators``: the names drawn from;
    ``sampler``: ``uniform`` (the published method) or ``novelty``. The novelty sampler draws
    parents weighted by how far each is from its nearest neighbour in the pool, and refuses a
    validated child whose nearest neighbour is at least ``similarity_threshold`` alike: weights
    alone cannot keep the tail flat, since a child lands next to its parent whichever parent is
    drawn (measured: docs/measurements.md#recursive-synthesis)."""

    rounds: int
    candidates: int
    sampler: str
    operators: tuple[str, ...]
    novelty_power: float
    seed: int
    similarity_threshold: float

    @classmethod
    def of(cls, config: SynthesisConfig, sampler: str, seed: int) -> RoundsConfig:
        """The rounds ``synthesis`` sets, growing with ``sampler`` (its own, or ``compare_with``)."""
        return cls(config.rounds, config.candidates, sampler, tuple(config.operators), config.novelty_power,
                   seed, config.similarity_threshold)

    @property
    def gate(self) -> float | None:
        """The similarity at which a child is refused as too close to the pool (None: no gate)."""
        return self.similarity_threshold if self.sampler == "novelty" else None

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        unknown = [name for name in self.operators if name not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown operator(s) {', '.join(unknown)}; known: {', '.join(OPERATORS)}")


@dataclass(frozen=True, eq=False)
class Member:
    """One task of the growing pool: where it came from and its signature, with its blueprint and
    contract kept compressed (about a kilobyte, where the blueprint's rows as Python objects take
    ten), since the pool holds every task of every round."""

    task_id: str
    domain_id: str
    round: int
    signature: TaskSignature
    parents: tuple[str, ...] = ()
    operator: str | None = None
    packed_blueprint: bytes = b""
    packed_contract: bytes | None = None

    @classmethod
    def of(cls, blueprint: Blueprint, round: int, signature: TaskSignature, parents: tuple[str, ...] = (),
           operator: str | None = None, contract: str | None = None) -> Member:
        return cls(blueprint.task_id, blueprint.domain_id, round, signature, parents, operator,
                   zlib.compress(pickle.dumps(blueprint, pickle.HIGHEST_PROTOCOL)),
                   None if contract is None else zlib.compress(contract.encode()))

    @property
    def blueprint(self) -> Blueprint:
        return pickle.loads(zlib.decompress(self.packed_blueprint))

    @property
    def contract(self) -> str | None:
        """The transformation contract as JSON (None for a seed)."""
        return None if self.packed_contract is None else zlib.decompress(self.packed_contract).decode()


@dataclass
class RoundReport:
    round: int
    candidates: int = 0
    validated: int = 0
    rejections: Counter = field(default_factory=Counter)  # (operator, reason kind) -> count
    validated_by_operator: Counter = field(default_factory=Counter)
    nodes: list[int] = field(default_factory=list)  # graph size of each validated child
    reference_calls: list[int] = field(default_factory=list)
    seconds: float = 0.0
    nearest: list[float] = field(default_factory=list)  # every pool task's nearest-neighbour similarity


@dataclass(frozen=True)
class Candidate:
    """One candidate: its round and index, operator, parents, child id and what became of it."""

    round: int
    index: int
    operator: str
    parents: tuple[str, ...]
    child: str
    checked: Checked | None  # None: the operator did not apply
    reason: str  # why it was refused ("" when validated)
    signature: TaskSignature | None = None  # the child's, once it passed validation

    @property
    def kind(self) -> str:
        """The rejection's kind: the prefix of its first reason (``not applicable``, ``compile``,
        ``conformance``, ``oracle``, ``duplicate``, ``novelty``, or ``review`` for the reviews and
        controls)."""
        if not self.reason:
            return ""
        head = self.reason.split(":", 1)[0]
        return head if head in REJECTION_KINDS else "review"


class Pool:
    """The tasks parents are drawn from, with the fingerprints of every pool's tasks (a child may
    duplicate none of them)."""

    def __init__(self, catalog: Catalog, seeds: Sequence[Task], taken: Iterable[Blueprint]) -> None:
        self.catalog = catalog
        self.members = [Member.of(t.blueprint, 0, task_signature(t.graph, t.pack)) for t in seeds]
        taken = list(taken)
        #: every task's content (no child may repeat one) and every other pool's content up to words
        #: (no child may be a near duplicate of a :data:`GUARDED_POOLS` task, the evaluation pools
        #: among them; within rft, a rewrite that changes only words, such as a routing change, is a
        #: new task)
        self.fingerprints: set[str] = ({b.fingerprint for b in taken}
                                       | {t.blueprint.fingerprint for t in seeds})
        self.skeletons: set[str] = {b.skeleton for b in taken if b.pool in GUARDED_POOLS}
        self._compiled: dict[str, Task] = {t.blueprint.task_id: t for t in seeds}
        self.index = SimilarityIndex()
        for member in self.members:
            self.index.add(member.signature)

    def task(self, member: Member) -> Task:
        """The member compiled (kept for the round it is drawn in)."""
        if member.task_id not in self._compiled:
            self._compiled[member.task_id] = compile_task(member.blueprint, self.catalog[member.domain_id])
        return self._compiled[member.task_id]

    def join(self, member: Member, fingerprint: str) -> None:
        """Add a validated child: a member, its content's fingerprint and its indexed signature."""
        self.members.append(member)
        self.fingerprints.add(fingerprint)
        self.index.add(member.signature)

    def forget_compiled(self) -> None:
        self._compiled.clear()

    def nearest(self) -> list[tuple[int | None, float]]:
        """Each member's nearest neighbour and similarity, kept up to date as members join
        (:class:`~interlock.recursive.similarity.SimilarityIndex`)."""
        return self.index.nearest()


def parent_weights(pool: Pool, sampler: str, power: float) -> np.ndarray:
    """Each pool member's chance of being drawn: equal, or ``(1 - nearest similarity) ** power``
    (plus a floor, so a task with a twin can still be drawn) for the novelty sampler."""
    if sampler == "uniform" or len(pool.members) < 2:
        weights = np.ones(len(pool.members))
    else:
        weights = np.array([(1.0 - similarity) ** power for _, similarity in pool.nearest()]) + 1e-3
    return weights / weights.sum()


def plan_round(pool: Pool, config: RoundsConfig,
               round_number: int) -> list[tuple[int, Operator, list[Member]]]:
    """The round's candidates, drawn before any is validated (so what one candidate becomes never
    changes which parents the next draws): for each, an operator and its parents."""
    if not pool.members:  # nothing was admitted to grow from: the round has no candidates
        return []
    rng = random.Random(stable_seed(config.seed, "rst", round_number))
    weights = parent_weights(pool, config.sampler, config.novelty_power)
    plan = []
    for index in range(config.candidates):
        operator = OPERATORS[rng.choice(config.operators)]
        first = pool.members[int(rng.choices(range(len(pool.members)), weights=weights)[0])]
        parents = [first]
        if operator.arity == 2:
            same = [i for i, m in enumerate(pool.members)
                    if m.domain_id == first.domain_id and m is not first]
            if same:
                parents.append(pool.members[rng.choices(same, weights=[weights[i] for i in same])[0]])
        plan.append((index, operator, parents))
    return plan


def child_id(parent: Blueprint, round_number: int, index: int) -> str:
    """A child's task id: its domain and pool, then ``r<round>.<index>`` (so ids sort by round)."""
    return f"{parent.domain_id}.{parent.pool}.r{round_number:02d}.{index:05d}"


def attempt(pool: Pool, operator: Operator, parents: Sequence[Member], round_number: int, index: int,
            seed: int, gate: float | None = None) -> Candidate:
    """One candidate: rewrite, validate, and refuse a duplicate, or, with a ``gate``, a child at
    least that similar to a pool task."""
    first = parents[0].blueprint
    task_id = child_id(first, round_number, index)
    names = tuple(p.task_id for p in parents)
    domain = pool.catalog[first.domain_id]
    try:
        rewrite = operator.rewrite([p.blueprint for p in parents], domain, task_id,
                                   stable_seed(seed, "rst", round_number, index))
    except NotApplicable as exc:
        return Candidate(round_number, index, operator.name, names, task_id, None, f"not applicable: {exc}")
    checked = validate(pool.task(parents[0]), rewrite, domain)
    reason = checked.reasons[0] if checked.reasons else ""
    if not reason and rewrite.child.fingerprint in pool.fingerprints:
        reason = "duplicate: the child's content is already a task's"
    if not reason and rewrite.child.skeleton in pool.skeletons:
        reason = NEAR_DUPLICATE
    if reason:
        return Candidate(round_number, index, operator.name, names, task_id, checked, reason)
    signature = task_signature(checked.task.graph, checked.task.pack)
    if gate is not None:
        closest, value = pool.index.closest(signature, gate)
        if closest is not None:
            reason = (f"novelty: the child is {value:.3f} similar to "
                      f"{pool.members[closest].task_id} (the gate: {gate})")
    return Candidate(round_number, index, operator.name, names, task_id, checked, reason, signature)


Progress = Callable[[int], None]


def grow_rounds(pool: Pool, config: RoundsConfig, *, first: int = 1,
                progress: Progress | None = None) -> Iterator[tuple[RoundReport, list[Candidate]]]:
    """Run the rounds, numbered from ``first``; yield each round's report and its candidates'
    outcomes (validated children have joined ``pool`` by then). ``progress`` is called with the
    number of candidates done."""
    for round_number in range(first, first + config.rounds):
        report, outcomes = RoundReport(round_number), []
        start = time.perf_counter()
        for index, operator, parents in plan_round(pool, config, round_number):
            outcome = attempt(pool, operator, parents, round_number, index, config.seed, config.gate)
            outcomes.append(outcome)
            report.candidates += 1
            if outcome.reason:
                report.rejections[operator.name, outcome.kind] += 1
            else:
                task = outcome.checked.task
                pool.join(Member.of(task.blueprint, round_number, outcome.signature, outcome.parents,
                                    operator.name, outcome.checked.contract.to_json()),
                          task.blueprint.fingerprint)
                report.validated += 1
                report.validated_by_operator[operator.name] += 1
                report.nodes.append(len(task.graph.nodes))
                report.reference_calls.append(len(task.pack.reference))
            if progress is not None:
                progress(1)
        pool.forget_compiled()
        report.seconds = time.perf_counter() - start
        report.nearest = [similarity for _, similarity in pool.nearest()]
        yield report, outcomes
