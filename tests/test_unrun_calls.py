"""What an example trains on is what ran: calls a turn holds after the call that ended the episode
(``submit``) never run, so the engine records the turn without them, the judge refuses a record
that holds them, and no training example, correction, RL episode or export carries them.
"""

from __future__ import annotations

import dataclasses

import pytest
from transformers import AutoTokenizer

from interlock.core.chat import Message, ToolCall, render_turn
from interlock.judging.verdicts import REPLAY_FAILED, accepted
from interlock.rl.environment import TaskEpisode, policy_tokens
from interlock.rollout.engine import (
    RolloutLimits,
    WorkspaceEnvironment,
    assistant_message,
    reenacted_trajectory,
    respond,
)
from interlock.rollout.scripted import DONE, SUBMIT
from interlock.training.examples import encode_trajectories

from helpers.episodes import oracle_turns, play_turns

#: what a policy may write after its submit, in the same turn: a wipe of the policy, a write that
#: would fail, a read, and the submit again
AFTERWARDS = [ToolCall("write_file", {"path": "policies/wiped.md", "content": ""}),
              ToolCall("append_record", {"path": "nowhere.csv", "record": {"a": "1"}}),
              ToolCall("read_file", {"path": "REQUEST.md"}), SUBMIT]


def _wiping(context, after: list[ToolCall]) -> list:
    """The oracle's turns, its last (the submit) followed by ``after`` in the same turn."""
    *work, _ = oracle_turns(context)
    return [*work, (DONE, [SUBMIT, *after])]


@pytest.fixture(scope="module")
def played(contexts, tmp_path_factory):
    """Per fixture task: the oracle, and the oracle writing calls after its submit (one plan per
    call of :data:`AFTERWARDS`, and all of them), played through the rollout engine."""
    plans = {}
    for context in contexts:
        plans[f"oracle-{context.task_id}"] = (context, oracle_turns(context))
        for number, call in enumerate(AFTERWARDS):
            plans[f"after{number}-{context.task_id}"] = (context, _wiping(context, [call]))
        plans[f"all-{context.task_id}"] = (context, _wiping(context, AFTERWARDS))
    made = play_turns(plans, tmp_path_factory.mktemp("unrun"))
    return {t.rollout_id: t for t in made}


def _calls(trajectory) -> list[ToolCall]:
    return [c for m in trajectory.messages if m.role == "assistant" for c in m.tool_calls]


def test_the_engine_records_only_the_calls_that_ran(contexts, played) -> None:
    """Every call after the submit is cut from the record, the submit ends it, and the record is
    the oracle's own (the calls never ran, so nothing in the workspace shows them either)."""
    for context in contexts:
        oracle = played[f"oracle-{context.task_id}"]
        for name in [f"after{n}" for n in range(len(AFTERWARDS))] + ["all"]:
            trajectory = played[f"{name}-{context.task_id}"]
            assert _calls(trajectory) == _calls(oracle) and _calls(trajectory)[-1] == SUBMIT
            assert trajectory.messages == oracle.messages
            assert trajectory.final_files == oracle.final_files and trajectory.finish_reason == "submitted"


def test_calls_after_the_end_are_cut_and_the_rest_is_judged_as_it_ran(contexts, played, agent_judge) -> None:
    """The oracle's work with calls written after its submit is accepted (what ran is correct), and
    what it trains on holds none of them."""
    items = [(played[f"all-{c.task_id}"], c.pack) for c in contexts]
    judged = agent_judge.judge(items)
    assert all(accepted(j.passed, c.pack.rubric) for j, c in zip(judged, contexts, strict=True))


def test_a_record_holding_calls_after_the_end_is_refused(contexts, played, agent_judge) -> None:
    """A record written by hand with the calls kept in the submitting turn (the engine never writes
    one) fails every criterion, named as calls that never ran; the twin without them passes."""
    for context in contexts:
        oracle = played[f"oracle-{context.task_id}"]
        turn = max(i for i, m in enumerate(oracle.messages) if m.role == "assistant")
        forged_turn = dataclasses.replace(oracle.messages[turn],
                                          tool_calls=(*oracle.messages[turn].tool_calls, *AFTERWARDS[:1]))
        forged = dataclasses.replace(oracle, messages=[*oracle.messages[:turn], forged_turn,
                                                       *oracle.messages[turn + 1:]])
        [judgement] = agent_judge.judge([(forged, context.pack)])
        assert not any(judgement.passed.values())
        assert all(v["evidence"].startswith(REPLAY_FAILED) and "never ran" in v["evidence"]
                   for v in judgement.verdicts)
        [honest] = agent_judge.judge([(oracle, context.pack)])
        assert accepted(honest.passed, context.pack.rubric)


