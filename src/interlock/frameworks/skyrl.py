"""SkyRL-Gym (NovaSky's ``skyrl-gym``): Interlock's admitted tasks as a text environment.

SkyRL's generator makes one environment per dataset row (``skyrl_gym.make("interlock",
env_config=..., extras=row["extras"])``), hands :meth:`InterlockTextEnv.init` the row's prompt and
then each assistant turn's text to :meth:`InterlockTextEnv.step`; the reward comes with the step
that ends the episode (the agent judge's, :mod:`interlock.frameworks.episodes`), 0 before.
:func:`dataset_rows` writes the rows (prompt: the task's opening, ``extras.task_id``).

``env_config`` names the run: ``params`` (its ``params.yaml``), ``pool`` (``rft`` unless given).
One host per (run, pool) serves every environment of this process; each episode has a workspace
of its own.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from interlock.core.errors import InterlockError
from interlock.frameworks.episodes import EpisodeHost, shared_host
from interlock.rl.environment import TaskPool

#: the id the environment is registered under (:func:`register`)
ENV_ID = "interlock"


def _config(env_config: Any, key: str, default: str | None = None) -> str | None:
    value = env_config.get(key, default) if env_config is not None else default
    return None if value is None else str(value)


def host_for(env_config: Any) -> EpisodeHost:
    """The process's host of the run and pool ``env_config`` names (:func:`shared_host`)."""
    params, pool = _config(env_config, "params"), _config(env_config, "pool", "rft")
    if params is None:
        raise InterlockError("env_config.params must name the run's params.yaml", field="env_config.params")
    return shared_host(params, pool)


class InterlockTextEnv(BaseTextEnv):
    """One episode of one admitted task. ``extras``: ``task_id`` (required), ``seed`` (0)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None,
                 host: EpisodeHost | None = None) -> None:
        super().__init__()
        extras = extras or {}
        host = host or host_for(env_config)
        self.episode = host.open(extras.get("task_id"), seed=extras.get("seed", 0))
        self.max_turns = host.limits.max_turns

    def init(self, prompt: Any = None) -> tuple[list[dict], dict[str, Any]]:
        """The task's own opening, whatever the row's prompt says (a prompt is the dataset's, and
        the episode is the task's)."""
        return self.episode.opening, {"task_id": self.episode.task_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        observations = self.episode.step(action)
        if not self.episode.done:
            return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=False, metadata={})
        verdict = self.episode.verdict()
        return BaseTextEnvStepOutput(observations=observations, reward=verdict.reward, done=True,
                                     metadata={"passed": verdict.passed, "criteria": verdict.criteria,
                                               "problem": verdict.problem})

    def close(self) -> None:
        self.episode.close()


def dataset_rows(pool: TaskPool, *, seed: int = 0) -> list[dict]:
    """SkyRL's dataset rows of ``pool``: each task's opening as the prompt, this environment as
    its class, the task's id in ``extras``."""
    return [{"prompt": [{k: v for k, v in m.items() if k != "task_id"} for m in TaskPool.prompt(task)],
             "env_class": ENV_ID, "extras": {"task_id": task.task_id, "seed": seed}}
            for task in pool.tasks]


def register() -> None:
    """Register :class:`InterlockTextEnv` with SkyRL-Gym as ``interlock`` (once)."""
    from skyrl_gym.envs import registration

    if ENV_ID not in registration.registry:
        registration.register(id=ENV_ID, entry_point=f"{__name__}:InterlockTextEnv")
