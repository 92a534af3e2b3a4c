"""Rollout-time intervention: the diagnosis finds the planted turn, corrections are verified,
the note never reaches a training example, and the stage is resumable."""

from __future__ import annotations

import random

import pytest

from interlock.core import schemas
from interlock.core.backend import ChatRequest, Completion
from interlock.core.chat import Message, ToolCall, render_turn
from interlock.core.config import InterventionConfig, ShiftFilterConfig
from interlock.core.io import loads, write_table
from interlock.intervention.correction import (
    NOTE_HEADER,
    SUFFIX,
    Case,
    NotedBackend,
    ScriptedCorrector,
    correction_turns,
)
from interlock.intervention.diagnosis import diagnose, failures_after_completion
from interlock.intervention.stage import Roles, run_intervention
from interlock.judging.verdicts import accepted
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import scripted_rollouts
from interlock.rollout.scripted import (
    DONE,
    SUBMIT,
    case_of,
    decision_turns,
    look_turn,
    noisy_gap,
)
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.kinds.effects import realizations, register_entry
from interlock.synthesis.workspace import MemoryStore

from helpers.episodes import Played

LIMITS = RolloutLimits(max_turns=12)
CONFIG = InterventionConfig(name="rti", critic="scripted", corrector="scripted",
                            filter=ShiftFilterConfig(quantile=1.0, slack=10.0), weight_cap=1.0,
                            mask="corrected", critic_max_new_tokens=64)


def _diagnosed(contexts, plans: dict[str, list], workdir) -> list[tuple[Trajectory, object]]:
    """The planned rollouts (keys ``task_id@anything``), each with its diagnosis."""
    from interlock.rollout.engine import Episode

    by_id = {c.task_id: c for c in contexts}
    tasks = {key: by_id[key.split("@")[0]] for key in plans}
    episodes = [Episode(key, task, task.domain.id, "rft", "planned", 0, 0) for key, task in tasks.items()]
    return [(t, diagnose(t.messages, tasks[t.rollout_id]))
            for t in run_episodes(episodes, Played(plans), LIMITS, workdir)]


def _wrong_decision_plan(task, k: int) -> list | None:
    """The oracle's plan with decision ``k`` given another outcome the rule admits (None: the rule
    admits no other)."""
    writes = []
    for index, decision in enumerate(task.graph.of_kind("decision")):
        row, alternatives = case_of(task, decision)
        outcome = task.graph.outcome(decision)
        basis = decision.attrs["basis"]
        if index == k:
            outcome = next((a for a in alternatives if a.value != outcome.value), None)
            if outcome is None:
                return None
        writes.append(register_entry(row["id"], outcome.value, basis).tool_call())
        writes += [e.tool_call() for _, e in realizations(task.domain, task.graph.effects_per_decision, row,
                                                           outcome, basis)]
    return [look_turn(task), *decision_turns(task, writes), (DONE, [SUBMIT])]


def test_the_reference_completion_passes_from_the_initial_workspace(contexts):
    for task in contexts:
        assert failures_after_completion(task, MemoryStore(task.pack.files)) == [], task.task_id


def test_a_skipped_effect_is_an_omission_at_the_submitting_turn(contexts, tmp_path):
    plans, expected = {}, {}
    for task in contexts:
        for seed in range(40):
            gap = noisy_gap(task, random.Random(seed), {"skip_effect": 0.3, "ignore_coupling": 0.0})
            if gap.skipped:
                turns = [look_turn(task), *decision_turns(task, gap.writes), (DONE, [SUBMIT])]
                plans[f"{task.task_id}@{seed}"] = turns
                expected[f"{task.task_id}@{seed}"] = len(turns) - 1
                break
    assert plans
    for trajectory, d in _diagnosed(contexts, plans, tmp_path):
        assert (d.failure, d.turn) == ("omission", expected[trajectory.rollout_id]), d.reason
        assert trajectory.messages[d.message].role == "assistant"
        assert d.failing


def test_an_ignored_coupling_is_a_commission_at_the_first_wrong_decision(contexts, tmp_path):
    plans, expected = {}, {}
    for task in contexts:
        decisions = task.graph.of_kind("decision")
        for seed in range(40):
            gap = noisy_gap(task, random.Random(seed), {"skip_effect": 0.0, "ignore_coupling": 1.0})
            wrong = [i for i, d in enumerate(decisions) if str(case_of(task, d)[0]["id"]) in gap.ignored
                     and case_of(task, d)[1][0].value != task.graph.outcome(d).value]
            if wrong:
                key = f"{task.task_id}@{seed}"
                plans[key] = [look_turn(task), *decision_turns(task, gap.writes), (DONE, [SUBMIT])]
                expected[key] = 1 + wrong[0]  # turn 0 reads; decision i is turn 1 + i
                break
    assert plans
    for trajectory, d in _diagnosed(contexts, plans, tmp_path):
        assert (d.failure, d.turn) == ("commission", expected[trajectory.rollout_id]), d.reason


