"""The oracle solver: follows the graph and solves the task through the agent's own tools.

Its tool-call trajectory is the task's reference solution (later, demonstrations).
"""

from __future__ import annotations

from interlock.core.chat import ToolCall
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.kinds.effects import Realization, register_entry
from interlock.synthesis.workspace import MemoryStore, execute


def reference_writes(graph: CompletionGraph) -> list[list[Realization]]:
    """What the reference solution writes, one group per decision in graph order: its register
    entry, then every effect that realizes it (the oracle, and the corrections of rollout-time
    intervention, carry out these)."""
    groups = []
    for decision in graph.of_kind("decision"):
        a = decision.attrs
        groups.append([register_entry(a["case_id"], a["outcome"], a["basis"]),
                       *(Realization.from_dict(effect.attrs["realization"])
                         for effect in graph.targets(decision.node_id, "realization"))])
    return groups


def reading_calls(domain: Domain) -> list[ToolCall]:
    """Look at the workspace, then read the evidence: the cases, the policy, the options."""
    calls = [ToolCall("list_files", {}), ToolCall("read_file", {"path": domain.case.table}),
             ToolCall("read_file", {"path": domain.policy.file})]
    if domain.decision.options:
        calls.append(ToolCall("read_file", {"path": domain.decision.options.table}))
    return calls


def oracle_calls(graph: CompletionGraph, domain: Domain) -> list[ToolCall]:
    """Look, read the evidence, record each decision and carry it through, then submit."""
    writes = [r.tool_call() for group in reference_writes(graph) for r in group]
    return [*reading_calls(domain), *writes, ToolCall("submit", {})]


def replay(files: dict[str, str], calls: list[ToolCall]) -> tuple[list[dict], MemoryStore]:
    """Run tool calls on a fresh in-memory copy of a workspace; return the steps and final state."""
    store = MemoryStore(files)
    steps = []
    for step, call in enumerate(calls):
        result = execute(store, call)
        steps.append({"step": step, "tool": call.name, "arguments": call.arguments,
                      "ok": result.ok, "observation": result.output})
    return steps, store
