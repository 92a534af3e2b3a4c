"""Stage `blueprints`: seeded task blueprints per domain, split into disjoint pools."""

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.pipeline import run_blueprints


def main(params: Params, data: Artifacts) -> None:
    scale = params.scale
    counts = run_blueprints(
        data.domains, data.blueprints, seed=params.seed, train_domains=scale.train_domains,
        heldout_domains=scale.heldout_domains, tasks_per_domain=scale.tasks_per_domain,
        size=scale.task_size.build(), row_group_tasks=scale.row_group_tasks)
    print("blueprints: " + ", ".join(f"{pool} {n}" for pool, n in sorted(counts.items())))


if __name__ == "__main__":
    run_stage("blueprints", main)
