"""Stage `domains`: the domain catalog, with its train / held-out split."""

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.pipeline import run_domains


def main(params: Params, data: Artifacts) -> None:
    catalog = run_domains(data.domains)
    print(f"domains: {len(catalog.split('train'))} train, {len(catalog.split('heldout'))} held-out")


if __name__ == "__main__":
    run_stage("domains", main)
