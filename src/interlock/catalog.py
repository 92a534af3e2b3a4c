"""The domain catalog: every domain is declared once, in ``domains.yaml``, never in the engine.

A domain is a family of workflows with its own completion structure. Its *signature* is
built from the closed vocabularies in :mod:`interlock.kinds` only, so two domains that differ
only in words share a signature and the catalog refuses them.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from interlock.errors import InterlockError
from interlock.kinds import (
    ALL_OUTCOME_EFFECTS,
    AMOUNT_DECISIONS,
    AMOUNT_EFFECTS,
    COUPLING_COMPATIBLE,
    CouplingKindName,
    DecisionKindName,
    EffectKindName,
)

CATALOG_PATH = Path(__file__).with_name("domains.yaml")
_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
#: which case columns each decision kind reads
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "limit_approval": ("amount",),
    "eligibility_approval": ("amount", "category"),
    "capped_payment": ("amount",),
    "rate_payment": ("quantity",),
    "tier_assignment": ("score",),
    "team_routing": ("category",),
    "option_selection": (),
    "due_date": (),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _relative_path(value: str, suffixes: tuple[str, ...]) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or path.suffix not in suffixes:
        raise ValueError(f"must be a relative path inside the workspace ending in {suffixes}")
    return value


class CaseTable(_Strict):
    """The record table whose pending rows the agent decides on."""

    noun: str
    plural: str
    table: str
    id_prefix: str = Field(pattern=r"^[A-Z]{2,4}$")
    subject: str = Field(description="column naming who or what the case is about")
    subjects: list[str] | None = Field(
        default=None, min_length=4, description="values of the subject column when it is not a person")
    group: str = Field(description="column that partitions cases into coupling groups")
    group_values: list[str] = Field(min_length=4)
    date: str = Field(description="column with the date that orders cases for couplings")
    amount: str | None = None
    category: str | None = None
    categories: list[str] | None = Field(default=None, min_length=4)
    quantity: str | None = None
    score: str | None = None

    @field_validator("table")
    @classmethod
    def _table_path(cls, value: str) -> str:
        return _relative_path(value, (".csv",))

    @field_validator("subject", "group", "date", "amount", "category", "quantity", "score")
    @classmethod
    def _column(cls, value: str | None) -> str | None:
        if value is not None and (not _IDENT.match(value) or value in {"id", "status"}):
            raise ValueError("a column name is snake_case and not 'id' or 'status'")
        return value

    @field_validator("group_values", "categories")
    @classmethod
    def _words(cls, values: list[str] | None) -> list[str] | None:
        for value in values or ():
            if not _WORD.match(value):
                raise ValueError(f"{value!r} must be one word (letters, digits, '_' or '-')")
        if values is not None and len(set(values)) != len(values):
            raise ValueError("values must be distinct")
        return values

    def columns(self) -> list[str]:
        optional = [self.amount, self.category, self.quantity, self.score]
        return ["id", self.subject, self.group, self.date, *[c for c in optional if c], "status"]


class OptionTable(_Strict):
    """Candidate rows an ``option_selection`` decision chooses among (quotes, bids, slots)."""

    table: str
    noun: str
    plural: str
    provider: str = Field(description="column naming who offers the option")
    providers: list[str] = Field(min_length=4)

    @field_validator("table")
    @classmethod
    def _table_path(cls, value: str) -> str:
        return _relative_path(value, (".csv",))


class DecisionSpec(_Strict):
    """What the agent decides per case, in the domain's words."""

    kind: DecisionKindName
    positive: str | None = Field(default=None, description="outcome word for approval/payment kinds")
    fallback: str = Field(description="outcome of a case that cannot get its preferred outcome")
    tiers: list[str] | None = Field(default=None, min_length=2, max_length=3)
    teams: list[str] | None = Field(default=None, min_length=3)
    options: OptionTable | None = None

    @field_validator("positive", "fallback")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        if value is not None and not _WORD.match(value):
            raise ValueError(f"{value!r} must be one word (letters, digits, '_' or '-')")
        return value

    @model_validator(mode="after")
    def _kind_vocabulary(self) -> DecisionSpec:
        needs = {
            "limit_approval": "positive", "eligibility_approval": "positive",
            "capped_payment": "positive", "rate_payment": "positive",
            "tier_assignment": "tiers", "team_routing": "teams", "option_selection": "options",
        }.get(self.kind)
        if needs and getattr(self, needs) is None:
            raise ValueError(f"decision kind {self.kind} needs '{needs}'")
        return self


