"""Realization (effect) kinds: where a decision must be carried through, and how.

A :class:`Realization` is the one description of an effect: the oracle turns it into a tool
call, the rubric into a check, the contract into a deliverable. Each kind renders one request
instruction and parses it back, so the critic can rebuild realizations from public text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from interlock.core.chat import ToolCall
from interlock.core.registry import DECISION_KINDS, EFFECT_KINDS
from interlock.synthesis.catalog import Domain, EffectSpec
from interlock.synthesis.kinds.decisions import Outcome
from interlock.synthesis.text import DETERMINER, PREPOSITION, Template, any_of

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
    #: whether every decision gets it, whatever its outcome (else only outcomes but the fallback);
    #: a domain's first effect is one of these
    every_outcome: ClassVar[bool] = False
    #: whether it posts the outcome's amount (so the decision kind must carry one)
    posts_amount: ClassVar[bool] = False
    #: whether the domain gives it an account code (``code``)
    takes_code: ClassVar[bool] = False
    #: the words that ask to carry decisions into an effect of this kind, read over a sentence's
    #: lower-case words joined by single spaces (the request-scope review: a task must not ask
    #: for an effect it does not request); None: no words are known
    cues: ClassVar[re.Pattern | None] = None

    @property
    def suffixes(self) -> tuple[str, ...] | None:
        """What the name of the file it writes ends with; None: it edits the case table (no file)."""
        return {"case_table": None, "jsonl": (".jsonl",), "folder": ("",)}.get(self.target, (".csv",))

    def words(self, domain: Domain, effect: EffectSpec) -> dict:
        """The instruction's content, from the domain declaration."""
        return {"noun": domain.case.noun, "fallback": domain.decision.fallback,
                "table": domain.case.table, "subject": domain.case.subject,
                "file": effect.file, "label": effect.label, "code": effect.code,
                "date_source": "its outcome" if DECISION_KINDS[domain.decision.kind].dated
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
    name, target, every_outcome = "status_update", "case_table", True
    cues = any_of(
        r"\bstatus(?:es)? (?:\w+ ){0,2}?(?:updated|set|changed|marked|flipped|moved|written|switched"
        r"|edited|amended)\b",
        r"\b(?:update|updates|updated|updating|set|sets|setting|change|changes|changed|changing|mark"
        r"|marks|marked|marking|flip|flips|flipped|switch|edit|edits|edited|amend) "
        rf"(?:{DETERMINER} )?(?:\w+ ){{0,3}}?status(?:es)?\b",
        r"\bwrit(?:e|es|ten|ing) (?:\w+ ){0,3}?back\b", r"\bmark(?:s|ed|ing)? (?:\w+ ){0,3}?as\b",
        r"\b(?:is|are|be|been|being|get|gets|got) (?:\w+ )?updated\b")
    template = Template("Set the `status` of each {noun} in `{table}` to its outcome.")

    def realize(self, words, case, outcome, basis):
        return Realization("update_csv", words["table"], str(case["id"]), {"status": outcome.value})


class LedgerPosting(EffectKind):
    name, posts_amount, takes_code = "ledger_posting", True, True
    columns = ("case_id", "account", "amount")
    cues = any_of(
        r"\bledgers?\b", r"\bjournal(?:s|ed)?\b", r"\bpost(?:s|ed|ing|ings)?\b",
        r"\b(?:charge|charges|charged|cost|costs|costed|book|books|booked|expense|expenses|expensed"
        r"|recharge|recharged|debit|debited|credited) (?:(?:it|them|this|that|all) |(?:each|every|the|all)"
        r" (?:\w+ ){1,3}?)?(?:to|against)\b",
        r"\bcapitali[sz](?:e|es|ed|ing|ation)\b", r"\baccounts? (?:code|number)s?\b", r"\bgl\b",
        r"\breceivables?\b")
    template = Template(
        "For each {noun} that is not {fallback}, append a row to `{file}` (the {label}) with "
        "case_id, account {code} and amount."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_csv", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "account": words["code"], "amount": str(outcome.amount)})


class PaymentInstruction(EffectKind):
    name, target, posts_amount = "payment_instruction", "jsonl", True
    cues = any_of(
        r"\bpay(?:ment)?s? (?:file|instruction|batch|order|record)s?\b", r"\bpayees?\b",
        r"\b(?:pay|pays|paid|paying) (?:\w+ )?out\b", r"\bpaid to\b",
        r"\b(?:is|are|be|been|being|gets?|got) paid\b",
        r"\bremit(?:s|ted|ting|tance|tances)?\b", r"\bwir(?:e|es|ed|ing)\b", r"\bbank transfers?\b")
    template = Template(
        "For each {noun} that is not {fallback}, append a record to `{file}` (the {label}) with "
        "case_id, payee (the {subject}) and amount."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_jsonl", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "payee": str(case[words["subject"]]),
            "amount": str(outcome.amount)})


class Notification(EffectKind):
    name, target, every_outcome = "notification", "jsonl", True
    cues = any_of(
        r"\bnotif(?:y|ies|ied|ying|ication|ications)\b", r"\bnotices\b",
        r"\b(?:a|an|each|every|one) (?:\w+ ){0,2}notice\b",
        r"\b(?:tell|tells|told|telling|inform|informs|informed|informing|alert|alerts|alerted|alerting"
        r"|remind|reminds|reminded|reminding|reminders?|e ?mails?|e ?mailed|e ?mailing|mails?|mailed"
        r"|mailing|announce|announces|announced|announcing|announcements?|answered|replied|outbox)\b",
        r"\b(?:send|sends|sent|sending) (?:\w+ ){0,3}?(?:the|their|its|his|her|a|an|each|every|word|them)"
        r" (?:\w+ )?(?:outcome|decision|result|message|note|word|update|email|answer)s?\b",
        r"\blet (?:\w+ ){1,3}know\b",
        r"\bhears? (?:the|their|its|about|back|of|from|whether|how|what)\b",
        r"\b(?:reply|replies|respond|responds|write back|writes back) to\b")
    template = Template(
        "For each {noun}, append a record to `{file}` (the {label}) with to (the {subject}), "
        "case_id and outcome."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_jsonl", words["file"], str(case["id"]), {
            "to": str(case[words["subject"]]), "case_id": str(case["id"]), "outcome": outcome.value})


