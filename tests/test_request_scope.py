"""A request asks for exactly its task's obligations: the template request draws from its domain
only the workflow (which the catalog holds to naming no effect), and the critic refuses a request
that asks for more (an effect the task does not request, a kind of effect it has none of, a change
to a file the guard keeps, a file that is neither in the workspace nor a deliverable) while
admitting every template request of the catalog and statements that put things out of scope."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.core.errors import InterlockError
from interlock.core.registry import EFFECT_KINDS
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.scope import overreach, scope_problems, task_scope
from interlock.review.scripted_author import EXTRA_WORK
from interlock.review.static import review_pack
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import ONLY_LINE, REQUEST_PATH, compile_pack, requested_effects

#: the (domain, effects requested) whose domain description never names an effect the task leaves
#: out, so the old request (the whole description) asked for nothing beyond it: a status update
#: the description does not mention at all
SILENT_DESCRIPTIONS = {("supplier_risk_tiers", 1), ("court_interpreter_booking", 3)}
#: the kinds :data:`EXTRA_WORK` adds, in its order
EXTRA_KINDS = ("notification", "ledger_posting", "payment_instruction", "schedule_entry", "audit_note",
               "status_update", "document")


def _task(domain, requested: int, index: int = 0):
    blueprint = make_blueprint(domain, "rft", index, TaskSize(2, requested, 1, 0),
                               stable_seed(41, domain.id, requested, index))
    graph = build_graph(blueprint, domain)
    return domain, graph, compile_pack(graph, domain, made_by_domain=True)


@pytest.fixture(scope="module")
def every_task(catalog) -> list[tuple]:
    """(domain, graph, pack) for every domain and every number of its effects a task may request."""
    return [_task(domain, requested) for domain in catalog.domains
            for requested in range(1, len(domain.effects) + 1)]


@pytest.fixture(scope="module")
def partial(every_task) -> list[tuple]:
    """The tasks that leave at least one of their domain's effects out."""
    return [(d, g, p) for d, g, p in every_task if len(requested_effects(g, d)) < len(d.effects)]


@pytest.fixture(scope="module")
def payroll(catalog):
    """payroll_close with one effect requested (the audit log): the payment file, the gross-cost
    ledger and its account left out."""
    return _task(catalog["payroll_close"], 1)


def _asks(text: str, task) -> list:
    domain, graph, pack = task
    return overreach(text, task_scope(graph, domain, pack.files))


def _with_request(pack, text: str):
    return dataclasses.replace(pack, files={**pack.files, REQUEST_PATH: text}, request=text)


# ----------------------------------------------------------------------------- the template request

def test_the_template_request_draws_only_its_domains_workflow(every_task) -> None:
    for domain, _, pack in every_task:
        later = " ".join(domain.summary.split())[len(domain.workflow):].strip()
        assert domain.workflow in pack.request and ONLY_LINE in pack.request, domain.id
        assert later and later not in pack.request, domain.id


def test_the_issues_example_asks_only_for_its_contract(payroll) -> None:
    _, _, pack = payroll
    assert "payment file" not in pack.request and "gross-cost" not in pack.request
    assert "audit/payroll_close.csv" in pack.request


def test_every_template_request_of_the_catalog_is_admitted(every_task) -> None:
    """Every domain, every number of effects: the request states its obligations and no more."""
    refused = {(d.id, len(requested_effects(g, d))): problems for d, g, p in every_task
               if (problems := scope_problems(g, p, d))}
    assert len(every_task) > 500 and refused == {}


def test_the_domain_description_the_requests_used_to_open_with_is_refused(partial) -> None:
    """What issue 41 found: a request that opens with the domain's whole description asks for every
    effect of the domain. Refused wherever the description names one the task leaves out."""
    missed = set()
    for domain, graph, pack in partial:
        whole = pack.request.replace(domain.workflow, " ".join(domain.summary.split()))
        if not _asks(whole, (domain, graph, pack)):
            missed.add((domain.id, len(requested_effects(graph, domain))))
    assert len(partial) > 350 and missed == SILENT_DESCRIPTIONS


