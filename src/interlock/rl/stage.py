"""The ``rl`` stage: GRPO from the starting policy (``solver.start``) on the ``rft``
pool's admitted tasks (recursive synthesis's children included), rewarded by the agent judge
(:mod:`interlock.rl.grpo`); the policy goes to ``models/rl`` and ``evaluate`` compares it with the
others.

Off unless ``train=grpo`` (``train.rl.enabled``): then ``models/rl`` holds only a note saying why
no policy was trained, ``evaluate`` leaves ``rl`` out and says so, and switching the option
re-runs this stage and ``evaluate`` only. Killed at any point, a second run resumes from the last
trainer checkpoint (``train.rl.save_steps``) under ``paths.rl_work``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from interlock.core.config import Params
from interlock.core.io import write_tsv
from interlock.core.paths import Paths
from interlock.core.runner import main_process
from interlock.core.tracking import StageReport
from interlock.judging.agent import AgentJudge
from interlock.models.backends import model_runtime
from interlock.models.checkpoint import write_untrained
from interlock.rl.environment import TaskPool
from interlock.rl.grpo import GRPOSettings, train_grpo
from interlock.rollout.engine import RolloutLimits
from interlock.synthesis.tasks import admitted_tasks, load_domains

#: the per-step series drawn, one TSV each under ``paths.rl_plot``
PLOTTED = ("reward", "pass_rate")


def write_step_plots(folder: Path, steps: list[dict]) -> None:
    """One TSV (step, value) per series in :data:`PLOTTED`: DVC draws a plot folder's files as one
    series each (header only where nothing was trained)."""
    shutil.rmtree(folder, ignore_errors=True)
    for key in PLOTTED:
        write_tsv(folder / f"{key}.tsv", [{"step": row["step"], "value": row[key]} for row in steps],
                  ["step", "value"])


def rl_limits(params: Params) -> RolloutLimits:
    """The RL episodes' rules: the rollouts' sampling and clipping, ``train.rl.max_turns`` turns."""
    generation = params.backbone.generation
    return RolloutLimits(max_turns=params.train.rl.max_turns, max_new_tokens=generation.max_new_tokens,
                         max_observation_chars=params.scale.rollouts.max_observation_chars,
                         temperature=generation.temperature)


def rl(params: Params, paths: Paths) -> StageReport | None:
    """The stage; None in every process but the main one under ``train.launcher`` (it alone
    writes and reports)."""
    out, config = paths.model("rl"), params.train.rl
    if not config.enabled and not main_process():
        return None
    if not config.enabled:
        reason = f"train={params.train.name} trains no RL policy (train=grpo does)"
        write_untrained(out, reason)
        write_step_plots(paths.rl_plot, [])
        print(f"rl: {reason}")
        return StageReport({"trained": False, "reason": reason})
    start = paths.model(params.solver.start)
    runtime = model_runtime(params.backbone, "train", start, backend="transformers")
    limits = rl_limits(params)
    settings = GRPOSettings(config, params.seed, limits, runtime["resolved_dtype"],
                            params.backbone.max_context, params.train.max_grad_norm, params.backbone.server)
    pool = TaskPool(admitted_tasks(paths, load_domains(paths.domains), "rft"))
    with AgentJudge(episode=limits.episode, sandbox=params.sandbox.provider) as judge:
        metrics, steps = train_grpo(start, pool, judge, settings, out, paths.rl_work)
    if not main_process():
        return None
    write_step_plots(paths.rl_plot, steps)
    reward, passed = metrics["reward"], metrics["pass_rate"]
    print(f"rl: {metrics['steps']} steps, {metrics['episodes']} episodes on {metrics['tasks']} tasks; reward "
          f"{reward['first']} -> {reward['last']}, pass rate {passed['first']} -> {passed['last']}; "
          f"{metrics['seconds_per_step']} s a step")
    return StageReport(metrics, {"rl": steps}, config={"runtime": runtime})
