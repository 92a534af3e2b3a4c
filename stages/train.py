"""Stage `train`: rejection-sampling fine-tuning. The starting policy (the checkpoint that made the
rollouts) is fine-tuned on its own accepted trajectories; nothing accepted means an untrained
copy, said plainly in the metrics, so the evaluation still runs."""

from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.blueprints import stable_seed
from interlock.config import Params
from interlock.io import write_json
from interlock.tracking import StageReport
from interlock.training.trainer import Recipe, fine_tune_on_trajectories


def main(params: Params, data: Artifacts) -> StageReport:
    recipe = Recipe.of(params.train, "rft", stable_seed(params.seed, "train"))
    metrics = fine_tune_on_trajectories(data.accepted, data.model(params.scale.rollouts.policy),
                                        data.model("rft"), recipe, name="rft",
                                        max_context=params.backbone.max_context)
    write_json(Path("metrics/train.json"), metrics)
    print(f"train: {metrics['message']}; {metrics['tokens_per_second']} tokens/s")
    return StageReport(metrics)


if __name__ == "__main__":
    run_stage("train", main)
