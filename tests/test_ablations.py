"""The ablations as DVC experiments at the smoke scale: a breadth sweep and a judge sweep run
through the real DVC queue, then `interlock collect` compares them; how experiments are read
through DVC's API (which it lists, their files at their commits, per-episode results from the
cache or a DVC remote), on a one-stage pipeline of made-up results run as real DVC experiments;
and, on experiments made up here (no pipeline run), the intervention axis and every comparison's
minimum detectable effect."""

from __future__ import annotations

import dataclasses
import json
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from dvc.api import exp_show

from interlock.analysis import ablations, cli
from interlock.analysis.ablations import (
    Experiment,
    ablation_frame,
    axis_comparisons,
    comparison_table,
    plot_breadth,
    plot_interventions,
    plot_judges,
    plot_rl,
    plot_synthesis,
    read_experiments,
)
from interlock.core.errors import InterlockError
from interlock.evaluation.metrics import Resampling, paired_delta, seed_noise, summarize_pool

from helpers.repo import BIN, command_timeout, dvc
from helpers.repo import run as _run

REPO = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]


@pytest.fixture(scope="module")
def swept(smoke_repo, tmp_path_factory) -> Iterator[Path]:
    """A copy of the smoke run, committed, with both sweeps queued and run as the README says:
    `interlock run-queue` (DVC's queue worker, started again where it stops early)."""
    repo = tmp_path_factory.mktemp("sweeps") / "repo"
    shutil.copytree(smoke_repo, repo, ignore=shutil.ignore_patterns("wandb"))
    _run([*GIT, "add", "-A"], repo)
    _run([*GIT, "commit", "-qm", "the smoke run"], repo)
    # `dvc exp run -S` composes conf/ from its defaults plus the overrides: the experiment is one of them.
    # The breadth sweep uses the text judge: the agent judge accepts the smoke scale's noisy
    # solver in only 3 of its 4 domains, too few for d4 (an error that says so; see test_sampling).
    # The judge sweep holds the trajectory count with a breadth, as the README's command does: 2
    # trajectories from 2 domains (the agent judge's first two domains hold 3 accepted at the smoke
    # scale).
    # Recursive synthesis as the smoke run has it, so the grown pool and the rollouts are the smoke
    # run's (unchanged, DVC skips them): a sweep starts after the rollouts. Two RFT seeds, as the smoke run
    # trains (the smoke experiment's own default is three): enough for every comparison's seed noise.
    sweeps = (("domains.count=2,4", ("judge=text", "synthesis=rst", "train.seeds=2"), "breadth"),
              ("judge=agent,text", ("domains.count=2", "scale.breadth_trajectories=2", "synthesis=rst",
                                    "train.seeds=2"), "judge"))
    for sweep, fixed, group in sweeps:  # each sweep queues one experiment per value
        dvc("exp", "run", "--queue", "-S", "experiment=smoke", "-S", sweep,
            *(arg for setting in fixed for arg in ("-S", setting)), "-S", f"tracking.group={group}",
            cwd=repo, tracked=True)
    try:  # the experiments' W&B runs are read (the last test)
        ran = _run([str(BIN / "interlock"), "run-queue"], repo, tracked=True)
        assert "4 experiments succeeded" in ran, ran
        yield repo
    finally:  # a worker left behind would keep running experiments after the tests
        dvc("queue", "stop", "--kill", cwd=repo, check=False)


def test_a_breadth_sweep_holds_the_trajectory_count_and_reruns_only_what_follows_sampling(swept) -> None:
    experiments = read_experiments(swept, "breadth")
    assert sorted(e.breadth for e in experiments) == [2, 4]
    counts = {e.breadth: e.metrics["sample"]["trajectories"] for e in experiments}
    assert counts[2] == counts[4] > 0  # only breadth changes
    assert {e.breadth: e.metrics["sample"]["domains"] for e in experiments} == {2: 2, 4: 4}
    for experiment in experiments:
        log = dvc("queue", "logs", experiment.name, cwd=swept)
        # accept (and intervene, which follows it) too where the judge differs from the baseline's
        # (in every such experiment: DVC keeps no run cache of a stage with an uncached output that
        # is no metric or plot, as each stage's timing file is)
        ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
        assert {"sample", "train", "evaluate"} <= ran <= {"accept", "intervene", "sample", "train",
                                                           "evaluate"}, log


