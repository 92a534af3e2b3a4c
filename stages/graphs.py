"""Stage `graphs`: one completion graph per blueprint (nodes, edges, hyperedges)."""

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.pipeline import run_graphs


def main(params: Params, data: Artifacts) -> None:
    print(f"graphs: {run_graphs(data.domains, data.blueprints, data.graphs)}")


if __name__ == "__main__":
    run_stage("graphs", main)
