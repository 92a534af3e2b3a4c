"""Readers and plots for the results notebook (``notebooks/results.ipynb``).

Everything here reads what the pipeline wrote (``metrics/`` and the data directory), so a
notebook cell is one call: the comparison table of the evaluated models, what each pool can
detect (its minimum detectable effects), the per-domain
picture (acceptance per training domain, pass rate per evaluated domain), an example task's
completion graph, an accepted against a rejected trajectory side by side with the judge's
per-criterion verdicts, and the training curves. Every reader copes with what a small run
leaves: nothing accepted, an untrained RFT copy, a pool without tasks (intervals of ``None``).

Plots are drawn on :class:`matplotlib.figure.Figure` objects (no pyplot state); a notebook
shows a returned figure as its cell's value.
"""

from __future__ import annotations

import html
import io
import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from matplotlib.figure import Figure

from interlock.analysis.artifacts import Artifacts, find_repository
from interlock.analysis.draw import draw_graph
from interlock.core import schemas
from interlock.core.config import Params, load_params
from interlock.core.io import open_table
from interlock.core.paths import MissingArtifacts, Paths
from interlock.evaluation.metrics import TARGET_MDE, table_rows
from interlock.judging.verdicts import render_transcript
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import TaskPack

#: the environment variable that points the notebook at another checkout
#: the comparison table's metrics (keys of ``metrics/evaluate.json``) and their column names
TABLE_METRICS = {
    "pass_rate": "task pass rate",
    "score": "weighted score",
    "criterion_pass_rate": "criterion pass rate",
    "completion_gap_rate": "completion-gap rate",
    "mean_turns": "turns",
    "mean_tool_calls": "tool calls",
}
#: the metrics that are fractions in [0, 1], drawn together as bars
BAR_METRICS = ("pass_rate", "score", "criterion_pass_rate", "completion_gap_rate")
MISSING = "n/a"
#: the comparison table's column of episodes that ended for the context window
CONTEXT_FAILURES = "context failures"
COLORS = ("#64748b", "#2563eb", "#16a34a", "#d97706", "#db2777", "#7c3aed")


# ----------------------------------------------------------------------------- where

@dataclass(frozen=True)
class Results:
    """One repository's results: its parameters, its artifacts and its metrics files."""

    root: Path
    params: Params

    @classmethod
    def open(cls, start: Path | str | None = None, env: Mapping[str, str] | None = None) -> Results:
        root = find_repository(start, env)
        return cls(root, load_params(root / "params.yaml"))

    @property
    def paths(self) -> Paths:
        """The repository's paths, from wherever the reader runs."""
        return self.params.paths.under(self.root)

    @property
    def data(self) -> Artifacts:
        return Artifacts(self.paths)

    def metrics(self, stage: str) -> dict:
        """A stage's metrics file; a :class:`MissingArtifacts` error names the stage to run."""
        path = self.paths.metrics_of(stage)
        if not path.is_file():
            raise MissingArtifacts(f"{path} does not exist; run `dvc repro` first", file=str(path))
        return json.loads(path.read_text())

    def loss_curves(self) -> dict[str, pd.DataFrame]:
        """Every fine-tuning's loss curve: ``demo_sft``, then ``rft/seed-0`` ... (one per seed)."""
        curves = {"demo_sft": read_plot(self.paths.demo_sft_loss)}
        folder = self.paths.require(self.paths.train_loss)
        for path in sorted(folder.glob("*.tsv"), key=lambda p: (len(p.stem), p.stem)):
            curves[f"rft/{path.stem}"] = read_plot(path)
        return curves

    def verdicts(self, judges: Sequence[str] | None = None) -> pd.DataFrame:
        """Both judges' verdicts on the rollout pool (the configured judge first)."""
        judges = judges or _judge_order(self.params.judge.name)
        return read_verdicts(*(self.paths.require(self.paths.judgements / f"{j}.parquet") for j in judges))


def _judge_order(chosen: str) -> list[str]:
    return [chosen] + [j for j in ("agent", "text") if j != chosen]


def read_plot(path: Path | str) -> pd.DataFrame:
    """A plots TSV written by :func:`interlock.core.io.write_tsv` (``None`` cells are missing; no
    rows when the stage had none)."""
    if not Path(path).is_file():
        raise MissingArtifacts(f"{path} does not exist; run `dvc repro` first", file=str(path))
    return plot_table(Path(path).read_text(encoding="utf-8"))


