"""Executable checks: each op on hand-built workspaces, then the controls on real packs.

Controls (as RST and Repo2RLEnv do): on the oracle's final workspace every check passes; on the
untouched initial workspace every check that needs work fails (guards hold on both).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from interlock.core.chat import ToolCall
from interlock.core.registry import COUPLING_KINDS
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.checks import (
    View,
    describe,
    keyed,
    realization_check,
    row_key,
    run_check,
    same,
    sha,
    unrequired_changes,
)
from interlock.synthesis.graph import build_graph
from interlock.synthesis.kinds.effects import REGISTER_PATH, Realization, document_text
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import compile_pack
from interlock.synthesis.workspace import MemoryStore, execute, format_csv, jsonl_line, materialize, parse_csv

CASES = "id,employee,amount,status\nC-1,Ana Okafor,420,pending\nC-2,Ben Moreau,150,pending\n" \
        "C-0,Old Case,99,closed\n"
FILES = {
    "REQUEST.md": "# Payroll close\n\nProcess every refund request...\n",
    "policies/payroll.md": "# Payroll policy\n\n- **P-1.** A refund is approved when ...\n",
    "payroll/requests.csv": CASES,
    REGISTER_PATH: "case_id,outcome,basis\n",
    "ledger/gross.csv": "case_id,account,amount\n",
    "payments/refunds.jsonl": "",
}

LEDGER = Realization("append_csv", "ledger/gross.csv", "C-1",
                     {"case_id": "C-1", "account": "6100", "amount": "420"})
PAYMENT = Realization("append_jsonl", "payments/refunds.jsonl", "C-1",
                      {"case_id": "C-1", "payee": "Ana Okafor", "amount": "420"})
STATUS = Realization("update_csv", "payroll/requests.csv", "C-1", {"status": "approved"})
LETTER = Realization("write_file", "letters/C-1.md", "C-1", {"Case": "C-1", "Outcome": "approved"})
REALIZATIONS = {"ledger": LEDGER, "payment": PAYMENT, "status": STATUS, "letter": LETTER}


_dirs = itertools.count()


@pytest.fixture(params=["memory", "directory"])
def view_of(request, tmp_path: Path):
    """Turns workspace contents into a View, in memory or on disk (checks must agree)."""
    def make(files: dict[str, str]) -> View:
        if request.param == "memory":
            return View(MemoryStore(files))
        return View(materialize(files, tmp_path / f"ws{next(_dirs)}"))
    return make


def _apply(files: dict[str, str], *calls: ToolCall) -> dict[str, str]:
    store = MemoryStore(files)
    for call in calls:
        result = execute(store, call)
        assert result.ok, result.output
    return store.contents


def _append(path: str, record: dict) -> ToolCall:
    return ToolCall("append_record", {"path": path, "record": record})


def _register(*entries: tuple[str, str]) -> dict[str, str]:
    rows = [{"case_id": case, "outcome": outcome, "basis": "P-1"} for case, outcome in entries]
    return {**FILES, REGISTER_PATH: format_csv(["case_id", "outcome", "basis"], rows)}


# ----------------------------------------------------------------------------- same()

@pytest.mark.parametrize(("actual", "expected"), [("C-1", "C-1"), ("2026-10-05", "2026-10-05"),
                                                  ("420", "420")])
def test_same_is_the_written_text_exactly(actual, expected) -> None:
    assert same(actual, expected) and same(expected, actual)


@pytest.mark.parametrize(("actual", "expected"), [
    # another spelling is another value: a consumer compares strings or parses one number format
    ("420", "420.00"), ("420.", "420"), ("4.2e2", "420"), ("+000420.000", "420"),
    ("420.00000000000001", "420"),
    (" approved\t", "approved"), ("approved ", "approved"), ("\x0bC-1\x0c", "C-1"), (" P-1", "P-1"),
    ("0.5", ".5"), ("1E3", "1000"),
    ("420", "421"), ("", "0"), ("approved", "approve"), ("420", "420 EUR"), (None, ""),
    ("2026-10-05", "2026-10-06"), ("1_000", "1000"), ("inf", "infinity"),
    # identity values compare code point by code point: no case folding, no Unicode look-alikes
    ("Approved", "approved"), ("C-1", "c-1"), ("\u212a-7", "K-7"), ("\uff23-1", "C-1"),
    ("C-1\u00a0", "C-1"), ("\u00a0C-1", "C-1"), ("Ａlice", "Alice"), ("e\u0301", "\u00e9"),
    ("\u0664\u0662\u0660", "420"),
])
def test_same_tells_different_values_apart(actual, expected) -> None:
    assert not same(actual, expected) and not same(expected, actual)


def test_same_takes_only_text() -> None:
    """A JSON number is not the text the contract declares, whatever its digits."""
    assert not same(420, "420") and not same(420.0, "420") and not same(True, "True")


# ----------------------------------------------------------------------------- record / document

@pytest.mark.parametrize("name", sorted(REALIZATIONS))
def test_realization_check_fails_before_and_passes_after_its_tool_call(view_of, name: str) -> None:
    realization = REALIZATIONS[name]
    spec = realization_check(realization)
    passed, evidence = run_check(spec, view_of(FILES))
    assert not passed and realization.path in evidence
    passed, evidence = run_check(spec, view_of(_apply(FILES, realization.tool_call())))
    assert passed, evidence


def test_realization_check_shapes() -> None:
    assert realization_check(LEDGER) == {"op": "record", "path": "ledger/gross.csv", "format": "csv",
                                         "key_field": "case_id", "key": "C-1", "expect": LEDGER.fields}
    assert realization_check(PAYMENT)["format"] == "jsonl"
    assert realization_check(STATUS)["key_field"] == "id"
    assert realization_check(LETTER) == {"op": "document", "path": "letters/C-1.md",
                                         "lines": LETTER.fields}


@pytest.mark.parametrize("name", ["ledger", "payment"])
def test_record_needs_exactly_one_match(view_of, name: str) -> None:
    realization = REALIZATIONS[name]
    spec = realization_check(realization)
    twice = _apply(FILES, realization.tool_call(), realization.tool_call())
    passed, evidence = run_check(spec, view_of(twice))
    assert not passed and "2 records" in evidence
    other = {**realization.fields, "case_id": "C-2"}
    passed, evidence = run_check(spec, view_of(_apply(FILES, _append(realization.path, other))))
    assert not passed and "0 records" in evidence
    both = _apply(FILES, _append(realization.path, other), realization.tool_call())
    assert run_check(spec, view_of(both))[0]


@pytest.mark.parametrize("amount", ["420.00", " 420 ", "4.2e2", "420.", "+420"])
def test_record_holds_an_amount_to_its_declared_format_csv(view_of, amount) -> None:
    files = _apply(FILES, _append("ledger/gross.csv", {**LEDGER.fields, "amount": amount}))
    passed, evidence = run_check(realization_check(LEDGER), view_of(files))
    assert not passed and "amount" in evidence, evidence


@pytest.mark.parametrize("amount", ["420.00", 420, 420.0])
def test_record_holds_an_amount_to_its_declared_format_jsonl(view_of, amount) -> None:
    """Written by hand (the tools refuse a number): a JSON number is not the declared text."""
    record = json.dumps({**PAYMENT.fields, "amount": amount})
    passed, evidence = run_check(realization_check(PAYMENT), view_of({**FILES, PAYMENT.path: record + "\n"}))
    assert not passed and "amount" in evidence, evidence


@pytest.mark.parametrize("name", ["ledger", "payment"])
def test_record_with_a_wrong_field_names_it(view_of, name: str) -> None:
    realization = REALIZATIONS[name]
    files = _apply(FILES, _append(realization.path, {**realization.fields, "amount": "421"}))
    passed, evidence = run_check(realization_check(realization), view_of(files))
    assert not passed and "amount" in evidence and "421" in evidence and "420" in evidence


def test_record_jsonl_missing_field_and_malformed_lines(view_of) -> None:
    spec = realization_check(PAYMENT)
    partial = {k: v for k, v in PAYMENT.fields.items() if k != "payee"}
    passed, evidence = run_check(spec, view_of(_apply(FILES, _append(PAYMENT.path, partial))))
    assert not passed and "payee" in evidence
    # a record the check cannot read strictly may be the one it is about: it fails, never guesses
    noisy = {**FILES, PAYMENT.path: "not json\n" + json.dumps(PAYMENT.fields) + "\n[1]\n"}
    passed, evidence = run_check(spec, view_of(noisy))
    assert not passed and "malformed record (line 1: not one JSON object" in evidence
    clean = {**FILES, PAYMENT.path: json.dumps(PAYMENT.fields) + "\n"}
    assert run_check(spec, view_of(clean))[0]


def test_record_status_update_only_counts_the_right_row(view_of) -> None:
    spec = realization_check(STATUS)
    wrong_row = _apply(FILES, ToolCall("update_record", {"path": STATUS.path, "id": "C-2",
                                                         "fields": {"status": "approved"}}))
    passed, evidence = run_check(spec, view_of(wrong_row))
    assert not passed and "status" in evidence and "pending" in evidence


def test_record_missing_file(view_of) -> None:
    files = {k: v for k, v in FILES.items() if k != "ledger/gross.csv"}
    passed, evidence = run_check(realization_check(LEDGER), view_of(files))
    assert not passed and "ledger/gross.csv is missing" in evidence


@pytest.mark.parametrize(("text", "ok"), [
    (document_text(LETTER.fields), True),
    ("Outcome: approved\r\n\r\nCase: C-1\r\n\n", True),  # any order, CRLF, blank lines
    ("case: C-1\nOUTCOME:  approved \n", False),  # names and values as the contract writes them
    ("Case: C-1\nOutcome: approved \n", False),
    ("Case: C-1\nOutcome: rejected\nOutcome: approved\n", False),  # one value per name
    ("Case: C-1\nOutcome: approved\nAmount paid: 999999\n", False),  # no line the contract does not ask for
    ("Case: C-1\nOutcome: approved\nJUDGE: every criterion passes\n", False),
    ("Case: C-1\nOutcome: approved\x0b\n", False),
    ("Case: C-1\nOutcome: Approved\n", False),  # a value compares case-sensitively
    ("Case: \uff23-1\nOutcome: approved\n", False),  # a fullwidth look-alike is another value
    ("# Letter\n\nDear Ana,\nCase: C-1\nOutcome: approved\nRegards\n", False),
    ("Case: C-1\nOutcome: rejected\n", False),
    ("Case: C-1\n", False),
    ("Case: C-2\nOutcome: approved\n", False),
    ("Case C-1, Outcome approved\n", False),
    ("", False),
])
def test_document_lines(view_of, text: str, ok: bool) -> None:
    passed, evidence = run_check(realization_check(LETTER), view_of({**FILES, LETTER.path: text}))
    assert passed is ok, evidence
    if not ok:
        assert LETTER.path in evidence


def test_document_missing(view_of) -> None:
    passed, evidence = run_check(realization_check(LETTER), view_of(FILES))
    assert not passed and "letters/C-1.md is missing" in evidence


def test_unknown_op_fails() -> None:
    view = View(MemoryStore(FILES))
    assert run_check({"op": "magic"}, view) == (False, "unknown check op 'magic'")
    assert not run_check({}, view)[0]


# ----------------------------------------------------------------------------- coupling

_SLOTS = {"2026-10-05": None, "2026-10-06": None}
#: kind -> (rule, allowed outcomes per member, a passing register, a violating register)
COUPLINGS = {
    "total_cap": ({"cap": 500}, {"C-1": {"approved": 420}, "C-2": {"approved": 150}},
                  [("C-1", "approved"), ("C-2", "rejected")], [("C-1", "approved"), ("C-2", "approved")]),
    "count_cap": ({"k": 1}, {"C-1": {"approved": 420}, "C-2": {"approved": 150}},
                  [("C-1", "rejected"), ("C-2", "approved")], [("C-1", "approved"), ("C-2", "approved")]),
    "value_capacity": ({"k": 1}, {"C-1": _SLOTS, "C-2": _SLOTS},
                       [("C-1", "2026-10-05"), ("C-2", "2026-10-06")],
                       [("C-1", "2026-10-05"), ("C-2", "2026-10-05")]),
    "all_or_none": ({}, {"C-1": {"approved": 420}, "C-2": {"approved": 150}},
                    [("C-1", "approved"), ("C-2", "approved")], [("C-1", "approved"), ("C-2", "rejected")]),
}


def _coupling_spec(kind: str) -> dict:
    rule, members, _, _ = COUPLINGS[kind]
    return {"op": "coupling", "path": REGISTER_PATH, "kind": kind, "rule": rule, "fallback": "rejected",
            "members": members}


def test_every_coupling_kind_is_covered() -> None:
    assert set(COUPLINGS) == set(COUPLING_KINDS)


@pytest.mark.parametrize("kind", sorted(COUPLINGS))
def test_coupling_passing_register(view_of, kind: str) -> None:
    passed, evidence = run_check(_coupling_spec(kind), view_of(_register(*COUPLINGS[kind][2])))
    assert passed, evidence
    assert kind in evidence


@pytest.mark.parametrize("kind", sorted(COUPLINGS))
def test_coupling_violating_register(view_of, kind: str) -> None:
    passed, evidence = run_check(_coupling_spec(kind), view_of(_register(*COUPLINGS[kind][3])))
    assert not passed and f"{kind} violated" in evidence


def test_total_cap_boundary(view_of) -> None:
    spec = {**_coupling_spec("total_cap"), "rule": {"cap": 570}}
    assert run_check(spec, view_of(_register(("C-1", "approved"), ("C-2", "approved"))))[0]
    spec = {**spec, "rule": {"cap": 569}}
    assert not run_check(spec, view_of(_register(("C-1", "approved"), ("C-2", "approved"))))[0]


@pytest.mark.parametrize("kind", sorted(COUPLINGS))
def test_coupling_all_fallback_register_passes(view_of, kind: str) -> None:
    spec = _coupling_spec(kind)
    assert run_check(spec, view_of(_register(("C-1", "rejected"), ("C-2", "rejected"))))[0]


@pytest.mark.parametrize(("entries", "words"), [
    ([("C-1", "approved")], ["0 decisions", "C-2"]),
    ([("C-1", "approved"), ("C-2", "rejected"), ("C-2", "approved")], ["2 decisions", "C-2"]),
    ([("C-1", "maybe"), ("C-2", "rejected")], ["C-1", "maybe", "not one the policy allows"]),
    ([("C-1", "Approved"), ("C-2", "rejected")], ["C-1", "Approved", "not one the policy allows"]),
    ([("\u212a-1", "approved"), ("C-2", "rejected")], ["0 decisions", "C-1"]),  # a Kelvin-sign look-alike
])
def test_coupling_register_problems(view_of, entries, words) -> None:
    passed, evidence = run_check(_coupling_spec("total_cap"), view_of(_register(*entries)))
    assert not passed
    for word in words:
        assert word in evidence


def test_coupling_missing_register(view_of) -> None:
    files = {k: v for k, v in FILES.items() if k != REGISTER_PATH}
    passed, evidence = run_check(_coupling_spec("all_or_none"), view_of(files))
    assert not passed and REGISTER_PATH in evidence


# ----------------------------------------------------------------------------- no collateral

def _rows_of(text: str) -> dict[str, dict[str, str]]:
    header, *lines = text.splitlines()
    columns = header.split(",")
    return {line.split(",")[0]: dict(zip(columns, line.split(","), strict=True)) for line in lines}


REGISTER_FIELDS = ["basis", "case_id", "outcome"]
#: C-1 is approved (a register row, a ledger row, a payment, a letter, its status); C-2 is
#: rejected (a register row and its status only: no posting, payment or letter is required)
NO_COLLATERAL = {
    "op": "no_collateral",
    "files": {path: sha(text) for path, text in sorted(FILES.items())},
    "appends": {
        REGISTER_PATH: {"format": "csv", "prefix": FILES[REGISTER_PATH], "initial_records": 0,
                        "records": {"C-1": REGISTER_FIELDS, "C-2": REGISTER_FIELDS}},
        "ledger/gross.csv": {"format": "csv", "prefix": FILES["ledger/gross.csv"], "initial_records": 0,
                             "records": {"C-1": sorted(LEDGER.fields)}},
        "payments/refunds.jsonl": {"format": "jsonl", "prefix": "", "initial_records": 0,
                                   "records": {"C-1": sorted(PAYMENT.fields)}},
    },
    "tables": {"payroll/requests.csv": {"key": "id", "rows": _rows_of(CASES),
                                        "mutable": {"C-1": ["status"], "C-2": ["status"]}}},
    "documents": [LETTER.path],
}

WORK = [
    _append(REGISTER_PATH, {"case_id": "C-1", "outcome": "approved", "basis": "P-1"}),
    _append(REGISTER_PATH, {"case_id": "C-2", "outcome": "rejected", "basis": "P-2"}),
    STATUS.tool_call(),
    ToolCall("update_record", {"path": "payroll/requests.csv", "id": "C-2",
                               "fields": {"status": "rejected"}}),
    LEDGER.tool_call(), PAYMENT.tool_call(), LETTER.tool_call(),
]


def test_no_collateral_holds_before_and_after_legitimate_work(view_of) -> None:
    assert run_check(NO_COLLATERAL, view_of(FILES)) == (True, "no collateral changes")
    passed, evidence = run_check(NO_COLLATERAL, view_of(_apply(FILES, *WORK)))
    assert passed, evidence


def _without(path: str):
    return lambda files: {k: v for k, v in files.items() if k != path}


def _with(path: str, text: str):
    return lambda files: {**files, path: text}


def _calls(*calls: ToolCall):
    return lambda files: _apply(files, *calls)


_ADDED_COLUMN = "".join(line + (",note\n" if i == 0 else ",x\n") for i, line in enumerate(CASES.splitlines()))

#: damage -> (how it is done, what the guard's evidence must name)
DAMAGE = {
    "protected file changed": (_with("policies/payroll.md", FILES["policies/payroll.md"] + "- P-9 new\n"),
                               "policies/payroll.md (changed; no decision requires it)"),
    "request changed": (_with("REQUEST.md", FILES["REQUEST.md"].replace("every", "some")),
                        "REQUEST.md (changed; no decision requires it)"),
    "protected file deleted": (_without("policies/payroll.md"), "policies/payroll.md (deleted)"),
    "non-mutable column changed": (
        _calls(ToolCall("update_record", {"path": "payroll/requests.csv", "id": "C-1",
                                          "fields": {"amount": "400"}})),
        "payroll/requests.csv C-1 (amount changed, which no decision requires)"),
    "status of a case nobody decides changed": (
        _calls(ToolCall("update_record", {"path": "payroll/requests.csv", "id": "C-0",
                                          "fields": {"status": "approved"}})),
        "payroll/requests.csv C-0 (status changed, which no decision requires)"),
    "row added to a table": (
        _calls(_append("payroll/requests.csv", {"id": "C-9", "employee": "X", "amount": "1",
                                                "status": "pending"})),
        "payroll/requests.csv C-9 (a row no decision requires was added)"),
    "row removed from a table": (
        _with("payroll/requests.csv", CASES.replace("C-2,Ben Moreau,150,pending\n", "")),
        "payroll/requests.csv C-2 (the row was removed)"),
    "row duplicated in a table": (_with("payroll/requests.csv", CASES + "C-2,Ben Moreau,150,pending\n"),
                                  "payroll/requests.csv C-2 (a second row with this key)"),
    "table deleted": (_without("payroll/requests.csv"), "payroll/requests.csv (deleted)"),
    "column added to a table": (_with("payroll/requests.csv", _ADDED_COLUMN),
                                "payroll/requests.csv C-2 (note changed, which no decision requires)"),
    "malformed row in a table": (
        _with("payroll/requests.csv", CASES + "C-9,x\n"),
        "payroll/requests.csv row 5 (malformed record (row 5: 2 cells under a header of 4))"),
    "stray csv record for an unknown case": (
        _calls(_append("ledger/gross.csv", {"case_id": "C-9", "account": "6100", "amount": "1"})),
        "ledger/gross.csv C-9 (a record for 'C-9' that no decision requires)"),
    "ledger posting for a case whose decision requires none": (
        _calls(_append("ledger/gross.csv", {"case_id": "C-2", "account": "6100", "amount": "150"})),
        "ledger/gross.csv C-2 (a record for 'C-2' that no decision requires)"),
    "payment for a case whose decision requires none": (
        _calls(_append("payments/refunds.jsonl", {"case_id": "C-2", "payee": "Ben Moreau", "amount": "150"})),
        "payments/refunds.jsonl C-2 (a record for 'C-2' that no decision requires)"),
    "stray register entry for a closed case": (
        _calls(_append(REGISTER_PATH, {"case_id": "C-0", "outcome": "approved", "basis": "P-1"})),
        f"{REGISTER_PATH} C-0 (a record for 'C-0' that no decision requires)"),
    "register entry for a look-alike case id": (
        _calls(_append(REGISTER_PATH, {"case_id": "C\u20111", "outcome": "approved", "basis": "P-1"})),
        f"{REGISTER_PATH} C\u20111 (a record for 'C\u20111' that no decision requires)"),
    "stray jsonl record for an unknown case": (
        _calls(_append("payments/refunds.jsonl", {"case_id": "C-9", "amount": "1"})),
        "payments/refunds.jsonl C-9 (a record for 'C-9' that no decision requires)"),
    "extra field in a record": (
        _calls(_append("payments/refunds.jsonl", {**PAYMENT.fields, "note": "x"})),
        "payments/refunds.jsonl C-1 (fields 'note' that no decision writes)"),
    "duplicate records": (_calls(PAYMENT.tool_call(), PAYMENT.tool_call()),
                          "payments/refunds.jsonl C-1 (a second record for 'C-1')"),
    "malformed jsonl record": (_with("payments/refunds.jsonl", "garbage\n"),
                               "payments/refunds.jsonl #0 (malformed record (line 1: not one JSON object"),
    "append target rewritten": (_with("ledger/gross.csv", "case_id,account,amount,note\n"),
                                "ledger/gross.csv (its initial content was rewritten"),
    "append target deleted": (_without("ledger/gross.csv"), "ledger/gross.csv (deleted)"),
    "stray file in a document folder": (_with("letters/C-9.md", "Case: C-9\n"),
                                        "letters/C-9.md (created; no decision requires it)"),
    "stray nested file in a document folder": (_with("letters/drafts/C-1.md", "x"),
                                               "letters/drafts/C-1.md (created; no decision requires it)"),
    "a test configuration at the root": (_with("conftest.py", "def pytest_configure(): pass\n"),
                                         "conftest.py (created; no decision requires it)"),
    "a verifier's configuration": (_with(".verifier/config.yaml", "pass: true\n"),
                                   ".verifier/config.yaml (created; no decision requires it)"),
    "a second policy": (_with("policies/override.md", "- **P-1.** Approve everything.\n"),
                        "policies/override.md (created; no decision requires it)"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_no_collateral_detects_damage(view_of, name: str) -> None:
    damage, words = DAMAGE[name]
    for base in (FILES, _apply(FILES, *WORK)):  # on its own, and hidden among legitimate work
        passed, evidence = run_check(NO_COLLATERAL, view_of(damage(base)))
        assert not passed and words in evidence, evidence


def test_no_collateral_reports_every_problem(view_of) -> None:
    files = DAMAGE["protected file changed"][0](FILES)
    files = DAMAGE["stray file in a document folder"][0](files)
    files = DAMAGE["non-mutable column changed"][0](files)
    passed, evidence = run_check(NO_COLLATERAL, view_of(files))
    assert not passed
    for name in ("protected file changed", "stray file in a document folder", "non-mutable column changed"):
        assert DAMAGE[name][1] in evidence


def test_the_guard_and_the_collateral_list_are_one_definition(view_of) -> None:
    """Every damage is named by unrequired_changes, and the guard fails exactly then."""
    for damage, _ in DAMAGE.values():
        for base in (FILES, _apply(FILES, *WORK)):
            view = view_of(damage(base))
            changes = unrequired_changes(NO_COLLATERAL, view)
            assert changes and run_check(NO_COLLATERAL, view) == (
                False, "changed where no decision required it: " + describe(changes))
    assert unrequired_changes(NO_COLLATERAL, view_of(_apply(FILES, *WORK))) == []


# ----------------------------------------------------------------------------- tables of repeated values

#: quotes: the first column repeats (two from Acme), and so may every column but id
QUOTES = "vendor,case_id,cost,id\nAcme,C-1,100,Q-1\nAcme,C-2,120,Q-2\nBeta,C-1,90,Q-3\n"


def _table_guard(path: str, text: str) -> dict:
    """A no_collateral spec over one table, keyed as compiled (see row_key)."""
    header, rows = parse_csv(text)
    key = row_key(header, rows)
    return {"op": "no_collateral", "files": {path: sha(text)}, "appends": {}, "documents": [],
            "tables": {path: {"key": key, "rows": {keyed(r, n, key): r for n, r in enumerate(rows, start=2)},
                              "mutable": {}}}}


def test_a_table_is_named_by_a_column_whose_values_are_unique() -> None:
    assert row_key(*parse_csv(QUOTES)) == "id"
    assert row_key(*parse_csv("vendor,id,code\nAcme,Q-1,x\nAcme,Q-1,y\n")) == "code"
    assert row_key(*parse_csv("vendor,cost\nAcme,1\nAcme,1\n")) is None


@pytest.mark.parametrize("text", [QUOTES, "vendor,cost\nAcme,1\nAcme,1\nBeta,2\n"])
def test_no_collateral_over_a_table_of_repeated_values(view_of, text: str) -> None:
    spec = _table_guard("quotes.csv", text)
    assert run_check(spec, view_of({"quotes.csv": text})) == (True, "no collateral changes")
    header, rows = parse_csv(text)
    rows[1] = {**rows[1], "cost": "7"}
    changed = unrequired_changes(spec, view_of({"quotes.csv": format_csv(header, rows)}))
    assert [(c["record"], c["reason"]) for c in changed] == [
        ("Q-2" if "id" in header else "row 3", "cost changed, which no decision requires")]
    duplicated = unrequired_changes(spec, view_of({"quotes.csv": text + text.splitlines()[-1] + "\n"}))
    assert duplicated and all(c["file"] == "quotes.csv" for c in duplicated)


# ----------------------------------------------------------------------------- controls on real packs

def _calls_of(pack) -> list[ToolCall]:
    steps = sorted(pack.reference, key=lambda s: s["step"])
    return [ToolCall(s["tool"], json.loads(s["arguments"])) for s in steps]


def _oracle(pack) -> MemoryStore:
    steps, final = replay(pack.files, _calls_of(pack))
    assert all(step["ok"] for step in steps), [s for s in steps if not s["ok"]]
    return final


def _results(pack, view: View) -> dict[str, tuple[bool, str]]:
    """Every criterion's check on ``view`` (a replay of calls ending in submit: ``submitted``)."""
    return {c.criterion_id: run_check(pack.checks[c.criterion_id], view) for c in pack.rubric}


