"""The ``demos`` and ``rollouts`` stages: the oracle's reference demonstrations on the admitted
``demo`` tasks, and the starting policy on every admitted ``rft`` task (recursive synthesis's children
included), ``attempts`` times each
(resumable: killed at any point, a second run finishes only the missing episodes)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from interlock.core.backend import releasing
from interlock.core.config import Params
from interlock.core.io import fingerprint
from interlock.core.paths import Paths
from interlock.core.tracking import StageReport
from interlock.models.checkpoint import read_manifest
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.runs import plan_episodes, run_rollouts, write_demonstrations
from interlock.rollout.solvers import solver_backend
from interlock.synthesis.tasks import admitted_tasks, load_domains, rollout_ids


def demos(params: Params, paths: Paths) -> StageReport:
    """Reference demonstrations (disjoint from the rft tasks and the benchmark by construction of
    the pools)."""
    tasks = admitted_tasks(paths, load_domains(paths.domains), "demo")
    with tempfile.TemporaryDirectory(prefix="interlock-demos-") as work:
        summary = write_demonstrations(tasks, paths.demos_table, seed=params.seed, workdir=Path(work))
    print(f"demos: {summary['episodes']} demonstrations, {summary['mean_tool_calls']} tool calls each")
    return StageReport(summary)


def rollouts(params: Params, paths: Paths) -> StageReport:
    backbone, config, solver = params.backbone, params.scale.rollouts, params.solver
    checkpoint = paths.model(solver.start)
    backend, policy, runtime = solver_backend(solver.rollouts, params, checkpoint, solver.start)
    noisy = solver.noisy if solver.rollouts == "noisy" else None
    # names the resumable parts: a run under other settings (or another engine or dtype resolved
    # on this machine: ``runtime``) starts afresh
    run_id = fingerprint(params.seed, config.model_dump(), solver.start, solver.rollouts, backbone.name,
                         runtime, backbone.max_context, backbone.generation.model_dump(),
                         read_manifest(checkpoint), noisy and [noisy.skip_effect, noisy.ignore_coupling])
    chosen = rollout_ids(paths, matched=params.synthesis.match_rollouts, seed=params.seed)
    episodes = plan_episodes(admitted_tasks(paths, load_domains(paths.domains), "rft", set(chosen)),
                             policy=policy, attempts=config.attempts, seed=params.seed)
    with releasing(backend):
        summary = run_rollouts(episodes, backend, RolloutLimits.of(config, backbone.generation),
                               total=len(chosen) * config.attempts, out=paths.trajectories,
                               timings=paths.rollout_timings, work=paths.rollouts_work, run_id=run_id,
                               batch_size=config.batch_size)
    print(f"rollouts: {summary['episodes']} episodes, {summary['finish_reasons']}")
    return StageReport(summary, config={"runtime": runtime})
