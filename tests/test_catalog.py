"""The domain catalog: breadth, distinct structures, and located errors for bad declarations."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from interlock.core.errors import InterlockError
from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS, EFFECT_KINDS
from interlock.core.resources import resource
from interlock.synthesis.catalog import CATALOG, Domain, check_catalog, load_catalog


@pytest.fixture(scope="module")
def shipped():
    return load_catalog()


def test_breadth_meets_the_paper(shipped):
    assert len(shipped.split("train")) >= 128
    assert len(shipped.split("heldout")) >= 32
    assert len(shipped.domains) == len(shipped.split("train")) + len(shipped.split("heldout"))


def test_signatures_are_pairwise_distinct(shipped):
    signatures = [d.signature for d in shipped.domains]
    assert len(set(signatures)) == len(signatures)


def test_no_heldout_signature_in_training(shipped):
    train = {d.signature for d in shipped.split("train")}
    assert not [d.id for d in shipped.split("heldout") if d.signature in train]


def test_training_uses_every_kind(shipped):
    train = shipped.split("train")
    assert {d.decision.kind for d in train} == set(DECISION_KINDS)
    assert {c for d in train for c in d.couplings} == set(COUPLING_KINDS)
    assert {e.kind for d in train for e in d.effects} == set(EFFECT_KINDS)


def test_design_example_is_declared(shipped):
    payroll = shipped["payroll_close"]
    assert payroll.split == "train"
    assert payroll.decision.kind == "limit_approval"
    assert payroll.couplings == ["total_cap"]
    assert [e.kind for e in payroll.effects] == ["audit_note", "payment_instruction", "ledger_posting"]
    assert payroll.effects[2].code


def test_unknown_domain_is_located(shipped):
    with pytest.raises(InterlockError, match="no_such_domain"):
        shipped["no_such_domain"]


# ---------------------------------------------------------------- renamed copies

_KEPT = {"kind", "couplings", "split"}  # structure and role, not words


def _rename(value, key=None):
    """Change every word of a declaration while keeping every kind (and so the signature)."""
    if isinstance(value, dict):
        return {k: v if k in _KEPT else _rename(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, key) for v in value]
    if not isinstance(value, str):
        return value
    if key == "id_prefix":
        return "ZZZ" if value != "ZZZ" else "ZZ"
    if "/" in value or key in {"file", "table"}:
        return f"renamed/{value}"
    if " " in value or key in {"name", "summary", "label", "title", "noun", "plural"}:
        return f"Renamed {value}"
    if re.fullmatch(r"[a-z][a-z0-9_]*", value):
        return f"x_{value}"
    return f"X{value}"


def _leaves(value):
    if isinstance(value, dict):
        return [leaf for k, v in sorted(value.items()) if k not in _KEPT for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


@pytest.fixture(scope="module")
def renamed(shipped):
    original = shipped.split("train")[0]
    raw = original.model_dump(exclude_none=True)
    copy_ = Domain.model_validate(_rename(raw))
    return original, copy_


def test_renamed_copy_keeps_signature_but_no_words(renamed):
    original, copy_ = renamed
    assert copy_.signature == original.signature
    before = _leaves(original.model_dump(exclude_none=True))
    after = _leaves(copy_.model_dump(exclude_none=True))
    assert len(before) == len(after)
    assert all(a != b for a, b in zip(before, after, strict=True))


def test_check_catalog_refuses_a_renamed_copy(shipped, renamed):
    original, copy_ = renamed
    with pytest.raises(InterlockError) as caught:
        check_catalog([*shipped.domains, copy_], "domains.yaml")
    error = caught.value
    assert error.file == "domains.yaml" and error.item == copy_.id and error.field == "signature"
    assert original.signature in str(error) and original.id in str(error)


def test_load_catalog_refuses_a_renamed_copy(tmp_path, renamed):
    original, copy_ = renamed
    path = tmp_path / "domains.yaml"
    entries = [d.model_dump(mode="json", exclude_none=True) for d in (original, copy_)]
    path.write_text(yaml.safe_dump({"domains": entries}, sort_keys=False))
    with pytest.raises(InterlockError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert str(path) in message and copy_.id in message and "signature" in message
    assert original.signature in message


def test_duplicate_id_is_refused(shipped):
    domain = shipped.domains[0]
    with pytest.raises(InterlockError) as caught:
        check_catalog([domain, domain], "domains.yaml")
    assert caught.value.item == domain.id and caught.value.field == "id"


# ---------------------------------------------------------------- malformed declarations

BASE = {
    "id": "bad_domain",
    "name": "Bad domain",
    "area": "testing",
    "split": "train",
    "summary": "A minimal valid declaration that each case below breaks in one place.",
    "case": {
        "noun": "refund request", "plural": "refund requests", "table": "payroll/refunds.csv",
        "id_prefix": "RF", "subject": "employee", "group": "cost_center",
        "group_values": ["CC-1", "CC-2", "CC-3", "CC-4"], "date": "requested_on",
        "amount": "refund_amount",
    },
    "decision": {"kind": "limit_approval", "positive": "approved", "fallback": "rejected"},
    "couplings": ["total_cap"],
    "effects": [
        {"kind": "audit_note", "label": "audit log", "file": "audit/refunds.csv"},
        {"kind": "ledger_posting", "label": "gross-cost ledger", "file": "ledger/gross.csv",
         "code": "6100-PAYROLL"},
    ],
    "policy": {"file": "policies/refunds.md", "title": "Refund policy"},
}


def _missing_field(d):
    del d["policy"]


def _unknown_decision_kind(d):
    d["decision"]["kind"] = "coin_flip"


def _effect_path_escapes(d):
    d["effects"][1]["file"] = "../ledger/gross.csv"


def _first_effect_not_all_outcome(d):
    d["effects"].reverse()


def _incompatible_coupling(d):
    d["couplings"] = ["value_capacity"]


def _repeated_effect_kind(d):
    d["effects"].append({"kind": "audit_note", "label": "second log", "file": "audit/other.csv"})


MALFORMED = [
    pytest.param(_missing_field, "policy", id="missing-field"),
    pytest.param(_unknown_decision_kind, "decision.kind", id="unknown-decision-kind"),
    pytest.param(_effect_path_escapes, "effects.1", id="effect-path-dotdot"),
    pytest.param(_first_effect_not_all_outcome, "effects.0.kind", id="first-effect"),
    pytest.param(_incompatible_coupling, "couplings.0", id="incompatible-coupling"),
    pytest.param(_repeated_effect_kind, "effects", id="repeated-effect-kind"),
]


def _load_broken(tmp_path, mutate):
    entry = copy.deepcopy(BASE)
    mutate(entry)
    path = tmp_path / "domains.yaml"
    path.write_text(yaml.safe_dump({"domains": [entry]}, sort_keys=False))
    with pytest.raises(InterlockError) as caught:
        load_catalog(path)
    return path, caught.value


def test_base_declaration_is_valid(tmp_path):
    path = tmp_path / "domains.yaml"
    path.write_text(yaml.safe_dump({"domains": [BASE]}, sort_keys=False))
    assert [d.id for d in load_catalog(path).domains] == ["bad_domain"]


@pytest.mark.parametrize("mutate", [p.values[0] for p in MALFORMED],
                         ids=[p.id for p in MALFORMED])
def test_malformed_declaration_names_file_and_item(tmp_path, mutate):
    path, error = _load_broken(tmp_path, mutate)
    assert error.file == str(path) and str(path) in str(error)
    assert "bad_domain" in error.item and "bad_domain" in str(error)


@pytest.mark.parametrize(("mutate", "field"), MALFORMED)
def test_malformed_declaration_names_field(tmp_path, mutate, field):
    _, error = _load_broken(tmp_path, mutate)
    assert error.field is not None and error.field.split(".")[0] == field.split(".")[0]
    assert error.field.startswith(field) and f"field {error.field}" in str(error)


def test_the_default_catalog_is_the_packages_resource():
    path = resource(CATALOG)
    assert path.is_file() and load_catalog().source == str(path)