def plot_table(text: str) -> pd.DataFrame:
    """The text of a plots TSV (:func:`interlock.core.io.write_tsv`) as a table, ``None`` cells
    missing: a file of the checkout (:func:`read_plot`) or of an experiment's commit."""
    return pd.read_csv(io.StringIO(text), sep="\t", na_values=["None"], keep_default_na=True)


# ----------------------------------------------------------------------------- comparison

def comparison_frame(evaluate: Mapping) -> pd.DataFrame:
    """``metrics/evaluate.json`` as one row per pool x model x metric: ``value``, ``low``,
    ``high`` and the paired delta against the reference model (``delta``, ``delta_low``,
    ``delta_high``; 0 for the reference itself) with its minimum detectable effect at the run's
    size (``delta_mde``; missing for the reference, and in metrics written before
    ``evaluate.json`` carried it), with the pool's ``tasks`` and the model's
    ``episodes`` and ``context_failures`` (episodes that ended for the context window). A pool
    without tasks keeps its rows, with missing values."""
    rows = []
    for pool, summary in evaluate.get("pools", {}).items():
        for flat in table_rows(pool, summary):
            for metric in TABLE_METRICS:
                if metric not in flat:
                    continue
                rows.append({"pool": pool, "model": flat["model"], "metric": metric,
                             "tasks": flat["tasks"], "episodes": flat["episodes"],
                             "context_failures": flat["context_failures"],
                             "value": flat[metric], "low": flat[f"{metric}_low"],
                             "high": flat[f"{metric}_high"],
                             "delta": flat.get(f"delta_{metric}"),
                             "delta_low": flat.get(f"delta_{metric}_low"),
                             "delta_high": flat.get(f"delta_{metric}_high"),
                             "delta_mde": flat.get(f"delta_{metric}_mde")})
    numbers = ["value", "low", "high", "delta", "delta_low", "delta_high", "delta_mde"]
    frame = pd.DataFrame(rows, columns=["pool", "model", "metric", "tasks", "episodes", "context_failures",
                                        *numbers])
    for column in numbers:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def comparison_table(evaluate: Mapping, digits: int = 3) -> pd.DataFrame:
    """The comparison table: one row per pool x model, each metric as ``value [low, high]`` (a
    Wilson interval for the binary rates, pass rate and completion-gap rate; a bootstrap interval
    over tasks for the others) and its delta against the reference (the first model) as
    ``+delta [low, high]`` (paired bootstrap interval over tasks) and, next to it,
    ``MDE <metric>``: the minimum detectable effect of that delta at the run's size (the smallest
    true difference it would detect at 95% confidence and 80% power; a delta whose interval covers
    0 is "too small a run to tell" below it); ``ref`` for the reference itself, ``n/a`` where a
    pool has no tasks or a benchmark has no such metric (BFCL: completion gap), or metrics predate
    the MDE. ``context failures`` counts the episodes that ended because the prompt outgrew the
    context window (failures)."""
    frame = comparison_frame(evaluate)
    reference = evaluate.get("reference")
    index = pd.MultiIndex.from_tuples([], names=["pool", "model"])
    counts = {"tasks": "tasks", "episodes": "episodes", "context_failures": CONTEXT_FAILURES}
    columns = [*counts.values()] + [c for m in TABLE_METRICS.values()
                                    for c in (m, f"Δ {m} vs {reference}", f"MDE {m}")]
    if frame.empty:
        return pd.DataFrame(index=index, columns=columns)
    rows = {}
    for (pool, model), group in frame.groupby(["pool", "model"], sort=False):
        row = {name: int(group[column].iloc[0]) for column, name in counts.items()}
        for item in group.itertuples():
            name = TABLE_METRICS[item.metric]
            row[name] = _interval(item.value, item.low, item.high, digits)
            row[f"Δ {name} vs {reference}"] = ("ref" if model == reference else
                                               _interval(item.delta, item.delta_low, item.delta_high,
                                                         digits, signed=True))
            row[f"MDE {name}"] = ("ref" if model == reference else
                                  MISSING if _missing(item.delta_mde) else f"{item.delta_mde:.{digits}f}")
        rows[pool, model] = row
    table = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=columns).fillna(MISSING)
    table.index = pd.MultiIndex.from_tuples(list(rows), names=["pool", "model"])
    return table


