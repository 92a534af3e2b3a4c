"""The two fine-tuning stages as one function: which data, from which checkpoint, to which.

- ``demo`` (stage ``demo_sft``): the base checkpoint on the reference demonstrations; the warm
  start of RFT where ``scale.rollouts.policy`` is ``demo_sft``, and the demonstration baseline;
- ``rft`` (stage ``train``): the starting policy (the checkpoint that made the rollouts) on its
  own accepted trajectories (the training set the ``sample`` stage chose from them).
"""

from __future__ import annotations

import os
from pathlib import Path

from interlock.artifacts import Artifacts
from interlock.blueprints import stable_seed
from interlock.config import Params
from interlock.io import write_json, write_tsv
from interlock.tracking import StageReport
from interlock.training.trainer import Recipe, fine_tune_on_trajectories, loss_curve

#: phase -> (stage, checkpoint it writes)
PHASES = {"demo": ("demo_sft", "demo_sft"), "rft": ("train", "rft")}


def run_fine_tuning(params: Params, data: Artifacts, phase: str,
                    metrics_dir: Path = Path("metrics")) -> StageReport | None:
    stage, name = PHASES[phase]
    if phase == "demo":
        trajectories, start = data.demos, data.base_model
    else:
        trajectories, start = data.training_set, data.model(params.scale.rollouts.policy)
    recipe = Recipe.of(params.train, phase, stable_seed(params.seed, stage))
    out = data.model(name)
    metrics = fine_tune_on_trajectories(trajectories, start, out, recipe, name=name,
                                        max_context=params.backbone.max_context)
    if int(os.environ.get("RANK", "0")) != 0:
        return None  # under `accelerate launch`, the main process alone reports
    curve = loss_curve(out)
    write_json(metrics_dir / f"{stage}.json", metrics)
    write_tsv(metrics_dir / "plots" / f"{stage}_loss.tsv", curve, ["step", "loss", "learning_rate"])
    print(f"{stage}: {metrics['message']}; {metrics['tokens_per_second']} tokens/s", flush=True)
    return StageReport(metrics, {"loss": curve})
