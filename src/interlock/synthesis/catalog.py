"""The domain catalog: every domain is declared once, in ``domains.yaml``, never in the engine.

A domain is a family of workflows with its own completion structure. Its *signature* is
built from the closed vocabularies in :mod:`interlock.synthesis.kinds` only, so two domains that differ
only in words share a signature and the catalog refuses them.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from interlock.core.errors import InterlockError
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.core.resources import resource

#: the catalog that ships with the package (``src/interlock/resources/``)
CATALOG = "domains.yaml"
_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_WORD_RUN = re.compile(r"[^\W_]+")
#: where a summary's first sentence ends
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
def words(text: str) -> tuple[str, ...]:
    """The words of a text as names are matched: case folded, split at anything but a letter or
    a digit (``gross_cost.csv`` is gross cost csv, ``gross-cost`` is gross cost), each singular
    (notices: notice), so a name is found however it is punctuated or inflected."""
    return tuple(_singular(word) for word in _WORD_RUN.findall(text.casefold()))


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def holds(text: tuple[str, ...], name: tuple[str, ...]) -> bool:
    """Whether the words ``text`` hold the words ``name`` in a row."""
    width = len(name)
    return bool(width) and any(text[i:i + width] == name for i in range(len(text) - width + 1))


def _words(values: list[str]) -> list[str]:
    """Outcome and group words appear inside policy sentences: one word each, all distinct."""
    for value in values:
        if not _WORD.match(value):
            raise ValueError(f"{value!r} must be one word (letters, digits, '_' or '-')")
    if len(set(values)) != len(values):
        raise ValueError("values must be distinct")
    return values


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
    def _word_list(cls, values: list[str] | None) -> list[str] | None:
        return _words(values) if values is not None else None

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

    @field_validator("providers")
    @classmethod
    def _word_list(cls, values: list[str]) -> list[str]:
        return _words(values)

    @field_validator("table")
    @classmethod
    def _table_path(cls, value: str) -> str:
        return _relative_path(value, (".csv",))


class DecisionSpec(_Strict):
    """What the agent decides per case, in the domain's words."""

    kind: str = Field(description="a registered decision kind (interlock.core.registry.DECISION_KINDS)")
    positive: str | None = Field(default=None, description="outcome word for approval/payment kinds")
    fallback: str = Field(description="outcome of a case that cannot get its preferred outcome")
    tiers: list[str] | None = Field(default=None, min_length=2, max_length=3)
    teams: list[str] | None = Field(default=None, min_length=3)
    options: OptionTable | None = None

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        return DECISION_KINDS.check(value)

    @field_validator("positive", "fallback")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        return _words([value])[0] if value is not None else None

    @field_validator("tiers", "teams")
    @classmethod
    def _word_list(cls, values: list[str] | None) -> list[str] | None:
        return _words(values) if values is not None else None