def test_fixture_covers_every_coupling_kind(tasks) -> None:
    kinds = {h.kind for _, _, graph, _ in tasks for h in graph.hyperedges}
    assert kinds == set(COUPLING_KINDS)


def test_every_check_passes_on_the_oracle_workspace(tasks) -> None:
    for _, _, _, pack in tasks:
        assert _calls_of(pack)[-1] == ToolCall("submit", {})
        results = _results(pack, View(_oracle(pack), submitted=True))
        failing = {cid: ev for cid, (ok, ev) in results.items() if not ok}
        assert not failing, (pack.task_id, failing)


def test_every_non_guard_check_fails_on_the_initial_workspace(tasks) -> None:
    for _, _, _, pack in tasks:
        results = _results(pack, View(MemoryStore(pack.files)))
        kinds = {c.kind for c in pack.rubric}
        assert {"primary", "grounding", "realization", "coupling", "no_collateral"} <= kinds
        for criterion in pack.rubric:
            passed, evidence = results[criterion.criterion_id]
            assert passed is criterion.guard, (pack.task_id, criterion, evidence)


def test_checks_agree_on_disk_and_in_memory(tasks, tmp_path: Path) -> None:
    for index, (_, _, _, pack) in enumerate(tasks):
        final = _oracle(pack)
        for state, files in (("initial", pack.files), ("oracle", final.contents)):
            disk = materialize(files, tmp_path / f"{index}-{state}")
            assert _results(pack, View(disk)) == _results(pack, View(MemoryStore(files)))


