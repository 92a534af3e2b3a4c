"""Controls: a check that passes without work, or fails on the oracle, is a defect of the pack.

Fail-to-pass criteria must fail on the untouched workspace and pass on the oracle's final one;
guards (no collateral damage) hold on both and must fail once collateral damage is planted.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlock.core.chat import ToolCall
from interlock.core.io import loads
from interlock.synthesis.checks import Result, View, run_check
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import REQUEST_PATH, TaskPack
from interlock.synthesis.workspace import MemoryStore


@dataclass(frozen=True)
class ReferenceRun:
    """The reference solution run once per review on a fresh copy of the initial workspace: its
    steps and final state, and every check's result there (the controls and the critic both
    need them)."""

    steps: list[dict]
    final: MemoryStore
    results: dict[str, Result]


def reference_calls(pack: TaskPack) -> list[ToolCall]:
    """The pack's reference solution as tool calls, in step order."""
    return [ToolCall(s["tool"], loads(s["arguments"], file="reference_solutions", item=pack.task_id,
                                      field=f"step {s['step']}"))
            for s in sorted(pack.reference, key=lambda s: s["step"])]


def run_reference(pack: TaskPack) -> ReferenceRun:
    steps, final = replay(pack.files, reference_calls(pack))
    view = View(final, submitted=submitted(steps))
    return ReferenceRun(steps, final, {c.criterion_id: run_check(pack.checks[c.criterion_id], view)
                                              for c in pack.rubric})


def submitted(steps: list[dict]) -> bool:
    """Whether a run of tool calls (:func:`~interlock.synthesis.oracle.replay`'s steps) submitted."""
    return any(s["tool"] == "submit" and s["ok"] for s in steps)


def control_problems(pack: TaskPack, reference: ReferenceRun | None = None) -> list[dict]:
    """Rows for every control whose result differs from what it should be (``reference``: the
    reference solution already run, see :func:`run_reference`)."""
    reference = reference or run_reference(pack)
    final = reference.final
    problems = [{"criterion_id": "", "control": "oracle", "passed": False, "expected": True,
                 "evidence": f"reference step {s['step']} ({s['tool']}) failed: {s['observation']}"}
                for s in reference.steps if not s["ok"]]
    damaged = MemoryStore(final.contents)
    damaged.write(REQUEST_PATH, (final.read(REQUEST_PATH) or "") + "\nNote: scope widened.\n")
    states = {"initial": View(MemoryStore(pack.files)), "collateral": View(damaged)}
    for criterion in pack.rubric:
        expectations = {"initial": criterion.guard, "oracle": True}
        if criterion.guard:
            expectations["collateral"] = False
        for control, expected in expectations.items():
            spec = pack.checks[criterion.criterion_id]
            passed, evidence = (reference.results[criterion.criterion_id] if control == "oracle"
                                else run_check(spec, states[control]))
            if passed != expected:
                problems.append({"criterion_id": criterion.criterion_id, "control": control,
                                 "passed": passed, "expected": expected, "evidence": evidence})
    return problems
