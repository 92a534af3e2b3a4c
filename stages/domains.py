"""Stage `domains`: the domain catalog, with its train / held-out split."""

from pathlib import Path

from common import run_stage

from interlock.config import Params
from interlock.pipeline import StageTimer, run_domains


def main(params: Params, data: Path) -> None:
    with StageTimer(Path("metrics/timing/domains.json")):
        catalog = run_domains(data / "domains.parquet")
    print(f"domains: {len(catalog.split('train'))} train, {len(catalog.split('heldout'))} held-out")


if __name__ == "__main__":
    run_stage(main)