class EffectSpec(_Strict):
    """A downstream record or artifact that must reflect each decision."""

    kind: EffectKindName
    label: str = Field(description="what a reader calls it, e.g. 'gross-cost ledger'")
    file: str | None = Field(default=None, description="target file (a folder for 'document')")
    code: str | None = Field(default=None, description="account or code a ledger posting carries")

    @model_validator(mode="after")
    def _target(self) -> EffectSpec:
        if self.kind == "status_update":
            if self.file is not None:
                raise ValueError("status_update edits the case table; it takes no 'file'")
            return self
        if self.file is None:
            raise ValueError(f"effect kind {self.kind} needs 'file'")
        suffix = {"payment_instruction": (".jsonl",), "notification": (".jsonl",), "document": ("",)}
        _relative_path(self.file, suffix.get(self.kind, (".csv",)))
        if self.kind == "ledger_posting" and not self.code:
            raise ValueError("ledger_posting needs 'code' (the account it posts to)")
        return self


class PolicySpec(_Strict):
    file: str
    title: str

    @field_validator("file")
    @classmethod
    def _policy_path(cls, value: str) -> str:
        return _relative_path(value, (".md",))


class Domain(_Strict):
    """One declared domain. Validation here is all the engine needs to trust it."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    name: str
    area: str
    split: Literal["train", "heldout"]
    summary: str
    case: CaseTable
    decision: DecisionSpec
    couplings: list[CouplingKindName] = Field(min_length=1, max_length=2)
    effects: list[EffectSpec] = Field(min_length=2, max_length=4)
    policy: PolicySpec

    @model_validator(mode="after")
    def _structure(self) -> Domain:
        kind = self.decision.kind
        for role in REQUIRED_FIELDS[kind]:
            if getattr(self.case, role) is None:
                raise ValueError(f"decision kind {kind} needs the case column '{role}'")
        if (kind in {"eligibility_approval", "team_routing"}) != (self.case.categories is not None):
            raise ValueError("'case.categories' is given exactly when the decision reads a category")
        if len(set(self.couplings)) != len(self.couplings):
            raise ValueError("couplings must be distinct")
        for coupling in self.couplings:
            if kind not in COUPLING_COMPATIBLE[coupling]:
                raise ValueError(f"coupling {coupling} cannot bind decision kind {kind}")
        if self.effects[0].kind not in ALL_OUTCOME_EFFECTS:
            raise ValueError(
                f"the first effect must apply to every outcome ({sorted(ALL_OUTCOME_EFFECTS)})"
            )
        for effect in self.effects:
            if effect.kind in AMOUNT_EFFECTS and kind not in AMOUNT_DECISIONS:
                raise ValueError(f"effect {effect.kind} posts an amount; {kind} has none")
        paths = [self.case.table, self.policy.file, *(e.file for e in self.effects if e.file)]
        if self.decision.options:
            paths.append(self.decision.options.table)
        if len(set(paths)) != len(paths):
            raise ValueError("case table, policy, option table and effect files must be distinct")
        return self

    @cached_property
    def signature(self) -> str:
        """Structural signature: kinds only, so renaming cannot make two domains distinct."""
        return "|".join((
            f"decision={self.decision.kind}",
            "coupling=" + "+".join(sorted(self.couplings)),
            "effects=" + "+".join(sorted(e.kind for e in self.effects)),
        ))


class Catalog:
    """The validated list of domains, in declaration order."""

    def __init__(self, domains: list[Domain], source: str) -> None:
        self.domains = domains
        self.source = source
        self._by_id = {d.id: d for d in domains}

    def __getitem__(self, domain_id: str) -> Domain:
        try:
            return self._by_id[domain_id]
        except KeyError:
            raise InterlockError(f"unknown domain {domain_id!r}", file=self.source) from None

    def split(self, split: str) -> list[Domain]:
        return [d for d in self.domains if d.split == split]


def load_catalog(path: Path | str = CATALOG_PATH) -> Catalog:
    """Read and validate a catalog; any defect names the file, the domain and the field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InterlockError(f"cannot read the catalog: {exc}", file=str(path)) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("domains"), list):
        raise InterlockError("expected a mapping with a 'domains' list", file=str(path))
    domains = []
    for index, entry in enumerate(raw["domains"]):
        named = isinstance(entry, dict) and "id" in entry
        item = f"domains[{index}]" + (f" ({entry['id']})" if named else "")
        try:
            domains.append(Domain.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or None
            raise InterlockError(error["msg"], file=str(path), item=item, field=field) from None
    check_catalog(domains, str(path))
    return Catalog(domains, str(path))


def check_catalog(domains: list[Domain], source: str) -> None:
    """Unique ids, pairwise-distinct signatures, and held-out structures unseen in training."""
    seen_ids: set[str] = set()
    seen_signatures: dict[str, str] = {}
    for domain in domains:
        if domain.id in seen_ids:
            raise InterlockError("duplicate domain id", file=source, item=domain.id, field="id")
        seen_ids.add(domain.id)
        other = seen_signatures.get(domain.signature)
        if other is not None:
            raise InterlockError(
                f"same structural signature as {other!r} ({domain.signature}): a renamed domain "
                "is not a new domain", file=source, item=domain.id, field="signature",
            )
        seen_signatures[domain.signature] = domain.id
