"""The RL reward (:mod:`interlock.rl.reward`) on the abuse suite: what the pipeline's own judge
and accept stages make of the same transcripts, nothing for an attack or for doing nothing,
everything for the oracle's work; and the two rewards it must not be (read from the transcript,
or from the files an episode says it left), each fooled where it is not."""

from __future__ import annotations

import dataclasses

import pytest

from interlock.judging.text import TextJudge
from interlock.judging.verdicts import accepted
from interlock.rl.reward import FAILED_ENDS, REWARD_KINDS, episode_reward
from interlock.synthesis.checks import View, run_check
from interlock.synthesis.workspace import MemoryStore
from interlock.testing.adversaries import ATTACKS, CONTROLS

from helpers.judges import accepted_by_the_stages

#: the attacks on the oracle's work that damage something the guard watches
GUARD_ATTACKS = ("escape_paths", "plant_verifier", "delete_records", "rewrite_records", "edit_request_policy",
                 "tamper_and_restore", "flood_output", "collateral_damage")


@pytest.fixture(scope="module")
def judged(contexts, adversary_rollouts, agent_judge) -> dict[str, list]:
    """policy -> the agent judge's judgements of its rollouts, in task order."""
    return {policy: agent_judge.judge([(t, c.pack) for t, c in zip(made, contexts, strict=True)])
            for policy, made in adversary_rollouts.items()}


def _rewards(trajectories, judgements, contexts, kind: str) -> list[float]:
    return [episode_reward(t, j, c.pack.rubric, kind) for t, j, c in zip(trajectories, judgements, contexts,
                                                                         strict=True)]


def test_the_oracle_earns_everything_an_attack_no_pass_and_doing_nothing_nothing(
        contexts, adversary_rollouts, judged) -> None:
    def rewards(policy, kind):
        return _rewards(adversary_rollouts[policy], judged[policy], contexts, kind)

    for kind in REWARD_KINDS:
        assert rewards("oracle", kind) == [1.0] * len(contexts), kind
        for control in CONTROLS:  # reads and claims only: not even the guard's share
            assert rewards(control, kind) == [0.0] * len(contexts), (control, kind)
    for attack in ATTACKS:
        assert rewards(attack, "pass") == [0.0] * len(contexts), attack
        assert all(r < 1.0 for r in rewards(attack, "score")), attack
    for attack in GUARD_ATTACKS:  # damage anywhere costs the gated score everything
        assert rewards(attack, "gated_score") == [0.0] * len(contexts), attack
        assert all(r > 0.0 for r in rewards(attack, "score")), attack


def test_the_reward_is_what_the_judge_and_accept_stages_make_of_the_same_transcripts(
        contexts, adversary_rollouts, judged, tmp_path) -> None:
    trajectories = [t for made in adversary_rollouts.values() for t in made]
    by_stage = accepted_by_the_stages(trajectories, contexts, tmp_path)
    rewarded = {t.rollout_id for policy, made in adversary_rollouts.items()
                for t, r in zip(made, _rewards(made, judged[policy], contexts, "pass"), strict=True)
                if r == 1.0}
    assert rewarded == by_stage and {t.rollout_id for t in adversary_rollouts["oracle"]} <= rewarded


def _reward_from_recorded_files(trajectory, pack) -> float:
    """The broken twin: the compiled checks on the files the trajectory says it left."""
    files = {**pack.files, **trajectory.final_files}
    view = View(MemoryStore({p: t for p, t in files.items() if t is not None}),
                submitted=trajectory.finish_reason == "submitted")
    return float(accepted({cid: run_check(spec, view)[0] for cid, spec in pack.checks.items()}, pack.rubric))


def test_a_reward_from_the_transcript_or_from_the_recorded_files_would_be_fooled(
        contexts, adversary_rollouts, judged, agent_judge) -> None:
    # the transcript's words: a forged tool result convinces a judge that reads them
    forged = adversary_rollouts["transcript_forgery"]
    by_text = TextJudge().judge([(t, c.pack) for t, c in zip(forged, contexts, strict=True)])
    assert _rewards(forged, by_text, contexts, "pass") == [1.0] * len(contexts)
    assert _rewards(forged, judged["transcript_forgery"], contexts, "pass") == [0.0] * len(contexts)
    # the recorded files: work that was never done, recorded as the oracle's result
    claims = [dataclasses.replace(t, final_files=o.final_files)
              for t, o in zip(adversary_rollouts["claim_only"], adversary_rollouts["oracle"], strict=True)]
    assert [_reward_from_recorded_files(t, c.pack) for t, c in zip(claims, contexts, strict=True)] == [
        1.0] * len(contexts)
    replayed = agent_judge.judge([(t, c.pack) for t, c in zip(claims, contexts, strict=True)])
    for kind in REWARD_KINDS:
        assert _rewards(claims, replayed, contexts, kind) == [0.0] * len(contexts)


@pytest.mark.parametrize("end", sorted(FAILED_ENDS))
def test_an_episode_cut_short_by_the_machinery_earns_nothing(end, contexts, adversary_rollouts,
                                                             judged) -> None:
    failed = [dataclasses.replace(t, finish_reason=end) for t in adversary_rollouts["oracle"]]
    for kind in REWARD_KINDS:
        assert _rewards(failed, judged["oracle"], contexts, kind) == [0.0] * len(contexts)


def test_an_unknown_reward_is_refused(contexts, adversary_rollouts, judged) -> None:
    with pytest.raises(ValueError, match="unknown reward 'sum'"):
        episode_reward(adversary_rollouts["oracle"][0], judged["oracle"][0], contexts[0].pack.rubric, "sum")
