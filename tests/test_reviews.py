"""The reviews admit clean packs and catch one planted defect of each kind, naming it."""

from __future__ import annotations

import copy
import json

import pytest

from interlock.core.io import dumps
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.controls import control_problems
from interlock.review.coverage import coverage_problems
from interlock.review.critic import critic_problems, public_calls
from interlock.review.leaks import leak_problems
from interlock.review.stage import kill_rates
from interlock.review.static import review_pack
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.graph import build_graph, graph_rows, graphs_from_rows
from interlock.synthesis.packs import REQUEST_PATH, compile_pack, pack_rows


def test_clean_packs_pass_every_review(tasks):
    for domain, _, graph, pack in tasks:
        verdict = review_pack(graph, pack, domain)["verdicts"][0]
        assert verdict["admitted"], (domain.id, verdict["reasons"])


def test_every_domain_compiles_alike_from_its_graph_rows_and_passes_its_controls(catalog):
    """What the packs stage compiles is the graph read back from its Parquet rows: every domain's
    task compiles to the same pack from those rows as from the graph built in memory, and the
    compiled checks pass their controls (option tables whose first column repeats included)."""
    for domain in catalog.domains:
        pool = "rft" if domain.split == "train" else "benchmark"
        blueprint = make_blueprint(domain, pool, 0, TaskSize(2, 2, 1, 1), stable_seed(3, domain.id))
        graph = build_graph(blueprint, domain)
        [read_back] = graphs_from_rows(graph_rows(graph), source="test")
        pack = compile_pack(read_back, domain)
        assert pack_rows(pack) == pack_rows(compile_pack(graph, domain)), domain.id
        assert control_problems(pack) == [] and leak_problems(read_back, pack) == [], domain.id


def test_public_solver_reproduces_the_oracle(tasks):
    """The critic's public-only solution writes the same files as the oracle's graph-following one."""
    from interlock.synthesis.oracle import oracle_calls, replay
    for domain, _, graph, pack in tasks:
        _, oracle_final = replay(pack.files, oracle_calls(graph, domain))
        public = pack.public_files()
        _, public_final = replay(public, public_calls(public))
        assert _records(public_final.contents) == _records(oracle_final.contents), domain.id


def _records(files: dict[str, str]) -> dict[str, list[str]]:
    """File contents up to line order (a solver may record cases in any order) and, in JSONL,
    up to the order of a record's keys."""
    return {path: sorted(dumps(json.loads(line)) if path.endswith(".jsonl") else line
                         for line in text.splitlines()) for path, text in files.items()}


def _planted(tasks, kind: str):
    """A deep copy of a task whose pack realizes at least one positive-only effect."""
    for domain, _, graph, pack in tasks:
        if any(n.subkind == kind for n in graph.of_kind("effect")):
            return domain, graph, copy.deepcopy(pack)
    pytest.skip(f"no sample task with a {kind} effect")


def _effect(graph):
    return next(n for n in graph.of_kind("effect"))


def test_coverage_catches_a_realization_dropped_from_the_contract(tasks):
    graph, pack = tasks[0][2], copy.deepcopy(tasks[0][3])
    effect = _effect(graph)
    pack.contract = [item for item in pack.contract if effect.node_id not in item["node_ids"]]
    problems = coverage_problems(graph, pack)
    assert [p["relation"] for p in problems] == ["realization"]
    assert f"effect {effect.node_id} is not in the contract" in problems[0]["problem"]


def test_coverage_catches_a_coupling_left_out_of_the_rubric(tasks):
    graph, pack = tasks[1][2], copy.deepcopy(tasks[1][3])
    hyper = graph.hyperedges[0]
    dropped = [c.criterion_id for c in pack.rubric if hyper.hyperedge_id in c.node_ids]
    pack.rubric = [c for c in pack.rubric if c.criterion_id not in dropped]
    problems = coverage_problems(graph, pack)
    assert problems and all(p["relation"] == "coupling" for p in problems)
    assert problems[0]["ref"] == hyper.hyperedge_id and hyper.kind in problems[0]["problem"]


