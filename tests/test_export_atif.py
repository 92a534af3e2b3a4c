"""Judged rollouts exported in ATIF, Harbor's Agent Trajectory Interchange Format, version
``ATIF-v1.7``: every document is checked against the published specification (a JSON schema written
from RFC 0001 and Harbor's pydantic models at the commit the exporter names, plus the models'
cross-field rules), gives back the judged transcript exactly, and carries both judges' verdicts.

The rollouts are real: scripted solvers with known outcomes (the oracle, a noisy solver, a no-work
control, malformed records, a forged transcript) through the rollout engine, judged by both judges
as the ``judge`` stage does, exported through the command line."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest

from interlock.analysis.artifacts import repository_paths
from interlock.analysis.cli import main
from interlock.core import schemas
from interlock.core.backend import SampledTokens
from interlock.core.chat import Message, ToolCall
from interlock.core.errors import InterlockError
from interlock.core.io import iter_row_groups, read_rows, write_row_groups, write_table_set
from interlock.core.paths import Paths
from interlock.export import atif
from interlock.judging.judges import JudgeContext
from interlock.judging.stage import GRADERS, accepted_rollouts, mandatory_criteria, run_judge
from interlock.rollout.runs import scripted_rollouts
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import TaskContext
from interlock.testing.adversaries import PLANS

from helpers.artifacts import write_packs
from helpers.repo import REPO

ATIF_SCHEMA = json.loads((REPO / "tests" / "schemas" / "atif-v1.7.schema.json").read_text())
POLICIES = ("oracle", "noisy", "claim_only", "malformed_records", "transcript_forgery")


def atif_problems(document: object) -> list[str]:
    """Everything that keeps ``document`` from being an ATIF-v1.7 trajectory: the schema, then the
    rules Harbor's models add (step ids 1, 2, ...; a result's source_call_id names a tool call of
    its own step; timestamps in ISO 8601; embedded subagents with unique trajectory ids)."""
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(ATIF_SCHEMA).iter_errors(document)]
    if problems:
        return problems
    for index, step in enumerate(document["steps"]):
        if step["step_id"] != index + 1:
            problems.append(f"steps[{index}].step_id is {step['step_id']}, not {index + 1}")
        if step.get("timestamp") is not None:
            try:
                datetime.fromisoformat(step["timestamp"].replace("Z", "+00:00"))
            except ValueError:
                problems.append(f"steps[{index}].timestamp is not ISO 8601")
        calls = {call["tool_call_id"] for call in step.get("tool_calls") or ()}
        for result in (step.get("observation") or {}).get("results", ()):
            if result.get("source_call_id") is not None and result["source_call_id"] not in calls:
                problems.append(f"steps[{index}] answers {result['source_call_id']!r}, no call of its own")
    subagents = [s.get("trajectory_id") for s in document.get("subagent_trajectories") or ()]
    if None in subagents or len(set(subagents)) < len(subagents):
        problems.append("embedded subagents need unique trajectory ids")
    for subagent in document.get("subagent_trajectories") or ():
        problems += atif_problems(subagent)
    return problems


def transcript(document: dict) -> list[Message]:
    """The conversation an ATIF document records, as interlock's messages (a tool message named after
    the call it answers, ``invalid`` where it answers none)."""
    messages = []
    for step in document["steps"]:
        if step["source"] != "agent":
            messages.append(Message(step["source"], step["message"]))
            continue
        calls = step.get("tool_calls") or []
        messages.append(Message("assistant", step["message"],
                                tuple(ToolCall(c["function_name"], c["arguments"]) for c in calls)))
        names = {c["tool_call_id"]: c["function_name"] for c in calls}
        for result in (step.get("observation") or {}).get("results", ()):
            messages.append(Message("tool", result["content"],
                                    name=names.get(result.get("source_call_id"), atif.INVALID_CALL)))
    return messages


@pytest.fixture(scope="module")
def judged_run(tasks, tmp_path_factory) -> tuple[Paths, list[Trajectory], Path]:
    """Three tasks' packs, their scripted rollouts in two row groups, both judges' verdicts, and
    the run exported by the command line: (paths, rollouts, export folder)."""
    root = tmp_path_factory.mktemp("artifacts") / "data"
    paths = repository_paths(REPO, data=root)
    chosen = tasks[:3]
    write_packs(paths.packs, [pack for *_, pack in chosen])
    contexts = [TaskContext(pack.task_id, pack, graph, domain) for domain, _, graph, pack in chosen]
    rollouts = scripted_rollouts(contexts, POLICIES, seed=0, workdir=tmp_path_factory.mktemp("work"),
                                 plans=PLANS)
    with write_row_groups(paths.trajectories, schemas.TRAJECTORIES) as writer:
        half = len(rollouts) // 2
        for group in (rollouts[:half], rollouts[half:]):
            writer.write([t.to_row() for t in group])
    run_judge(paths.trajectories, [paths.packs], paths.judgements, context=JudgeContext(workers=1),
              progress=False)
    out = tmp_path_factory.mktemp("atif")
    assert main(["--data", str(root), "export", "trajectories", "--format", "atif", "-o", str(out)]) == 0
    return paths, rollouts, out


def documents(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def test_one_atif_document_per_judged_rollout(judged_run):
    _, rollouts, out = judged_run
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{t.rollout_id}.json" for t in rollouts)
    assert atif.ATIF_VERSION == "ATIF-v1.7"
    assert {d["schema_version"] for d in documents(out).values()} == {"ATIF-v1.7"}


def test_every_document_follows_the_atif_specification(judged_run):
    _, _, out = judged_run
    for rollout_id, document in documents(out).items():
        assert atif_problems(document) == [], rollout_id


def test_the_specification_check_can_fail(judged_run):
    _, _, out = judged_run
    document = next(d for d in documents(out).values() if d["extra"]["interlock"]["policy"] == "oracle")
    assert atif_problems(document) == []
    agent_step = next(i for i, s in enumerate(document["steps"]) if s.get("tool_calls"))

    def broken(edit) -> dict:
        changed = copy.deepcopy(document)
        edit(changed)
        return changed

    mutants = {
        "a field ATIF does not have": lambda d: d["steps"][0].update(reward=1),
        "tool calls on a user step": lambda d: d["steps"][1].update(tool_calls=[]),
        "a gap in the step ids": lambda d: d["steps"][2].update(step_id=7),
        "an answer to no call": lambda d: d["steps"][agent_step]["observation"]["results"][0].update(
            source_call_id="call-none"),
        "no agent version": lambda d: d["agent"].pop("version"),
        "an unknown version": lambda d: d.update(schema_version="ATIF-v2.0"),
        "arguments as a JSON string": lambda d: d["steps"][agent_step]["tool_calls"][0].update(
            arguments="{}"),
        "a bad timestamp": lambda d: d["steps"][0].update(timestamp="yesterday"),
        "no steps": lambda d: d.update(steps=[]),
    }
    for name, edit in mutants.items():
        assert atif_problems(broken(edit)), name


def test_documents_give_back_the_judged_transcript_exactly(judged_run):
    _, rollouts, out = judged_run
    found = documents(out)
    invalid = 0
    for trajectory in rollouts:
        document = found[trajectory.rollout_id]
        assert transcript(document) == trajectory.messages, trajectory.rollout_id
        assert document["session_id"] == document["trajectory_id"] == trajectory.rollout_id
        assert document["agent"]["model_name"] == trajectory.policy
        assert document["final_metrics"]["total_completion_tokens"] == trajectory.generated_tokens
        assert document["final_metrics"]["total_steps"] == len(document["steps"])
        extra = document["extra"]["interlock"]
        assert (extra["task_id"], extra["finish_reason"], extra["diff"]) == (
            trajectory.task_id, trajectory.finish_reason, trajectory.diff)
        invalid += sum(m.name == atif.INVALID_CALL for m in trajectory.messages)
    assert invalid  # the malformed calls' errors, which answer no call, were among them


def test_an_agent_step_carries_the_ids_its_turn_sampled(judged_run):
    """A rollout whose turns recorded their sampled ids and log-probabilities: each agent step holds
    them in its ATIF metrics, and the document still follows the specification; the scripted
    rollouts' steps (nothing sampled) hold no metrics (the twin)."""
    _, rollouts, out = judged_run
    trajectory = next(t for t in rollouts if t.policy == "oracle")
    document = documents(out)[trajectory.rollout_id]
    assert not any("metrics" in step for step in document["steps"])
    turns = [m for m in trajectory.messages if m.role == "assistant"]
    sampled = [SampledTokens((7 + n, 8, 2), (-0.5, -0.25, -0.125), True) for n in range(len(turns) - 1)]
    document["steps"] = atif.agent_steps(trajectory.messages, trajectory.rollout_id, "t", [*sampled, None])
    metrics = [step.get("metrics") for step in document["steps"] if step["source"] == "agent"]
    assert metrics == [*({"completion_tokens": 3, "completion_token_ids": list(s.ids),
                          "logprobs": list(s.logprobs)} for s in sampled), None]
    assert atif_problems(document) == []