@pytest.mark.parametrize("k", [0, 2])
def test_a_wrong_decision_is_a_commission_at_its_turn(contexts, tmp_path, k):
    plans = {f"{task.task_id}@{k}": plan for task in contexts if (plan := _wrong_decision_plan(task, k))}
    assert len(plans) >= 3
    for _, d in _diagnosed(contexts, plans, tmp_path):
        assert (d.failure, d.turn) == ("commission", 1 + k), d.reason


def test_a_correct_rollout_and_hostile_content_have_no_intervention_point(contexts, tmp_path):
    task = contexts[0]
    oracle = scripted_rollouts([task], ["oracle"], seed=1, workdir=tmp_path)[0]
    assert diagnose(oracle.messages, task).turn is None
    deep = {"record": {}}
    node = deep["record"]
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    hostile = [Message("system", "s"), Message("user", "u"),
               Message("assistant", "x", (
                   ToolCall("append_record", {"path": "out/decisions.csv", **deep}),
                   ToolCall("write_file", {"path": "../../etc/passwd", "content": "\0" * 10}))),
               Message("assistant", "done", (ToolCall("submit", {}),))]
    d = diagnose(hostile, task)  # never raises: the tools refused both calls, so nothing wrong was written
    assert (d.failure, d.turn, d.message) == ("omission", 1, 3), d.reason
    planted = [*hostile[:2], Message("assistant", "", (ToolCall("write_file", {"path": "tests/verifier.py",
                                                                               "content": "PASS"}),)),
               hostile[-1]]
    d = diagnose(planted, task)  # a file no decision requires: completing the work cannot undo it
    assert (d.failure, d.turn) == ("commission", 0), d.reason


def test_the_scripted_corrector_completes_from_the_prefix_and_passes_the_judge(contexts, tmp_path,
                                                                               agent_judge):
    trajectories = scripted_rollouts(contexts, ["noisy"], seed=5, workdir=tmp_path, attempts=4,
                                     skip_effect=0.3, ignore_coupling=0.5)
    by_id = {c.task_id: c for c in contexts}
    cases = []
    for t in trajectories:
        d = diagnose(t.messages, by_id[t.task_id])
        if d.turn is not None:
            cases.append(Case(t, by_id[t.task_id], d, {}))
    assert len(cases) >= 4
    fixed = list(run_episodes([c.episode("rti/scripted") for c in cases], ScriptedCorrector(), LIMITS,
                              tmp_path / "c"))
    judged = agent_judge.judge([(t, by_id[t.task_id].pack) for t in fixed])
    for case, trajectory, judgement in zip(sorted(cases, key=lambda c: c.rollout_id),
                                           sorted(fixed, key=lambda t: t.rollout_id),
                                           sorted(judged, key=lambda j: j.rollout_id), strict=True):
        assert trajectory.rollout_id == case.rollout_id + SUFFIX
        assert trajectory.messages[:len(case.prefix)] == list(case.prefix)  # the prefix is kept as it was
        passed = {v["criterion_id"]: v["passed"] for v in judgement.verdicts}
        assert accepted(passed, by_id[trajectory.task_id].pack.rubric), judgement.verdicts
        # its counts cover the whole conversation, prefix included
        assert trajectory.turns == sum(m.role == "assistant" for m in trajectory.messages)


def test_correction_turns_skip_writes_the_prefix_already_made(contexts):
    task = contexts[0]
    writes = list(_wrong_decision_plan(task, k=-1)[1][1])  # the oracle's first decision, written right
    prefix = [Message("system", "s"), Message("user", "u"), Message("assistant", "", tuple(writes))]
    planned = [c for _, calls in correction_turns(task, prefix) for c in calls]
    assert not set(map(repr, writes)) & set(map(repr, planned))  # nothing written twice
    assert planned[0].name == "list_files" and planned[-1].name == "submit"  # it never read: it reads first


