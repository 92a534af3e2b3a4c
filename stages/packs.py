"""Stage `packs`: compile each graph to workspace + index, request + contract, rubric + checks,
with the oracle's reference solution."""

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.pipeline import run_packs


def main(params: Params, data: Artifacts) -> None:
    print(f"packs: {run_packs(data.domains, data.graphs, data.packs)}")


if __name__ == "__main__":
    run_stage("packs", main)