def detectability_table(evaluate: Mapping, digits: int = 3) -> pd.DataFrame:
    """What each evaluated pool can detect (``summary`` of ``metrics/evaluate.json``): one row per
    pool x compared model (every model but the reference) with the pool's tasks and attempts, the
    pass-rate delta against the reference and its paired interval, its minimum detectable effect,
    the per-task SD of the paired difference, and the tasks the pool would need for an MDE of
    :data:`~interlock.evaluation.metrics.TARGET_MDE`; ``n/a`` where a pool has too few tasks. No
    rows for metrics written before ``evaluate.json`` carried the summary."""
    reference = evaluate.get("reference")
    delta_column, needed_column = f"Δ task pass rate vs {reference}", f"tasks for an MDE of {TARGET_MDE:.2f}"
    columns = ["tasks", "attempts", delta_column, "MDE", "per-task SD", needed_column]

    def number(value: float | None) -> str:
        return MISSING if _missing(value) else f"{value:.{digits}f}"

    rows = {}
    for pool, summary in evaluate.get("summary", {}).items():
        for model, delta in summary["deltas"].items():
            rows[pool, model] = {
                "tasks": summary["tasks"], "attempts": summary["attempts"],
                delta_column: _interval(delta["value"], delta["low"], delta["high"], digits, signed=True),
                "MDE": number(delta["mde"]), "per-task SD": number(delta["per_task_sd"]),
                needed_column: MISSING if delta["tasks_needed"] is None else str(delta["tasks_needed"])}
    table = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=columns)
    table.index = pd.MultiIndex.from_tuples(list(rows), names=["pool", "model"])
    return table


def _interval(value: float, low: float, high: float, digits: int, signed: bool = False) -> str:
    if value is None or _missing(value):
        return MISSING
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    if low is None or high is None or _missing(low) or _missing(high):
        return fmt.format(value)
    return f"{fmt.format(value)} [{fmt.format(low)}, {fmt.format(high)}]"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def plot_comparison(frame: pd.DataFrame, metrics: Sequence[str] = BAR_METRICS) -> Figure:
    """Bars per model for each rate metric, one panel per pool, with their intervals as error
    bars (a pool without tasks says so in its panel)."""
    pools = list(dict.fromkeys(frame["pool"])) or ["(no pools)"]
    fig = Figure(figsize=(5.5 * len(pools), 3.6), layout="constrained")
    for i, pool in enumerate(pools):
        ax = fig.add_subplot(1, len(pools), i + 1)
        part = frame[(frame["pool"] == pool) & frame["metric"].isin(metrics)]
        models = list(dict.fromkeys(part["model"]))
        shown = [m for m in metrics if m in set(part["metric"])]
        width = 0.8 / max(len(models), 1)
        drawn = False
        for j, model in enumerate(models):
            rows = part[part["model"] == model].set_index("metric").reindex(shown)
            values = rows["value"].astype(float)
            if values.notna().any():
                drawn = True
            lower = (values - rows["low"].astype(float)).clip(lower=0).fillna(0)
            upper = (rows["high"].astype(float) - values).clip(lower=0).fillna(0)
            xs = [k + (j - (len(models) - 1) / 2) * width for k in range(len(shown))]
            ax.bar(xs, values.fillna(0), width, yerr=[lower, upper], capsize=3, label=model,
                   color=COLORS[j % len(COLORS)])
        ax.set_xticks(range(len(shown)), [TABLE_METRICS[m] for m in shown], rotation=20, ha="right")
        ax.set_ylim(0, 1)
        tasks = int(part["tasks"].iloc[0]) if len(part) else 0
        ax.set_title(f"{pool} ({tasks} tasks)")
        if not drawn:
            ax.text(0.5, 0.5, "no tasks in this pool" if not tasks else "no values",
                    ha="center", va="center", transform=ax.transAxes, color="#6b7280")
        if models:
            ax.legend(fontsize=8)
    return fig


# ----------------------------------------------------------------------------- per domain