class RecordingBackend:
    """A model stand-in that records the requests it was sent and answers with a submit."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[ChatRequest] = []

    def begin(self, key, task) -> None:
        pass

    def complete(self, requests):
        self.seen += requests
        return [Completion(render_turn("Submitting.", [SUBMIT])) for _ in requests]

    def end(self, key) -> None:
        pass


def test_the_critics_note_reaches_the_corrector_but_never_the_trajectory(contexts, tmp_path):
    task = contexts[0]
    t = scripted_rollouts([task], ["noisy"], seed=2, workdir=tmp_path, skip_effect=1.0,
                          ignore_coupling=0.0)[0]
    d = diagnose(t.messages, task)
    case = Case(t, task, d, {"C1": "missing"})
    inner = RecordingBackend()
    note = "Write the ledger row for the first case. SECRET-HINT-42"
    corrector = NotedBackend(inner, {case.rollout_id: note})
    fixed = list(run_episodes([case.episode("rti/model")], corrector, LIMITS, tmp_path / "c"))[0]
    sent = inner.seen[0].messages
    assert sent[len(case.prefix)].role == "user" and note in sent[len(case.prefix)].content
    assert NOTE_HEADER in sent[len(case.prefix)].content
    assert not any(note in m.content or NOTE_HEADER in m.content for m in fixed.messages)
    assert fixed.messages[:len(case.prefix)] == list(case.prefix)


# ----------------------------------------------------------------------------- the stage's library

def _pool(contexts, tmp_path, agent_judge):
    """Noisy rollouts, their agent verdicts and the accepted ids, written as the stages write them."""
    trajectories = scripted_rollouts(contexts, ["noisy"], seed=11, workdir=tmp_path / "w", attempts=3,
                                     skip_effect=0.3, ignore_coupling=0.5)
    judged = agent_judge.judge([(t, next(c for c in contexts if c.task_id == t.task_id).pack)
                                for t in trajectories])
    write_table(tmp_path / "trajectories.parquet", [t.to_row() for t in trajectories], schemas.TRAJECTORIES)
    write_table(tmp_path / "verdicts.parquet", [v for j in judged for v in j.verdicts], schemas.VERDICTS)
    by_id = {c.task_id: c for c in contexts}
    ok = {j.rollout_id for j in judged
          if accepted({v["criterion_id"]: v["passed"] for v in j.verdicts}, by_id[j.task_id].pack.rubric)}
    return by_id, ok


def _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint, corrector=None, work="work"):
    return run_intervention(tmp_path / "trajectories.parquet", tmp_path / "verdicts.parquet", ok, by_id,
                            config=CONFIG, roles=Roles(None, corrector, "rti/test"),
                            checkpoint=tiny_checkpoint, scorer_dtype="float32", max_context=12288,
                            limits=LIMITS, work=tmp_path / work, run_id="r1", batch_size=4, judge=agent_judge)


def test_run_intervention_corrects_verifies_scores_and_reports(contexts, tmp_path, agent_judge,
                                                               tiny_checkpoint):
    by_id, ok = _pool(contexts, tmp_path, agent_judge)
    rows, metrics, plots = _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint)
    assert metrics["failed"] == len(rows) > 0 and metrics["rollouts"] == len(rows) + len(ok)
    kept = [r for r in rows if r["kept"]]
    assert kept and metrics["kept"] == len(kept)
    for row in rows:
        if row["kept"]:
            corrected = Trajectory.from_row(loads(row["corrected"], file="t", item="r", field="c"), "t")
            assert row["verified"] and row["nll"] > 0 and 0 < row["weight"] <= CONFIG.weight_cap
            assert corrected.rollout_id == row["rollout_id"] + SUFFIX
            assert corrected.messages[row["prefix_messages"]].role == "assistant"
            assert row["critic_note"] and "fail" in row["critic_note"]
            assert not any(row["critic_note"] in m.content for m in corrected.messages)
    assert sum(r["kept"] for r in plots["domains"]) == len(kept)
    assert plots["threshold"] and plots["accepted"] and plots["corrections"]


def test_a_correction_that_fails_the_judge_is_never_kept(contexts, tmp_path, agent_judge, tiny_checkpoint):
    by_id, ok = _pool(contexts, tmp_path, agent_judge)
    rows, metrics, _ = _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint, corrector=RecordingBackend())
    corrected = [r for r in rows if r["corrected"] is not None]
    assert corrected and metrics["kept"] == 0 and metrics["verified"] == 0
    assert all(not r["kept"] and r["verified"] is False and "fails the agent judge" in r["reason"]
               for r in corrected)


class Killed(Exception):
    pass


class DyingCorrector(ScriptedCorrector):
    """Dies (as a killed process would) after ``lives`` batched calls."""

    def __init__(self, lives: int) -> None:
        super().__init__()
        self.lives = lives

    def complete(self, requests):
        self.lives -= 1
        if self.lives < 0:
            raise Killed
        return super().complete(requests)


def test_killed_and_rerun_loses_and_duplicates_nothing(contexts, tmp_path, agent_judge, tiny_checkpoint):
    by_id, ok = _pool(contexts, tmp_path, agent_judge)
    clean, _, _ = _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint, work="clean")
    with pytest.raises(Killed):
        _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint, corrector=DyingCorrector(7), work="resumed")
    assert list((tmp_path / "resumed" / "r1").glob("part-*.parquet"))  # finished corrections were kept
    resumed, _, _ = _run(tmp_path, by_id, ok, agent_judge, tiny_checkpoint, corrector=ScriptedCorrector(),
                         work="resumed")
    assert resumed == clean
