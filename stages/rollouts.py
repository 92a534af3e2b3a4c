"""Stage `rollouts`: the starting policy on every admitted `rft` task, `attempts` times each.

Resumable: killed at any point, a second run finishes only the missing episodes."""

from pathlib import Path

from common import run_stage

from interlock.agents.backends.factory import solver_backend
from interlock.agents.rollout import RolloutLimits
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.models.checkpoint import read_manifest
from interlock.pipeline import load_domains
from interlock.rollouts import admitted_count, admitted_tasks, fingerprint, plan_episodes, run_rollouts
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    backbone, rollouts = params.backbone, params.scale.rollouts
    checkpoint = data.model(rollouts.policy)
    limits = RolloutLimits.of(rollouts, backbone.generation)
    catalog = load_domains(data.domains)
    total = admitted_count(data.review, "rft") * rollouts.attempts
    backend, policy = solver_backend(rollouts.solver, params, checkpoint, rollouts.policy)
    run_id = fingerprint(params.seed, rollouts.model_dump(), backbone.model_dump(), read_manifest(checkpoint),
                         params.scale.validation.model_dump() if rollouts.solver == "noisy" else None)
    episodes = plan_episodes(admitted_tasks(data.review, data.packs, data.graphs, catalog, "rft"),
                             policy=policy, attempts=rollouts.attempts, seed=params.seed)
    summary = run_rollouts(episodes, backend, limits, total=total,
                           out=data.trajectories, timings=data.root / "rollout_timings.parquet",
                           work=data.root / ".rollouts-partial", run_id=run_id,
                           batch_size=rollouts.batch_size)
    write_json(Path("metrics/rollouts.json"), summary)
    print(f"rollouts: {summary['episodes']} episodes, {summary['finish_reasons']}")
    return StageReport(metrics=summary)


if __name__ == "__main__":
    run_stage("rollouts", main)