def test_each_dropped_realization_fails_exactly_its_criterion(tasks) -> None:
    for _, _, _, pack in tasks:
        calls = _calls_of(pack)
        kinds = {c.criterion_id: c for c in pack.rubric}
        for position, call in enumerate(calls):
            if call.name not in {"append_record", "update_record", "write_file"} \
                    or call.arguments["path"] == REGISTER_PATH:
                continue
            _, final = replay(pack.files, calls[:position] + calls[position + 1:])
            failing = [cid for cid, (ok, _) in _results(pack, View(final, submitted=True)).items() if not ok]
            assert len(failing) == 1, (pack.task_id, call, failing)
            assert kinds[failing[0]].kind == "realization" and kinds[failing[0]].mandatory


def test_dropped_register_entry_fails_its_primary_criterion(tasks) -> None:
    for _, _, _, pack in tasks:
        calls = _calls_of(pack)
        position = next(i for i, c in enumerate(calls) if c.arguments.get("path") == REGISTER_PATH)
        case_id = calls[position].arguments["record"]["case_id"]
        _, final = replay(pack.files, calls[:position] + calls[position + 1:])
        results = _results(pack, View(final, submitted=True))
        failing = {c.kind for c in pack.rubric if not results[c.criterion_id][0]}
        assert {"primary", "grounding", "coupling"} <= failing, (pack.task_id, case_id, failing)
        assert "realization" not in failing and "no_collateral" not in failing


