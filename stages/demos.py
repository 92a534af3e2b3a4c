"""Stage `demos`: reference demonstrations, the oracle's trajectories on the admitted `demo` tasks
(disjoint from the rft tasks and the benchmark by construction of the pools)."""

import tempfile
from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.pipeline import load_domains
from interlock.rollouts import admitted_tasks, write_demonstrations
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    tasks = admitted_tasks(data.review, data.packs, data.graphs, load_domains(data.domains), "demo")
    with tempfile.TemporaryDirectory(prefix="interlock-demos-") as work:
        summary = write_demonstrations(tasks, data.demos, seed=params.seed, workdir=Path(work))
    write_json(Path("metrics/demos.json"), summary)
    print(f"demos: {summary['episodes']} demonstrations, {summary['mean_tool_calls']} tool calls each")
    return StageReport(summary)


if __name__ == "__main__":
    run_stage("demos", main)
