"""A GRPO run on the fixture tasks' training domains, as a process of its own, so a test can kill
it with SIGKILL and run it again (``python tests/helpers/grpo_run.py CHECKPOINT OUT WORK``).

The episodes are played by the scripted noisy policy and rewarded by the weighted score (rewards
that differ within a group, so every step moves the weights); with ``--generation vllm`` by the
policy itself through its vLLM engine (``train.rl.generation: vllm``), given the trained weights
after every step, the judge's score then topped up by a share that hashes what the policy wrote
(the tiny random policy's episodes all score alike: without it no step would move the weights,
and a resume that played from stale weights could not be told apart). ``--kill-at N`` kills the
process with SIGKILL once the trainer checkpoint of step N is written. It prints the run's
metrics and per-step rows as JSON on its last line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import TrainerCallback  # noqa: E402

from interlock.core.config import RLConfig, default_params  # noqa: E402
from interlock.core.seeds import stable_seed  # noqa: E402
from interlock.judging.agent import AgentJudge  # noqa: E402
from interlock.rl import grpo  # noqa: E402
from interlock.rl.environment import TaskPool  # noqa: E402
from interlock.rl.grpo import GRPOSettings, train_grpo  # noqa: E402
from interlock.rollout.engine import RolloutLimits  # noqa: E402
from interlock.rollout.scripted import ScriptedBackend  # noqa: E402
from interlock.synthesis.catalog import load_catalog  # noqa: E402

from helpers.tasks import contexts_of, fixture_tasks  # noqa: E402

SETTINGS = RLConfig(enabled=True, reward="score", steps=4, tasks_per_step=2, group_size=2, learning_rate=1e-3,
                    kl=0.04, max_turns=12, save_steps=1, generation="transformers",
                    vllm_engine="auto")
LIMITS = RolloutLimits(max_turns=SETTINGS.max_turns, max_new_tokens=64, temperature=1.0)


VLLM = SETTINGS.model_copy(update={"generation": "vllm", "vllm_engine": "auto", "max_turns": 3})


def _share(trajectory) -> float:
    return stable_seed(trajectory.to_row()["messages"]) % 50 / 100


def _varied(score):
    """``score`` with each reward topped up by a share in [0, 0.5) of a hash of the episode's turns."""

    def scored(trajectories, tasks, judge, kind):
        return [dataclasses.replace(s, reward=s.reward + _share(s.trajectory))
                for s in score(trajectories, tasks, judge, kind)]

    return scored


class KillAt(TrainerCallback):
    """SIGKILL (no clean-up of any kind) right after the checkpoint of one step is written."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def training_pool() -> TaskPool:
    return TaskPool(c for c in contexts_of(fixture_tasks(load_catalog())) if c.pack.pool == "rft")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--generation", choices=["scripted", "vllm"], default="scripted")
    args = parser.parse_args()
    callbacks = [KillAt(args.kill_at)] if args.kill_at else []
    vllm = args.generation == "vllm"
    if vllm:
        grpo.score = _varied(grpo.score)
    settings = GRPOSettings(VLLM if vllm else SETTINGS, 3, LIMITS, "float32", 4096, max_grad_norm=1.0,
                            server=default_params().backbone.server)
    with AgentJudge(episode=LIMITS.episode) as judge:
        metrics, rows = train_grpo(args.checkpoint, training_pool(), judge, settings, args.out, args.work,
                                   backend=None if vllm else ScriptedBackend("noisy", seed=3),
                                   callbacks=callbacks)
    print(json.dumps({"metrics": metrics, "rows": rows}))


if __name__ == "__main__":
    main()