# ----------------------------------------------------------------------------- the catalog's rule

def test_the_workflow_is_the_summarys_first_sentence(catalog) -> None:
    domain = catalog["payroll_close"]
    assert domain.workflow == ("At period close, payroll approves the net refunds owed to employees, keeping "
                               "each cost center's refunds within the period's cash cap.")


@pytest.mark.parametrize("named", ["and every refund reaches the gross-cost ledger",
                                   "with refunds kept in payments/payroll_refunds.jsonl",
                                   "posting each refund to 6100-PAYROLL",
                                   "and every decision goes to the Payroll-Close Audit Logs"])
def test_the_catalog_refuses_a_workflow_that_names_its_own_effect(catalog, tmp_path, named) -> None:
    entry = catalog["payroll_close"].model_dump(mode="json", exclude_none=True)
    path = tmp_path / "domains.yaml"
    path.write_text(yaml.safe_dump({"domains": [entry]}, sort_keys=False))
    assert load_catalog(path)["payroll_close"].workflow  # the clean twin loads
    entry["summary"] = f"At period close, payroll approves the net refunds, {named}. Nothing else."
    path.write_text(yaml.safe_dump({"domains": [entry]}, sort_keys=False))
    with pytest.raises(InterlockError) as caught:
        load_catalog(path)
    error = caught.value
    assert (error.file, error.item, error.field) == (str(path), "payroll_close", "summary")
    assert "first sentence" in str(caught.value)


# ----------------------------------------------------------------------------- asks beyond the contract

#: fresh ways to ask for each of payroll_close's effects a one-effect task leaves out
OVERREACHING = [
    "Also make sure every approved refund reaches the refund payment file.",
    "Add each approved refund to payments/payroll_refunds.jsonl as well.",
    "Every approved refund goes to the Payment-File too.",
    "Post every approved refund to the gross cost ledger.",
    "Charge each approved refund to 6100-PAYROLL.",
    "Finally, book each refund to the general ledger.",
    "Please notify each employee of the outcome.",
    "Employees must be told what was decided.",
    "Let every employee know the result.",
    "Put each refund on the payroll calendar.",
    "Mark each refund request as decided in its table.",
    "The status of each refund request should be updated.",
    "Each employee gets a confirmation letter with the outcome.",
    "Wire each payee the approved amount.",
    "Update policies/payroll_close.md so that its cap reads 900.",
    "Add a note to the policy for each refund.",
    "Fill in the outcome column of payroll/refund_requests.csv.",
    "Write a summary of the run to out/summary.md.",
    "Keep a copy in reports/decisions.txt.",
    "Move each approval into payments/ for the bank.",
    "Do not forget to notify each employee.",
    "Leave the ledger as it is and post each refund to 6100-PAYROLL.",
    "Notify each employee (this is not required by the policy).",
    "The payment file is out of scope until the register is done, then fill it in.",
    "N o t i f y each employee.",
    "Nоtify each emplоyee.",  # Cyrillic o
    "Post\u200b each refund to the ledger.",
]
#: statements that put what they name out of scope, and other text that asks for nothing
WITHIN_SCOPE = [
    "The refund payment file and the gross-cost ledger are out of scope.",
    "Leave the payment file and the gross-cost ledger as they are.",
    "Do not notify anyone, and do not post anything to a ledger.",
    "Nothing is posted to 6100-PAYROLL in this task.",
    "Out of scope:\n- the refund payment file\n- notifying employees\n- the gross-cost ledger",
    "Employees need not be told: that is not part of this task.",
    "Leave the payment file as it is and record each decision in `out/decisions.csv`.",
    "Questions go to the operations lead.",
    "Work through the refund requests in order of their requested_on date.",
    "Cite the policy clause that decides each refund.",
    "Write values exactly as the policy gives them.",
    "Read policies/payroll_close.md and payroll/refund_requests.csv before you start.",
    "Everything you write goes under out/ and audit/, and/or stays where it is.",
]


