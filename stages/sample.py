"""Stage `sample`: the training set of the chosen domain breadth (`domains=all`: every accepted
trajectory; `domains=d4` ... `d128`: `scale.breadth_trajectories` of them, stratified across that
many training domains)."""

from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.sampling import run_sampling
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    breadth = params.domains.count
    metrics = run_sampling(data.accepted, data.trajectories, data.training_set, breadth=breadth,
                           trajectories=params.scale.breadth_trajectories if breadth else None,
                           seed=params.seed)
    write_json(Path("metrics/sample.json"), metrics)
    print(f"sample: {metrics['message']}")
    return StageReport(metrics={k: v for k, v in metrics.items() if k != "per_domain"},
                       tables={"per_domain": [{"domain_id": d, "trajectories": n}
                                              for d, n in metrics["per_domain"].items()]})


if __name__ == "__main__":
    run_stage("sample", main)