def test_the_refusal_holds_for_calls_past_the_cap_in_the_submitting_turn(contexts, tmp_path) -> None:
    """A turn past its cap of calls whose last run call submits: the calls past the cap are cut
    with it (they never ran either), and the engine answers the turn as it records it."""
    context = contexts[0]
    limits = RolloutLimits(max_calls_per_turn=2).episode
    text = render_turn("Finishing.", [ToolCall("list_files"), SUBMIT, *AFTERWARDS[:1]]) + "\n<tool_call>{bad"
    turn = assistant_message(text, limits.max_calls_per_turn)
    assert turn.tool_calls == (ToolCall("list_files"), SUBMIT) and "policies/wiped.md" in turn.content
    response = respond(WorkspaceEnvironment(context.pack, tmp_path / "w"), turn, limits)
    assert response.finish_reason == "submitted" and response.unrun == 1
    assert response.turn.tool_calls == turn.tool_calls and "policies/wiped.md" not in response.turn.content
    assert "<tool_call>{bad" in response.turn.content  # the malformed markup is text the model wrote
    again = respond(WorkspaceEnvironment(context.pack, tmp_path / "again"), response.turn, limits)
    assert again.messages == response.messages and again.unrun == 0 and again.turn == response.turn


def test_training_and_rl_see_only_what_ran(contexts, played, tiny_checkpoint, tmp_path) -> None:
    """The training example of the oracle with calls after its submit is the oracle's, token for
    token; an RL episode played turn by turn records and trains the same cut turn."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    context = contexts[0]
    oracle, after = played[f"oracle-{context.task_id}"], played[f"all-{context.task_id}"]
    examples = encode_trajectories([oracle, after], tokenizer, max_length=100_000).examples
    assert examples[0].input_ids == examples[1].input_ids and examples[0].loss_mask == examples[1].loss_mask
    episode = TaskEpisode(context, RolloutLimits(), tmp_path, rollout_id="rl")
    for content, calls in _wiping(context, AFTERWARDS):
        episode.step(render_turn(content, calls))
    trajectory = episode.finish()
    assert _calls(trajectory) == _calls(oracle)
    assert policy_tokens(trajectory, tokenizer, 100_000) == policy_tokens(
        dataclasses.replace(oracle, messages=trajectory.messages), tokenizer, 100_000)


def test_replaying_a_record_writes_only_what_ran(contexts, played, tmp_path) -> None:
    """What ``accept`` writes for a record with calls after its end (should any judge pass it) is
    the record as the engine would have written it: the calls are gone."""
    context = contexts[0]
    oracle = played[f"oracle-{context.task_id}"]
    turn = max(i for i, m in enumerate(oracle.messages) if m.role == "assistant")
    forged = dataclasses.replace(oracle, messages=[
        *oracle.messages[:turn],
        Message("assistant", oracle.messages[turn].content, (*oracle.messages[turn].tool_calls, *AFTERWARDS)),
        *oracle.messages[turn + 1:]])
    environment = WorkspaceEnvironment(context.pack, tmp_path / "w")
    again = reenacted_trajectory(forged, environment, RolloutLimits().episode)
    assert again.messages == oracle.messages and again.to_row() == oracle.to_row()


def test_a_completion_after_the_end_is_refused_by_the_episode(contexts, tmp_path) -> None:
    """A trainer that drives an episode turn by turn cannot step it after its submit."""
    episode = TaskEpisode(contexts[0], RolloutLimits(), tmp_path, rollout_id="rl")
    episode.step(render_turn("", [SUBMIT, AFTERWARDS[0]]))
    assert episode.done and episode.episode.finish_reason == "submitted"
    with pytest.raises(Exception, match="ended"):
        episode.step(render_turn("", [AFTERWARDS[0]]))
