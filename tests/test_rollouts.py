"""The rollout engine with scripted solvers: protocol, error recovery, abuse, resumability."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.chat import ToolCall, parse_turn, render_turn
from interlock.core.io import read_rows
from interlock.judging.verdicts import accepted
from interlock.rollout.engine import RolloutLimits, run_episodes
from interlock.rollout.runs import plan_episodes, run_rollouts
from interlock.rollout.scripted import ScriptedBackend
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import MemoryStore
from interlock.testing.adversaries import ADVERSARIES, PLANS

from helpers.artifacts import apply_changes, kill_when_parts_are_written


def _contexts(tasks) -> list[TaskContext]:
    return [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in tasks]


def _episodes(contexts, policy: str, attempts: int = 1):
    return list(plan_episodes(iter(contexts), policy=policy, attempts=attempts, seed=1))


def _accepted(trajectory, context) -> bool:
    """Ground truth: every mandatory compiled check passes on the real final workspace of an
    episode that submitted."""
    view = View(MemoryStore(apply_changes(context.pack.files, trajectory.final_files)),
                submitted=trajectory.finish_reason == "submitted")
    return all(run_check(context.pack.checks[c.criterion_id], view)[0]
               for c in context.pack.rubric if c.mandatory)


def test_protocol_round_trips_and_reports_malformed_calls():
    calls = [ToolCall("read_file", {"path": "a.csv"}), ToolCall("submit", {})]
    parsed = parse_turn(render_turn("Reading.", calls))
    assert parsed.remainder() == "Reading." and list(parsed.calls) == calls and not parsed.problems
    broken = parse_turn('<tool_call>{"name": "x", "arguments": "[1]"}</tool_call> <tool_call>{oops'
                        '</tool_call><tool_call>{"arguments": {}}</tool_call>')
    assert not broken.calls and len(broken.problems) == 3
    # a number too long for Python's int() is a malformed call too, never an exception
    huge = "9" * 5000
    overflow = parse_turn(f'<tool_call>{{"name": "x", "arguments": {{"n": {huge}}}}}</tool_call>'
                          f'<tool_call>{{"name": "x", "arguments": "{{\\"n\\": {huge}}}"}}</tool_call>')
    assert not overflow.calls and len(overflow.problems) == 2
    assert "not JSON: Exceeds the limit" in overflow.problems[0]


def test_oracle_rollouts_pass_and_record_everything(tasks, tmp_path):
    contexts = _contexts(tasks)
    trajectories = list(run_episodes(_episodes(contexts, "oracle"), ScriptedBackend("oracle"),
                                     RolloutLimits(), tmp_path))
    by_task = {c.task_id: c for c in contexts}
    assert len(trajectories) == len(contexts)
    for t in trajectories:
        assert t.finish_reason == "submitted" and t.invalid_calls == 0
        assert _accepted(t, by_task[t.task_id])
        assert t.tool_calls == len(by_task[t.task_id].pack.reference)
        assert any(len(m.tool_calls) > 1 for m in t.messages if m.role == "assistant")
        assert [m.role for m in t.messages[:2]] == ["system", "user"]
        assert t.diff and all({"file", "record", "before", "after"} <= set(d) for d in t.diff)
    assert not list(tmp_path.iterdir()), "episode workspaces are removed when they end"


def test_noisy_solvers_open_a_completion_gap(tasks, tmp_path):
    contexts = _contexts(tasks)
    backend = ScriptedBackend("noisy", seed=2, skip_effect=0.1, ignore_coupling=0.0)
    trajectories = list(run_episodes(_episodes(contexts, "noisy", attempts=3), backend, RolloutLimits(),
                                     tmp_path))
    by_task = {c.task_id: c for c in contexts}
    accepted = [_accepted(t, by_task[t.task_id]) for t in trajectories]
    assert 0 < sum(accepted) < len(accepted)
    again = list(run_episodes(_episodes(contexts, "noisy", attempts=3),
                              ScriptedBackend("noisy", seed=2, skip_effect=0.1, ignore_coupling=0.0),
                              RolloutLimits(), tmp_path))
    assert [t.to_row() for t in again] == [t.to_row() for t in trajectories]


def _tree(root: Path, skip: Path) -> dict[str, float]:
    """Every path under ``root`` but the episodes' own workspaces, with its modification time."""
    return {str(p): p.stat().st_mtime for p in root.rglob("*") if p != skip and skip not in p.parents}


