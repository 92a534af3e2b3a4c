"""How a rewrite declares what it changes: a builder that an operator fills in as it edits a
blueprint, in the stable keys of :mod:`interlock.recursive.contract`.

An operator says what it touches (which evidence, clauses, hyperedges, request lines and files) and
which cases its edit may decide differently; the builder works out, for those cases only, what the
policy then decides (through :func:`~interlock.synthesis.graph.resolve_blueprint`, the same
resolution the graph is built from) and so which decisions, effects and edges change. A change
anywhere else is undeclared and fails conformance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from interlock.core.types import TaskSize
from interlock.recursive.contract import DECLARED_FACETS, Delta, TransformationContract, edge_key, flatten
from interlock.synthesis.blueprints import Blueprint
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import RULE_CLAUSE, Resolution, resolve_blueprint
from interlock.synthesis.kinds.effects import realizations
from interlock.synthesis.packs import REQUEST_PATH


def derive(parent: Blueprint, domain: Domain, task_id: str, seed: int, **changes) -> Blueprint:
    """A child blueprint: the parent with ``changes`` (cases, options, params, groups, distractor
    rows and clauses, ``effects_per_decision``), its size recounted and each group's members
    recomputed from the cases (the group's pending cases, in the order the policy takes them)."""
    effects = changes.pop("effects_per_decision", parent.size.effects_per_decision)
    child = replace(parent, task_id=task_id, seed=seed, **changes)
    case = domain.case
    order = sorted(child.cases, key=lambda r: (r[case.date], r["id"]))
    groups = [{**g, "members": [r["id"] for r in order if r[case.group] == g["group"]]} for g in child.groups]
    return replace(child, groups=groups,
                   size=TaskSize(len(child.cases), effects, len(groups),
                                 len(child.distractor_rows) + len(child.distractor_clauses)))


class Declaration:
    """The changes one rewrite declares, collected key by key."""

    def __init__(self, parent: Blueprint, child: Blueprint, domain: Domain,
                 resolutions: tuple[Resolution, Resolution] | None = None) -> None:
        self.parent, self.child, self.domain = parent, child, domain
        self.before, self.after = resolutions or (resolve_blueprint(parent, domain),
                                                  resolve_blueprint(child, domain))
        self._parts = {facet: {"added": set(), "removed": set(), "changed": set()}
                       for facet in DECLARED_FACETS}
        self._evidence: dict[str, dict] = {}

    # ------------------------------------------------------------------ single keys

    def added(self, facet: str, key: str) -> None:
        self._parts[facet]["added"].add(key)

    def removed(self, facet: str, key: str) -> None:
        self._parts[facet]["removed"].add(key)

    def changed(self, facet: str, key: str, *fields: str) -> None:
        self._parts[facet]["changed"].update(f"{key}/{name}" for name in fields)

    def file(self, path: str, part: str | None = None) -> None:
        """A workspace file the rewrite changes (a file it creates counts as changed); for a table of
        records, which ``part``: a row by its id (see :func:`~interlock.recursive.contract.file_facts`)."""
        self.changed("files", path if part is None else f"{path}#{part}", "sha")

    def request_line(self, line: str) -> None:
        self.added("request", line)
        self.file(REQUEST_PATH)

    # ------------------------------------------------------------------ evidence

    def evidence(self, key: str, path: str, ref: str, change: str, fields: Iterable[str] = ()) -> None:
        """New or changed evidence and where it lives in the workspace."""
        fields = sorted(fields)
        if change == "added":
            self.added("nodes", key)
        else:
            self.changed("nodes", key, *fields)
        self._evidence[key] = {"key": key, "path": path, "ref": ref, "change": change, "fields": fields}
        self.file(path, ref if path.endswith(".csv") else None)

    def record(self, row: dict, change: str, fields: Iterable[str] = ()) -> None:
        self.evidence(f"record:{row['id']}", self.domain.case.table, row["id"], change,
                      [f"row.{name}" for name in fields])

    def clause(self, group: str, change: str, fields: Iterable[str] = ()) -> None:
        """A clause: the decision rule's (``group`` "rule") or a coupling or distractor clause's."""
        ref = RULE_CLAUSE if group == "rule" else self.after.clause_ref[group]
        self.evidence(f"clause:{group}", self.domain.policy.file, ref, change, fields)

    def renumbered(self) -> set[str]:
        """Declare every clause whose P-number the edit shifts; return the cases whose decisions
        cite one of those clauses (their basis, and what records it, changes with it)."""
        moved = {group for group, ref in self.before.clause_ref.items()
                 if group in self.after.clause_ref and self.after.clause_ref[group] != ref}
        for group in sorted(moved):
            self.clause(group, "changed", ["ref"])
        old_refs = {self.before.clause_ref[g] for g in moved}
        return {case for case, d in self.before.decided.items() if d.basis in old_refs}

    # ------------------------------------------------------------------ decisions and their effects

    def new_case(self, case_id: str) -> None:
        """A pending case the child adds: its record and options, its decision with every
        grounding, its effects and their realization edges."""
        row = next(r for r in self.child.cases if r["id"] == case_id)
        self.record(row, "added")
        decision = f"decision:{case_id}"
        self.added("nodes", decision)
        grounds = [f"record:{case_id}", "clause:rule", f"clause:{row[self.domain.case.group]}"]
        for option in self.after.options_by_case.get(case_id, []):
            key = f"option:{option['id']}"
            self.evidence(key, self.domain.decision.options.table, option["id"], "added")
            grounds.append(key)
        for source in grounds:
            self.added("edges", edge_key("grounding", source, decision))
        for kind in self._effects(self.after, self.child, case_id):
            self.added("nodes", f"effect:{kind}:{case_id}")
            self.added("edges", edge_key("realization", decision, f"effect:{kind}:{case_id}"))

    def decisions(self, cases: Iterable[str]) -> None:
        """Cases of both parent and child the edit may decide differently: each attribute of the
        decision that changes, each effect it gains, loses or writes differently, each clause it
        is grounded by instead of another."""
        group = self.domain.case.group
        for case_id in sorted(set(cases)):
            key = f"decision:{case_id}"
            b, a = self.before.decided[case_id], self.after.decided[case_id]
            pairs = {"outcome": (b.outcome.value, a.outcome.value),
                     "amount": (b.outcome.amount, a.outcome.amount),
                     "fallback": (b.outcome.fallback, a.outcome.fallback), "basis": (b.basis, a.basis)}
            fields = [name for name, (old, new) in pairs.items() if old != new]
            self.changed("nodes", key, *fields)
            old_row, new_row = _row(self.parent, case_id), _row(self.child, case_id)
            if old_row[group] != new_row[group]:
                self.removed("edges", edge_key("grounding", f"clause:{old_row[group]}", key))
                self.added("edges", edge_key("grounding", f"clause:{new_row[group]}", key))
            old = self._effects(self.before, self.parent, case_id)
            new = self._effects(self.after, self.child, case_id)
            for kind in new.keys() - old.keys():
                self.added("nodes", f"effect:{kind}:{case_id}")
                self.added("edges", edge_key("realization", key, f"effect:{kind}:{case_id}"))
            for kind in old.keys() - new.keys():
                self.removed("nodes", f"effect:{kind}:{case_id}")
                self.removed("edges", edge_key("realization", key, f"effect:{kind}:{case_id}"))
            for kind in old.keys() & new.keys():
                before, after = flatten(old[kind], "realization"), flatten(new[kind], "realization")
                self.changed("nodes", f"effect:{kind}:{case_id}",
                             *[name for name in before.keys() | after.keys()
                               if before.get(name) != after.get(name)])

    def _effects(self, resolution: Resolution, blueprint: Blueprint, case_id: str) -> dict[str, dict]:
        decided = resolution.decided[case_id]
        return {spec.kind: realization.to_dict() for spec, realization in realizations(
            self.domain, blueprint.size.effects_per_decision, _row(blueprint, case_id), decided.outcome,
            decided.basis)}

    def members(self, group: str) -> list[str]:
        """The cases of a group in the parent and the child."""
        def of(blueprint: Blueprint) -> list[str]:
            return next((g["members"] for g in blueprint.groups if g["group"] == group), [])
        return sorted(set(of(self.parent)) | set(of(self.child)))

    def observable(self, cases: Iterable[str]) -> bool:
        """Whether the child decides one of ``cases`` differently in a way something records: its
        outcome or basis (the register), or anything one of its effects writes. An amount no
        deliverable carries is not observable, so a child that only moves it asks nothing new."""
        probe = Declaration(self.parent, self.child, self.domain, (self.before, self.after))
        probe.decisions(c for c in cases if c in self.before.decided and c in self.after.decided)
        nodes = probe._parts["nodes"]
        return bool(nodes["added"] or nodes["removed"]
                    or any(k.startswith("effect:") or k.rsplit("/", 1)[1] in {"outcome", "basis"}
                           for k in nodes["changed"]))

    # ------------------------------------------------------------------ the contract

    def contract(self, operator: str, parents: tuple[str, ...], demands: str,
                 adds_requirement: bool) -> TransformationContract:
        """The declaration as a contract (its derived facets are filled in at validation, from the
        parent's graph: :meth:`TransformationContract.complete`)."""
        changes = {facet: Delta.of(**{part: sorted(keys) for part, keys in parts.items()})
                   for facet, parts in self._parts.items()}
        return TransformationContract(operator, parents, self.child.task_id, demands, adds_requirement,
                                      changes, tuple(self._evidence[k] for k in sorted(self._evidence)))


def _row(blueprint: Blueprint, case_id: str) -> dict:
    return next(r for r in blueprint.cases if r["id"] == case_id)