def test_coverage_and_critic_catch_an_evidence_record_removed_from_the_workspace(tasks):
    domain, _, graph, pack = tasks[2]
    pack = copy.deepcopy(pack)
    record = next(n for n in graph.of_kind("evidence") if n.subkind == "record" and not n.distractor)
    lines = pack.files[domain.case.table].splitlines(keepends=True)
    pack.files[domain.case.table] = "".join(line for line in lines if not line.startswith(record.ref + ","))
    problems = coverage_problems(graph, pack)
    assert [p["ref"] for p in problems] == [record.node_id]
    assert record.ref in problems[0]["problem"] and domain.case.table in problems[0]["problem"]
    assert critic_problems(pack), "a decision on a record the solver cannot see is not derivable"


def test_coverage_catches_a_clause_missing_from_the_policy(tasks):
    domain, _, graph, pack = tasks[3]
    pack = copy.deepcopy(pack)
    clause = graph.clause(graph.by_id[graph.hyperedges[0].clause].ref)
    pack.files[domain.policy.file] = pack.files[domain.policy.file].replace(clause.attrs["text"], "")
    problems = coverage_problems(graph, pack)
    assert any(p["ref"] == clause.node_id and clause.ref in p["problem"] for p in problems)


def test_critic_catches_a_criterion_that_needs_a_private_value(tasks):
    """A check expecting a value that only the private evidence index holds is not derivable."""
    domain, _, graph, pack = tasks[0]
    pack = copy.deepcopy(pack)
    secret = "ACCT-PRIVATE-7731"
    pack.evidence_index.append({"node_id": "E999", "path": "(private)", "locator": "note",
                                "ref": "reserve-account", "expected": f'"{secret}"'})
    target = next(c for c in pack.rubric if c.kind == "realization")
    spec = pack.checks[target.criterion_id]
    field = next(iter(spec.get("expect") or spec.get("lines")))
    (spec.get("expect") or spec.get("lines"))[field] = secret
    problems = critic_problems(pack)
    assert [p["criterion_id"] for p in problems] == [target.criterion_id]
    assert "not derivable from public material" in problems[0]["problem"]


def test_critic_catches_a_deliverable_the_request_never_asks_for(tasks):
    domain, graph, pack = _planted(tasks, "notification")
    lines = pack.request.splitlines(keepends=True)
    dropped = next(line for line in lines if "append a record to" in line and "(the " in line
                   and any(e.file in line for e in domain.effects if e.kind == "notification"))
    pack.request = "".join(line for line in lines if line != dropped)
    pack.files[REQUEST_PATH] = pack.request
    problems = critic_problems(pack)
    notified = {c.criterion_id for c in pack.rubric if c.kind == "realization"
                and any(graph.by_id[n].subkind == "notification" for n in c.node_ids if n in graph.by_id)}
    guards = {c.criterion_id for c in pack.rubric if c.guard}  # the request file itself changed
    assert notified and {p["criterion_id"] for p in problems} - guards == notified


def test_critic_catches_a_hidden_condition(tasks):
    """A policy parameter changed in public text but not in the rubric: criteria disagree."""
    domain, _, graph, pack = next(t for t in tasks if t[0].decision.kind == "limit_approval")
    pack = copy.deepcopy(pack)
    rule = graph.clause("P-1").attrs["text"]
    limit = str(graph.clause("P-1").attrs["rule"]["limit"])
    pack.files[domain.policy.file] = pack.files[domain.policy.file].replace(
        rule, rule.replace(f"at most {limit};", "at most 0;"))
    problems = critic_problems(pack)
    positive = [d for d in graph.of_kind("decision") if not d.attrs["fallback"]]
    assert positive and problems, "approvals no public reading supports must be reported"


def test_controls_catch_a_check_that_passes_without_work(tasks):
    domain, _, graph, pack = copy.deepcopy(tasks[4])
    target = next(c for c in pack.rubric if c.kind == "primary")
    case_id = graph.by_id[target.node_ids[0]].attrs["case_id"]
    pack.checks[target.criterion_id] = {"op": "record", "path": domain.case.table, "format": "csv",
                                        "key_field": "id", "key": case_id, "expect": {}}
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(target.criterion_id, "initial")]


