"""Stage `review` (static part): source coverage, public-input critic and controls; admitted tasks."""

from pathlib import Path

from common import run_stage

from interlock.config import Params
from interlock.io import write_json
from interlock.pipeline import StageTimer, run_review


def main(params: Params, data: Path) -> None:
    with StageTimer(Path("metrics/timing/review.json")):
        summary = run_review(data / "graphs", data / "packs", data / "review")
    write_json(Path("metrics/review.json"), summary)
    for pool, counts in summary.items():
        print(f"review: {pool}: {counts['admitted']} of {counts['tasks']} admitted")


if __name__ == "__main__":
    run_stage(main)
