"""The BFCL v4 multi_turn_base adapter on the real bfcl-eval package (no model): BFCL's ground
truth through the adapter's environment and the rollout engine passes BFCL's own checker, doing
nothing fails it, calls outside the task's functions never reach BFCL's eval, and the engine's
per-user-turn step limit holds."""

from __future__ import annotations

import json
import sys

import pytest

from interlock.core import schemas
from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.evaluation import bfcl
from interlock.evaluation.benchmarks import RunSettings
from interlock.evaluation.bfcl import (
    STEP_LIMIT,
    BfclEnvironment,
    BfclMultiTurn,
    GroundTruthBackend,
    bfcl_tool,
    ground_truth_calls,
    load_tasks,
)
from interlock.rollout.engine import Episode, RolloutLimits, run_episodes
from interlock.rollout.trajectory import Trajectory


@pytest.fixture(scope="module")
def bench() -> BfclMultiTurn:
    return BfclMultiTurn()


def _cached_instances() -> list[str]:
    """The API instances BFCL holds in its module globals under the adapter's model names."""
    return [k for k in vars(bfcl._bfcl().utils) if k.startswith("interlock_")]


def _roll_out(bench, backend, tmp_path, attempts: int = 1) -> list[Trajectory]:
    """The benchmark's own rollout (the engine, the Parquet table), read back as the stage grades it."""
    out = tmp_path / "trajectories.parquet"
    settings = RunSettings(attempts=attempts, seed=3, limits=RolloutLimits(max_turns=8))
    bench.rollout("m", "m/policy", backend, settings, out=out, timings=tmp_path / "timings.parquet",
                  work=tmp_path / "work")
    return [Trajectory.from_row(row, str(out)) for row in read_rows(out, schemas.TRAJECTORIES)]


class Replies:
    """A scripted backend: ``reply(task, turn, step)`` writes each assistant turn (``turn``: the user
    turn's index, ``step``: assistant turns since its user message)."""

    name = "replies"

    def __init__(self, reply) -> None:
        self.reply, self.tasks = reply, {}

    def begin(self, key: str, task: bfcl.BfclTask) -> None:
        self.tasks[key] = task

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        completions = []
        for request in requests:
            users = [i for i, m in enumerate(request.messages) if m.role == "user"]
            step = sum(m.role == "assistant" for m in request.messages[users[-1]:])
            completions.append(Completion(self.reply(self.tasks[request.key], len(users) - 1, step)))
        return completions

    def end(self, key: str) -> None:
        self.tasks.pop(key)


def test_the_ground_truth_through_the_engine_passes_every_task(bench, tmp_path) -> None:
    """The control: every one of the 200 tasks, BFCL's ground-truth calls replayed through the
    tool-call protocol, the engine and the environment, graded by BFCL's checker."""
    assert len(bench.tasks()) == 200 and bench.tasks()[:2] == [
        ("multi_turn_base_0", "GorillaFileSystem+TwitterAPI"), ("multi_turn_base_1", "GorillaFileSystem")]
    trajectories = _roll_out(bench, GroundTruthBackend(), tmp_path)
    assert [t.task_id for t in trajectories] == sorted(t for t, _ in bench.tasks())  # sorted by rollout id
    assert {t.finish_reason for t in trajectories} == {"no_tool_call"}
    assert all(t.invalid_calls == 0 and t.pool == "bfcl" and t.policy == "m/policy" for t in trajectories)
    by_id = {task.task_id: task for task in bench.bfcl_tasks}
    for t in trajectories:
        task = by_id[t.task_id]
        assert [m.content for m in t.messages if m.role == "user"] == task.user_turns
        assert t.tool_calls == sum(len(turn) for turn in task.ground_truth)
    results = bench.grade(trajectories)
    assert all(r.passed for r in results), [r.rollout_id for r in results if not r.passed][:5]
    assert {(r.score, r.criterion_pass_rate) for r in results} == {(1.0, 1.0)}
    assert all(r.primary_passed is None and r.completion_gap is None for r in results)
    assert [r.criteria for r in results] == [len(by_id[t.task_id].ground_truth) for t in trajectories]
    assert not _cached_instances(), "episodes and checks drop their API instances"
    # the final API state as JSON: the file system after multi_turn_base_0 holds the moved report
    first = next(t for t in trajectories if t.task_id == "multi_turn_base_0")
    assert set(first.final_files) == {"GorillaFileSystem", "TwitterAPI"}
    state = json.loads(first.final_files["GorillaFileSystem"])
    document = state["root"]["contents"]["document"]["contents"]
    assert set(document["temp"]["contents"]) == {"final_report.pdf", "previous_report.pdf"}
    assert {d["record"] for d in first.diff if d["file"] == "GorillaFileSystem"} == {"root"}