def test_a_judge_sweep_trains_each_judges_accepted_set(swept) -> None:
    experiments = {e.judge: e for e in read_experiments(swept, "judge")}
    assert set(experiments) == {"agent", "text"}
    accepted = {judge: e.metrics["accept"]["accepted"] for judge, e in experiments.items()}
    # the credulous text judge accepts what the executable agent judge rejects
    assert accepted["text"] > accepted["agent"]
    # matched settings: each judge's accepted set sampled to the same count, trained alike
    sampled = {judge: e.metrics["sample"]["trajectories"] for judge, e in experiments.items()}
    assert sampled["agent"] == sampled["text"] == experiments["agent"].params["scale"]["breadth_trajectories"]
    for key in ("examples", "steps", "seeds"):
        assert experiments["agent"].metrics["train"][key] == experiments["text"].metrics["train"][key], key


def test_every_experiment_of_a_sweep_logs_its_wandb_runs_into_the_repository(swept) -> None:
    """Each experiment's stage runs, written offline from DVC's temporary workspaces, land in the
    repository's wandb/ folder (the copy starts without one), each a run folder with its ``.wandb``
    log for ``wandb sync``: at least sample, train and evaluate per experiment. Their names and
    group are not read back from disk (offline, only W&B's private log holds them); that a run's
    group is the sweep's ``tracking.group`` and its name the experiment's is
    tests/test_tracking.py's, on the live run."""
    experiments = read_experiments(swept)
    assert {e.group for e in experiments} == {"breadth", "judge"}
    folders = sorted((swept / "wandb").glob("offline-run-*"))
    assert len(folders) >= 3 * len(experiments) == 3 * 4
    for folder in folders:
        assert (folder / f"run-{folder.name.rsplit('-', 1)[-1]}.wandb").stat().st_size > 0


