"""The oracle solver: follows the graph and solves the task through the agent's own tools.

Its tool-call trajectory is the task's reference solution (later, demonstrations).
"""

from __future__ import annotations

from interlock.core.chat import ToolCall
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.kinds.effects import Realization, register_entry
from interlock.synthesis.workspace import MemoryStore, execute


def oracle_calls(graph: CompletionGraph, domain: Domain) -> list[ToolCall]:
    """Look, read the evidence, record each decision and carry it through, then submit."""
    calls = [ToolCall("list_files", {}), ToolCall("read_file", {"path": domain.case.table}),
             ToolCall("read_file", {"path": domain.policy.file})]
    if domain.decision.options:
        calls.append(ToolCall("read_file", {"path": domain.decision.options.table}))
    for decision in graph.of_kind("decision"):
        a = decision.attrs
        calls.append(register_entry(a["case_id"], a["outcome"], a["basis"]).tool_call())
        calls += [Realization.from_dict(effect.attrs["realization"]).tool_call()
                  for effect in graph.targets(decision.node_id, "realization")]
    return [*calls, ToolCall("submit", {})]


def replay(files: dict[str, str], calls: list[ToolCall]) -> tuple[list[dict], MemoryStore]:
    """Run tool calls on a fresh in-memory copy of a workspace; return the steps and final state."""
    store = MemoryStore(files)
    steps = []
    for step, call in enumerate(calls):
        result = execute(store, call)
        steps.append({"step": step, "tool": call.name, "arguments": call.arguments,
                      "ok": result.ok, "observation": result.output})
    return steps, store
