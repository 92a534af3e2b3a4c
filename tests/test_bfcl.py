"""The BFCL v4 multi-turn adapter on the real bfcl-eval package (no model), per category: BFCL's
ground truth through the adapter's environment and the rollout engine passes BFCL's own checker
on every task, doing nothing passes none, held-out functions join the tools at their turn as
BFCL's inference adds them, the long-context state is the one BFCL grades, calls outside the
task's functions never reach BFCL's eval, and BFCL's limits (not the run's) bound its episodes."""

from __future__ import annotations

import json
import sys

import pytest

from interlock.core import schemas
from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import ToolCall, render_turn
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.core.registry import BENCHMARKS
from interlock.evaluation import bfcl
from interlock.evaluation.benchmarks import RunSettings, roll_out
from interlock.evaluation.bfcl import (
    ADDED_FUNCTIONS,
    CATEGORIES,
    LIMITS,
    STEP_LIMIT,
    BfclMultiTurn,
    api_state,
    bfcl_episode,
    bfcl_tool,
    load_tasks,
)
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.trajectory import Trajectory

from helpers.bfcl import GroundTruthBackend, ground_truth_calls

#: the run's limits in these tests: the workspace tasks'; BFCL's episodes must not be bound by them
RUN_LIMITS = RolloutLimits(max_turns=8)


@pytest.fixture(scope="module")
def bench() -> BfclMultiTurn:
    return BfclMultiTurn()


@pytest.fixture(scope="module", params=list(CATEGORIES))
def category(request) -> BfclMultiTurn:
    """Every task of one BFCL multi-turn category (its pool)."""
    return BfclMultiTurn(request.param)


def _cached_instances() -> list[str]:
    """The API instances BFCL holds in its module globals under the adapter's model names."""
    return [k for k in vars(bfcl._bfcl().utils) if k.startswith("interlock_")]