def test_collect_writes_the_table_the_comparisons_and_the_pictures(swept, tmp_path) -> None:
    out = tmp_path / "report"
    printed = _run([str(BIN / "interlock"), "collect", "--repo", str(swept), "--group", "breadth",
                    "-o", str(out)], swept)
    assert "task pass rate on every evaluated pool, 2 experiments" in printed
    table = pd.read_csv(out / "ablations.tsv", sep="\t")
    frame = ablation_frame(read_experiments(swept, "breadth"))
    assert len(table) == len(frame) and set(table["experiment"]) == set(frame["experiment"])
    rft = table[(table["model"] == "rft") & (table["metric"] == "pass_rate") & (table["pool"] == "benchmark")]
    assert sorted(rft["breadth"]) == [2, 4] and set(rft["seeds"]) == {2}
    assert (rft["low"] <= rft["value"]).all() and (rft["value"] <= rft["high"]).all()
    assert rft["judge_seconds_per_rollout"].notna().all()
    for name in ("breadth.png", "judges.png", "interventions.png", "synthesis.png", "rl.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every comparison states its MDE: d4 against d2, paired over the per-episode results that
    # `dvc exp run` left in the DVC cache
    assert "each ablation's comparison" in printed and "MDE" in printed
    assert rft["delta_mde"].notna().all() and set(table["intervention"]) == {"none"}
    compared = pd.read_csv(out / "comparisons.tsv", sep="\t")
    assert set(compared["pool"]) == {"benchmark", "indist"}  # every evaluated pool is compared
    d4 = compared[(compared["model"] == "rft") & (compared["metric"] == "pass_rate")
                  & (compared["pool"] == "benchmark")]
    assert list(zip(d4["axis"], d4["level"], d4["reference_level"], strict=True)) == [("breadth", 4, 2)]
    assert d4["paired"].all() and d4["mde"].notna().all() and (d4["low"] <= d4["high"]).all()
    experiments = read_experiments(swept)
    everything = ablation_frame(experiments)
    assert everything["experiment"].nunique() == 4
    assert len(plot_breadth(everything).axes) == 4 and len(plot_judges(everything).axes) == 1
    comparisons = axis_comparisons(experiments)
    assert set(comparisons["axis"]) == {"breadth", "judge"} and comparisons["paired"].all()
    assert len(plot_interventions(everything, comparisons=comparisons).axes) == 1


def test_collect_without_experiments_says_what_to_run(smoke_repo, tmp_path) -> None:
    done = _run([str(BIN / "interlock"), "collect", "--group", "no-such-sweep", "-o", str(tmp_path)],
                smoke_repo, check=False)
    assert "no finished experiment in group 'no-such-sweep'" in done


def test_the_notebook_shows_the_ablations(swept, venv_kernel, tmp_path, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("INTERLOCK_REPO", str(swept))
    notebook = nbformat.read(REPO / "notebooks" / "results.ipynb", as_version=4)
    NotebookClient(notebook, timeout=command_timeout(), kernel_name=venv_kernel,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cell = next(c for c in notebook.cells if c.get("id") == "ablations")
    assert not [o for o in cell.outputs if o["output_type"] == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    assert html.count("<tr>") >= 4 + 1  # 4 experiments x their models, and the header
    assert sum("image/png" in o.get("data", {}) for o in cell.outputs) == 3  # breadth, judges, intervention
    assert "difference [interval], MDE" in html and "MDE" in html


# ----------------------------------------------------------------------------- made-up experiments

SEED, RESAMPLES = 7, 300


def _results(model: str, passed: list[bool], seed: int | None = None, pool: str = "benchmark") -> list[dict]:
    return [{"model": model, "seed": seed, "pool": pool, "rollout_id": f"{model}-{seed}-t{i:02d}",
             "task_id": f"t{i:02d}", "domain_id": f"d{i % 4}", "attempt": 0, "passed": p,
             "score": 0.5 + 0.5 * p, "criterion_pass_rate": 0.5 + 0.5 * p, "criteria": 4, "primary_passed": p,
             "completion_gap": False, "turns": 4, "tool_calls": 6, "finish_reason": "submitted"}
            for i, p in enumerate(passed)]


def _experiment(name: str, rates: tuple[float, float], *, group: str = "intervention",
                intervention: str = "none", breadth: int | None = 4, judge: str = "agent",
                cached: bool = True, tasks: int = 40, synthesis: str | None = None,
                pools: tuple[str, ...] = ("benchmark",)) -> Experiment:
    """An experiment with a failing base and an rft of two seeds passing at ``rates`` on each pool."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    evaluate: dict = {"models": ["base", "rft"], "reference": "base", "pools": {}}
    results = []
    for pool in pools:
        rft = [row for k, rate in enumerate(rates)
               for row in _results("rft", list(rng.random(tasks) < rate), k, pool)]
        by_model = {"base": _results("base", [False] * tasks, pool=pool), "rft": rft}
        evaluate["pools"][pool] = summarize_pool(by_model, pool=pool, seed=SEED, resamples=RESAMPLES,
                                                 confidence=0.95)
        results += [r for rows in by_model.values() for r in rows]
    params = {"seed": SEED, "eval": {"bootstrap": RESAMPLES, "confidence": 0.95},
              "tracking": {"group": group}, "domains": {"count": breadth}, "judge": {"name": judge},
              "intervention": {"name": intervention}}
    if synthesis is not None:  # older experiments have no synthesis option: base
        params["synthesis"] = {"name": synthesis}
    return Experiment(name, "0" * 40, params, {"evaluate": evaluate, "train": {"seeds": 2}},
                      results if cached else None)


@pytest.fixture(scope="module")
def made_up() -> list[Experiment]:
    """An intervention sweep (none, rti), a breadth sweep (d2, d4, d8), a judge sweep (agent, text)
    and a synthesis sweep (base, rst)."""
    return [_experiment("no-rti", (0.2, 0.25)), _experiment("rti", (0.45, 0.5), intervention="rti"),
            *(_experiment(f"b{b}", (0.3, 0.3), group="breadth", breadth=b, judge="text") for b in (8, 2, 4)),
            _experiment("agent", (0.3, 0.35), group="judge", breadth=2),
            _experiment("text", (0.3, 0.3), group="judge", breadth=2, judge="text", cached=False),
            _experiment("rst", (0.4, 0.35), group="synthesis", synthesis="rst"),
            _experiment("base", (0.3, 0.3), group="synthesis", synthesis="base")]


def test_the_intervention_axis_is_read_and_an_older_experiment_had_none(made_up) -> None:
    assert [e.intervention for e in made_up[:2]] == ["none", "rti"]
    older = {k: v for k, v in made_up[0].params.items() if k != "intervention"}
    assert Experiment("old", "0" * 40, older, made_up[0].metrics).intervention == "none"
    assert [e.synthesis for e in made_up] == ["base"] * 7 + ["rst", "base"]
    frame = ablation_frame(made_up)
    assert list(frame.columns) == ablations.COLUMNS
    rows = frame[(frame["metric"] == "pass_rate") & (frame["pool"] == "benchmark")]
    assert dict(zip(rows["experiment"], rows["intervention"], strict=True))["rti"] == "rti"
    # every delta against base states its MDE; the reference, compared with nothing, has none
    assert rows[rows["model"] == "rft"]["delta_mde"].gt(0).all()
    assert rows[rows["model"] == "base"]["delta_mde"].isna().all()


def test_each_ablation_compares_against_its_reference_level_with_a_paired_mde(made_up) -> None:
    comparisons = axis_comparisons(made_up)
    assert list(comparisons.columns) == ablations.COMPARISON_COLUMNS
    rft = comparisons[(comparisons["model"] == "rft") & (comparisons["metric"] == "pass_rate")]
    pairs = {(r.axis, r.experiment, r.reference_experiment) for r in rft.itertuples()}
    assert pairs == {("intervention", "rti", "no-rti"), ("breadth", "b4", "b2"), ("breadth", "b8", "b2"),
                     ("judge", "text", "agent"), ("synthesis", "rst", "base")}
    rti = rft[rft["axis"] == "intervention"].iloc[0]
    assert rti["paired"] and rti["level"] == "rti" and rti["reference_level"] == "none"
    assert rti["difference"] == pytest.approx(rti["value"] - rti["reference_value"], abs=1e-6)
    assert rti["low"] <= rti["difference"] <= rti["high"] and rti["mde"] > 0
    # the MDE is the paired bootstrap's, over the two experiments' per-task values, within the 4 domains
    theirs, ours = ([[float(r["passed"]) for r in e.results if r["model"] == "rft" and r["seed"] == k]
                     for k in (0, 1)] for e in made_up[:2])
    draws = [seed_noise(RESAMPLES, SEED, "benchmark", f"{name}/rft") for name in ("rti", "no-rti")]
    tasks = Resampling.by_domain([f"d{i % 4}" for i in range(40)]).weights(RESAMPLES, SEED, "benchmark")
    expected = paired_delta(np.array(ours), np.array(theirs), tasks, 0.95, *draws)
    assert rti["mde"] == pytest.approx(expected["mde"]) and rti["low"] == pytest.approx(expected["low"])
    # identical base checkpoints: no difference, and nothing to detect it with
    base = comparisons[(comparisons["model"] == "base") & (comparisons["axis"] == "intervention")]
    assert (base["difference"] == 0).all() and (base["mde"] == 0).all()
    # an experiment whose per-episode results are not in the DVC cache: the point difference only
    text = rft[rft["axis"] == "judge"].iloc[0]
    assert not text["paired"] and np.isnan(text["mde"]) and not np.isnan(text["difference"])
    words = comparison_table(comparisons, models=["rft"])
    said = dict(zip(words["experiment"], words["task pass rate difference [interval], MDE"], strict=True))
    assert f"MDE {rti['mde']:.3f}" in said["rti"] and said["rti"].endswith("detected")
    assert "no per-task results in the DVC cache" in said["text"]
    assert set(words["level"]) >= {"rti", "d4", "d8", "text"}


def test_the_pictures_state_each_comparisons_mde(made_up) -> None:
    frame, comparisons = ablation_frame(made_up), axis_comparisons(made_up)
    fig = plot_interventions(frame, comparisons=comparisons)
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.texts]
    rft = comparisons.query("axis == 'intervention' and model == 'rft' and metric == 'pass_rate'")
    mde = rft["mde"].iloc[0]
    assert f"MDE\n{mde:.2f}" in texts
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["no intervention", "rti"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "rft"]
    breadth = plot_breadth(frame, comparisons=comparisons)
    # d4 and d8 on each metric but the completion gap, which is 0 throughout (an MDE of 0 is not drawn)
    assert sum(t.get_text().startswith("MDE") for a in breadth.axes for t in a.texts) == 2 * 3
    assert "fewest domains" in breadth.get_supxlabel()
    # only the sweep that varies breadth
    assert [t.get_text() for t in breadth.axes[0].get_legend().get_texts()] == ["text judge"]
    judges = plot_judges(frame, comparisons=comparisons)
    assert judges.axes[0].get_legend() is not None  # text's MDE unknown (not cached): no label, no error
    # without an intervention sweep the picture says so
    alone = plot_interventions(ablation_frame(made_up[2:]))
    assert "no intervention sweep" in " ".join(t.get_text() for t in alone.axes[0].texts)
    # the synthesis sweep: the base pool first, rst beside it with its MDE
    (ax,) = plot_synthesis(frame, comparisons=comparisons).axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base pool", "rst"]
    rst = comparisons.query("axis == 'synthesis' and model == 'rft' and metric == 'pass_rate'")["mde"].iloc[0]
    assert f"MDE\n{rst:.2f}" in [t.get_text() for t in ax.texts]
    assert "no synthesis sweep (synthesis=base,rst)" in " ".join(
        t.get_text() for t in plot_synthesis(ablation_frame(made_up[:2])).axes[0].texts)


def test_the_rl_picture_draws_each_rl_experiments_curves_labelled_by_who_played(made_up) -> None:
    steps = {"vllm": ((1, 0.25, 0.25), (2, 0.5, 0.5), (3, 0.75, 0.75)),
             "transformers": ((1, 0.0, 0.0), (2, 0.5, 0.25))}
    rl = [dataclasses.replace(made_up[0], name=f"grpo-{who}", rl_steps=steps[who],
                              params={**made_up[0].params, "train": {"rl": {"generation": who}}},
                              metrics={**made_up[0].metrics, "rl": {"seconds_per_step": seconds}})
          for who, seconds in (("transformers", 180.1), ("vllm", 133.9))]
    assert [e.generation for e in rl] == ["transformers", "vllm"] and made_up[0].generation is None
    reward, passed = plot_rl([*made_up, *rl]).axes  # the experiments that trained no RL policy: no line
    assert [t.get_text() for t in reward.get_legend().get_texts()] == [
        "grpo-transformers (transformers, 180 s/step)", "grpo-vllm (vllm, 134 s/step)"]
    assert [list(line.get_xdata()) for line in reward.lines] == [[1, 2], [1, 2, 3]]
    assert [list(line.get_ydata()) for line in passed.lines] == [[0.0, 0.25], [0.25, 0.5, 0.75]]
    (none,) = [t.get_text() for t in plot_rl(made_up).axes[0].texts]
    assert none == "no RL experiment (dvc exp run -S train=grpo)"


def test_collect_writes_the_comparisons_with_their_mde(made_up, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(ablations, "read_experiments", lambda repo, group=None, revs=None: made_up[:2])
    assert cli.main(["collect", "--repo", str(tmp_path), "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "MDE" in printed and "rti" in printed and "no-rti (none)" in printed
    table = pd.read_csv(tmp_path / "out" / "ablations.tsv", sep="\t")
    assert "delta_mde" in table.columns and set(table["intervention"]) == {"none", "rti"}
    compared = pd.read_csv(tmp_path / "out" / "comparisons.tsv", sep="\t")
    assert set(compared["axis"]) == {"intervention"}
    assert compared.query("model == 'rft' and metric == 'pass_rate'")["mde"].gt(0).all()
    for name in ("breadth.png", "judges.png", "interventions.png", "synthesis.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_collect_prints_the_rows_of_every_evaluated_pool(tmp_path, monkeypatch, capsys) -> None:
    """Not only the benchmark's: the in-distribution pool's rows too, in both tables."""
    both = ("benchmark", "indist")
    swept = [_experiment("no-rti", (0.2, 0.25), pools=both),
             _experiment("rti", (0.45, 0.5), intervention="rti", pools=both)]
    monkeypatch.setattr(ablations, "read_experiments", lambda repo, group=None, revs=None: swept)
    assert cli.main(["collect", "--repo", str(tmp_path), "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "task pass rate on every evaluated pool, 2 experiments" in printed
    for pool in both:  # 2 experiments x 2 models, and rti against no-rti
        assert printed.count(f"│ {pool} ") == 2 * 2 + 1, printed


# ----------------------------------------------------------------------------- read through dvc.api

#: the one stage of the toy pipeline: made-up per-episode results (a base that fails, an rft that
#: passes more often the more domains), summarized as the evaluate stage summarizes them
TOY_STAGE = '''\
import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from interlock.core import schemas
from interlock.evaluation.metrics import summarize_pool

params = yaml.safe_load(Path("params.yaml").read_text())
count = params["domains"]["count"]
passed = {"base": [False] * 12, "rft": list(np.random.default_rng(count).random(12) < count / 8)}
by_model = {model: [{"model": model, "seed": 0, "pool": "benchmark", "rollout_id": f"{model}-t{i:02d}",
                     "task_id": f"t{i:02d}", "domain_id": f"d{i % 4}", "attempt": 0, "passed": bool(p),
                     "score": float(p), "criterion_pass_rate": float(p), "criteria": 4,
                     "primary_passed": bool(p), "completion_gap": False, "turns": 4, "tool_calls": 6,
                     "finish_reason": "submitted"} for i, p in enumerate(flags)]
            for model, flags in passed.items()}
summary = summarize_pool(by_model, pool="benchmark", seed=params["seed"],
                         resamples=params["eval"]["bootstrap"], confidence=params["eval"]["confidence"])
metrics, evaluation = Path(params["paths"]["metrics"]), Path(params["paths"]["evaluation"])
metrics.mkdir(exist_ok=True)
evaluation.mkdir(parents=True, exist_ok=True)
(metrics / "evaluate.json").write_text(json.dumps({"models": list(by_model), "reference": "base",
                                                   "pools": {"benchmark": summary}}))
(metrics / "sample.json").write_text(json.dumps({"trajectories": 2 * count, "domains": count}))
rows = [row for model_rows in by_model.values() for row in model_rows]
pq.write_table(pa.Table.from_pylist(rows, schema=schemas.EVAL_RESULTS), evaluation / "results.parquet")
rl = Path(params["paths"]["rl_plot"])
rl.mkdir(parents=True, exist_ok=True)
for name, share in (("reward", 16), ("pass_rate", 32)):
    lines = "".join(f"{s}\\t{s * count / share}\\n" for s in (1, 2))
    (rl / f"{name}.tsv").write_text("step\\tvalue\\n" + lines)
'''
TOY_PIPELINE = {
    "metrics": ["metrics/evaluate.json", "metrics/sample.json"],
    "stages": {"evaluate": {"cmd": "python evaluate.py", "deps": ["evaluate.py"],
                            "params": ["seed", "eval", "domains.count", "judge.name", "tracking.group"],
                            "outs": ["data/evaluation", {"metrics/evaluate.json": {"cache": False}},
                                     {"metrics/sample.json": {"cache": False}},
                                     {"metrics/plots/rl": {"cache": False}}]}},
}
TOY_PARAMS = {"seed": SEED, "eval": {"bootstrap": RESAMPLES, "confidence": 0.95},
              "paths": {"metrics": "metrics", "evaluation": "data/evaluation", "rl_plot": "metrics/plots/rl"},
              "tracking": {"group": None},
              "domains": {"count": 2}, "judge": {"name": "agent"}, "intervention": {"name": "none"}}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict[str, Path]:
    """A one-stage DVC pipeline in a real git repository with a DVC remote, its baseline run and
    committed (metrics in git, as the pipeline's are): a breadth sweep (d2, d4) and a judge
    experiment (text) run with `dvc exp run`, one more queued and never run (its commit holds the
    baseline's metrics), the sweep pushed (`dvc exp push`) to a bare git remote, and a clone of
    that remote that pulled the experiments without their data (`dvc exp pull --no-cache`)."""
    root = tmp_path_factory.mktemp("toy")
    repo, origin, clone = root / "repo", root / "origin.git", root / "clone"
    repo.mkdir()
    (repo / "evaluate.py").write_text(TOY_STAGE)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(TOY_PIPELINE, sort_keys=False))
    (repo / "params.yaml").write_text(yaml.safe_dump(TOY_PARAMS, sort_keys=False))
    _run(["git", "init", "-q"], repo)
    dvc("init", "-q", cwd=repo)
    dvc("remote", "add", "-d", "store", str(root / "store"), cwd=repo)
    _run([*GIT, "add", "-A"], repo)
    _run([*GIT, "commit", "-qm", "a one-stage pipeline"], repo)
    dvc("repro", cwd=repo)
    _run([*GIT, "add", "-A"], repo)
    _run([*GIT, "commit", "-qm", "the baseline's run"], repo)
    _run(["git", "init", "-q", "--bare", str(origin)], root)
    _run(["git", "remote", "add", "origin", str(origin)], repo)
    _run(["git", "push", "-q", "origin", "HEAD"], repo)
    for name, settings in (("d2", ("domains.count=2", "judge.name=agent", "tracking.group=breadth")),
                           ("d4", ("domains.count=4", "judge.name=agent", "tracking.group=breadth")),
                           ("text", ("domains.count=2", "judge.name=text", "tracking.group=judge"))):
        dvc("exp", "run", "-n", name, *(arg for setting in settings for arg in ("-S", setting)), cwd=repo)
    dvc("exp", "run", "--queue", "-n", "waiting", "-S", "domains.count=8", cwd=repo)
    dvc("exp", "push", "origin", "d2", "d4", cwd=repo)
    _run(["git", "clone", "-q", str(origin), str(clone)], root)
    dvc("exp", "pull", "origin", "d2", "d4", "--no-cache", cwd=clone)
    return {"repo": repo, "clone": clone, "origin": origin}


def _queued(repo: Path, name: str) -> str:
    """The commit DVC's queue holds for the experiment ``name``."""
    return next(row["rev"] for row in exp_show(repo=str(repo)) if row.get("Experiment") == name)


def _at(repo: Path, rev: str, path: str) -> str:
    return _run(["git", "show", f"{rev}:{path}"], repo, stdout_only=True)


def _empty_remote(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    dvc("remote", "modify", "--local", "store", "url", str(tmp_path / "empty"), cwd=repo)


def test_experiments_are_read_at_their_commits_as_dvc_exp_show_lists_them(toy) -> None:
    repo = toy["repo"]
    found = read_experiments(repo)
    # finished experiments of HEAD, oldest first: the queued one is left out, though its commit holds
    # metrics (the baseline's)
    queued = json.loads(_at(repo, _queued(repo, "waiting"), "metrics/evaluate.json"))
    assert queued["models"] == ["base", "rft"]
    assert [e.name for e in found] == ["d2", "d4", "text"]
    assert "waiting" in dvc("exp", "show", "--no-pager", "--csv", cwd=repo)  # though DVC lists it
    for experiment in found:
        # the files as git holds them at the experiment's commit, typed as written (not as `dvc exp show`
        # prints them)
        assert experiment.params == yaml.safe_load(_at(repo, experiment.rev, "params.yaml"))
        assert experiment.metrics == {stem: json.loads(_at(repo, experiment.rev, f"metrics/{stem}.json"))
                                      for stem in ("evaluate", "sample")}
        # the per-episode results, from the DVC cache: what the summary was computed from
        rft = [r for r in experiment.results if r["model"] == "rft"]
        summary = experiment.metrics["evaluate"]["pools"]["benchmark"]["models"]["rft"]
        assert len(experiment.results) == 2 * 12
        assert summary["pass_rate"]["value"] == pytest.approx(sum(r["passed"] for r in rft) / 12)
    # each step's reward and pass rate, as the RL stage's plot files hold them at the experiment's commit
    assert [e.rl_steps for e in found] == [((1, c / 16, c / 32), (2, 2 * c / 16, 2 * c / 32))
                                           for c in (2, 4, 2)]
    assert [(e.breadth, e.judge, e.group) for e in found] == [
        (2, "agent", "breadth"), (4, "agent", "breadth"), (2, "text", "judge")]
    assert [e.name for e in read_experiments(repo, "breadth")] == ["d2", "d4"]
    assert [e.name for e in read_experiments(repo, "judge")] == ["text"]
    assert read_experiments(repo, "no-such-group") == []
    comparisons = axis_comparisons(found)  # within a sweep only: text is another sweep's
    assert set(zip(comparisons["axis"], comparisons["experiment"], comparisons["reference_experiment"],
                   strict=True)) == {("breadth", "d4", "d2")}
    assert comparisons["paired"].all()


def test_a_clone_reads_the_per_episode_results_from_the_dvc_remote(toy) -> None:
    """A clone that pulled the experiments without their data has no DVC cache: their results come
    from the remote, as they are in the repository that pushed them."""
    assert not (toy["clone"] / ".dvc" / "cache").exists()
    cloned = read_experiments(toy["clone"])
    assert [e.name for e in cloned] == ["d2", "d4"]  # only the pushed ones
    pushed = {e.name: e for e in read_experiments(toy["repo"], "breadth")}
    for experiment in cloned:
        assert experiment.results is not None and experiment.results == pushed[experiment.name].results
        assert experiment.metrics == pushed[experiment.name].metrics


def test_results_in_neither_the_cache_nor_the_remote_read_as_none(toy, tmp_path) -> None:
    """Without the per-episode results (the cache cleared, the remote empty), the experiments still
    read from git, and their comparison is the point difference alone."""
    repo = tmp_path / "repo"
    shutil.copytree(toy["repo"], repo, symlinks=True)
    shutil.rmtree(repo / ".dvc" / "cache")
    _empty_remote(repo, tmp_path)
    found = read_experiments(repo, "breadth")
    assert [e.name for e in found] == ["d2", "d4"] and all(e.results is None for e in found)
    assert found[0].metrics == read_experiments(toy["repo"], "breadth")[0].metrics
    comparisons = axis_comparisons(found)
    assert len(comparisons) and not comparisons["paired"].any() and comparisons["mde"].isna().all()
    said = comparison_table(comparisons, models=["rft"])["task pass rate difference [interval], MDE"]
    assert "no per-task results in the DVC cache" in said.iloc[0]


def test_collect_reads_the_experiments_of_another_baseline(toy, tmp_path, capsys) -> None:
    """After a new commit the sweep's experiments are no longer HEAD's: `--rev` names the commit
    they started from."""
    repo = tmp_path / "repo"
    shutil.copytree(toy["repo"], repo, symlinks=True)
    baseline = _run(["git", "rev-parse", "HEAD"], repo, stdout_only=True).strip()
    _run([*GIT, "commit", "-qm", "later", "--allow-empty"], repo)
    assert read_experiments(repo) == []
    done = _run([str(BIN / "interlock"), "collect", "--repo", str(repo), "-o", str(tmp_path / "none")], repo,
                check=False)
    assert "no finished experiment under HEAD" in done and "--rev" in done
    out = tmp_path / "report"
    args = ["collect", "--repo", str(repo), "--rev", baseline, "--group", "breadth", "-o", str(out)]
    assert cli.main(args) == 0
    assert "task pass rate on every evaluated pool, 2 experiments" in capsys.readouterr().out
    assert set(pd.read_csv(out / "ablations.tsv", sep="\t")["experiment"]) == {"d2", "d4"}


def test_a_folder_that_is_no_dvc_repository_is_refused(tmp_path) -> None:
    with pytest.raises(InterlockError, match="not the root of a DVC repository"):
        read_experiments(tmp_path)
