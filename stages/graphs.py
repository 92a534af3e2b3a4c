"""Stage `graphs`: one completion graph per blueprint (nodes, edges, hyperedges)."""

from pathlib import Path

from common import run_stage

from interlock.config import Params
from interlock.pipeline import StageTimer, run_graphs


def main(params: Params, data: Path) -> None:
    with StageTimer(Path("metrics/timing/graphs.json")):
        count = run_graphs(data / "domains.parquet", data / "blueprints.parquet", data / "graphs")
    print(f"graphs: {count}")


if __name__ == "__main__":
    run_stage(main)
