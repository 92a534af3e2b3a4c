"""Collect finished DVC experiments into one ablation comparison: a table, the comparisons each
ablation makes, and the pictures of the four ablations (the rollout-time intervention, none
against rti; recursive synthesis, base against rst; transfer against domain breadth; agent judge
against text judge), and the reward curves of the experiments that trained an RL policy.

A finished experiment is what ``dvc exp show`` lists under a baseline commit (``HEAD`` unless
told otherwise) and does not call queued, running or failed, read through DVC's public API:
:func:`dvc.api.exp_show` names the experiments and their commits, and :func:`dvc.api.read` reads
each one's files at its commit: ``params.yaml`` says what it varied (``intervention``,
``synthesis``, ``domains``, ``judge``, ``train.seeds``, and its sweep, ``tracking.group``) and its
``metrics/*.json`` (committed: DVC does not cache them) hold what it measured, the same numbers
that ``dvc exp show`` lists and W&B holds.

**Minimum detectable effect.** Every comparison states the smallest true difference the run
would detect (95% confidence, 80% power; :func:`~interlock.evaluation.metrics.minimum_detectable_effect`),
so "no difference" reads as "none" or as "too small a run to tell". Within an experiment, each
model's delta against the reference model carries its ``delta_mde`` from ``evaluate.json``.
Between experiments (:func:`axis_comparisons`: rti against none, each breadth against the
smallest, the text judge against the agent judge) the difference is bootstrapped paired by task
from the two experiments' per-episode results, read with :func:`dvc.api.open` at each
experiment's commit (git alone has only the summaries; DVC finds them in the local cache, else in
the default remote); where neither holds them the point difference is given without an interval or
MDE.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path, PurePosixPath

import dvc.api
import numpy as np
import pandas as pd
import yaml
from dvc.exceptions import DvcException, PathMissingError
from dvc_data.index import DataIndexError
from matplotlib.figure import Figure

from interlock.analysis.queue import require_dvc_root
from interlock.analysis.report import BAR_METRICS, COLORS, TABLE_METRICS, comparison_frame, plot_table
from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.evaluation.metrics import METRICS, paired_delta, pool_design, seed_noise, task_values

#: the metrics files an experiment is read from
METRICS_FILES = ("evaluate", "sample", "train", "judge", "accept", "rl")
#: the ablation axes: what a sweep varies (an :class:`Experiment` property of that name)
AXES = ("intervention", "synthesis", "breadth", "judge")
#: per axis, the order its levels are compared in; the first present is the reference (breadth:
#: fewest domains first, no breadth (``domains.count`` null) last)
LEVEL_ORDER = {"intervention": ("none", "rti"), "synthesis": ("base", "rst"), "judge": ("agent", "text")}
#: the methods, each pictured as bars per model against its reference level: the picture's title,
#: the reference's label and the sweep that makes it
METHODS = {"intervention": ("rollout-time intervention", "no intervention", "intervention=none,rti"),
           "synthesis": ("recursive synthesis", "base pool", "synthesis=base,rst")}
#: the table's columns, in order
COLUMNS = ["experiment", "group", "breadth", "judge", "intervention", "synthesis", "seeds",
           "training_trajectories", "pool", "model", "metric", "tasks", "episodes", "value", "low", "high",
           "delta", "delta_low", "delta_high", "delta_mde", "judge_seconds_per_rollout",
           "judge_output_tokens_per_rollout"]
#: the comparisons' columns (:func:`axis_comparisons`), in order
COMPARISON_COLUMNS = ["axis", "group", "experiment", "level", "reference_experiment", "reference_level",
                      "pool", "model", "metric", "tasks", "value", "reference_value", "difference", "low",
                      "high", "mde", "paired"]


@dataclass(frozen=True)
class Experiment:
    """One finished experiment: its name, commit (abbreviated, as ``dvc exp show`` lists it),
    parameters and metrics files (by stem), and its evaluation's per-episode result rows where the
    DVC cache or remote holds them (else None)."""

    name: str
    rev: str
    params: dict
    metrics: dict[str, dict]
    results: list[dict] | None = field(default=None, compare=False, repr=False)
    #: (step, mean reward, pass rate) of each step of the experiment's RL run; empty where it trained none
    rl_steps: tuple[tuple[int, float, float], ...] = ()

    @property
    def group(self) -> str | None:
        return (self.params.get("tracking") or {}).get("group")

    @property
    def breadth(self) -> int | None:
        """Training domains of a breadth choice (``domains.count``); None for no breadth."""
        return (self.params.get("domains") or {}).get("count")

    @property
    def judge(self) -> str:
        return self.params["judge"]["name"]

    @property
    def intervention(self) -> str:
        """``none`` (rejection sampling alone) or ``rti`` (rollout-time intervention); ``none`` for
        an experiment from before the option existed."""
        return (self.params.get("intervention") or {}).get("name") or "none"

    @property
    def synthesis(self) -> str:
        """``base`` (the blueprints' tasks) or ``rst`` (recursive synthesis grew the rft pool);
        ``base`` for an experiment from before the option existed."""
        return (self.params.get("synthesis") or {}).get("name") or "base"

    @property
    def generation(self) -> str | None:
        """Who played the RL episodes (``train.rl.generation``: ``transformers`` or ``vllm``)."""
        return ((self.params.get("train") or {}).get("rl") or {}).get("generation")


#: the states ``dvc exp show`` gives a finished experiment: none (run by ``dvc exp run`` itself)
#: or ``Success`` (run from the queue)
FINISHED_STATES = (None, "Success")


def _listed(repo: Path, revs: str | Sequence[str] | None) -> list[tuple[str, str]]:
    """(name, commit) of every finished experiment ``dvc exp show`` lists under the baselines
    ``revs`` (``HEAD`` when None), each baseline's oldest first (DVC lists the newest first). A
    queued, running or failed one is left out: DVC lists it at the commit it was queued from, whose
    metrics are its baseline's (git holds them), not its own."""
    require_dvc_root(repo)
    baselines = [revs] if isinstance(revs, str) else list(revs) if revs else None
    try:
        rows = dvc.api.exp_show(repo=str(repo), revs=baselines)
    except DvcException as exc:
        raise InterlockError(f"dvc exp show failed: {exc}", file=str(repo)) from None
    listed: list[tuple[str, str]] = []
    batch: list[tuple[str, str]] = []
    for row in rows:
        if row.get("typ") == "baseline":  # a baseline row starts the next baseline's experiments
            listed += reversed(batch)
            batch = []
        elif row.get("Experiment") and row.get("rev") and row.get("State") in FINISHED_STATES:
            batch.append((str(row["Experiment"]), str(row["rev"])))
    listed += reversed(batch)
    return list(dict.fromkeys(listed))  # a baseline given twice (HEAD and its branch) is listed twice


def _read(repo: Path, rev: str, path: str) -> str | None:
    """A text file of the experiment ``rev`` (git's or DVC's), None where it has none."""
    try:
        return dvc.api.read(path, repo=str(repo), rev=rev)
    except PathMissingError:
        return None
    except DvcException as exc:
        raise InterlockError(f"cannot read it at experiment commit {rev} ({exc})", file=path) from None


def _results(repo: Path, rev: str, evaluation: str) -> list[dict] | None:
    """The evaluate stage's per-episode results at ``rev``, from the DVC cache or the default
    remote. None where neither holds them (a cleared cache, an experiment pulled without data, no
    remote), or where the table is not one this reader can use: then there is no paired
    comparison."""
    path = (PurePosixPath(evaluation) / "results.parquet").as_posix()
    try:
        with dvc.api.open(path, repo=str(repo), rev=rev, mode="rb") as handle:
            data = handle.read()
    except (DvcException, DataIndexError, OSError):
        return None
    with tempfile.TemporaryDirectory(prefix="interlock-results-") as folder:
        table = Path(folder) / "results.parquet"
        table.write_bytes(data)
        try:
            return read_rows(table, schemas.EVAL_RESULTS)
        except InterlockError:
            return None


def _rl_steps(repo: Path, rev: str, folder: str) -> tuple[tuple[int, float, float], ...]:
    """The RL stage's per-step series at ``rev`` (``reward.tsv`` and ``pass_rate.tsv`` under
    ``paths.rl_plot``: step, value), step by step; empty where it trained nothing."""
    series = []
    for name in ("reward", "pass_rate"):  # interlock.rl.stage.PLOTTED, as the stage writes them
        path = (PurePosixPath(folder) / f"{name}.tsv").as_posix()
        text = _read(repo, rev, path)
        if text is None:
            return ()
        try:
            table = plot_table(text)
            series.append({int(step): float(value) for step, value in zip(table["step"], table["value"],
                                                                          strict=True)})
        except (ValueError, KeyError, pd.errors.ParserError) as exc:
            raise InterlockError(f"not a step/value table at experiment commit {rev}: {exc}",
                                 file=path) from None
    reward, passed = series
    return tuple((step, reward[step], passed.get(step, math.nan)) for step in sorted(reward))


def read_experiments(repo: Path | str, group: str | None = None,
                     revs: str | Sequence[str] | None = None) -> list[Experiment]:
    """Every finished experiment of ``repo`` that ``dvc exp show`` lists under the baseline
    commits ``revs`` (``HEAD`` when None; a branch, tag or commit, or several), of the sweep
    ``group`` only when given, each baseline's oldest first; one still queued or running, one
    that failed, and one without its evaluate metrics are left out. The paths are read from each
    experiment's own ``params.yaml`` (an older layout reads as well)."""
    repo = Path(repo)
    experiments = []
    for name, rev in _listed(repo, revs):
        params_text = _read(repo, rev, "params.yaml")
        params = yaml.safe_load(params_text) if params_text else None
        paths = params.get("paths") if isinstance(params, dict) else None
        if not isinstance(paths, dict) or "metrics" not in paths or "evaluation" not in paths:
            continue  # not an experiment of this pipeline's layout
        if group is not None and (params.get("tracking") or {}).get("group") != group:
            continue
        metrics_folder = PurePosixPath(paths["metrics"])
        texts = {stem: _read(repo, rev, (metrics_folder / f"{stem}.json").as_posix())
                 for stem in METRICS_FILES}
        if texts["evaluate"] is None:
            continue
        metrics = {stem: json.loads(text) for stem, text in texts.items() if text is not None}
        results = _results(repo, rev, str(paths["evaluation"]))
        rl_steps = _rl_steps(repo, rev, str(paths["rl_plot"])) if "rl_plot" in paths else ()
        experiments.append(Experiment(name, rev, params, metrics, results, rl_steps))
    return experiments


def ablation_frame(experiments: Sequence[Experiment]) -> pd.DataFrame:
    """One row per experiment x pool x model x metric, with what the experiment varied and what
    its training set and judge cost; ``delta`` is against the experiment's reference model, with
    its interval and ``delta_mde``, the minimum detectable effect at the experiment's size (None
    for the reference itself, and for metrics written before ``evaluate.json`` carried it)."""
    frames = []
    for experiment in experiments:
        frame = comparison_frame(experiment.metrics["evaluate"])
        judges = experiment.metrics.get("judge", {}).get("rollouts", {}).get("judges", {})
        judge = judges.get(experiment.judge, {})
        frame.insert(0, "experiment", experiment.name)
        frame.insert(1, "group", experiment.group)
        frame.insert(2, "breadth", experiment.breadth)
        frame.insert(3, "judge", experiment.judge)
        frame.insert(4, "intervention", experiment.intervention)
        frame.insert(5, "synthesis", experiment.synthesis)
        frame.insert(6, "seeds", experiment.metrics.get("train", {}).get("seeds"))
        frame.insert(7, "training_trajectories", experiment.metrics.get("sample", {}).get("trajectories"))
        frame["judge_seconds_per_rollout"] = judge.get("seconds_per_rollout")
        frame["judge_output_tokens_per_rollout"] = judge.get("output_tokens_per_rollout")
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]


