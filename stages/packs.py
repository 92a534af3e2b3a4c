"""Stage `packs`: compile each graph to workspace + index, request + contract, rubric + checks,
with the oracle's reference solution."""

from pathlib import Path

from common import run_stage

from interlock.config import Params
from interlock.pipeline import StageTimer, run_packs


def main(params: Params, data: Path) -> None:
    with StageTimer(Path("metrics/timing/packs.json")):
        count = run_packs(data / "domains.parquet", data / "graphs", data / "packs")
    print(f"packs: {count}")


if __name__ == "__main__":
    run_stage(main)
