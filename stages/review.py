"""Stage `review`: source coverage, public-input critic and controls, then the execution gate
(a validation rollout per statically admitted task, judged by the agent judge); admitted tasks."""

from pathlib import Path

from common import run_stage

from interlock.agents.backends.factory import solver_backend
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.judges.agent import AgentJudge
from interlock.pipeline import load_domains, run_review
from interlock.reviews.execution import ExecutionGate
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    solver, policy = solver_backend(params.scale.validation.solver, params, data.base_model, "base")
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