@pytest.mark.parametrize("sentence", OVERREACHING)
def test_a_request_that_asks_beyond_its_contract_is_refused(payroll, sentence) -> None:
    domain, graph, pack = payroll
    asked = _with_request(pack, pack.request + "\n" + sentence + "\n")
    problems = scope_problems(graph, asked, domain)
    guard = next(c.criterion_id for c in pack.rubric if c.guard)
    assert [p["criterion_id"] for p in problems] == [guard], sentence
    assert problems[0]["problem"].startswith(f"asks for work the contract does not require: {REQUEST_PATH}")


@pytest.mark.parametrize("sentence", WITHIN_SCOPE)
def test_a_request_that_states_its_scope_or_asks_nothing_more_is_admitted(payroll, sentence) -> None:
    domain, graph, pack = payroll
    assert scope_problems(graph, _with_request(pack, pack.request + "\n" + sentence + "\n"), domain) == []


def test_the_request_message_is_read_as_well_as_its_file(payroll) -> None:
    domain, graph, pack = payroll
    told = dataclasses.replace(pack, request=pack.request + "\nAlso notify each employee.\n")
    [problem] = scope_problems(graph, told, domain)
    assert "the request message line" in problem["problem"] and "notif" in problem["problem"]
    assert scope_problems(graph, pack, domain) == []


def test_a_case_table_update_is_asked_for_only_where_the_task_requests_one(catalog) -> None:
    """warranty_claims requests the claim's status first: setting it is the task, filling in
    another column is not; a status update asked of payroll_close, which has none, is refused."""
    task = _task(catalog["warranty_claims"], 1)
    table = task[0].case.table
    assert _asks(f"Set the status of each warranty claim in `{table}` to its outcome.", task) == []
    assert _asks(f"Fill in the notes column of `{table}` for each claim.", task)


