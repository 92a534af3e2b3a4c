"""Task blueprints: per domain and pool, seeded entities and parameters for one task each.

Pools (``demo``, ``rft``, ``dev``, ``indist`` from training domains, ``benchmark`` from held-out
ones) are a column of the blueprint, and :func:`check_pools` refuses a task shared between pools or
a near duplicate across them.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from functools import cached_property

from interlock.core.errors import InterlockError
from interlock.core.io import dumps, loads
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS
from interlock.core.seeds import stable_seed
from interlock.core.types import HELDOUT_POOLS, INDIST_POOL, TRAIN_POOLS, TaskSize
from interlock.synthesis.catalog import Catalog, Domain
from interlock.synthesis.kinds.decisions import Row

PERIOD_START = date(2026, 10, 1)
_FIRST = (
    "Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemal",
    "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera",
    "Wen", "Xavi", "Yara", "Zoe",
)
_LAST = (
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski", "Brennan",
    "Iyer", "Fischer", "Osei", "Rossi", "Varga", "Nakamura", "Duarte", "Petrov", "Achebe", "Larsen",
    "Quispe",
)


@dataclass
class Blueprint:
    """One task before it has a graph: who the cases are and what the policy says."""

    task_id: str
    domain_id: str
    pool: str
    seed: int
    size: TaskSize
    cases: list[Row]
    options: list[Row]
    params: dict
    groups: list[dict]
    distractor_rows: list[Row] = field(default_factory=list)
    distractor_clauses: list[dict] = field(default_factory=list)

    def content(self) -> dict:
        """Everything that makes the task what it is, without its name, pool or seed."""
        return {"domain": self.domain_id, "effects_per_decision": self.size.effects_per_decision,
                "cases": self.cases, "options": self.options,
                "params": self.params, "groups": self.groups, "distractor_rows": self.distractor_rows,
                "distractor_clauses": self.distractor_clauses}

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(dumps(self.content()).encode()).hexdigest()[:24]

    @cached_property
    def skeleton(self) -> str:
        """The task with every word removed: renaming cannot hide a near duplicate."""
        def numbers(value: object) -> list:
            if isinstance(value, bool) or value is None:
                return []
            if isinstance(value, int):
                return [value]
            if isinstance(value, str):
                return [value] if value[:2] == "20" and value[4:5] == "-" else []  # dates
            items = [value[k] for k in sorted(value)] if isinstance(value, dict) else value
            return [n for item in items for n in numbers(item)]
        return hashlib.sha256(dumps(numbers(self.content())).encode()).hexdigest()[:24]

    def to_row(self) -> dict:
        return {"task_id": self.task_id, "domain_id": self.domain_id, "pool": self.pool,
                "seed": self.seed, **asdict(self.size),
                "cases": dumps(self.cases), "options": dumps(self.options),
                "params": dumps(self.params), "groups": dumps(self.groups),
                "distractor_rows": dumps(self.distractor_rows),
                "distractor_clauses": dumps(self.distractor_clauses),
                "fingerprint": self.fingerprint, "skeleton": self.skeleton}

    @classmethod
    def from_row(cls, row: dict, source: str) -> Blueprint:
        def field_of(name: str) -> object:
            return loads(row[name], file=source, item=row["task_id"], field=name)
        try:
            size = TaskSize(row["decisions"], row["effects_per_decision"], row["couplings"],
                            row["distractors"])
        except InterlockError as exc:
            raise InterlockError(exc.reason, file=source, item=row["task_id"], field=exc.field) from None
        blueprint = cls(row["task_id"], row["domain_id"], row["pool"], row["seed"], size,
                        field_of("cases"), field_of("options"), field_of("params"),
                        field_of("groups"), field_of("distractor_rows"),
                        field_of("distractor_clauses"))
        for name in ("fingerprint", "skeleton"):
            if row[name] != getattr(blueprint, name):
                raise InterlockError("does not match the blueprint's content (edited by hand?)",
                                     file=source, item=row["task_id"], field=name)
        return blueprint


def select_domains(catalog: Catalog, split: str, count: int, seed: int) -> list[Domain]:
    """The first ``count`` domains of a seeded shuffle: larger counts extend smaller ones."""
    domains = catalog.split(split)
    if count > len(domains):
        raise InterlockError(f"the catalog has {len(domains)} {split} domains, {count} requested",
                             item="scale", field=f"{split}_domains")
    order = sorted(domains, key=lambda d: stable_seed(seed, "domain-order", d.id))
    return order[:count]


def make_blueprint(domain: Domain, pool: str, index: int, size: TaskSize, seed: int) -> Blueprint:
    """One seeded task: cases, options, decision parameters and binding coupling parameters."""
    rng = random.Random(seed)
    kind = DECISION_KINDS[domain.decision.kind]
    case = domain.case
    n_rows = size.decisions + size.distractors
    numbers = sorted(rng.sample(range(1000, 10000), n_rows))
    free_groups = rng.sample(case.group_values, len(case.group_values))
    task_groups, spare_groups = free_groups[:size.couplings], free_groups[size.couplings:]
    days = rng.sample(range(28), size.decisions)
    rows = []
    for position, number in enumerate(numbers[:size.decisions]):
        rows.append({
            "id": f"{case.id_prefix}-{number}",
            case.subject: sample_subject(rng, domain),
            case.group: task_groups[position % size.couplings],
            case.date: (PERIOD_START + timedelta(days=days[position])).isoformat(),
            **kind.sample_case(rng, domain), "status": "pending",
        })
    options = _sample_options(rng, domain, rows)
    params = kind.sample_params(rng, domain, rows)
    rule = kind.rule(domain, params)
    order = sorted(rows, key=lambda r: (r[case.date], r["id"]))
    groups = []
    for index_group, group in enumerate(task_groups):
        coupling = domain.couplings[index_group % len(domain.couplings)]
        members = [r for r in order if r[case.group] == group]
        preferred = [kind.alternatives(r, rule, _options_of(options, r))[0] for r in members]
        groups.append({"group": group, "kind": coupling, "members": [r["id"] for r in members],
                       "params": COUPLING_KINDS[coupling].sample_params(rng, preferred)})
    distractor_rows, distractor_clauses = [], []
    for d in range(size.distractors):
        if d % 2 == 1 and spare_groups:
            group = spare_groups.pop()
            coupling = domain.couplings[0]
            members = [kind.alternatives(r, rule, _options_of(options, r))[0] for r in rows]
            distractor_clauses.append({"group": group, "kind": coupling,
                                       "params": COUPLING_KINDS[coupling].sample_params(rng, members)})
            continue
        row = {"id": f"{case.id_prefix}-{numbers[size.decisions + d]}",
               case.subject: sample_subject(rng, domain),
               case.group: rng.choice(case.group_values),
               case.date: (PERIOD_START - timedelta(days=rng.randint(1, 60))).isoformat(),
               **kind.sample_case(rng, domain), "status": "closed"}
        distractor_rows.append(row)
    task_id = f"{domain.id}.{pool}.{index:04d}"
    return Blueprint(task_id, domain.id, pool, seed, size, rows, options, params, groups,
                     distractor_rows, distractor_clauses)


def sample_subject(rng: random.Random, domain: Domain) -> str:
    if domain.case.subjects:
        return rng.choice(domain.case.subjects)
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def _sample_options(rng: random.Random, domain: Domain, rows: list[Row]) -> list[Row]:
    spec = domain.decision.options
    if spec is None:
        return []
    numbers = iter(sorted(rng.sample(range(100, 1000), 3 * len(rows))))
    return [{"id": f"OPT-{next(numbers)}", "case_id": r["id"], spec.provider: provider,
             "cost": rng.randrange(20, 400) * 5, "rating": rng.randint(1, 5)}
            for r in rows for provider in rng.sample(spec.providers, 3)]


def _options_of(options: list[Row], row: Row) -> list[Row]:
    return [o for o in options if o["case_id"] == row["id"]]


def generate_blueprints(catalog: Catalog, *, seed: int, train_domains: int, heldout_domains: int,
                        tasks_per_domain: dict[str, int], size: TaskSize) -> Iterator[Blueprint]:
    """Every blueprint of a scale, in a fixed order; near duplicates are re-drawn, not kept (a pool
    ``tasks_per_domain`` leaves out draws none).

    The ``indist`` pool is drawn last, after the benchmark: a redraw depends on every task drawn
    before it, so drawing it last leaves every other pool's blueprints as they were without it."""
    train = select_domains(catalog, "train", train_domains, seed)
    plan = [(d, pool) for d in train for pool in TRAIN_POOLS if pool != INDIST_POOL]
    plan += [(d, pool) for d in select_domains(catalog, "heldout", heldout_domains, seed)
             for pool in HELDOUT_POOLS]
    plan += [(d, INDIST_POOL) for d in train]
    seen: set[str] = set()
    for domain, pool in plan:
        for index in range(tasks_per_domain.get(pool, 0)):
            for attempt in range(100):
                task_seed = stable_seed(seed, domain.id, pool, index, attempt)
                blueprint = make_blueprint(domain, pool, index, size, task_seed)
                if blueprint.skeleton not in seen and blueprint.fingerprint not in seen:
                    break
            seen.update((blueprint.skeleton, blueprint.fingerprint))
            yield blueprint


