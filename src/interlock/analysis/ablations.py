"""Collect finished DVC experiments into one ablation comparison: a table, and the pictures of
the paper's two ablations (transfer against domain breadth; agent judge against text judge).

A finished experiment is a git commit under ``refs/exps/``: its ``params.yaml`` says what it
varied (``domains``, ``judge``, ``train.seeds``, and its sweep, ``tracking.group``) and its
``metrics/*.json`` (committed: DVC does not cache them) hold what it measured. Reading those
files at each experiment's commit needs nothing but git, and gives the same numbers that
``dvc exp show`` lists and W&B holds.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from interlock.analysis.report import BAR_METRICS, COLORS, TABLE_METRICS, comparison_frame
from interlock.core.errors import InterlockError
from interlock.core.paths import Paths

#: the metrics files an experiment is read from
METRICS_FILES = ("evaluate", "sample", "train", "judge", "accept")
#: the table's columns, in order
COLUMNS = ["experiment", "group", "breadth", "judge", "seeds", "training_trajectories", "pool", "model",
           "metric", "tasks", "episodes", "value", "low", "high", "delta", "delta_low", "delta_high",
           "judge_seconds_per_rollout", "judge_output_tokens_per_rollout"]


@dataclass(frozen=True)
class Experiment:
    """One finished experiment: its name, commit, parameters and metrics files (by stem)."""

    name: str
    rev: str
    params: dict
    metrics: dict[str, dict]

    @property
    def group(self) -> str | None:
        return (self.params.get("tracking") or {}).get("group")

    @property
    def breadth(self) -> int | None:
        """Training domains of a breadth choice; None for ``domains=all``."""
        return (self.params.get("domains") or {}).get("count")

    @property
    def judge(self) -> str:
        return self.params["judge"]["name"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise InterlockError(f"git {' '.join(args)} failed: {done.stderr.strip()}", file=str(repo))
    return done.stdout


def _at(repo: Path, rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def read_experiments(repo: Path | str, group: str | None = None) -> list[Experiment]:
    """Every finished experiment of ``repo`` (of the sweep ``group`` only, when given), oldest
    first; one without its evaluate metrics (it failed before evaluating) is left out."""
    repo = Path(repo)
    listing = _git(repo, "for-each-ref", "--sort=committerdate", "--format=%(refname) %(objectname)",
                   "refs/exps/")
    experiments = []
    for line in listing.splitlines():
        ref, rev = line.split()
        if ref.split("/")[2] in {"exec", "celery", "temp"} or ref.count("/") < 4:
            continue  # DVC's own bookkeeping refs, not finished experiments
        params_text = _at(repo, rev, "params.yaml")
        params = yaml.safe_load(params_text) if params_text else None
        if not isinstance(params, dict) or "paths" not in params:
            continue  # not an experiment of this pipeline's layout
        paths = Paths.model_validate(params["paths"])
        texts = {stem: _at(repo, rev, paths.metrics_of(stem).as_posix()) for stem in METRICS_FILES}
        if texts["evaluate"] is None:
            continue
        metrics = {stem: json.loads(text) for stem, text in texts.items() if text is not None}
        experiment = Experiment(ref.rsplit("/", 1)[-1], rev, params, metrics)
        if group is None or experiment.group == group:
            experiments.append(experiment)
    return experiments


def ablation_frame(experiments: Sequence[Experiment]) -> pd.DataFrame:
    """One row per experiment x pool x model x metric, with what the experiment varied and what
    its training set and judge cost; ``delta`` is against the experiment's reference model."""
    frames = []
    for experiment in experiments:
        frame = comparison_frame(experiment.metrics["evaluate"])
        judges = experiment.metrics.get("judge", {}).get("rollouts", {}).get("judges", {})
        judge = judges.get(experiment.judge, {})
        frame.insert(0, "experiment", experiment.name)
        frame.insert(1, "group", experiment.group)
        frame.insert(2, "breadth", experiment.breadth)
        frame.insert(3, "judge", experiment.judge)
        frame.insert(4, "seeds", experiment.metrics.get("train", {}).get("seeds"))
        frame.insert(5, "training_trajectories", experiment.metrics.get("sample", {}).get("trajectories"))
        frame["judge_seconds_per_rollout"] = judge.get("seconds_per_rollout")
        frame["judge_output_tokens_per_rollout"] = judge.get("output_tokens_per_rollout")
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]


