"""Where a failed rollout went wrong: the intervention point.

A rollout is *bound to fail* after a turn when even the reference solution, carried out from the
state that turn left (every write the reference makes that is not already there, checked with
the effect's own check) and submitted, no longer passes every mandatory criterion: the turn wrote
a wrong value (a wrong decision, a wrong amount, a record for the wrong case, a file nobody asked
for) that completing the work cannot undo; or the turn changed something no decision requires,
which the guard holds against the episode even where a later turn undoes it. The intervention
point is the earliest such turn; where there is none, the failure is an omission, and the point is
the turn where the agent stopped or submitted. The corrector starts from the state before that
turn, where completing the work still passes by this very definition, so diagnosis and correction
agree.

Every turn is replayed with the rollouts' own tools on a fresh in-memory copy of the initial
workspace, and the compiled checks run in-process after each (they are data, not code a model
wrote).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from interlock.core.chat import Message, ToolCall
from interlock.core.errors import InterlockError
from interlock.synthesis.checks import View, describe, realization_check, run_check, unrequired_changes
from interlock.synthesis.kinds.effects import Realization
from interlock.synthesis.oracle import reference_writes
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import WRITING_TOOLS, MemoryStore, PathRefused, Store, clean_path, execute

#: ``commission``: a turn wrote what completing the work cannot undo; ``omission``: nothing wrong
#: was written, something was left out; ``none``: no intervention point (nothing to correct, or the
#: rollout could not be diagnosed; ``reason`` says which)
Failure = Literal["commission", "omission", "none"]


@dataclass(frozen=True)
class Diagnosis:
    turn: int | None  # index of the intervention turn among the assistant turns
    message: int | None  # index of that assistant message: the kept prefix is messages[:message]
    failure: Failure
    failing: tuple[str, ...]  # mandatory criteria that fail once the work is completed after ``turn``
    reason: str


def mandatory_failures(task: TaskContext, store: Store, *, submitted: bool) -> list[str]:
    """The mandatory criteria whose compiled check fails on this workspace state (left by an
    episode that ``submitted`` or not)."""
    view = View(store, submitted=submitted)
    return [c.criterion_id for c in task.pack.rubric
            if c.mandatory and not run_check(task.pack.checks.get(c.criterion_id, {}), view)[0]]


def pending_writes(task: TaskContext, store: Store) -> list[list[Realization]]:
    """The reference solution's writes not yet carried out in ``store``, grouped by decision (a
    write already there, by its own check, is skipped; decisions with nothing left are dropped)."""
    view = View(store)
    groups = [[r for r in group if not run_check(realization_check(r), view)[0]]
              for group in reference_writes(task.graph)]
    return [group for group in groups if group]


def completion_calls(task: TaskContext, store: Store) -> list[ToolCall]:
    return [r.tool_call() for group in pending_writes(task, store) for r in group]


def failures_after_completion(task: TaskContext, store: MemoryStore) -> list[str]:
    """The mandatory criteria that still fail once the reference's pending writes are carried out
    on a copy of ``store`` and submitted (empty: the rollout was not yet bound to fail)."""
    completed = MemoryStore(store.contents)
    for call in completion_calls(task, completed):
        execute(completed, call)
    return mandatory_failures(task, completed, submitted=True)


def diagnose(messages: list[Message], task: TaskContext) -> Diagnosis:
    """The intervention point of a rollout (its conversation) on ``task``. Content the agent wrote
    is hostile: whatever it holds gives a diagnosis, never an exception."""
    try:
        return _diagnose(messages, task)
    except (InterlockError, RecursionError, MemoryError, ValueError, TypeError, KeyError) as exc:
        return Diagnosis(None, None, "none", (), f"could not be diagnosed: {type(exc).__name__}: "
                                                 f"{str(exc)[:200]}")


def _diagnose(messages: list[Message], task: TaskContext) -> Diagnosis:
    store = MemoryStore(task.pack.files)
    if failing := failures_after_completion(task, store):
        return Diagnosis(None, None, "none", tuple(failing),
                         "the reference solution fails on the initial workspace: the task is unsound")
    turns = [index for index, m in enumerate(messages) if m.role == "assistant"]
    if not turns:
        return Diagnosis(None, None, "none", (), "the rollout has no assistant turn")
    guard = task.pack.guard_check()
    for turn, index in enumerate(turns):
        submitted = run_turn(store, messages[index])
        written = [c.arguments["path"] for c in messages[index].tool_calls if c.name in WRITING_TOOLS
                   and isinstance(c.arguments.get("path"), str)]
        if guard and written and (changes := _unrequired(guard, store, written)):
            return Diagnosis(turn, index, "commission", (_guard_id(task),),
                             f"turn {turn + 1} changed what no decision requires ({describe(changes)})")
        if failing := failures_after_completion(task, store):
            return Diagnosis(turn, index, "commission", tuple(failing),
                             f"turn {turn + 1} wrote what completing the work cannot undo")
        if submitted:
            break
    if not (failing := mandatory_failures(task, store, submitted=submitted)):
        return Diagnosis(None, None, "none", (), "every mandatory check passes on the replayed final state: "
                                                 "nothing to correct")
    return Diagnosis(turn, index, "omission", tuple(failing),
                     f"turn {turn + 1} {'submitted' if submitted else 'stopped'} with work left undone")


def _unrequired(guard: dict, store: Store, paths: list[str]) -> list[dict]:
    """What the guard flags in the files a turn wrote (paths it refused are not files it wrote)."""
    cleaned = []
    for path in paths:
        try:
            cleaned.append(clean_path(path))
        except PathRefused:
            continue
    return unrequired_changes(guard, View(store), paths=cleaned)


def _guard_id(task: TaskContext) -> str:
    return next(c.criterion_id for c in task.pack.rubric if c.guard)


def run_turn(store: Store, message: Message) -> bool:
    """Run one assistant turn's calls as the engine ran them (none after a submit); True if it
    submitted."""
    return any(execute(store, call).submitted for call in message.tool_calls)
