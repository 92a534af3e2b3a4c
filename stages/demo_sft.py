"""Stage `demo_sft`: the base checkpoint fine-tuned on the reference demonstrations.

It is both the warm start of rejection-sampling fine-tuning (where `scale.rollouts.policy` is
`demo_sft`) and the paper's "SFT on demonstrations" baseline in the evaluation."""

from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.blueprints import stable_seed
from interlock.config import Params
from interlock.io import write_json
from interlock.tracking import StageReport
from interlock.training.trainer import Recipe, fine_tune_on_trajectories


def main(params: Params, data: Artifacts) -> StageReport:
    recipe = Recipe.of(params.train, "demo", stable_seed(params.seed, "demo_sft"))
    metrics = fine_tune_on_trajectories(data.demos, data.base_model, data.model("demo_sft"), recipe,
                                        name="demo_sft", max_context=params.backbone.max_context)
    write_json(Path("metrics/demo_sft.json"), metrics)
    print(f"demo_sft: {metrics['message']}; {metrics['tokens_per_second']} tokens/s")
    return StageReport(metrics)


if __name__ == "__main__":
    run_stage("demo_sft", main)
