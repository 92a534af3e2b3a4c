"""The two fine-tuning stages as one function: which data, from which checkpoint, to which.

- ``demo`` (stage ``demo_sft``): the base checkpoint on the reference demonstrations; the warm
  start of RFT where ``scale.rollouts.policy`` is ``demo_sft``, and the demonstration baseline;
  one checkpoint, ``models/demo_sft``;
- ``rft`` (stage ``train``): the starting policy (the checkpoint that made the rollouts) on its
  own accepted trajectories (the training set the ``sample`` stage chose from them), once per
  seed in ``train.seeds``: ``models/rft/seed-0`` ..., so evaluation's intervals can cover
  training seeds as well as tasks. With nothing to train on, every seed would be the same
  untrained copy, so only ``seed-0`` is written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from interlock.artifacts import Artifacts
from interlock.blueprints import stable_seed
from interlock.config import Params
from interlock.io import write_json, write_tsv
from interlock.models.checkpoint import SEED_FOLDER
from interlock.tracking import StageReport
from interlock.training.trainer import Recipe, fine_tune_on_trajectories, loss_curve

#: phase -> (stage, checkpoint it writes)
PHASES = {"demo": ("demo_sft", "demo_sft"), "rft": ("train", "rft")}
LOSS_COLUMNS = ["step", "loss", "learning_rate"]


def run_fine_tuning(params: Params, data: Artifacts, phase: str,
                    metrics_dir: Path = Path("metrics")) -> StageReport | None:
    stage, name = PHASES[phase]
    out = data.model(name)
    main_process = int(os.environ.get("RANK", "0")) == 0  # under `accelerate launch`, it alone reports
    if phase == "demo":
        recipe = Recipe.of(params.train, phase, stable_seed(params.seed, stage))
        metrics = fine_tune_on_trajectories(data.demos, data.base_model, out, recipe, name=name,
                                            max_context=params.backbone.max_context)
        curves = {name: loss_curve(out)} if main_process else {}
    else:
        metrics, curves = _rft_seeds(params, data, out, name, main_process)
    if not main_process:
        return None
    write_json(metrics_dir / f"{stage}.json", metrics)
    plots = metrics_dir / "plots"
    if phase == "demo":
        write_tsv(plots / f"{stage}_loss.tsv", curves[name], LOSS_COLUMNS)
    else:  # one file per seed: DVC draws a plot folder's files as one series each
        shutil.rmtree(plots / f"{stage}_loss", ignore_errors=True)
        for seed_name, curve in curves.items():
            write_tsv(plots / f"{stage}_loss" / f"{seed_name}.tsv", curve, LOSS_COLUMNS)
    print(f"{stage}: {metrics['message']}; {metrics['tokens_per_second']} tokens/s", flush=True)
    return StageReport({k: v for k, v in metrics.items() if k != "by_seed"},
                       {"loss": [{"seed": s, **row} for s, curve in curves.items() for row in curve]})


def _rft_seeds(params: Params, data: Artifacts, out: Path, name: str,
               main_process: bool) -> tuple[dict, dict[str, list[dict]]]:
    """Train every seed (one untrained copy when there is nothing to train); the stage's metrics
    (per seed under ``by_seed``, totals and means at the top) and each seed's loss curve."""
    by_seed: dict[str, dict] = {}
    for index in range(params.train.seeds):
        folder = SEED_FOLDER.format(index)
        recipe = Recipe.of(params.train, "rft", stable_seed(params.seed, "train", index))
        by_seed[folder] = fine_tune_on_trajectories(
            data.training_set, data.model(params.scale.rollouts.policy), out / folder, recipe,
            name=f"{name}/{folder}", max_context=params.backbone.max_context)
        if not by_seed[folder]["trained"]:
            break
    if main_process and out.is_dir():  # an earlier run's checkpoints: more seeds, another layout
        for stale in sorted(set(os.listdir(out)) - set(by_seed)):
            path = out / stale
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    first = next(iter(by_seed.values()))
    trained = first["trained"]
    seconds = sum(m["seconds"] for m in by_seed.values())
    metrics = {
        "trained": trained, "seeds": len(by_seed),
        "message": (f"{first['message']}; {len(by_seed)} seeds" if trained else
                    f"{first['message']} (one copy, not one per seed: they would all be the same)"),
        **{k: first[k] for k in ("examples", "too_long", "nothing_to_learn", "tokens", "trained_tokens",
                                 "epochs", "steps")},
        **{k: _mean(m[k] for m in by_seed.values())
           for k in ("first_loss", "last_loss", "mean_last_epoch_loss")},
        "seconds": round(seconds, 2),
        "tokens_per_second": round(sum(m["tokens_per_second"] * m["seconds"] for m in by_seed.values())
                                   / seconds, 1) if seconds else 0.0,
        "by_seed": by_seed,
    }
    curves = {folder: loss_curve(out / folder) for folder in by_seed} if main_process else {}
    return metrics, curves


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 6) if values else None