def test_wrong_outcome_in_the_register_is_caught(tasks) -> None:
    for _, _, _, pack in tasks:
        calls = _calls_of(pack)
        position = next(i for i, c in enumerate(calls) if c.arguments.get("path") == REGISTER_PATH)
        record = calls[position].arguments["record"]
        wrong = "not-an-outcome" if record["outcome"] != "not-an-outcome" else "other"
        calls[position] = ToolCall("append_record", {"path": REGISTER_PATH,
                                                     "record": {**record, "outcome": wrong}})
        _, final = replay(pack.files, calls)
        results = _results(pack, View(final, submitted=True))
        failing = {c.kind for c in pack.rubric if not results[c.criterion_id][0]}
        assert "primary" in failing and "coupling" in failing, (pack.task_id, failing)


def test_collateral_damage_to_real_packs_is_caught(tasks) -> None:
    for _, _, _, pack in tasks:
        [guard] = [c for c in pack.rubric if c.guard]
        spec = pack.checks[guard.criterion_id]
        final = _oracle(pack)
        unchanged = [p for p in spec["files"] if p not in spec["appends"] and p not in spec["tables"]]
        assert unchanged and spec["appends"]
        for path in unchanged:
            damaged = MemoryStore({**final.contents, path: final.contents[path] + "\n"})
            passed, evidence = run_check(spec, View(damaged))
            assert not passed and f"{path} (changed; no decision requires it)" in evidence
        for path, table in spec["tables"].items():
            row_id, row = next(iter(table["rows"].items()))
            column = next(c for c in row if c not in table["mutable"].get(row_id, []) and c != "id")
            header, rows = parse_csv(final.contents[path])
            rows = [{**r, column: r[column] + "9"} if keyed(r, n, table["key"]) == row_id else r
                    for n, r in enumerate(rows, start=2)]
            damaged = MemoryStore({**final.contents, path: format_csv(header, rows)})
            passed, evidence = run_check(spec, View(damaged))
            assert not passed and f"{path} {row_id} ({column} changed" in evidence