def plot_acceptance(by_domain: pd.DataFrame) -> Figure:
    """Acceptance per training domain (``accept_by_domain``), labelled accepted / rollouts."""
    fig = Figure(figsize=(7, 1.0 + 0.25 * max(len(by_domain), 2)), layout="constrained")
    ax = fig.add_subplot()
    if by_domain.empty:
        _empty(ax, "no rollouts")
        return fig
    frame = by_domain.sort_values("domain_id", ascending=False)
    ys = range(len(frame))
    ax.barh(ys, frame["acceptance"], color=COLORS[2])
    ax.set_yticks(ys, frame["domain_id"])
    for y, item in zip(ys, frame.itertuples(), strict=True):
        ax.text(item.acceptance + 0.01, y, f"{item.accepted}/{item.rollouts}", va="center", fontsize=8)
    ax.set_xlim(0, 1.1)
    total, kept = frame["rollouts"].sum(), frame["accepted"].sum()
    ax.set_xlabel("accepted share of rollouts")
    ax.set_title(f"acceptance per training domain: {kept} of {total} rollouts accepted", fontsize=10)
    return fig


def domain_pass_rates(domains: pd.DataFrame) -> pd.DataFrame:
    """``evaluate_domains`` as a table: one row per pool x domain (a held-out domain; for BFCL, an
    API set), one column per model."""
    if domains.empty:
        return pd.DataFrame()
    models = list(dict.fromkeys(domains["model"]))
    table = domains.pivot_table(index=["pool", "domain_id"], columns="model", values="pass_rate",
                                aggfunc="first", sort=False)
    return table.reindex(columns=models)


def plot_domain_pass_rates(domains: pd.DataFrame) -> Figure:
    """Pass rate per domain (a held-out domain; for BFCL, an API set), one bar per model, one panel
    per pool (values printed, so a zero pass rate is still seen)."""
    table = domain_pass_rates(domains)
    pools = list(dict.fromkeys(table.index.get_level_values("pool"))) if len(table) else []
    rows = max((len(table.loc[p]) for p in pools), default=1)
    fig = Figure(figsize=(5.5 * max(len(pools), 1), 1.0 + 0.5 * rows * max(len(table.columns), 1) / 2),
                 layout="constrained")
    if not pools:
        _empty(fig.add_subplot(), "no evaluated episodes")
        return fig
    for i, pool in enumerate(pools):
        ax = fig.add_subplot(1, len(pools), i + 1)
        part = table.loc[pool]
        height = 0.8 / len(part.columns)
        for j, model in enumerate(part.columns):
            ys = [k + (j - (len(part.columns) - 1) / 2) * height for k in range(len(part))]
            values = part[model].astype(float).fillna(0)
            ax.barh(ys, values, height, label=model, color=COLORS[j % len(COLORS)])
            for y, value in zip(ys, values, strict=True):
                ax.text(value + 0.01, y, f"{value:.2f}", va="center", fontsize=7)
        ax.set_yticks(range(len(part)), part.index)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.15)
        ax.set_xlabel("task pass rate")
        ax.set_title(f"{pool}: pass rate per domain")
        ax.legend(fontsize=8, loc="lower right")
    return fig


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#6b7280")
    ax.set_axis_off()


# ----------------------------------------------------------------------------- intervention

@dataclass(frozen=True)
class InterventionNll:
    """The distribution-shift filter's NLL histograms (``intervene_nll``): the policy's own
    accepted turns and the corrections (``nll``: the bin centre, ``count``), and the threshold a
    kept correction's NLL is at most (None where none was set)."""

    accepted: pd.DataFrame
    corrections: pd.DataFrame
    threshold: float | None

    @property
    def empty(self) -> bool:
        """Nothing scored: the files a run with ``intervention=none`` writes (headers only)."""
        return self.accepted.empty and self.corrections.empty


def read_intervention_nll(folder: Path | str) -> InterventionNll | None:
    """The filter's histograms from ``folder`` (``accepted.tsv``, ``corrections.tsv``,
    ``threshold.tsv``); None when any is missing (a run from before the intervene stage; a run
    with ``intervention=none`` writes them without rows: :attr:`InterventionNll.empty`)."""
    folder = Path(folder)
    files = {name: folder / f"{name}.tsv" for name in ("accepted", "corrections", "threshold")}
    if not all(path.is_file() for path in files.values()):
        return None
    threshold = pd.to_numeric(read_plot(files["threshold"]).get("nll", pd.Series(dtype=float)),
                              errors="coerce").dropna()
    return InterventionNll(read_plot(files["accepted"]), read_plot(files["corrections"]),
                           float(threshold.iloc[0]) if len(threshold) else None)


