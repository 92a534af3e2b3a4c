"""Stage `review` (static part): source coverage, public-input critic and controls; admitted tasks."""

from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.pipeline import run_review


def main(params: Params, data: Artifacts) -> None:
    summary = run_review(data.graphs, data.packs, data.review)
    write_json(Path("metrics/review.json"), summary)
    for pool, counts in summary.items():
        print(f"review: {pool}: {counts['admitted']} of {counts['tasks']} admitted")


if __name__ == "__main__":
    run_stage("review", main)