def test_ending_every_turn_without_a_call_scores_nothing(bench, tmp_path) -> None:
    few = BfclMultiTurn(limit=5)
    silent = _roll_out(few, Replies(lambda task, turn, step: "I cannot help with that."), tmp_path / "a")
    assert [t.turns for t in silent] == [len(task.user_turns) for task in few.bfcl_tasks]
    results = few.grade(silent)
    assert not any(r.passed for r in results) and {r.score for r in results} == {0.0}
    first_turn = results[0].verdicts[0]
    assert not first_turn["passed"] and "empty_turn_model_response" in first_turn["evidence"]

    def first_turn_only(task, turn, step):
        calls = ground_truth_calls(task)[0] if turn == 0 and step == 0 else []
        return render_turn("" if calls else "Done.", calls)

    partial = few.grade(_roll_out(few, Replies(first_turn_only), tmp_path / "b"))
    assert not any(r.passed for r in partial)
    assert [r.score for r in partial] == [1 / len(task.ground_truth) for task in few.bfcl_tasks]
    assert [[v["passed"] for v in r.verdicts][:2] for r in partial] == [[True, False]] * 5


def test_calls_outside_the_tasks_functions_never_reach_bfcl(bench, tmp_path, monkeypatch) -> None:
    task = next(t for t in bench.bfcl_tasks if t.domain_id == "GorillaFileSystem")
    executed = []
    real = bfcl._bfcl().utils.execute_multi_turn_func_call

    def spy(calls, *args, **kwargs):
        executed.extend(calls)
        return real(calls, *args, **kwargs)

    monkeypatch.setattr(bfcl._bfcl().utils, "execute_multi_turn_func_call", spy)
    attempts = [ToolCall("post_tweet", {"content": "hi"}),  # another BFCL API's function
                ToolCall("__import__", {"name": "os"}),
                ToolCall("ls", {"a=__import__('os').getcwd(),b": True}),  # an argument name that injects code
                ToolCall("ls", {"a": True})]
    backend = Replies(lambda t, turn, step: render_turn("", attempts) if turn == step == 0 else "Done.")
    episode = Episode("refused", task, task.domain_id, "bfcl", "p", 0, 0,
                      open_environment=BfclEnvironment)
    (trajectory,) = run_episodes([episode], backend, RolloutLimits(max_turns=STEP_LIMIT), tmp_path)
    assert executed == ["ls(a=True)"]
    observations = [m.content for m in trajectory.messages if m.role == "tool"]
    assert observations[0].startswith("error: unknown function 'post_tweet'; the functions are cat, cd")
    assert observations[1].startswith("error: unknown function '__import__'")
    assert observations[2].startswith("error: ls: \"a=__import__('os').getcwd(),b\" is not an argument name")
    assert json.loads(observations[3])["current_directory_content"]
    assert trajectory.invalid_calls == 3 and trajectory.tool_calls == 4
    assert not _cached_instances()


def test_a_user_turn_ends_the_episode_at_the_step_limit(bench, tmp_path) -> None:
    task = next(t for t in bench.bfcl_tasks if t.domain_id == "GorillaFileSystem")
    loop = Replies(lambda t, turn, step: render_turn("", [ToolCall("pwd")]))
    episode = Episode("loop", task, task.domain_id, "bfcl", "p", 0, 0,
                      open_environment=BfclEnvironment)
    (trajectory,) = run_episodes([episode], loop, RolloutLimits(max_turns=STEP_LIMIT), tmp_path)
    assert trajectory.finish_reason == "max_turns" and trajectory.turns == STEP_LIMIT == 20
    assert sum(m.role == "user" for m in trajectory.messages) == 1
    (result,) = BfclMultiTurn(limit=2).grade([trajectory])
    assert not result.passed and result.score == 0.0


def test_a_bfcl_doc_becomes_an_openai_tool() -> None:
    mean = next(doc for doc in load_tasks(limit=None)[15].docs if doc["name"] == "mean")
    assert "response" in mean and mean["parameters"]["type"] == "dict"
    assert bfcl_tool(mean) == {"type": "function", "function": {
        "name": "mean",
        "description": "This tool belongs to the Math API, which provides various mathematical operations. "
                       "Tool description: Calculate the mean of a list of numbers.",
        "parameters": {"type": "object", "properties": {"numbers": {
            "type": "array", "items": {"type": "number"},
            "description": "List of numbers to calculate the mean of. "}}, "required": ["numbers"]}}}
    add = bfcl_tool(next(doc for doc in load_tasks(limit=None)[15].docs if doc["name"] == "add"))
    assert add["function"]["parameters"]["properties"]["a"] == {
        "type": "number", "description": "First number. This is a float type value."}


def test_a_missing_bfcl_eval_says_how_to_install_it(monkeypatch) -> None:
    for name in [n for n in sys.modules if n == "bfcl_eval" or n.startswith("bfcl_eval.")]:
        monkeypatch.setitem(sys.modules, name, None)
    bfcl._bfcl.cache_clear()
    try:
        with pytest.raises(InterlockError, match=r"needs the bfcl-eval package.*pip install --no-deps "
                                                 r"bfcl-eval==2026\.3\.23"):
            BfclMultiTurn(limit=1)
    finally:
        bfcl._bfcl.cache_clear()