class AuditNote(EffectKind):
    name, every_outcome = "audit_note", True
    columns = REGISTER_COLUMNS
    cues = any_of(
        r"\baudit(?:s|ed|ing|or|ors)?\b", r"\blogged\b", r"\blogging\b",
        rf"\blog (?:it|them|all|any|{DETERMINER})\b",
        rf"\b(?:in|to|into|on|onto) {DETERMINER} (?:\w+ ){{0,3}}log\b",
        r"\blog (?:entry|entries|line|lines|note|notes|record|records|row|rows)\b")
    template = Template(
        "For each {noun}, append a row to `{file}` (the {label}) with case_id, outcome and basis."
    )

    def realize(self, words, case, outcome, basis):
        return Realization("append_csv", words["file"], str(case["id"]), {
            "case_id": str(case["id"]), "outcome": outcome.value, "basis": basis})


class ScheduleEntry(EffectKind):
    name = "schedule_entry"
    cues = any_of(
        rf"\b(?:on|in|into|onto|to|from|for) {DETERMINER} (?:\w+ ){{0,3}}"
        r"(?:schedule|calendar|roster|timetable|diary|diaries|agenda|rota)s?\b",
        r"\b(?:calendar|schedule|diary|roster|timetable|rota) (?:entry|entries|invites?|invitations?"
        r"|events?|bookings?|appointments?|rows?)\b", r"\bcalendars?\b")
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
    cues = any_of(
        r"\b(?:(?:get|gets|getting|got|receive|receives|received|send|sends|sent|issue|issues|issued|write"
        r"|writes|wrote|written|draft|drafts|drafted|prepare|prepares|prepared|produce|produces|produced"
        r"|generate|generates|generated|become|becomes|mail|mails|mailed|attach|attached)"
        r" (?:\w+ ){0,3}?|with )"
        rf"(?:a|an|one|each|every|their|its|his|her) (?:(?!{PREPOSITION}\b)\w+ ){{0,3}}?"
        r"(?:letter|memo|memorandum|certificate|confirmation|statement|contract|agreement|package|sheet"
        r"|brief|notice|authori[sz]ation|document|advice|receipt|filing)s?\b")
    template = Template(
        "For each {noun} that is not {fallback}, write `{file}/<case_id>.md` (a {label}) with the "
        "lines `Case: <case_id>` and `Outcome: <outcome>` and no other lines."
    )
    target = "folder"

    def realize(self, words, case, outcome, basis):
        case_id = str(case["id"])
        return Realization("write_file", f"{words['file']}/{case_id}.md", case_id,
                           {"Case": case_id, "Outcome": outcome.value})


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