@pytest.mark.parametrize("policy", ADVERSARIES)
def test_abuse_is_contained_and_never_accepted(tasks, tmp_path, policy, agent_judge):
    contexts = _contexts(tasks)
    workdir = tmp_path / "sandbox" / "workspaces"
    workdir.mkdir(parents=True)
    (tmp_path / "sandbox" / "outside.txt").write_text("untouched")
    before = _tree(tmp_path, workdir)
    trajectories = list(run_episodes(_episodes(contexts, policy), ScriptedBackend(policy, plans=PLANS),
                                     RolloutLimits(max_turns=12), workdir))
    assert len(trajectories) == len(contexts)
    assert _tree(tmp_path, workdir) == before, "nothing outside the workspaces changed"
    assert not Path("/tmp/interlock-escape.txt").exists()
    by_task = {c.task_id: c for c in contexts}
    judgements = agent_judge.judge([(t, by_task[t.task_id].pack) for t in trajectories])
    assert not [j.rollout_id for j in judgements if accepted(j.passed, by_task[j.task_id].pack.rubric)]
    # the truth of the final state (three attacks leave the oracle's: one undoes its damage before the
    # end, and only the judge's replay of the episode sees it; two write control text, which only the
    # judge's reading of the policy's words refuses)
    if policy not in ("tamper_and_restore", "control_text", "control_echo"):
        assert not [t.rollout_id for t in trajectories if _accepted(t, by_task[t.task_id])]


def test_long_output_is_clipped_and_loops_end_at_the_turn_limit(tasks, tmp_path):
    contexts = _contexts(tasks)[:1]
    flood = next(run_episodes(_episodes(contexts, "flood_output"),
                              ScriptedBackend("flood_output", plans=PLANS),
                              RolloutLimits(max_observation_chars=500), tmp_path))
    assert max(len(m.content) for m in flood.messages if m.role == "tool") < 600
    loop = next(run_episodes(_episodes(contexts, "tool_loop"), ScriptedBackend("tool_loop", plans=PLANS),
                             RolloutLimits(max_turns=5), tmp_path))
    assert loop.finish_reason == "max_turns" and loop.turns == 5


class _SlowScripted(ScriptedBackend):
    """The scripted oracle, slowed down so a run can be killed in the middle."""

    def complete(self, requests):
        time.sleep(0.03)
        return super().complete(requests)


def _run(contexts, out: Path, work: Path, slow: bool) -> dict:
    backend = (_SlowScripted if slow else ScriptedBackend)("noisy", seed=4)
    episodes = plan_episodes(iter(contexts), policy="noisy", attempts=4, seed=4)
    return run_rollouts(episodes, backend, RolloutLimits(), total=4 * len(contexts), out=out,
                        timings=out.with_name("timings.parquet"), work=work, run_id="run",
                        batch_size=2, flush_every=1)


def test_a_killed_run_resumes_without_losing_or_duplicating(tasks, tmp_path):
    contexts = _contexts(tasks)
    clean = tmp_path / "clean" / "trajectories.parquet"
    _run(contexts, clean, tmp_path / "clean-work", slow=False)

    out, work = tmp_path / "resumed" / "trajectories.parquet", tmp_path / "work"
    parts = kill_when_parts_are_written(_run, (contexts, out, work, True), work / "run")
    assert parts and not out.exists(), "killed mid-run: parts on disk, no final table yet"

    summary = _run(contexts, out, work, slow=False)
    rows = read_rows(out, schemas.TRAJECTORIES)
    ids = [r["rollout_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 4 * len(contexts) == summary["episodes"]
    assert out.read_bytes() == clean.read_bytes()
    assert not work.exists()