# ----------------------------------------------------------------------------- pictures

def _selected(frame: pd.DataFrame, model: str, pool: str) -> pd.DataFrame:
    return frame[(frame["model"] == model) & (frame["pool"] == pool)]


def plot_breadth(frame: pd.DataFrame, model: str = "rft", pool: str = "benchmark",
                 metrics: Sequence[str] = BAR_METRICS) -> Figure:
    """Each transfer metric of ``model`` against the number of training domains, with intervals
    (experiments at ``domains=all`` are left out: they have no breadth)."""
    rows = _selected(frame, model, pool).dropna(subset=["breadth"])
    fig = Figure(figsize=(3.2 * len(metrics), 3.2), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        points = rows[rows["metric"] == metric].sort_values("breadth")
        for i, (judge, group) in enumerate(points.groupby("judge", sort=True)):
            x = group["breadth"].astype(float)
            err = [(group["value"] - group["low"]).clip(lower=0),
                   (group["high"] - group["value"]).clip(lower=0)]
            ax.errorbar(x, group["value"], yerr=err, marker="o", capsize=3,
                        color=COLORS[(i + 1) % len(COLORS)], label=f"{judge} judge")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training domains")
        ax.set_title(TABLE_METRICS[metric])
        if points.empty:
            ax.text(0.5, 0.5, "no breadth experiments", ha="center", va="center", transform=ax.transAxes)
        else:
            ticks = sorted(points["breadth"].unique())
            ax.set_xticks(ticks, [str(int(b)) for b in ticks])
            ax.legend(fontsize=7)
    fig.suptitle(f"{model} on {pool}: transfer against domain breadth (fixed trajectory count)")
    return fig


def plot_judges(frame: pd.DataFrame, model: str = "rft", pool: str = "benchmark",
                metrics: Sequence[str] = BAR_METRICS) -> Figure:
    """``model``'s transfer metrics trained on the agent judge's accepted set against the text
    judge's, as bars with intervals, each judge's cost (seconds per rollout) in the legend."""
    rows = _selected(frame, model, pool)
    judges = sorted(rows["judge"].unique())
    fig = Figure(figsize=(7, 3.4), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(judges))
    for i, judge in enumerate(judges):
        own = rows[rows["judge"] == judge].groupby("metric").first()
        values = [own.loc[m, "value"] if m in own.index else math.nan for m in metrics]
        low = [own.loc[m, "value"] - own.loc[m, "low"] if m in own.index else 0 for m in metrics]
        high = [own.loc[m, "high"] - own.loc[m, "value"] if m in own.index else 0 for m in metrics]
        cost = own["judge_seconds_per_rollout"].dropna()
        label = f"{judge} judge" + (f" ({cost.iloc[0]:.3g} s/rollout)" if len(cost) else "")
        ax.bar([x + i * width for x in range(len(metrics))], values, width, yerr=[low, high], capsize=3,
               label=label, color=COLORS[(i + 1) % len(COLORS)])
    ax.set_xticks([x + width * (len(judges) - 1) / 2 for x in range(len(metrics))],
                  [TABLE_METRICS[m] for m in metrics], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title(f"{model} on {pool}: trained on each judge's accepted set")
    if judges:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no experiments", ha="center", va="center", transform=ax.transAxes)
    return fig


def write_ablation_report(repo: Path | str, out: Path | str, group: str | None = None) -> pd.DataFrame:
    """Read the finished experiments (of ``group``), write ``ablations.tsv``, ``breadth.png`` and
    ``judges.png`` under ``out``; return the table."""
    experiments = read_experiments(repo, group)
    if not experiments:
        where = f" in group {group!r}" if group else ""
        raise InterlockError(f"no finished experiment{where}; run a sweep (`dvc exp run --queue ...`, "
                             "then `dvc queue start`)", file=str(repo))
    frame = ablation_frame(experiments)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "ablations.tsv", sep="\t", index=False, float_format="%.6g")
    plot_breadth(frame).savefig(out / "breadth.png", dpi=120)
    plot_judges(frame).savefig(out / "judges.png", dpi=120)
    return frame