class EffectSpec(_Strict):
    """A downstream record or artifact that must reflect each decision."""

    kind: str = Field(description="a registered effect kind (interlock.core.registry.EFFECT_KINDS)")
    label: str = Field(description="what a reader calls it, e.g. 'gross-cost ledger'")
    file: str | None = Field(default=None, description="target file (a folder for 'document')")
    code: str | None = Field(default=None, description="account or code a ledger posting carries")

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        return EFFECT_KINDS.check(value)

    @model_validator(mode="after")
    def _target(self) -> EffectSpec:
        kind = EFFECT_KINDS[self.kind]
        if kind.suffixes is None and self.file is not None:
            raise ValueError(f"{self.kind} edits the case table; it takes no 'file'")
        if kind.suffixes is not None:
            if self.file is None:
                raise ValueError(f"effect kind {self.kind} needs 'file'")
            _relative_path(self.file, kind.suffixes)
        if kind.takes_code != bool(self.code):
            raise ValueError(f"'code' (the account posted to) is given exactly for an effect kind that "
                             f"posts to one ({self.kind} {'does' if kind.takes_code else 'does not'})")
        return self

    def names(self) -> list[tuple[str, ...]]:
        """What names this effect in prose, as :func:`words`: its label, its file (whole, and its
        base name) and its account code."""
        given = [self.label, self.file, self.file and PurePosixPath(self.file).name, self.code]
        return [words(name) for name in given if name]


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
    couplings: list[str] = Field(min_length=1, max_length=2)  # registered coupling kinds
    effects: list[EffectSpec] = Field(min_length=2, max_length=4)
    policy: PolicySpec

    @field_validator("couplings")
    @classmethod
    def _coupling_kinds(cls, values: list[str]) -> list[str]:
        return [COUPLING_KINDS.check(value) for value in values]

    @cached_property
    def workflow(self) -> str:
        """The summary's first sentence: the decision and what couples decisions. Every request of
        the domain opens with it, so it names no effect (a task requests only some of them)."""
        return _SENTENCE_END.split(" ".join(self.summary.split()), maxsplit=1)[0]

    def structure_problem(self) -> tuple[str, str] | None:
        """The first cross-field defect as (field, reason), or None: what the engine relies on."""
        kind, case = self.decision.kind, self.case
        decision = DECISION_KINDS[kind]
        workflow = words(self.workflow)
        for index, effect in enumerate(self.effects):
            named = next((name for name in effect.names() if holds(workflow, name)), None)
            if named is not None:
                return "summary", (f"its first sentence, which every request states, names effect "
                                   f"{index} ({effect.label}) as {' '.join(named)!r}: a task requests "
                                   "only some effects")
        for role in decision.reads:
            if getattr(case, role) is None:
                return f"case.{role}", f"decision kind {kind} needs the case column '{role}'"
        if ("category" in decision.reads) != (case.categories is not None):
            return "case.categories", "given exactly when the decision reads a category"
        columns = case.columns()
        if len(set(columns)) != len(columns):
            return "case", "case columns (subject, group, date, ...) must be distinct"
        needs = {*(("positive",) if decision.positive_word else ()), *decision.takes}
        for name in ("positive", "tiers", "teams", "options"):
            given = getattr(self.decision, name) is not None
            if given != (name in needs):
                verb = "needs" if name in needs else "takes no"
                return f"decision.{name}", f"decision kind {kind} {verb} '{name}'"
        values = [*(self.decision.tiers or ()), *(self.decision.teams or ()), self.decision.fallback]
        if len(set(values)) != len(values):
            return "decision.fallback", "tiers, teams and the fallback must be distinct"
        if len(set(self.couplings)) != len(self.couplings):
            return "couplings", "couplings must be distinct"
        for index, coupling in enumerate(self.couplings):
            if not COUPLING_KINDS[coupling].binds(decision):
                return f"couplings.{index}", f"coupling {coupling} cannot bind decision kind {kind}"
        if not EFFECT_KINDS[self.effects[0].kind].every_outcome:
            every = [name for name, effect in EFFECT_KINDS.items() if effect.every_outcome]
            return "effects.0.kind", f"the first effect must apply to every outcome ({', '.join(every)})"
        effect_kinds = [e.kind for e in self.effects]
        if len(set(effect_kinds)) != len(effect_kinds):
            return "effects", "each effect kind at most once (a second target of a kind is no new structure)"
        for index, effect in enumerate(self.effects):
            if EFFECT_KINDS[effect.kind].posts_amount and not decision.carries_amount:
                return f"effects.{index}.kind", f"effect {effect.kind} posts an amount; {kind} has none"
        paths = [case.table, self.policy.file, *(e.file for e in self.effects if e.file)]
        if self.decision.options:
            paths.append(self.decision.options.table)
        if len(set(paths)) != len(paths):
            return "effects", "case table, policy, option table and effect files must be distinct"
        return None

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


def load_catalog(path: Path | str | None = None) -> Catalog:
    """Read and validate a catalog (default: the package's own); any defect names the file, the
    domain and the field."""
    path = Path(path) if path is not None else resource(CATALOG)
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
    """Each domain's structure, unique ids, and pairwise-distinct signatures (so held-out
    structures never occur in training)."""
    seen_ids: set[str] = set()
    seen_signatures: dict[str, str] = {}
    for domain in domains:
        problem = domain.structure_problem()
        if problem is not None:
            raise InterlockError(problem[1], file=source, item=domain.id, field=problem[0])
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