def test_documents_carry_both_judges_verdicts_and_acceptance(judged_run):
    paths, rollouts, out = judged_run
    found = documents(out)
    mandatory = mandatory_criteria([paths.packs])
    for judge in GRADERS:
        table = paths.judgements / f"{judge}.parquet"
        accepted = accepted_rollouts(table, mandatory, judge)
        rows: dict[str, list[dict]] = {}
        for row in read_rows(table, schemas.VERDICTS):
            rows.setdefault(row["rollout_id"], []).append(row)
        for trajectory in rollouts:
            judged = found[trajectory.rollout_id]["extra"]["interlock"]["judges"][judge]
            assert judged["accepted"] == (trajectory.rollout_id in accepted)
            required = mandatory[trajectory.task_id]
            assert judged["verdicts"] == [
                {"criterion_id": r["criterion_id"], "mandatory": r["criterion_id"] in required,
                 "passed": r["passed"], "evidence": r["evidence"]} for r in rows[trajectory.rollout_id]]
    by_policy: dict[tuple[str, str], set[bool]] = {}
    for extra in (d["extra"]["interlock"] for d in found.values()):
        for judge in GRADERS:
            by_policy.setdefault((extra["policy"], judge), set()).add(extra["judges"][judge]["accepted"])
    assert by_policy["oracle", "agent"] == {True} and by_policy["claim_only", "agent"] == {False}
    assert True in by_policy["claim_only", "text"]  # the credulous text judge believes the claim


