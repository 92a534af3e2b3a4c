"""Realization (effect) kinds: where a decision must be carried through, and how.

A :class:`Realization` is the one description of an effect: the oracle turns it into a tool
call, the rubric into a check, the contract into a deliverable. Each kind renders one request
instruction and parses it back, so the critic can rebuild realizations from public text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from interlock.core.chat import ToolCall
from interlock.synthesis.catalog import Domain, EffectSpec
from interlock.synthesis.kinds import ALL_OUTCOME_EFFECTS
from interlock.synthesis.kinds.decisions import Outcome
from interlock.synthesis.text import Template

REGISTER_PATH = "out/decisions.csv"
REGISTER_COLUMNS = ("case_id", "outcome", "basis")
#: how a deliverable's field is written, as the contract declares it and the request tells the
#: agent; a check holds a value to exactly this (:func:`interlock.synthesis.checks.same`)
FIELD_FORMATS = {
    "text": "text exactly as the records and the policy give it, character for character, with "
            "nothing before or after it",
    "amount": "a whole number in plain digits, as the records write amounts (390, not 390.00, +390 "
              "or 3.9e2)",
}


def field_format(field: str) -> str:
    """The declared format of a deliverable field (a key of :data:`FIELD_FORMATS`)."""
    return "amount" if field == "amount" else "text"


@dataclass(frozen=True)
class Realization:
    """What one effect writes: ``op`` is append_csv, update_csv, append_jsonl or write_file."""

    op: str
    path: str
    key: str
    fields: dict[str, str]

    def to_dict(self) -> dict:
        return {"op": self.op, "path": self.path, "key": self.key, "fields": self.fields}

    @classmethod
    def from_dict(cls, data: dict) -> Realization:
        return cls(data["op"], data["path"], data["key"], dict(data["fields"]))

    def tool_call(self) -> ToolCall:
        """The one tool call that carries this realization out."""
        if self.op == "update_csv":
            return ToolCall("update_record", {"path": self.path, "id": self.key, "fields": self.fields})
        if self.op == "write_file":
            return ToolCall("write_file", {"path": self.path, "content": document_text(self.fields)})
        return ToolCall("append_record", {"path": self.path, "record": self.fields})


def register_entry(case_id: str, outcome: str, basis: str, path: str = REGISTER_PATH) -> Realization:
    """The primary deliverable: one row per decision in the decision register."""
    return Realization("append_csv", path, case_id,
                       {"case_id": case_id, "outcome": outcome, "basis": basis})


class EffectKind:
    name: ClassVar[str]
    template: ClassVar[Template]
    #: what the target is: "csv", "jsonl", "case_table" (edited in place) or "folder"
    target: ClassVar[str] = "csv"
    columns: ClassVar[tuple[str, ...]] = ()

    @property
    def every_outcome(self) -> bool:
        return self.name in ALL_OUTCOME_EFFECTS

    def words(self, domain: Domain, effect: EffectSpec) -> dict:
        """The instruction's content, from the domain declaration."""
        return {"noun": domain.case.noun, "fallback": domain.decision.fallback,
                "table": domain.case.table, "subject": domain.case.subject,
                "file": effect.file, "label": effect.label, "code": effect.code,
                "date_source": "its outcome" if domain.decision.kind == "due_date"
                else f"its {domain.case.date}"}

    def render(self, words: dict) -> str:
        return self.template.render(**words)

    def parse(self, text: str) -> dict | None:
        return self.template.parse(text)

    def header(self, words: dict) -> str | None:
        """Initial content of the target file (None: the kind creates no file up front)."""
        if self.target == "csv":
            return ",".join(self.csv_columns(words)) + "\n"
        return "" if self.target == "jsonl" else None

    def csv_columns(self, words: dict) -> tuple[str, ...]:
        return self.columns

    def realize(self, words: dict, case: dict, outcome: Outcome, basis: str) -> Realization:
        raise NotImplementedError


class StatusUpdate(EffectKind):
    name = "status_update"
    target = "case_table"
    template = Template("Set the `status` of each {noun} in `{table}` to its outcome.")

    def realize(self, words, case, outcome, basis):
        return Realization("update_csv", words["table"], str(case["id"]), {"status": outcome.value})


class LedgerPosting(EffectKind):
    name = "ledger_posting"
    columns = ("case_id", "account", "amount")
    template = Template(
        "For each {noun} that is not {fallback}, append a row to `{file}` (the {label}) with "
        "case_id, account {code} and amount."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_csv", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "account": words["code"], "amount": str(outcome.amount)})


class PaymentInstruction(EffectKind):
    name = "payment_instruction"
    target = "jsonl"
    template = Template(
        "For each {noun} that is not {fallback}, append a record to `{file}` (the {label}) with "
        "case_id, payee (the {subject}) and amount."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_jsonl", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "payee": str(case[words["subject"]]),
            "amount": str(outcome.amount)})


class Notification(EffectKind):
    name = "notification"
    target = "jsonl"
    template = Template(
        "For each {noun}, append a record to `{file}` (the {label}) with to (the {subject}), "
        "case_id and outcome."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_jsonl", words["file"], str(case["id"]), {
            "to": str(case[words["subject"]]), "case_id": str(case["id"]), "outcome": outcome.value})


class AuditNote(EffectKind):
    name = "audit_note"
    columns = REGISTER_COLUMNS
    template = Template(
        "For each {noun}, append a row to `{file}` (the {label}) with case_id, outcome and basis."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_csv", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "outcome": outcome.value, "basis": basis})


class ScheduleEntry(EffectKind):
    name = "schedule_entry"
    template = Template(
        "For each {noun} that is not {fallback}, append a row to `{file}` (the {label}) with "
        "case_id, {subject} and date (the date is {date_source})."
    )

    def csv_columns(self, words):
        return ("case_id", words["subject"], "date")

    def realize(self, words, case, outcome, basis):
        source = words["date_source"]
        when = outcome.value if source == "its outcome" else str(case[source.removeprefix("its ")])
        return Realization("append_csv", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), words["subject"]: str(case[words["subject"]]), "date": when})


class Document(EffectKind):
    name = "document"
    template = Template(
        "For each {noun} that is not {fallback}, write `{file}/<case_id>.md` (a {label}) with the "
        "lines `Case: <case_id>` and `Outcome: <outcome>` and no other lines."
    )
    target = "folder"

    def realize(self, words, case, outcome, basis):
        case_id = str(case["id"])
        return Realization("write_file", f"{words['file']}/{case_id}.md", case_id,
                           {"Case": case_id, "Outcome": outcome.value})


EFFECT_KINDS: dict[str, EffectKind] = {
    kind.name: kind()
    for kind in (StatusUpdate, LedgerPosting, PaymentInstruction, Notification, AuditNote,
                 ScheduleEntry, Document)
}


def realizations(domain: Domain, effects_per_decision: int, case: dict, outcome: Outcome,
                 basis: str) -> list[tuple[EffectSpec, Realization]]:
    """Every effect a decision with this outcome must reach (fallbacks skip positive-only ones)."""
    found = []
    for spec in domain.effects[:effects_per_decision]:
        kind = EFFECT_KINDS[spec.kind]
        if kind.every_outcome or not outcome.fallback:
            found.append((spec, kind.realize(kind.words(domain, spec), case, outcome, basis)))
    return found


def document_text(fields: dict[str, str]) -> str:
    """The body the oracle writes for a ``document`` effect: one ``Name: value`` line each."""
    return "".join(f"{name}: {value}\n" for name, value in fields.items())