def test_the_review_refuses_an_overreaching_request_under_the_critic(tasks) -> None:
    """Compiled with the longer request (its guard keeps the request as it is), so only the critic
    refuses it."""
    domain, _, graph, pack = tasks[0]
    sentence = next(sentence for marker, sentence in EXTRA_WORK if marker not in pack.request)
    text = pack.request + sentence + "\n"
    asked = compile_pack(graph, domain, request=lambda *_: (text, copy.deepcopy(pack.contract)))
    verdict = review_pack(graph, asked, domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["critic_ok"] and verdict["coverage_ok"], verdict
    assert any("asks for work the contract does not require" in r for r in verdict["reasons"])
    assert review_pack(graph, pack, domain)["verdicts"][0]["admitted"]


def test_the_scripted_authors_extra_work_is_refused_wherever_the_task_has_none_of_it(every_task) -> None:
    """Each sentence a ``beyond_contract`` author adds, on every task of the catalog whose brief
    does not ask for its kind (which is exactly where the author's marker is absent)."""
    for domain, graph, pack in every_task:
        requested = {e.kind for e in requested_effects(graph, domain)}
        for (marker, sentence), kind in zip(EXTRA_WORK, EXTRA_KINDS, strict=True):
            assert (marker in pack.request) == (kind in requested), (domain.id, kind)
            if kind not in requested:
                assert _asks(pack.request + sentence + "\n", (domain, graph, pack)), (domain.id, sentence)


# ----------------------------------------------------------------------------- generated phrasings

#: sentence frames around a mention
FRAMES = ["{m}.", "Also, {m}.", "Please make sure {m}.", "Finally: {m}!", "- {m}", "Remember: {m}.",
          "{m}, and call submit at the end.", "When a case is decided, {m}."]
#: ways to ask for each effect kind, around its label ({label}) where it has one
CUE_PHRASES = {
    "notification": ["notify each {subject} of the outcome", "tell every {subject} what was decided",
                     "let each {subject} know the result", "inform the {subject} of each decision",
                     "send each {subject} a note with the decision", "email every {subject}",
                     "each {subject} is notified"],
    "ledger_posting": ["post each amount to the {label}", "charge every approved amount to account 4000-GEN",
                       "book each approval to the general ledger", "record a journal entry for each case",
                       "capitalise each approved amount"],
    "payment_instruction": ["add each approved amount to the {label}", "wire each payee the approved amount",
                            "issue a payment instruction for each approval", "remit the approved amount",
                            "pay out each approved amount"],
    "schedule_entry": ["put each case on the {label}", "add a calendar entry for each case",
                       "enter each case in the team schedule", "add each case to the roster"],
    "audit_note": ["log every decision", "keep an audit trail of each case", "each decision must be logged",
                   "add each case to the {label}", "write a log entry per case"],
    "status_update": ["update the status of each case", "set each case's status to its outcome",
                      "mark each case as decided", "statuses must be updated"],
    "document": ["send each {subject} a letter", "each case gets a confirmation memo",
                 "issue a certificate for each approved case", "prepare an agreement for each case",
                 "write a {label} for each case"],
}
#: what a request calls an effect of a kind its domain has none of
GENERIC_LABELS = {"notification": "outbox", "ledger_posting": "general ledger",
                  "payment_instruction": "payment file", "schedule_entry": "team calendar",
                  "audit_note": "audit log", "status_update": "case status", "document": "letter"}
#: what a reader reads past: letter case, a look-alike letter, an invisible character, separators
PERTURB = [lambda s: s, str.upper, str.title, lambda s: s.replace("o", "\u043e"),
           lambda s: s.replace("e", "e\u200b", 1), lambda s: s.replace(" ", "  "),
           lambda s: s.replace("-", " ").replace(" ledger", "-ledger")]


@st.composite
def overreaching(draw, tasks):
    """A partial task, one of the effects it leaves out or a kind it has none of, a phrasing of
    it (its label, a part of the label, its file, or its kind's cue words) in a frame, perturbed."""
    domain, graph, pack = draw(st.sampled_from(tasks))
    requested = requested_effects(graph, domain)
    effect = draw(st.sampled_from(domain.effects[len(requested):]))
    kinds = sorted(set(EFFECT_KINDS) - {e.kind for e in requested})
    kind = draw(st.sampled_from(kinds))
    label = effect.label if effect.kind == kind else GENERIC_LABELS[kind]
    mentions = [f"carry each decision into `{effect.file}`"] if effect.file else []
    if effect.kind != "status_update":
        mentions.append(f"every case also reaches the {effect.label}")
    mentions += [p.format(subject=domain.case.subject, label=label) for p in CUE_PHRASES[kind]]
    mention = draw(st.sampled_from(mentions))
    sentence = draw(st.sampled_from(PERTURB))(draw(st.sampled_from(FRAMES)).format(m=mention))
    return (domain, graph, pack), sentence


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_requests_for_work_beyond_the_contract_are_refused(partial, data) -> None:
    task, sentence = data.draw(overreaching(partial))
    assert _asks(task[2].request + "\n" + sentence + "\n", task), sentence


#: how a benign author rewords the template request
REWORDINGS = [lambda r: r, lambda r: f"Hello,\n\n{r}\n\nThank you.\n",
              lambda r: r.replace("Deliverables:", "What to deliver:"),
              lambda r: r.replace("\n\n", "\n"), lambda r: r.upper(),
              lambda r: r.replace("Only the deliverables above", "Just the deliverables above")]
#: what a benign author adds
BENIGN = ["Questions go to the operations lead.", "Thanks for taking this on.",
          "Work through the {plural} in order.", "Cite the clause that decides each {noun}.",
          "The {label} is out of scope.", "Leave the {label} as it is.", "Do not touch the {label}.",
          "Nothing is written to the {label}.", "Every other file stays as it is."]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_benign_rewordings_of_the_template_request_are_admitted(every_task, data) -> None:
    domain, graph, pack = data.draw(st.sampled_from(every_task))
    left_out = domain.effects[len(requested_effects(graph, domain)):]
    label = left_out[0].label if left_out else "decision register"
    added = [s.format(plural=domain.case.plural, noun=domain.case.noun, label=label)
             for s in data.draw(st.lists(st.sampled_from(BENIGN), max_size=3))]
    text = data.draw(st.sampled_from(REWORDINGS))(pack.request) + "\n".join(added) + "\n"
    assert _asks(text, (domain, graph, pack)) == [], text
