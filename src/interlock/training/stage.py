"""The ``sample``, ``demo_sft`` and ``train`` stages. The two fine-tunings are one function: which
data, from which checkpoint, to which.

- ``demo`` (stage ``demo_sft``): the base checkpoint on the reference demonstrations; the warm
  start of RFT where ``solver.start`` is ``demo_sft``, and the demonstration baseline;
  one checkpoint, ``models/demo_sft``;
- ``rft`` (stage ``train``): the starting policy (the checkpoint that made the rollouts) on its
  own accepted trajectories (the training set the ``sample`` stage chose from them), once per
  seed in ``train.seeds``: ``models/rft/seed-0`` ..., so evaluation's intervals can cover
  training seeds as well as tasks. With nothing to train on, every seed would be the same
  untrained copy, so only ``seed-0`` is written.

Both compute in ``backbone.dtype`` resolved for training (``auto``: bf16 autocast where this
machine measured it faster), and their metrics say what that was (``runtime``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from interlock.core.config import Params
from interlock.core.io import write_tsv
from interlock.core.paths import Paths
from interlock.core.runner import main_process
from interlock.core.seeds import stable_seed
from interlock.core.tracking import StageReport
from interlock.models.backends import model_runtime
from interlock.models.checkpoint import SEED_FOLDER
from interlock.rollout.trajectory import report_bad_rows
from interlock.training.sampling import run_sampling
from interlock.training.trainer import fine_tune_on_trajectories, loss_curve

#: phase -> (stage, checkpoint it writes)
PHASES = {"demo": ("demo_sft", "demo_sft"), "rft": ("train", "rft")}
LOSS_COLUMNS = ["step", "loss", "learning_rate"]


def run_fine_tuning(params: Params, paths: Paths, phase: Literal["demo", "rft"]) -> StageReport | None:
    """Fine-tune; write the loss curves; return the stage's metrics (None in every process but the
    main one under ``accelerate launch``: it alone reports)."""
    stage, name = PHASES[phase]
    out = paths.model(name)
    start = paths.base_model if phase == "demo" else paths.model(params.solver.start)
    runtime = model_runtime(params.backbone, "train", start, backend="transformers")
    main = main_process()
    if phase == "demo":
        recipe = params.train.recipe(phase, stable_seed(params.seed, stage))
        metrics = fine_tune_on_trajectories(paths.demos_table, start, out, recipe, name=name,
                                            max_context=params.backbone.max_context,
                                            compute_dtype=runtime["resolved_dtype"])
        curves = {name: loss_curve(out)} if main else {}
    else:
        metrics, curves = _rft_seeds(params, paths, start, out, name, main, runtime["resolved_dtype"])
    if not main:
        return None
    if phase == "demo":
        write_tsv(paths.demo_sft_loss, curves[name], LOSS_COLUMNS)
    else:  # one file per seed: DVC draws a plot folder's files as one series each
        shutil.rmtree(paths.train_loss, ignore_errors=True)
        for seed_name, curve in curves.items():
            write_tsv(paths.train_loss / f"{seed_name}.tsv", curve, LOSS_COLUMNS)
    print(f"{stage}: {metrics['message']}; {metrics['tokens_per_second']} tokens/s", flush=True)
    losses = [{"seed": seed, **row} for seed, curve in curves.items() for row in curve]
    return StageReport(metrics, {"loss": losses}, config={"runtime": runtime})


def _rft_seeds(params: Params, paths: Paths, start: Path, out: Path, name: str, main: bool,
               compute_dtype: str) -> tuple[dict, dict[str, list[dict]]]:
    """Train every seed (one untrained copy when there is nothing to train); the stage's metrics
    (per seed under ``by_seed``, totals and means at the top) and each seed's loss curve."""
    by_seed: dict[str, dict] = {}
    for index in range(params.train.seeds):
        folder = SEED_FOLDER.format(index)
        recipe = params.train.recipe("rft", stable_seed(params.seed, "train", index))
        by_seed[folder] = fine_tune_on_trajectories(
            paths.training_table, start, out / folder, recipe, name=f"{name}/{folder}",
            max_context=params.backbone.max_context, compute_dtype=compute_dtype)
        if not by_seed[folder]["trained"]:
            break
    if main and out.is_dir():  # an earlier run's checkpoints: more seeds, another layout
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
                                 "epochs", "steps", "refused", "assistant_turns")},
        **{k: _mean(m[k] for m in by_seed.values())
           for k in ("first_loss", "last_loss", "mean_last_epoch_loss")},
        "seconds": round(seconds, 2),
        "tokens_per_second": round(sum(m["tokens_per_second"] * m["seconds"] for m in by_seed.values())
                                   / seconds, 1) if seconds else 0.0,
        **({"by_source": first["by_source"]} if "by_source" in first else {}),  # examples per source
        "by_seed": by_seed,
    }
    curves = {folder: loss_curve(out / folder) for folder in by_seed} if main else {}
    return metrics, curves


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 6) if values else None


# ----------------------------------------------------------------------------- the stages

def sample(params: Params, paths: Paths) -> StageReport:
    """The training set of the chosen domain breadth (``domains.count`` null: every accepted trajectory
    and every kept correction of the ``intervene`` stage; ``domains.count=4`` ... ``128``:
    ``scale.breadth_trajectories`` of them, drawn from both together and stratified across that many
    training domains). ``intervention=none`` leaves the interventions table empty: accepted only."""
    breadth = params.domains.count
    metrics = run_sampling(paths.accepted_table, paths.trajectories, paths.training_table, breadth=breadth,
                           trajectories=params.scale.breadth_trajectories if breadth else None,
                           seed=params.seed, interventions=paths.interventions_table,
                           mask=params.intervention.mask)
    print(f"sample: {metrics['message']}")
    report_bad_rows("sample", metrics["bad_rows"])
    by_source = metrics["per_domain_by_source"]
    return StageReport(metrics, tables={
        "per_domain": [{"domain_id": d, "trajectories": n, **by_source[d]}
                       for d, n in metrics["per_domain"].items()],
        "per_domain_by_source": [{"domain_id": d, "source": source, "trajectories": n}
                                 for d, counts in by_source.items() for source, n in counts.items()],
    })


def demo_sft(params: Params, paths: Paths) -> StageReport | None:
    """The base checkpoint fine-tuned on the reference demonstrations: the warm start of RFT (where
    ``solver.start`` is demo_sft) and the "SFT on demonstrations" baseline."""
    return run_fine_tuning(params, paths, "demo")


def train(params: Params, paths: Paths) -> StageReport | None:
    """Rejection-sampling fine-tuning: the starting policy on its own accepted trajectories (none
    accepted: an untrained copy, said plainly in the metrics)."""
    return run_fine_tuning(params, paths, "rft")