# ----------------------------------------------------------------------------- comparisons

def _level_key(axis: str, level: object) -> tuple:
    """Sort key of an axis level: the reference first (no intervention, the base pool, fewest
    domains, the agent judge), no breadth (``domains.count`` null) last."""
    if _absent(level):
        return (2, 0.0, "")
    order = LEVEL_ORDER.get(axis, ())
    if level in order:
        return (0, float(order.index(level)), "")
    return (1, float(level), "") if isinstance(level, Real) else (1, 0.0, str(level))


def axis_comparisons(experiments: Sequence[Experiment], metrics: Sequence[str] = tuple(TABLE_METRICS)
                     ) -> pd.DataFrame:
    """What each ablation compares: per axis (:data:`AXES`), among experiments of one sweep
    (``tracking.group``) that agree on the other axes, every experiment against the one at the
    axis's reference level (intervention ``none``; synthesis ``base``; the fewest training domains;
    the ``agent`` judge), per pool x model x metric. ``difference`` is ``value - reference_value``; ``low``,
    ``high`` and ``mde`` (the minimum detectable effect at the run's size) come from a bootstrap
    paired by task over both experiments' per-episode results (``paired``); they are missing where
    either experiment's results are in neither the DVC cache nor the remote, or the two ran
    different tasks."""
    rows: list[dict] = []
    for axis in AXES:
        others = [a for a in AXES if a != axis]
        sweeps: dict[tuple, list[Experiment]] = defaultdict(list)
        for experiment in experiments:
            sweeps[(experiment.group, *(getattr(experiment, a) for a in others))].append(experiment)
        for members in sweeps.values():
            levels = sorted({getattr(e, axis) for e in members}, key=lambda level: _level_key(axis, level))
            if len(levels) < 2:
                continue
            reference = next(e for e in members if getattr(e, axis) == levels[0])
            for experiment in sorted(members, key=lambda e: _level_key(axis, getattr(e, axis))):
                if getattr(experiment, axis) != levels[0]:
                    rows += _compare(axis, experiment, reference, metrics)
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    for column in ("value", "reference_value", "difference", "low", "high", "mde"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _compare(axis: str, experiment: Experiment, reference: Experiment, metrics: Sequence[str]) -> list[dict]:
    """``experiment`` against ``reference`` on every pool, model and metric both evaluated."""
    rows = []
    ours = experiment.metrics["evaluate"].get("pools", {})
    theirs = reference.metrics["evaluate"].get("pools", {})
    settings = reference.params.get("eval") or {}
    resamples, confidence = int(settings.get("bootstrap", 1000)), float(settings.get("confidence", 0.95))
    seed = int(reference.params.get("seed", 0))
    for pool in [p for p in theirs if p in ours]:
        for model in [m for m in theirs[pool].get("models", {}) if m in ours[pool].get("models", {})]:
            own = _per_task(experiment.results, pool, model)
            other = _per_task(reference.results, pool, model)
            paired = own is not None and other is not None and own[0] == other[0] and bool(own[0])
            for metric in metrics:
                mine = ours[pool]["models"][model].get(metric)
                base = theirs[pool]["models"][model].get(metric)
                if mine is None or base is None:
                    continue
                row = {"axis": axis, "group": experiment.group, "experiment": experiment.name,
                       "level": getattr(experiment, axis), "reference_experiment": reference.name,
                       "reference_level": getattr(reference, axis), "pool": pool, "model": model,
                       "metric": metric, "tasks": ours[pool].get("tasks"), "value": mine["value"],
                       "reference_value": base["value"], "difference": None, "low": None, "high": None,
                       "mde": None, "paired": False}
                if mine["value"] is not None and base["value"] is not None:
                    row["difference"] = round(mine["value"] - base["value"], 6) + 0.0
                values = (task_values(own[1], METRICS[metric], own[0]) if paired else None,
                          task_values(other[1], METRICS[metric], other[0]) if paired else None)
                if values[0] is not None and values[1] is not None:
                    weights = pool_design(own[1], own[0]).weights(resamples, seed, pool)
                    draws = [seed_noise(resamples, seed, pool, f"{e.name}/{model}")
                             for e in (experiment, reference)]
                    delta = paired_delta(values[0], values[1], weights, confidence, *draws)
                    row.update({"difference": delta["value"], "low": delta["low"], "high": delta["high"],
                                "mde": delta["mde"], "paired": True})
                rows.append(row)
    return rows


def _per_task(results: list[dict] | None, pool: str, model: str) -> tuple[list[str], list[dict]] | None:
    """One model's result rows on one pool and its sorted task ids (None without results)."""
    if results is None:
        return None
    rows = [r for r in results if r["pool"] == pool and r["model"] == model]
    return (sorted({r["task_id"] for r in rows}), rows) if rows else None


def describe(row: object, digits: int = 3) -> str:
    """One comparison in words: the difference, its interval, and the MDE, with what it means (a
    difference whose interval covers 0 is "not detected", and the MDE says how large one would
    have been)."""
    fmt = f"{{:+.{digits}f}}"
    if _absent(getattr(row, "difference", None)):
        return "n/a"
    text = fmt.format(row.difference)
    if _absent(row.low) or _absent(row.high) or _absent(row.mde):
        return f"{text} (not paired: no per-task results in the DVC cache, or other tasks; no MDE)"
    found = "detected" if row.low > 0 or row.high < 0 else "not detected"
    return f"{text} [{fmt.format(row.low)}, {fmt.format(row.high)}], MDE {row.mde:.{digits}f}: {found}"


def comparison_table(comparisons: pd.DataFrame, pool: str = "benchmark", metric: str = "pass_rate",
                     models: Sequence[str] | None = None) -> pd.DataFrame:
    """The comparisons of one pool and metric (of ``models`` only, when given), each in words
    (:func:`describe`): one row per ablation x experiment x model."""
    rows = comparisons[(comparisons["pool"] == pool) & (comparisons["metric"] == metric)]
    if models is not None:
        rows = rows[rows["model"].isin(list(models))]
    name = TABLE_METRICS.get(metric, metric)
    return pd.DataFrame({
        "ablation": rows["axis"], "experiment": rows["experiment"], "level": rows["level"].map(level_name),
        "against": rows["reference_experiment"], "reference level": rows["reference_level"].map(level_name),
        "model": rows["model"],
        f"{name} difference [interval], MDE": [describe(r) for r in rows.itertuples()],
    }).reset_index(drop=True)


def level_name(level: object) -> str:
    """An ablation level in words: a breadth as ``dN`` (``all`` domains for none), else the name."""
    if _absent(level):
        return "all domains"
    return f"d{int(level)}" if isinstance(level, Real) else str(level)


def _absent(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


# ----------------------------------------------------------------------------- pictures

#: what the pictures say their MDE annotations mean
MDE_NOTE = ("MDE: the smallest true difference from {} this run would detect\n"
            "(95% confidence, 80% power; paired bootstrap over tasks; none drawn where nothing varies)")


def _selected(frame: pd.DataFrame, model: str, pool: str) -> pd.DataFrame:
    return frame[(frame["model"] == model) & (frame["pool"] == pool)]


def _varying(rows: pd.DataFrame, axis: str) -> pd.DataFrame:
    """The rows of the sweeps (``group``) in which ``axis`` takes two levels or more, if any sweep
    does; else all of them."""
    groups = rows["group"].astype(object).where(rows["group"].notna(), "")
    varied = rows.groupby(groups)[axis].transform(lambda levels: levels.astype(object).nunique() > 1)
    return rows[varied] if varied.any() else rows


def _levels(rows: pd.DataFrame, axis: str) -> list[tuple[object, str]]:
    """(level, the first experiment at that level) in comparison order."""
    first = rows.drop_duplicates(subset=[axis])[[axis, "experiment"]]
    return sorted(zip(first[axis], first["experiment"], strict=True),
                  key=lambda item: _level_key(axis, item[0]))


def _mde(comparisons: pd.DataFrame | None, axis: str, experiment: str, model: str, pool: str,
         metric: str) -> float | None:
    """The MDE of ``experiment``'s comparison along ``axis`` to draw: None where there is none, or
    where it is 0 (identical per-task values on both sides: nothing varies, nothing to detect)."""
    if comparisons is None or comparisons.empty:
        return None
    hit = comparisons[(comparisons["axis"] == axis) & (comparisons["experiment"] == experiment)
                      & (comparisons["model"] == model) & (comparisons["pool"] == pool)
                      & (comparisons["metric"] == metric)]["mde"].dropna()
    return float(hit.iloc[0]) if len(hit) and hit.iloc[0] > 0 else None


def plot_breadth(frame: pd.DataFrame, model: str = "rft", pool: str = "benchmark",
                 metrics: Sequence[str] = BAR_METRICS, comparisons: pd.DataFrame | None = None) -> Figure:
    """Each transfer metric of ``model`` against the number of training domains, with intervals
    (experiments without a breadth are left out: they have no breadth), one line per judge and
    intervention; with ``comparisons`` (:func:`axis_comparisons`), each breadth past the first is
    labelled with its comparison's MDE."""
    rows = _selected(frame, model, pool).dropna(subset=["breadth"])
    rows = _varying(rows, "breadth") if len(rows) else rows
    several = rows["group"].astype(object).nunique(dropna=False) > 1
    fig = Figure(figsize=(3.2 * len(metrics), 3.4), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    annotated = False
    for ax, metric in zip(axes, metrics, strict=True):
        points = rows[rows["metric"] == metric].sort_values("breadth")
        lines = points.groupby(["group", "judge", "intervention"], sort=True, dropna=False)
        for i, ((sweep, judge, intervention), group) in enumerate(lines):
            x = group["breadth"].astype(float)
            err = [(group["value"] - group["low"]).clip(lower=0),
                   (group["high"] - group["value"]).clip(lower=0)]
            label = (f"{judge} judge" + ("" if intervention == "none" else f", {intervention}")
                     + (f" ({sweep})" if several and not _absent(sweep) else ""))
            ax.errorbar(x, group["value"], yerr=err, marker="o", capsize=3,
                        color=COLORS[(i + 1) % len(COLORS)], label=label)
            for item in group.itertuples():
                mde = _mde(comparisons, "breadth", item.experiment, model, pool, metric)
                if mde is not None:
                    ax.annotate(f"MDE {mde:.2f}", (float(item.breadth), item.value), xytext=(4, -11),
                                textcoords="offset points", fontsize=7, color=COLORS[(i + 1) % len(COLORS)])
                    annotated = True
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
    if annotated:
        fig.supxlabel(MDE_NOTE.format("the fewest domains"), fontsize=7)
    return fig


def _bars(ax, rows: pd.DataFrame, axis: str, groups: Sequence[str], key: str, label, comparisons,
          pool: str, model_of, metric_of) -> list[tuple[object, str]]:
    """Bars per level of ``axis`` (its first experiment at each level) for each of ``groups``
    (``key``: the column they are values of), with intervals, MDE above each compared bar."""
    levels = _levels(rows, axis)
    width = 0.8 / max(1, len(levels))
    for i, (level, experiment) in enumerate(levels):
        own = rows[rows["experiment"] == experiment].drop_duplicates(subset=[key]).set_index(key)
        values = [own.loc[g, "value"] if g in own.index else math.nan for g in groups]
        low = [max(0.0, own.loc[g, "value"] - own.loc[g, "low"]) if g in own.index else 0 for g in groups]
        high = [max(0.0, own.loc[g, "high"] - own.loc[g, "value"]) if g in own.index else 0 for g in groups]
        xs = [x + i * width for x in range(len(groups))]
        ax.bar(xs, np.nan_to_num(values), width, yerr=[np.nan_to_num(low), np.nan_to_num(high)], capsize=3,
               label=label(level, own), color=COLORS[(i + 1) % len(COLORS)])
        for x, g, value in zip(xs, groups, values, strict=True):
            mde = None if i == 0 else _mde(comparisons, axis, experiment, model_of(g), pool, metric_of(g))
            if mde is not None:
                top = value + (high[groups.index(g)] if not math.isnan(value) else 0)
                ax.text(x, min(0.97, (0 if math.isnan(top) else top) + 0.02), f"MDE\n{mde:.2f}",
                        ha="center", va="bottom", fontsize=6)
    ax.set_xticks([x + width * (len(levels) - 1) / 2 for x in range(len(groups))],
                  [TABLE_METRICS.get(g, g) for g in groups], fontsize=8)
    ax.set_ylim(0, 1)
    return levels


def plot_judges(frame: pd.DataFrame, model: str = "rft", pool: str = "benchmark",
                metrics: Sequence[str] = BAR_METRICS, comparisons: pd.DataFrame | None = None) -> Figure:
    """``model``'s transfer metrics trained on the agent judge's accepted set against the text
    judge's, as bars with intervals, each judge's cost (seconds per rollout) in the legend; with
    ``comparisons`` (:func:`axis_comparisons`), the text judge's bars carry their comparison's MDE.
    From a sweep that varies the judge, where there is one."""
    rows = _varying(_selected(frame, model, pool), "judge")
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()

    def label(judge: object, own: pd.DataFrame) -> str:
        cost = own["judge_seconds_per_rollout"].dropna()
        return f"{judge} judge" + (f" ({cost.iloc[0]:.3g} s/rollout)" if len(cost) else "")

    levels = _bars(ax, rows, "judge", list(metrics), "metric", label, comparisons, pool,
                   lambda _: model, lambda metric: metric)
    ax.set_title(f"{model} on {pool}: trained on each judge's accepted set")
    if levels:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no experiments", ha="center", va="center", transform=ax.transAxes)
    if levels and _mde(comparisons, "judge", levels[-1][1], model, pool, metrics[0]) is not None:
        fig.supxlabel(MDE_NOTE.format("the agent judge"), fontsize=7)
    return fig


def plot_method(frame: pd.DataFrame, axis: str, pool: str = "benchmark", metric: str = "pass_rate",
                comparisons: pd.DataFrame | None = None) -> Figure:
    """``metric`` of every evaluated model at each level of a method's axis (:data:`METHODS`:
    ``intervention`` none against rti, ``synthesis`` base against rst), as bars with intervals;
    with ``comparisons`` (:func:`axis_comparisons`), the compared bars carry their MDE. From a
    sweep that varies the axis, where there is one."""
    title, reference, sweep = METHODS[axis]
    rows = frame[(frame["pool"] == pool) & (frame["metric"] == metric)]
    rows = _varying(rows, axis) if len(rows) else rows
    models = list(dict.fromkeys(rows["model"]))
    fig = Figure(figsize=(max(5.0, 1.8 * len(models) + 2), 3.6), layout="constrained")
    ax = fig.add_subplot()
    levels = _bars(ax, rows, axis, models, "model",
                   lambda level, _: reference if level == LEVEL_ORDER[axis][0] else str(level), comparisons,
                   pool, lambda model: model, lambda _: metric)
    ax.set_ylabel(TABLE_METRICS.get(metric, metric))
    ax.set_title(f"{TABLE_METRICS.get(metric, metric)} on {pool}: {title}")
    if len(levels) > 1:
        ax.legend(fontsize=8)
    if len(levels) < 2:
        ax.text(0.5, 0.5, f"no {axis} sweep ({sweep})" if levels else "no experiments",
                ha="center", va="center", transform=ax.transAxes, color="#6b7280")
    if len(levels) > 1 and any(_mde(comparisons, axis, levels[-1][1], m, pool, metric) is not None
                               for m in models):
        fig.supxlabel(MDE_NOTE.format(reference), fontsize=7)
    return fig


def plot_interventions(frame: pd.DataFrame, pool: str = "benchmark", metric: str = "pass_rate",
                       comparisons: pd.DataFrame | None = None) -> Figure:
    """Every model with and without rollout-time intervention (:func:`plot_method`)."""
    return plot_method(frame, "intervention", pool, metric, comparisons)


def plot_synthesis(frame: pd.DataFrame, pool: str = "benchmark", metric: str = "pass_rate",
                   comparisons: pd.DataFrame | None = None) -> Figure:
    """Every model trained from the base pool and from the pool recursive synthesis grew
    (:func:`plot_method`)."""
    return plot_method(frame, "synthesis", pool, metric, comparisons)


def plot_rl(experiments: Sequence[Experiment]) -> Figure:
    """The mean reward and the pass rate per GRPO step of every experiment that trained an RL
    policy (``train=grpo``), a line each, labelled with who played its episodes
    (``train.rl.generation``) and its seconds per step."""
    trained = [e for e in experiments if e.rl_steps]
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    for i, experiment in enumerate(trained):
        steps, reward, passed = zip(*experiment.rl_steps, strict=True)
        seconds = (experiment.metrics.get("rl") or {}).get("seconds_per_step")
        label = f"{experiment.name} ({experiment.generation or 'generation unknown'}" + (
            f", {seconds:.0f} s/step)" if isinstance(seconds, Real) else ")")
        for ax, values in zip(axes, (reward, passed), strict=True):
            ax.plot(steps, values, marker="o", label=label, color=COLORS[(i + 1) % len(COLORS)])
    for ax, title in zip(axes, ("mean reward", "pass rate"), strict=True):
        ax.set_title(f"GRPO: {title} per step", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
    if trained:
        axes[0].legend(fontsize=7)
    else:
        axes[0].text(0.5, 0.5, "no RL experiment (dvc exp run -S train=grpo)", ha="center", va="center",
                     transform=axes[0].transAxes, color="#6b7280")
    return fig


def write_ablation_report(repo: Path | str, out: Path | str, group: str | None = None,
                          revs: str | Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read the finished experiments (of ``group``, under the baselines ``revs``: ``HEAD`` when
    None; :func:`read_experiments`), write ``ablations.tsv``, ``comparisons.tsv``
    (:func:`axis_comparisons`, each with its MDE), ``breadth.png``, ``judges.png``,
    ``interventions.png``, ``synthesis.png`` and ``rl.png`` (:func:`plot_rl`) under ``out``; return
    the table and the comparisons."""
    experiments = read_experiments(repo, group, revs)
    if not experiments:
        where = f" in group {group!r}" if group else ""
        under = ", ".join([revs] if isinstance(revs, str) else revs or ["HEAD"])
        raise InterlockError(f"no finished experiment{where} under {under}; run a sweep (`dvc exp run "
                             "--queue ...`, then `dvc queue start`), or name the commit it started from "
                             "(`--rev`)", file=str(repo))
    frame = ablation_frame(experiments)
    comparisons = axis_comparisons(experiments)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "ablations.tsv", sep="\t", index=False, float_format="%.6g")
    comparisons.to_csv(out / "comparisons.tsv", sep="\t", index=False, float_format="%.6g")
    plot_breadth(frame, comparisons=comparisons).savefig(out / "breadth.png", dpi=120)
    plot_judges(frame, comparisons=comparisons).savefig(out / "judges.png", dpi=120)
    plot_interventions(frame, comparisons=comparisons).savefig(out / "interventions.png", dpi=120)
    plot_synthesis(frame, comparisons=comparisons).savefig(out / "synthesis.png", dpi=120)
    plot_rl(experiments).savefig(out / "rl.png", dpi=120)
    return frame, comparisons