def test_controls_catch_a_check_that_fails_on_the_oracle(tasks):
    _, _, graph, pack = copy.deepcopy(tasks[5])
    target = next(c for c in pack.rubric if c.kind == "primary")
    pack.checks[target.criterion_id]["expect"]["outcome"] = "something-else"
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(target.criterion_id, "oracle")]
    assert "something-else" in problems[0]["evidence"]


def test_controls_catch_a_guard_blind_to_collateral_damage(tasks):
    _, _, _, pack = copy.deepcopy(tasks[6])
    guard = next(c for c in pack.rubric if c.guard)
    pack.checks[guard.criterion_id]["documents"].append(REQUEST_PATH)  # as if a decision wrote it
    problems = control_problems(pack)
    assert [(p["criterion_id"], p["control"]) for p in problems] == [(guard.criterion_id, "collateral")]


def test_verdict_lists_every_reason(tasks):
    domain, _, graph, pack = copy.deepcopy(tasks[0])
    effect = _effect(graph)
    pack.contract = [item for item in pack.contract if effect.node_id not in item["node_ids"]]
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["coverage_ok"] and verdict["critic_ok"]
    assert any(effect.node_id in reason for reason in verdict["reasons"])


# ----------------------------------------------------------------------------- mutation controls

def _mutations(domain, graph, pack):
    return review_pack(graph, pack, domain)["mutations"]


def test_every_mandatory_check_fails_on_its_own_mutants(tasks):
    for domain, _, graph, pack in tasks:
        rows = _mutations(domain, graph, pack)
        reached = {r["criterion_id"] for r in rows if r["killed"] is not None}
        mandatory = {c.criterion_id for c in pack.rubric if c.mandatory}
        slack = {r["criterion_id"] for r in rows if r["killed"] is None}
        assert reached | slack == mandatory and slack <= {c.criterion_id for c in pack.rubric
                                                          if c.kind == "coupling"}, domain.id
        assert all(r["killed"] for r in rows if r["killed"] is not None), domain.id
        kinds = {r["kind"] for r in rows if r["killed"]}
        assert {"primary", "realization", "no_collateral", "submit"} <= kinds, domain.id


def _binding_coupling(tasks, kind: str):
    for domain, _, graph, pack in tasks:
        for criterion in pack.rubric:
            if criterion.kind == "coupling" and pack.checks[criterion.criterion_id]["kind"] == kind and any(
                    r["criterion_id"] == criterion.criterion_id and r["killed"]
                    for r in _mutations(domain, graph, pack)):
                return domain, graph, copy.deepcopy(pack), criterion
    raise AssertionError(f"no fixture task has a binding {kind}")


@pytest.mark.parametrize(("kind", "loosen"), [("total_cap", {"cap": 10**9}), ("count_cap", {"k": 99})])
def test_mutation_controls_refuse_a_loosened_cap(tasks, kind, loosen):
    domain, graph, pack, criterion = _binding_coupling(tasks, kind)
    pack.checks[criterion.criterion_id]["rule"].update(loosen)
    assert not control_problems(pack), control_problems(pack)  # the old controls cannot see it
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["mutations_ok"]
    refusal = f"mutation control: {criterion.criterion_id} (coupling) passes on its mutant"
    assert any(reason.startswith(refusal) and "breaking" in reason for reason in verdict["reasons"]), \
        verdict["reasons"]


def test_mutation_controls_refuse_a_check_pointed_at_another_record(tasks):
    """A realization check that reads another effect's record passes on the oracle and fails on
    the untouched workspace, so only its own mutants show it does not check its node."""
    domain, _, graph, pack = copy.deepcopy(tasks[0])
    first, second = [c for c in pack.rubric if c.kind == "realization"][:2]
    pack.checks[first.criterion_id] = copy.deepcopy(pack.checks[second.criterion_id])
    assert not control_problems(pack)
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"]
    assert any(reason.startswith(f"mutation control: {first.criterion_id} (realization) passes on its mutant")
               for reason in verdict["reasons"]), verdict["reasons"]


def test_mutation_controls_refuse_a_primary_check_blind_to_the_outcome(tasks):
    domain, _, graph, pack = copy.deepcopy(tasks[1])
    primary = next(c for c in pack.rubric if c.kind == "primary")
    pack.checks[primary.criterion_id]["expect"] = {}  # the row exists: nothing more is asked
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"]
    assert any(f"{primary.criterion_id} (primary) passes on its mutant" in reason and "recorded as" in reason
               for reason in verdict["reasons"]), verdict["reasons"]