def intervention_domains(path: Path | str) -> pd.DataFrame | None:
    """``intervene_domains`` as a table, one row per training domain (its rollouts, and how many
    failed, were diagnosed, corrected, verified and kept) and a ``total`` row; None when the file
    is missing, no rows after a run with ``intervention=none``."""
    if not Path(path).is_file():
        return None
    table = read_plot(path).set_index("domain_id")
    if table.empty:
        return table
    counts = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    table.loc["total", counts] = table[counts].sum()
    return table.astype({c: int for c in counts})


def plot_intervention_nll(nll: InterventionNll) -> Figure:
    """The two NLL histograms of the filter, one above the other on one NLL axis, with the
    threshold as a vertical line: corrections to its left are as likely under the starting
    checkpoint as the policy's own accepted turns, and are kept."""
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    parts = (("the policy's accepted turns", nll.accepted, COLORS[2]),
             ("corrections", nll.corrections, COLORS[3]))
    for ax, (title, frame, color) in zip(axes, parts, strict=True):
        frame = frame.dropna(subset=["nll", "count"]).sort_values("nll") if len(frame) else frame
        total = int(frame["count"].sum()) if len(frame) else 0
        if total:
            centres = frame["nll"].astype(float).to_numpy()
            steps = [b - a for a, b in zip(centres, centres[1:], strict=False) if b > a]
            ax.bar(centres, frame["count"], width=0.9 * (min(steps) if steps else 0.1), color=color)
        else:
            ax.text(0.5, 0.5, "none scored", ha="center", va="center", transform=ax.transAxes,
                    color="#6b7280")
        if nll.threshold is not None:
            ax.axvline(nll.threshold, color="#dc2626", linestyle="--", linewidth=1.2,
                       label=f"threshold {nll.threshold:.3g}")
            ax.legend(fontsize=8)
        ax.set_ylabel("count")
        ax.set_title(f"{title}: {total}", fontsize=10)
    axes[-1].set_xlabel("mean token NLL under the starting checkpoint")
    fig.suptitle("distribution-shift filter: corrections at or left of the threshold are kept", fontsize=10)
    return fig


def plot_similarity_tail(rounds: pd.DataFrame, threshold: float) -> Figure:
    """Recursive synthesis's similarity tail: per round, the share of the pool whose nearest
    neighbour is more similar than ``threshold``, one line per parent sampler (``rounds``: columns
    ``round``, ``sampler``, ``tail_share``; the grow stage's ``grow_similarity.tsv`` or the rounds
    benchmark's figures)."""
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.subplots()
    if rounds.empty:
        _empty(ax, "no rounds (synthesis=base)")
        return fig
    for i, (sampler, frame) in enumerate(rounds.sort_values("round").groupby("sampler", sort=True)):
        ax.plot(frame["round"], frame["tail_share"], marker="o", color=COLORS[i % len(COLORS)], label=sampler)
    ax.set_xlabel("round")
    ax.set_ylabel(f"share with a neighbour above {threshold:g}")
    ax.set_ylim(0, 1)
    ax.legend(title="parent sampler", fontsize=8)
    ax.set_title("recursive synthesis: the similarity tail", fontsize=10)
    return fig


# ----------------------------------------------------------------------------- one task

def accepted_ids(path: Path | str) -> list[str]:
    """Rollout ids of the accepted trajectories (none when the table is empty or missing)."""
    if not Path(path).exists():
        return []
    return _column(path, "rollout_id")


def _column(path: Path | str, column: str) -> list:
    handle = open_table(path, schemas.TRAJECTORIES)
    return [v for batch in handle.iter_batches(columns=[column]) for v in batch.column(0).to_pylist()]