def _roll_out(bench, backend, tmp_path, attempts: int = 1) -> list[Trajectory]:
    """The benchmark's own rollout (the engine, the Parquet table), read back as the stage grades it."""
    out = tmp_path / "trajectories.parquet"
    settings = RunSettings(attempts=attempts, seed=3, limits=RUN_LIMITS)
    roll_out(bench, "m", "m/policy", backend, settings, out=out, timings=tmp_path / "timings.parquet",
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


def test_the_ground_truth_through_the_engine_passes_every_task(category, tmp_path) -> None:
    """The control, per category: every one of its 200 tasks, BFCL's ground-truth calls replayed
    through the tool-call protocol, the engine and the environment (under the run's workspace
    limits, which BFCL's episodes do not take), graded by BFCL's checker."""
    tasks = category.bfcl_tasks
    assert len(tasks) == 200 and {t.category for t in tasks} == {CATEGORIES[category.name]}
    trajectories = _roll_out(category, GroundTruthBackend(), tmp_path)
    assert [t.task_id for t in trajectories] == sorted(t for t, _ in category.tasks())  # sorted by rollout id
    assert {t.finish_reason for t in trajectories} == {"no_tool_call"}
    assert {(t.invalid_calls, t.pool, t.policy) for t in trajectories} == {(0, category.name, "m/policy")}
    by_id = {task.task_id: task for task in tasks}
    for t in trajectories:
        task = by_id[t.task_id]
        assert [m.content for m in t.messages if m.role == "user"] == task.user_turns
        assert t.tool_calls == sum(len(turn) for turn in task.ground_truth)  # every call ran
    results = category.grade(trajectories)
    assert all(r.passed for r in results), [r.rollout_id for r in results if not r.passed][:5]
    assert {(r.score, r.criterion_pass_rate) for r in results} == {(1.0, 1.0)}
    assert all(r.primary_passed is None and r.completion_gap is None for r in results)
    assert [r.criteria for r in results] == [len(by_id[t.task_id].ground_truth) for t in trajectories]
    assert not _cached_instances(), "episodes and checks drop their API instances"
    if category.name == "bfcl_long_context":  # neither capped nor clipped by the run's limits
        steps = [len(m.tool_calls) for t in trajectories for m in t.messages if m.role == "assistant"]
        longest = max(len(m.content) for t in trajectories for m in t.messages if m.role == "tool")
        assert max(steps) == 34 > RUN_LIMITS.max_calls_per_turn
        assert longest > 30_000 > RUN_LIMITS.max_observation_chars


def test_the_final_api_state_is_recorded_as_json(bench, tmp_path) -> None:
    assert bench.tasks()[:2] == [("multi_turn_base_0", "GorillaFileSystem+TwitterAPI"),
                                 ("multi_turn_base_1", "GorillaFileSystem")]
    (first,) = _roll_out(BfclMultiTurn(limit=1), GroundTruthBackend(), tmp_path)
    # the file system after multi_turn_base_0 holds the moved report
    assert set(first.final_files) == {"GorillaFileSystem", "TwitterAPI"}
    state = json.loads(first.final_files["GorillaFileSystem"])
    document = state["root"]["contents"]["document"]["contents"]
    assert set(document["temp"]["contents"]) == {"final_report.pdf", "previous_report.pdf"}
    assert {d["record"] for d in first.diff if d["file"] == "GorillaFileSystem"} == {"root"}


def test_ending_every_turn_without_a_call_passes_nothing(category, tmp_path) -> None:
    """The other control, per category, on every task: an agent that never calls passes none and
    scores 0 wherever the first turn needs a call; a turn whose ground truth makes no call passes
    unchecked in BFCL's checker (miss_param, miss_func), so it scores the turns before the first
    one that needs a call."""
    silent = _roll_out(category, Replies(lambda task, turn, step: "I cannot help with that."), tmp_path)
    tasks = {task.task_id: task for task in category.bfcl_tasks}
    assert [t.turns for t in silent] == [len(tasks[t.task_id].user_turns) for t in silent]
    results = category.grade(silent)
    assert not any(r.passed for r in results)
    truths = [tasks[r.task_id].ground_truth for r in results]
    free = [next(i for i, calls in enumerate(truth) if calls) for truth in truths]  # turns before a call
    assert [r.score for r in results] == [n / len(truth) for n, truth in zip(free, truths, strict=True)]
    assert (sum(n > 0 for n in free), sum(r.score == 0 for r in results)) == {
        "bfcl": (0, 200), "bfcl_miss_param": (81, 119), "bfcl_miss_func": (94, 106),
        "bfcl_long_context": (0, 200)}[category.name]
    first_call = [r.verdicts[n] for r, n in zip(results, free, strict=True)]
    assert all(not v["passed"] and "empty_turn_model_response" in v["evidence"] for v in first_call)


def test_turns_after_the_first_failing_one_are_not_credited(tmp_path) -> None:
    few = BfclMultiTurn(limit=5)

    def first_turn_only(task, turn, step):
        calls = ground_truth_calls(task)[0] if turn == 0 and step == 0 else []
        return render_turn("" if calls else "Done.", calls)

    partial = few.grade(_roll_out(few, Replies(first_turn_only), tmp_path))
    assert not any(r.passed for r in partial)
    assert [r.score for r in partial] == [1 / len(task.ground_truth) for task in few.bfcl_tasks]
    assert [[v["passed"] for v in r.verdicts][:2] for r in partial] == [[True, False]] * 5


class Recording(GroundTruthBackend):
    """The ground truth, keeping every request it was sent (the tools offered at each step)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ChatRequest] = []

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        self.requests += requests
        return super().complete(requests)


def test_held_out_functions_join_the_tools_at_their_turn_as_bfcl_adds_them(tmp_path) -> None:
    """BFCL's miss_func protocol: the functions ``missed_function`` names are not among the tools
    until their turn, whose user message is the one BFCL's inference sends; then they are, at the
    end of the list (where BFCL appends their docs)."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    assert ADDED_FUNCTIONS == DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    few = BfclMultiTurn("bfcl_miss_func", limit=1)
    (task,) = few.bfcl_tasks
    assert task.entry["missed_function"] == {"3": ["sort"]} and list(task.held_out) == [3]
    backend = Recording()
    episode = bfcl_episode("held", task, few.name, "p", 0, 0)
    (trajectory,) = run_episodes([episode], backend, RUN_LIMITS, tmp_path)
    offered: dict[int, list[str]] = {}
    for request in backend.requests:
        turn = sum(m.role == "user" for m in request.messages) - 1
        offered.setdefault(turn, [tool["function"]["name"] for tool in request.tools])
    names = [doc["name"] for doc in task.docs]
    assert "sort" not in names and [offered[turn] for turn in range(3)] == [names] * 3
    assert offered[3] == offered[4] == [*names, "sort"]
    assert task.entry["question"][3] == []
    assert [m.content for m in trajectory.messages if m.role == "user"][3] == ADDED_FUNCTIONS
    (result,) = few.grade([trajectory])
    assert result.passed


def _state(task: bfcl.BfclTask, long_context: bool) -> dict:
    """The API state BFCL's executor loads for a task's initial config, long or not."""
    name, entry = bfcl._unique_name("probe"), task.entry
    try:
        instances = bfcl._bfcl().utils.execute_multi_turn_func_call(
            [], entry["initial_config"], entry["involved_classes"], name, entry["id"],
            long_context=long_context)[1]
        return api_state(instances)
    finally:
        bfcl._forget(name)


def test_the_long_context_state_is_the_one_bfcl_grades() -> None:
    """The agent acts on BFCL's long scenario: what its checker loads for the category
    (``long_context=True``), not the short one the same initial config gives."""
    for task in BfclMultiTurn("bfcl_long_context", limit=10).bfcl_tasks:
        environment = bfcl.BfclEnvironment(bfcl_episode("long", task, "p", "p", 0, 0), None)
        environment.close()
        assert environment.initial == _state(task, True) != _state(task, False)
    assert not _cached_instances()


def test_every_bfcl_pool_is_a_registered_benchmark() -> None:
    assert set(CATEGORIES) <= set(BENCHMARKS.names())
    assert all(BENCHMARKS.get(pool) is bfcl.build for pool in CATEGORIES)
    with pytest.raises(InterlockError, match="no BFCL category for pool 'benchmark'"):
        BfclMultiTurn("benchmark")


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
    (trajectory,) = run_episodes([bfcl_episode("refused", task, "bfcl", "p", 0, 0)], backend, RUN_LIMITS,
                                 tmp_path)
    assert executed == ["ls(a=True)"]
    observations = [m.content for m in trajectory.messages if m.role == "tool"]
    assert observations[0].startswith("error: unknown function 'post_tweet'; the functions are cat, cd")
    assert observations[1].startswith("error: unknown function '__import__'")
    assert observations[2].startswith("error: ls: \"a=__import__('os').getcwd(),b\" is not an argument name")
    assert json.loads(observations[3])["current_directory_content"]
    assert trajectory.invalid_calls == 3 and trajectory.tool_calls == 4
    assert not _cached_instances()


def test_a_user_turn_ends_the_episode_at_bfcls_step_limit_not_the_runs(bench, tmp_path) -> None:
    """BFCL quits a turn when a step with calls follows its 20th (``count > MAXIMUM_STEP_LIMIT``):
    21 replies, the run's ``max_turns`` (8 here) notwithstanding."""
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    assert STEP_LIMIT == MAXIMUM_STEP_LIMIT and LIMITS.max_turns == STEP_LIMIT + 1
    assert LIMITS.max_calls_per_turn is None and LIMITS.max_observation_chars is None
    task = next(t for t in bench.bfcl_tasks if t.domain_id == "GorillaFileSystem")
    loop = Replies(lambda t, turn, step: render_turn("", [ToolCall("pwd")]))
    (trajectory,) = run_episodes([bfcl_episode("loop", task, "bfcl", "p", 0, 0)], loop, RUN_LIMITS, tmp_path)
    assert trajectory.finish_reason == "max_turns" and trajectory.turns == 21 and trajectory.tool_calls == 21
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