def test_mutation_controls_refuse_a_submit_check_that_reads_nothing(tasks):
    """The submit criterion's check must fail the whole work left unsubmitted."""
    domain, _, graph, pack = copy.deepcopy(tasks[0])
    submit = next(c for c in pack.rubric if c.kind == "submit")
    pack.checks[submit.criterion_id] = copy.deepcopy(next(pack.checks[c.criterion_id] for c in pack.rubric
                                                          if c.kind == "no_collateral"))
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"]
    assert any(f"{submit.criterion_id} (submit) passes on its mutant 'the whole work, never submitted'" in r
               for r in verdict["reasons"]), verdict["reasons"]


def test_kill_rates_by_criterion_kind(tasks):
    rows = [r for domain, _, graph, pack in tasks for r in _mutations(domain, graph, pack)]
    rates = kill_rates(rows)
    assert set(rates) == {"primary", "realization", "coupling", "no_collateral", "submit"}
    for kind, figures in rates.items():
        assert figures["kill_rate"] == 1.0 and figures["killed"] == figures["mutants"] > 0, kind
    assert rates["coupling"]["never_binds"] == sum(r["killed"] is None for r in rows)


# ----------------------------------------------------------------------------- the leak review

def _decided(graph):
    """A decision whose outcome is a word, and its case id and outcome."""
    decision = next(d for d in graph.of_kind("decision") if d.attrs["outcome"].isalpha())
    return decision.attrs["case_id"], decision.attrs["outcome"]


LEAKS = {
    "a note in the request": lambda case, outcome: ("REQUEST.md", f"\nNote: {case} should be {outcome}.\n"),
    "shouted, with an arrow": lambda case, outcome: ("REQUEST.md", f"\n{case} -> {outcome.upper()}\n"),
    "another ending of the word": lambda case, outcome: ("REQUEST.md",
                                                         f"\nWe {outcome[:-1]} {case} today.\n"),
    "a hint file": lambda case, outcome: ("notes/hints.csv", f"case,answer\n{case},{outcome}\n"),
    "a policy clause": lambda case, outcome: ("POLICY", f"- **P-9.** {case} is {outcome}.\n"),
}


@pytest.mark.parametrize("phrasing", sorted(LEAKS))
def test_the_leak_review_names_a_stated_outcome(tasks, phrasing):
    domain, _, graph, pack = copy.deepcopy(tasks[0])
    case, outcome = _decided(graph)
    path, text = LEAKS[phrasing](case, outcome)
    path = domain.policy.file if path == "POLICY" else path
    pack.files[path] = pack.files.get(path, "") + text
    if path == REQUEST_PATH:
        pack.request = pack.files[path]
    problems = leak_problems(graph, pack)
    assert problems and all(case in p["problem"] and repr(outcome) in p["problem"] and path in p["problem"]
                            for p in problems), problems
    verdict = review_pack(graph, pack, domain)["verdicts"][0]
    assert not verdict["admitted"] and not verdict["leaks_ok"]


def test_the_leak_review_names_an_amount_however_formatted(tasks):
    domain, graph, pack = next((d, g, copy.deepcopy(p)) for d, _, g, p in tasks
                               if any(_amount_of(g, e) for e in g.of_kind("effect")))
    effect = next(e for e in graph.of_kind("effect") if _amount_of(graph, e))
    case, amount = effect.ref, _amount_of(graph, effect)
    pack.files[REQUEST_PATH] += f"\nPay {case} ${int(amount):,}.00 in full.\n"
    problems = leak_problems(graph, pack)
    assert any(case in p["problem"] and repr(amount) in p["problem"] for p in problems), problems


def _amount_of(graph, effect) -> str | None:
    fields = effect.attrs["realization"]["fields"]
    amount = fields.get("amount")
    return amount if amount and str(amount).isdigit() and int(amount) >= 1000 else None


def test_the_leak_review_passes_what_the_generators_make(tasks):
    for domain, _, graph, pack in tasks:
        assert leak_problems(graph, pack) == [], domain.id