def example_task(data: Artifacts) -> str | None:
    """A task worth drawing: the task of the first accepted trajectory, else the first admitted
    ``rft`` task, else the first ``rft`` task, else the first task (None when there are none)."""
    accepted = accepted_ids(data.paths.accepted_table)
    if accepted:
        table = pq.read_table(data.paths.accepted_table, columns=["rollout_id", "task_id"])
        by_id = dict(zip(*(table.column(c).to_pylist() for c in ("rollout_id", "task_id")), strict=True))
        return by_id[min(accepted)]
    tasks = sorted(data.task_rows(), key=lambda r: r["task_id"])
    for keep in (lambda r: r["pool"] == "rft" and r["admitted"], lambda r: r["pool"] == "rft",
                 lambda r: True):
        chosen = [r["task_id"] for r in tasks if keep(r)]
        if chosen:
            return chosen[0]
    return None


def graph_png(graph: CompletionGraph) -> bytes:
    """The completion graph drawn by :func:`interlock.analysis.draw.draw_graph`, as PNG bytes."""
    with tempfile.TemporaryDirectory() as folder:
        return draw_graph(graph, Path(folder) / "graph.png").read_bytes()


# ----------------------------------------------------------------------------- two trajectories

def read_verdicts(*paths: Path | str) -> pd.DataFrame:
    """Per-criterion verdict tables (:data:`~interlock.core.schemas.VERDICTS`) as one DataFrame."""
    frames = []
    for path in paths:
        open_table(path, schemas.VERDICTS)  # schema check, and a located error for a bad file
        frames.append(pq.read_table(path, schema=schemas.VERDICTS).to_pandas())
    columns = list(schemas.VERDICTS.names)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns))[columns]


@dataclass(frozen=True)
class Pair:
    """Two rollouts to compare: an accepted one (left) against a rejected one (right), or, when
    nothing was accepted, the rollouts with the most and the fewest passed criteria."""

    left: str
    right: str
    left_label: str
    right_label: str
    note: str
    accepted: bool


def passed_counts(verdicts: pd.DataFrame, judge: str) -> pd.DataFrame:
    """Per rollout of ``judge``'s verdicts: its task, criteria passed and judged."""
    own = verdicts[verdicts["judge"] == judge]
    counts = own.groupby("rollout_id", sort=True).agg(task_id=("task_id", "first"),
                                                       passed=("passed", "sum"), criteria=("passed", "size"))
    return counts.astype({"passed": int, "criteria": int})


def pick_pair(verdicts: pd.DataFrame, accepted: Sequence[str], judge: str) -> Pair | None:
    """Which two rollouts to show side by side (deterministic; None with fewer than two).

    With accepted trajectories: an accepted one of a task that also has a rejected rollout where
    there is such a task, against that task's rejected rollout with the most passed criteria (a
    near miss); otherwise against the rejected rollout with the most passed criteria of any task.
    With nothing accepted: the rollout with the most passed criteria against the one with the
    fewest (ties broken by rollout id)."""
    counts = passed_counts(verdicts, judge)
    if len(counts) < 2:
        return None
    kept = set(accepted) & set(counts.index)
    if kept:
        rejected = counts[~counts.index.isin(kept)]
        if rejected.empty:
            ordered = sorted(kept)
            return Pair(ordered[0], ordered[1], "accepted", "accepted",
                        "every rollout was accepted: two accepted rollouts are shown", True)
        tasks = set(rejected["task_id"])
        same = sorted(r for r in kept if counts.loc[r, "task_id"] in tasks)
        left = same[0] if same else sorted(kept)[0]
        task = counts.loc[left, "task_id"]
        pool = rejected[rejected["task_id"] == task] if same else rejected
        right = _most_passed(pool)
        note = ("an accepted and a rejected rollout of the same task" if same else
                "no task has both an accepted and a rejected rollout: the rejected rollout with the "
                "most passed criteria, of another task")
        return Pair(left, right, "accepted", "rejected", f"{note} ({judge} judge)", True)
    best = _most_passed(counts)
    worst = _fewest_passed(counts.drop(index=best))
    return Pair(best, worst, "rejected: most criteria passed", "rejected: fewest criteria passed",
                f"nothing was accepted under the {judge} judge, so no accepted trajectory can be shown: "
                "these are the rollouts with the most and the fewest passed criteria", False)


def _most_passed(counts: pd.DataFrame) -> str:
    return counts.assign(rid=counts.index).sort_values(["passed", "rid"], ascending=[False, True]).index[0]


