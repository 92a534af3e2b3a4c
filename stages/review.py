"""Stage `review`: source coverage, public-input critic and controls, then the execution gate
(a validation rollout per statically admitted task, judged by the agent judge); admitted tasks."""

from pathlib import Path

from common import run_stage

from interlock.agents.backends.factory import make_backend
from interlock.agents.scripted import ScriptedBackend
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.judges.agent import AgentJudge
from interlock.pipeline import load_domains, run_review
from interlock.reviews.execution import ExecutionGate
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    validation = params.scale.validation
    if validation.solver == "noisy":
        solver, policy = ScriptedBackend("noisy", seed=params.seed, skip_effect=validation.skip_effect,
                                         ignore_coupling=validation.ignore_coupling), "scripted/noisy"
    else:
        solver, policy = make_backend(params.backbone, data.base_model), f"{params.backbone.name}/base"
    with AgentJudge() as judge:
        gate = ExecutionGate(solver, judge, policy=policy, seed=params.seed)
        summary = run_review(data.graphs, data.packs, data.review, catalog=load_domains(data.domains),
                             gate=gate)
    write_json(Path("metrics/review.json"), summary)
    for pool, counts in summary.items():
        print(f"review: {pool}: {counts['admitted']} of {counts['tasks']} admitted "
              f"({counts['validation_passed']} validation rollouts passed)")
    return StageReport(metrics=summary)


if __name__ == "__main__":
    run_stage("review", main)
