"""The whole-episode attacks against any checkout's judge and tools: which of them still pass.

    PYTHONPATH=<checkout>/src .venv/bin/python perf/episode_attacks.py

Written with only what the code as it landed (86f26da) and the code after it share, so one script
measures both side by side: check the landed commit out beside this one
(``git worktree add /tmp/old 86f26da``) and run the script once with each ``src``. The forged
records come from this checkout's :mod:`interlock.testing.forgeries` (loaded by path). Prints, per
attack, how many of two tasks' otherwise-correct episodes the agent judge accepts (a payroll task,
and one with a payment and a document), and whether each landed leniency still holds.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import interlock
from interlock.core.backend import Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.judging.agent import AgentJudge
from interlock.judging.verdicts import accepted
from interlock.rollout.engine import Episode, RolloutLimits, run_episodes
from interlock.rollout.scripted import DONE, SUBMIT, decision_turns, look_turn
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.checks import View, realization_check, run_check, same
from interlock.synthesis.graph import build_graph
from interlock.synthesis.kinds.effects import REGISTER_PATH, Realization
from interlock.synthesis.oracle import oracle_calls
from interlock.synthesis.packs import REQUEST_PATH, compile_pack
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import MemoryStore, execute, parse_csv, parse_jsonl

FORGERIES = Path(__file__).resolve().parents[1] / "src" / "interlock" / "testing" / "forgeries.py"
REGISTER = "case_id,outcome,basis\nC-1,approved,P-1\n"
SPELLINGS = (("approved ", "approved"), ("\x0bC-1\x0c", "C-1"), (" P-1", "P-1"), ("390.", "390"),
             ("3.9e2", "390"), ("+000390.000", "390"), ("390.00000000000001", "390"))


class Played:
    """Plays fixed turns per episode."""

    name = "played"

    def __init__(self, plans: dict) -> None:
        self.plans = plans

    def begin(self, key, task) -> None:
        pass

    def end(self, key) -> None:
        pass

    def complete(self, requests):
        out = []
        for request in requests:
            turn, plan = sum(m.role == "assistant" for m in request.messages), self.plans[request.key]
            content, calls = plan[turn] if turn < len(plan) else ("", [])
            out.append(Completion(render_turn(content, calls)))
        return out


def task(catalog, name: str) -> TaskContext:
    domain = catalog[name]
    blueprint = make_blueprint(domain, "rft", 0, TaskSize(3, 3, 1, 1), stable_seed(7, domain.id))
    graph = build_graph(blueprint, domain)
    return TaskContext(graph.task_id, compile_pack(graph, domain), graph, domain)


def writes(context: TaskContext) -> list[ToolCall]:
    """The oracle's work: its calls less the reads and the submit (both checkouts have ``oracle_calls``)."""
    return [c for c in oracle_calls(context.graph, context.domain)
            if c.name not in {"list_files", "read_file", "submit"}]


def play(context: TaskContext, extra: list, submit: bool = True):
    """The oracle's work, then ``extra`` turns, then (``submit``) the submit."""
    key = f"played-{context.task_id}-{len(extra)}-{submit}"
    plan = [look_turn(context), *decision_turns(context, writes(context)), *extra,
            *([(DONE, [SUBMIT])] if submit else [])]
    episode = Episode(key, context, context.pack.domain_id, context.pack.pool, "played", 0, 0)
    return next(run_episodes([episode], Played({key: plan}), RolloutLimits(), Path(tempfile.mkdtemp())))


def tampering(context: TaskContext) -> list:
    """The request and the policy rewritten and the case table wiped, then each put back."""
    final = MemoryStore(context.pack.files)
    for call in writes(context):
        execute(final, call)
    policy, table = context.domain.policy.file, context.domain.case.table
    tamper = [ToolCall("write_file", {"path": REQUEST_PATH, "content": "Approve every case.\n"}),
              ToolCall("write_file", {"path": policy, "content": "Every case is approved.\n"}),
              ToolCall("write_file", {"path": table, "content": final.read(table).split("\n")[0] + "\n"})]
    restore = [ToolCall("write_file", {"path": p, "content": final.read(p)})
               for p in (REQUEST_PATH, policy, table)]
    return [("Simplifying.", tamper), ("Putting it back.", restore)]


def main() -> None:
    print(f"judging with {interlock.__file__}")
    spec = importlib.util.spec_from_file_location("forgeries", FORGERIES)
    forgeries = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(forgeries)
    catalog = load_catalog()
    results: dict[str, list[bool]] = {}
    with AgentJudge(workers=1) as judge:
        for context in (task(catalog, "payroll_close"), task(catalog, "carrier_settlements")):
            def accepts(trajectory, context=context) -> bool:
                return accepted(judge.judge([(trajectory, context.pack)])[0].passed, context.pack.rubric)

            honest = play(context, [])
            results.setdefault("the honest oracle: accepted", []).append(accepts(honest))
            for name, forge in forgeries.FORGERIES.items():
                forged = forge(honest, context)
                results.setdefault(f"forged record {name}: accepted", []).append(accepts(forged))
            loop = [("Again.", [ToolCall("list_files", {})])] * 100
            episodes = {"tampering undone before submit": play(context, tampering(context)),
                        "stopping without submit": play(context, [("Done.", [])], submit=False),
                        "looping without submit": play(context, loop, submit=False)}
            for name, trajectory in episodes.items():
                results.setdefault(f"{name}: accepted", []).append(accepts(trajectory))
    letter = Realization("write_file", "letters/C-1.md", "C-1", {"Case": "C-1", "Outcome": "approved"})
    for name, text in (("an extra line", "Case: C-1\nOutcome: approved\nAmount paid: 999999\n"),
                       ("a wrong outcome, then the right one",
                        "Case: C-1\nOutcome: rejected\nOutcome: approved\n")):
        passed = run_check(realization_check(letter), View(MemoryStore({letter.path: text})))[0]
        results[f"a document with {name}: passes"] = [passed]
    results["another spelling of the value: passes as it"] = [same(a, e) for a, e in SPELLINGS]
    store = MemoryStore({REGISTER_PATH: REGISTER})
    execute(store, ToolCall("write_file", {"path": REGISTER_PATH + " ", "content": ""}))
    results["a path with a trailing space: wipes the register"] = [store.read(REGISTER_PATH) == ""]
    store = MemoryStore({REGISTER_PATH: REGISTER})
    row = {"case_id": "C-2", "outcome": "approved\r", "basis": "P-1"}
    execute(store, ToolCall("append_record", {"path": REGISTER_PATH, "record": row}))
    results["a value ending in \\r: the tools' table unreadable"] = [
        any("__malformed__" in row for row in parse_csv(store.read(REGISTER_PATH))[1])]
    results["a trailing blank line: a JSONL file malformed"] = [
        any("__malformed__" in row for row in parse_jsonl('{"a": "1"}\n\n'))]
    for name, outcomes in results.items():
        print(f"{name}: {sum(outcomes)} of {len(outcomes)}")


if __name__ == "__main__":
    main()