class PoolCheck:
    """Streaming check that pools are disjoint: no shared task, no near duplicate across pools."""

    def __init__(self, catalog: Catalog, source: str) -> None:
        self.catalog, self.source = catalog, source
        self.pool_of: dict[str, dict[str, tuple[str, str]]] = {"task_id": {}, "fingerprint": {},
                                                                "skeleton": {}}

    def add(self, task_id: str, domain_id: str, pool: str, fingerprint: str, skeleton: str) -> None:
        split = self.catalog[domain_id].split
        allowed = TRAIN_POOLS if split == "train" else HELDOUT_POOLS
        if pool not in allowed:
            raise InterlockError(f"pool {pool!r} is not allowed for a {split} domain "
                                 f"(allowed: {', '.join(allowed)})",
                                 file=self.source, item=task_id, field="pool")
        for name, value in (("task_id", task_id), ("fingerprint", fingerprint), ("skeleton", skeleton)):
            seen = self.pool_of[name]
            if value in seen and (name == "task_id" or seen[value][0] != pool):
                what = {"task_id": "task id", "fingerprint": "task",
                        "skeleton": "near duplicate (same task up to words)"}[name]
                raise InterlockError(f"{what} already in pool {seen[value][0]!r} as {seen[value][1]}",
                                     file=self.source, item=task_id, field=name)
            seen.setdefault(value, (pool, task_id))


def check_pools(blueprints: list[Blueprint], catalog: Catalog, source: str) -> None:
    check = PoolCheck(catalog, source)
    for b in blueprints:
        check.add(b.task_id, b.domain_id, b.pool, b.fingerprint, b.skeleton)