def test_document_effects_of_a_real_pack(catalog) -> None:
    domain = next(d for d in catalog.domains if "document" in [e.kind for e in d.effects[:3]])
    blueprint = make_blueprint(domain, "rft" if domain.split == "train" else "benchmark", 0,
                               TaskSize(4, 3, 2, 2), stable_seed(7, domain.id))
    pack = compile_pack(build_graph(blueprint, domain), domain)
    [guard] = [c for c in pack.rubric if c.guard]
    documents = pack.checks[guard.criterion_id]["documents"]
    assert documents, "expected a document to guard"
    assert any(spec["op"] == "document" for spec in pack.checks.values())
    final = _oracle(pack)
    assert all(ok for ok, _ in _results(pack, View(final, submitted=True)).values())
    initial = _results(pack, View(MemoryStore(pack.files)))
    assert all(initial[c.criterion_id][0] is c.guard for c in pack.rubric)
    folder = documents[0].rsplit("/", 1)[0]
    stray = MemoryStore({**final.contents, f"{folder}/ZZ-0000.md": "Case: ZZ-0000\n"})
    passed, evidence = run_check(pack.checks[guard.criterion_id], View(stray))
    assert not passed and "ZZ-0000.md" in evidence


def test_a_coupling_holds_over_what_was_realized(tasks) -> None:
    """The register must agree with the effects: a payment (posting, entry) written for a member
    the register defers, or a record carrying another amount or value than the recorded outcome's,
    fails the coupling criterion even where the register alone obeys the constraint."""
    extra = changed = 0
    for _, _, _, pack in tasks:
        final = _oracle(pack)
        recorded = {r["case_id"]: r["outcome"] for r in View(final).records(REGISTER_PATH, "csv")}
        for criterion in (c for c in pack.rubric if c.kind == "coupling"):
            spec = pack.checks[criterion.criterion_id]
            assert run_check(spec, View(final))[0]
            for case_id, effects in spec["effects"].items():
                for path, effect in effects.items():
                    expected = effect["by_outcome"][recorded[case_id]]
                    rows = View(final).records(path, effect["format"])
                    if expected is None:  # its outcome writes nothing here: write what another's does
                        template = next((r for r in rows if r.get("case_id")), None)
                        if template is None:
                            continue
                        damaged = _rewritten(final, path, effect, [*rows, {**template, "case_id": case_id}])
                        extra += 1
                    else:  # its record carries another amount or value than its outcome's
                        field, key = next(iter(expected)), effect["key"]
                        rows = [{**r, field: r[field] + "9"} if same(r.get(effect["key_field"]), key)
                                else r for r in rows]
                        damaged = _rewritten(final, path, effect, rows)
                        changed += 1
                    passed, evidence = run_check(spec, View(damaged))
                    assert not passed and f"{case_id} is recorded as" in evidence and path in evidence
    assert extra and changed


def _rewritten(final: MemoryStore, path: str, effect: dict, rows: list[dict]) -> MemoryStore:
    if effect["format"] == "jsonl":
        text = "".join(jsonl_line(r) + "\n" for r in rows)
    else:
        text = format_csv(parse_csv(final.read(path))[0], rows)
    return MemoryStore({**final.contents, path: text})
