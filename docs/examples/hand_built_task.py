"""The authoring guide's hand-built task (docs/authoring.md, "Build a task by hand"): two refund
requests of ``payroll_close`` in one cost center, the second pushed over the cash cap, built node
by node, compiled with its reference solution and reviewed. Run it from the repository root:
``.venv/bin/python docs/examples/hand_built_task.py``; ``tests/test_authoring.py`` runs it."""

from interlock.core.registry import COUPLING_KINDS, DECISION_KINDS
from interlock.review.static import review_pack
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.graph import CompletionGraph, Edge, Hyperedge, Node, coupling_words
from interlock.synthesis.packs import compile_pack

domain = load_catalog()["payroll_close"]
policy, table = domain.policy.file, domain.case.table

# Evidence: the decision rule (P-1), the cost center's cash cap (P-2), two pending requests.
rule = DECISION_KINDS["limit_approval"].rule(domain, {"limit": 500})
cap = COUPLING_KINDS["total_cap"].rule({"cap": 600}, {**coupling_words(domain), "group": "CC-100"})
rows = [{"id": "RFD-101", "employee": "Ana Silva", "cost_center": "CC-100",
         "requested_on": "2026-10-02", "refund_amount": 400, "status": "pending"},
        {"id": "RFD-102", "employee": "Ben Okafor", "cost_center": "CC-100",
         "requested_on": "2026-10-05", "refund_amount": 300, "status": "pending"}]
nodes = [
    Node("E1", "evidence", "clause", "P-1", "decision rule", {
        "path": policy, "rule": rule, "text": DECISION_KINDS["limit_approval"].render(rule)}),
    Node("E2", "evidence", "clause", "P-2", "cash cap of CC-100", {
        "path": policy, "rule": cap, "text": COUPLING_KINDS["total_cap"].render(cap),
        "coupling": "total_cap"}),
    Node("E3", "evidence", "record", "RFD-101", "request RFD-101", {"path": table, "row": rows[0]}),
    Node("E4", "evidence", "record", "RFD-102", "request RFD-102", {"path": table, "row": rows[1]}),
    # Decisions: RFD-101 (400, under the limit) is approved by P-1; approving RFD-102 too would
    # take CC-100 to 700, over its cap of 600, so P-2 rejects it.
    Node("D1", "decision", "limit_approval", "RFD-101", "decide RFD-101", {
        "case_id": "RFD-101", "outcome": "approved", "amount": 400, "fallback": False,
        "basis": "P-1"}),
    Node("D2", "decision", "limit_approval", "RFD-102", "decide RFD-102", {
        "case_id": "RFD-102", "outcome": "rejected", "amount": None, "fallback": True,
        "basis": "P-2"}),
    # Effects: an audit note for every decision, a payment for the approved one.
    Node("F1", "effect", "audit_note", "RFD-101", "audit note for RFD-101", {
        "label": "payroll close audit log", "realization": {
            "op": "append_csv", "path": "audit/payroll_close.csv", "key": "RFD-101",
            "fields": {"case_id": "RFD-101", "outcome": "approved", "basis": "P-1"}}}),
    Node("F2", "effect", "payment_instruction", "RFD-101", "payment for RFD-101", {
        "label": "refund payment file", "realization": {
            "op": "append_jsonl", "path": "payments/payroll_refunds.jsonl", "key": "RFD-101",
            "fields": {"case_id": "RFD-101", "payee": "Ana Silva", "amount": "400"}}}),
    Node("F3", "effect", "audit_note", "RFD-102", "audit note for RFD-102", {
        "label": "payroll close audit log", "realization": {
            "op": "append_csv", "path": "audit/payroll_close.csv", "key": "RFD-102",
            "fields": {"case_id": "RFD-102", "outcome": "rejected", "basis": "P-2"}}}),
]
edges = [
    Edge("G1", "grounding", "E3", "D1"), Edge("G2", "grounding", "E1", "D1"),
    Edge("G3", "grounding", "E2", "D1"), Edge("G4", "grounding", "E4", "D2"),
    Edge("G5", "grounding", "E1", "D2"), Edge("G6", "grounding", "E2", "D2"),
    Edge("R1", "realization", "D1", "F1"), Edge("R2", "realization", "D1", "F2"),
    Edge("R3", "realization", "D2", "F3"),
]
graph = CompletionGraph("payroll_close.hand.0001", "payroll_close", "dev", effects_per_decision=2,
                        nodes=nodes, edges=edges,
                        hyperedges=[Hyperedge("H1", "total_cap", "E2", cap, ("D1", "D2"))])

pack = compile_pack(graph, domain)  # workspace, request, contract, rubric, checks, reference
verdict = review_pack(graph, pack, domain)["verdicts"][0]
print(verdict["admitted"], verdict["reasons"])  # True []