def _fewest_passed(counts: pd.DataFrame) -> str:
    return counts.assign(rid=counts.index).sort_values(["passed", "rid"], ascending=[True, False]).index[0]


def read_trajectories(path: Path | str, rollout_ids: Sequence[str]) -> dict[str, Trajectory]:
    """The named rollouts only (a filter pushed down into Parquet)."""
    open_table(path, schemas.TRAJECTORIES)
    table = pq.read_table(path, schema=schemas.TRAJECTORIES,
                          filters=[("rollout_id", "in", list(rollout_ids))])
    found = {row["rollout_id"]: Trajectory.from_row(row, str(path)) for row in table.to_pylist()}
    missing = [r for r in rollout_ids if r not in found]
    if missing:
        raise MissingArtifacts(f"rollout {missing[0]!r} is not in {path}", file=str(path))
    return found


def verdict_frame(rollout_id: str, verdicts: pd.DataFrame, pack: TaskPack) -> pd.DataFrame:
    """One rollout's verdicts per rubric criterion: kind, mandatory, a column per judge (in the
    order the verdicts list them) and the first judge's evidence."""
    own = verdicts[verdicts["rollout_id"] == rollout_id]
    judges = list(dict.fromkeys(own["judge"]))
    rows = []
    for c in pack.rubric:
        row = {"criterion": c.criterion_id, "kind": c.kind, "mandatory": "yes" if c.mandatory else "no"}
        for judge in judges:
            hit = own[(own["judge"] == judge) & (own["criterion_id"] == c.criterion_id)]
            row[judge] = ("pass" if bool(hit["passed"].iloc[0]) else "FAIL") if len(hit) else "no verdict"
        first = own[(own["judge"] == judges[0]) & (own["criterion_id"] == c.criterion_id)] if judges else own
        row["evidence"] = first["evidence"].iloc[0] if len(first) else ""
        rows.append(row)
    return pd.DataFrame(rows).set_index("criterion") if rows else pd.DataFrame()


def side_by_side(pair: Pair, trajectories: Mapping[str, Trajectory], verdicts: pd.DataFrame,
                 pack: Callable[[str], TaskPack], transcript_chars: int = 3000) -> str:
    """HTML: the two rollouts in two columns, each with its counts, its per-criterion verdicts
    and its (clipped) transcript."""
    cells = []
    for rollout_id, label in ((pair.left, pair.left_label), (pair.right, pair.right_label)):
        t = trajectories[rollout_id]
        frame = verdict_frame(rollout_id, verdicts, pack(t.task_id))
        transcript = render_transcript(t.messages, max_chars=transcript_chars)
        cells.append(
            f"<h4>{html.escape(label)}</h4>"
            f"<p><code>{html.escape(rollout_id)}</code><br>task <code>{html.escape(t.task_id)}</code>, "
            f"{t.turns} turns, {t.tool_calls} tool calls, ended: {html.escape(t.finish_reason)}</p>"
            f"{frame.to_html(escape=True)}"
            f"<pre style='white-space: pre-wrap; max-height: 30em; overflow: auto; font-size: 80%'>"
            f"{html.escape(transcript)}</pre>")
    return (f"<p>{html.escape(pair.note)}</p><table><tr>"
            + "".join(f"<td style='vertical-align: top; text-align: left; width: 50%'>{c}</td>"
                      for c in cells)
            + "</tr></table>")


# ----------------------------------------------------------------------------- training

def plot_losses(curves: Mapping[str, pd.DataFrame]) -> Figure:
    """Training loss per optimizer step, one line per fine-tuning stage (a stage that took no
    step, e.g. RFT with nothing accepted, is listed in the legend as such)."""
    fig = Figure(figsize=(7, 3.4), layout="constrained")
    ax = fig.add_subplot()
    for i, (name, curve) in enumerate(curves.items()):
        color = COLORS[(i + 1) % len(COLORS)]
        if curve.empty:
            ax.plot([], [], color=color, linestyle=":", label=f"{name} (no training steps)")
        else:
            ax.plot(curve["step"], curve["loss"], marker="o", markersize=3, label=name, color=color)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("training loss")
    if curves:
        ax.legend(fontsize=8)
    return fig
