"""Controls: a check that passes without work, or fails on the oracle, is a defect of the pack.

Fail-to-pass criteria must fail on the untouched workspace and pass on the oracle's final one;
guards (no collateral damage) hold on both and must fail once collateral damage is planted.
"""

from __future__ import annotations

from interlock.core.chat import ToolCall
from interlock.core.io import loads
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.oracle import replay
from interlock.synthesis.packs import REQUEST_PATH, TaskPack
from interlock.synthesis.workspace import MemoryStore


def replay_reference(pack: TaskPack) -> tuple[list[dict], MemoryStore]:
    """The reference solution run on a fresh copy of the initial workspace: steps, final state."""
    calls = [ToolCall(s["tool"], loads(s["arguments"], file="reference_solutions", item=pack.task_id,
                                       field=f"step {s['step']}"))
             for s in sorted(pack.reference, key=lambda s: s["step"])]
    return replay(pack.files, calls)


def control_problems(pack: TaskPack, reference: tuple[list[dict], MemoryStore] | None = None) -> list[dict]:
    """Rows for every control whose result differs from what it should be (``reference``: the
    reference solution already replayed, see :func:`replay_reference`)."""
    steps, final = reference or replay_reference(pack)
    problems = [{"criterion_id": "", "control": "oracle", "passed": False, "expected": True,
                 "evidence": f"reference step {s['step']} ({s['tool']}) failed: {s['observation']}"}
                for s in steps if not s["ok"]]
    damaged = MemoryStore(final.contents)
    damaged.write(REQUEST_PATH, (final.read(REQUEST_PATH) or "") + "\nNote: scope widened.\n")
    states = {"initial": View(MemoryStore(pack.files)), "oracle": View(final),
              "collateral": View(damaged)}
    for criterion in pack.rubric:
        expectations = {"initial": criterion.guard, "oracle": True}
        if criterion.guard:
            expectations["collateral"] = False
        for control, expected in expectations.items():
            passed, evidence = run_check(pack.checks[criterion.criterion_id], states[control])
            if passed != expected:
                problems.append({"criterion_id": criterion.criterion_id, "control": control,
                                 "passed": passed, "expected": expected, "evidence": evidence})
    return problems