def test_a_tool_message_that_answers_nothing_is_refused_with_where():
    request = [Message("system", "s"), Message("user", "u")]
    where = r"file t\.parquet, item r-1, field messages\[2\]: a tool message"
    with pytest.raises(InterlockError, match=where):
        atif.agent_steps([*request, Message("tool", "x", name="read_file")], "r-1", "t.parquet")
    turn = Message("assistant", "", (ToolCall("read_file", {"path": "a"}),))
    with pytest.raises(InterlockError, match="'list_files' result where the turn's next unanswered call is"):
        atif.agent_steps([*request, turn, Message("tool", "x", name="list_files")], "r-1", "t.parquet")
    steps = atif.agent_steps([*request, turn, Message("tool", "error: bad", name="invalid"),
                              Message("tool", "text", name="read_file")], "r-1", "t.parquet")
    assert steps[2]["observation"]["results"] == [{"content": "error: bad"},
                                                  {"source_call_id": "call-3-1", "content": "text"}]


def test_verdicts_of_other_rollouts_are_refused(judged_run, tmp_path):
    paths, _, _ = judged_run
    judgements = tmp_path / "judge"
    with write_table_set(judgements, schemas.judge_tables(GRADERS)) as tables:
        for group in zip(*(iter_row_groups(paths.judgements / f"{name}.parquet", schema)
                           for name, schema in schemas.judge_tables(GRADERS).items()), strict=True):
            tables.write(dict(zip(schemas.judge_tables(GRADERS), group, strict=True)))
            break  # one row group of two
    with pytest.raises(InterlockError, match="2 row groups of trajectories but 1 of verdicts"):
        list(atif.iter_judged(paths.trajectories, judgements, [paths.packs]))


def test_cli_usage_errors(judged_run, tmp_path, capsys):
    paths, _, _ = judged_run
    with pytest.raises(SystemExit) as usage:
        main(["--data", str(paths.data), "export", "trajectories", "--format", "harbor", "-o", str(tmp_path)])
    assert usage.value.code == 2 and "invalid choice: 'harbor'" in capsys.readouterr().err
