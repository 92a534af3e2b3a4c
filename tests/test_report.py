"""The results notebook's readers and plots (interlock.analysis.report), on small hand-made tables."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from interlock.analysis import report
from interlock.analysis.artifacts import Artifacts
from interlock.core import schemas
from interlock.core.chat import Message, ToolCall
from interlock.core.config import load_params
from interlock.core.io import write_table, write_tsv
from interlock.core.paths import MissingArtifacts
from interlock.evaluation.metrics import detectability, summarize_pool
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.graph import graph_rows

from helpers.repo import REPO

# ----------------------------------------------------------------------------- where


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "params.yaml").write_text("seed: 1\n")
    (path / "dvc.yaml").write_text("stages: {}\n")
    return path


def test_the_repository_is_found_from_a_subfolder_and_the_variable_wins(tmp_path):
    repo = _repo(tmp_path / "repo")
    (repo / "notebooks").mkdir()
    assert report.find_repository(repo / "notebooks", env={}) == repo.resolve()
    assert report.find_repository(repo, env={}) == repo.resolve()
    other = _repo(tmp_path / "other")
    assert report.find_repository(repo / "notebooks", env={"INTERLOCK_REPO": str(other)}) == other.resolve()


def test_no_repository_says_how_to_point_at_one(tmp_path):
    with pytest.raises(MissingArtifacts, match="INTERLOCK_REPO"):
        report.find_repository(tmp_path, env={})
    with pytest.raises(MissingArtifacts, match="no params.yaml"):
        report.find_repository(tmp_path, env={"INTERLOCK_REPO": str(tmp_path)})


def test_a_missing_metrics_file_says_to_run_the_pipeline(tmp_path):
    results = report.Results(tmp_path, params=load_params(REPO / "params.yaml"))
    with pytest.raises(MissingArtifacts, match="dvc repro"):
        results.metrics("evaluate")
    with pytest.raises(MissingArtifacts, match="dvc repro"):
        report.read_plot(results.paths.evaluate_models_plot)
    with pytest.raises(MissingArtifacts, match="dvc repro"):
        results.loss_curves()


def test_plots_tsv_reads_back_with_missing_values_and_without_rows(tmp_path):
    write_tsv(tmp_path / "a.tsv", [{"model": "base", "value": None}, {"model": "rft", "value": 0.5}],
              ["model", "value"])
    frame = report.read_plot(tmp_path / "a.tsv")
    assert frame["model"].tolist() == ["base", "rft"]
    assert pd.isna(frame["value"][0]) and frame["value"][1] == 0.5
    write_tsv(tmp_path / "b.tsv", [], ["step", "loss"])
    empty = report.read_plot(tmp_path / "b.tsv")
    assert empty.empty and list(empty.columns) == ["step", "loss"]


# ----------------------------------------------------------------------------- comparison


def _result(model: str, task: int, passed: bool, score: float) -> dict:
    return {"model": model, "pool": "benchmark", "rollout_id": f"{model}-t{task}", "task_id": f"t{task}",
            "domain_id": f"d{task % 2}", "attempt": 0, "passed": passed, "score": score,
            "criterion_pass_rate": score, "criteria": 4, "primary_passed": passed,
            "completion_gap": False, "turns": 3 + task, "tool_calls": 5, "finish_reason": "submitted"}


@pytest.fixture
def evaluate() -> dict:
    """An evaluate.json: a benchmark pool where rft passes two more tasks, and a dev pool without tasks."""
    benchmark = {"base": [_result("base", t, False, 0.25) for t in range(4)],
                 "rft": [_result("rft", t, t < 2, 1.0 if t < 2 else 0.25) for t in range(4)]}
    evaluate: dict = {"models": ["base", "rft"], "reference": "base", "pools": {}, "summary": {}}
    for pool, rows in (("benchmark", benchmark), ("dev", {"base": [], "rft": []})):
        _add_pool(evaluate, pool, rows)
    return evaluate


def _add_pool(evaluate: dict, pool: str, rows: dict[str, list[dict]]) -> None:
    """A pool's metrics and its detectability, as the evaluate stage writes them (one attempt)."""
    evaluate["pools"][pool] = summarize_pool(rows, pool=pool, seed=1, resamples=200, confidence=0.95)
    evaluate["summary"][pool] = detectability(rows, evaluate["pools"][pool], attempts=1)


def test_the_comparison_table_has_intervals_deltas_and_a_reference(evaluate):
    table = report.comparison_table(evaluate)
    assert list(table.index) == [("benchmark", "base"), ("benchmark", "rft"), ("dev", "base"), ("dev", "rft")]
    rft = table.loc[("benchmark", "rft")]
    value = evaluate["pools"]["benchmark"]["models"]["rft"]["pass_rate"]
    assert rft["task pass rate"] == f"{value['value']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"
    assert rft["task pass rate"].startswith("0.500 [")
    assert rft["Δ task pass rate vs base"].startswith("+0.500 [+")
    assert table.loc[("benchmark", "base"), "Δ task pass rate vs base"] == "ref"
    assert rft["tasks"] == 4 and rft["episodes"] == 4 and rft[report.CONTEXT_FAILURES] == 0
    for name in report.TABLE_METRICS.values():
        assert name in table.columns and f"Δ {name} vs base" in table.columns


def test_a_pool_without_tasks_reads_as_not_available(evaluate):
    table = report.comparison_table(evaluate)
    assert table.loc[("dev", "rft"), "tasks"] == 0
    assert table.loc[("dev", "rft"), "task pass rate"] == report.MISSING
    assert table.loc[("dev", "rft"), "Δ task pass rate vs base"] == report.MISSING
    frame = report.comparison_frame(evaluate)
    assert frame[frame["pool"] == "dev"]["value"].isna().all()
    assert not frame[frame["pool"] == "benchmark"]["value"].isna().any()


def test_a_benchmark_without_a_completion_gap_shows_its_context_failures(evaluate):
    """A BFCL-like pool: no primary deliverable or completion gap (n/a), and the episodes that
    ended for the context window counted (0 where none did)."""
    rows = {model: [{**_result(model, t, False, 0.0), "pool": "bfcl", "primary_passed": None,
                     "completion_gap": None, "finish_reason": "context" if t < 3 else "no_tool_call"}
                    for t in range(4)] for model in ("base", "rft")}
    evaluate["pools"]["bfcl"] = summarize_pool(rows, pool="bfcl", seed=1, resamples=200, confidence=0.95)
    table = report.comparison_table(evaluate)
    assert table.loc[("bfcl", "rft"), report.CONTEXT_FAILURES] == 3
    assert table.loc[("benchmark", "rft"), report.CONTEXT_FAILURES] == 0
    assert table.loc[("bfcl", "rft"), "completion-gap rate"] == report.MISSING
    assert table.loc[("bfcl", "rft"), "task pass rate"] == "0.000 [0.000, 0.490]"  # Wilson: 0 of 4 tasks
    assert table.loc[("bfcl", "rft"), "Δ weighted score vs base"] == "+0.000 [+0.000, +0.000]"


def test_the_comparison_of_nothing_is_an_empty_table():
    assert report.comparison_table({"models": ["base"], "reference": "base", "pools": {}}).empty


def test_the_detectability_table_lists_every_pools_mde_and_the_tasks_it_would_need(evaluate):
    """Two tasks in each of two domains (d0: t0, t2; d1: t1, t3), so both pools are resampled
    within domains and sized by the spread within them. benchmark: rft passes t0 and t1, base
    nothing, so the paired difference is 1, 1, 0, 0: 1, 0 in each domain, a within-domain SD of
    sqrt((2 x 0.5 + 2 x 0.5) / 4) = 0.707, and an MDE of 0.10 needs 2.801585**2 x 0.5 / 0.01 =
    392.4 -> 393 tasks. indist: both pass t0, rft t1 too: 0, 1, 0, 0 (d0: 0, 0; d1: 1, 0), an SD of
    sqrt(2 x 0.5 / 4) = 0.5, 197 tasks."""
    _add_pool(evaluate, "indist", {model: [{**_result(model, t, t < passes, 0.5), "pool": "indist"}
                                           for t in range(4)] for model, passes in (("base", 1), ("rft", 2))})
    table = report.detectability_table(evaluate)
    assert list(table.index) == [("benchmark", "rft"), ("dev", "rft"), ("indist", "rft")]
    assert list(table.columns) == ["tasks", "attempts", "Δ task pass rate vs base", "MDE", "per-task SD",
                                   "tasks for an MDE of 0.10"]
    benchmark, dev, indist = (table.loc[pool, "rft"] for pool in ("benchmark", "dev", "indist"))
    mde = evaluate["pools"]["benchmark"]["deltas"]["rft"]["pass_rate"]["mde"]
    assert (benchmark["tasks"], benchmark["attempts"], benchmark["MDE"]) == (4, 1, f"{mde:.3f}")
    assert benchmark["Δ task pass rate vs base"].startswith("+0.500 [+")
    assert (benchmark["per-task SD"], benchmark["tasks for an MDE of 0.10"]) == ("0.707", "393")
    assert (indist["per-task SD"], indist["tasks for an MDE of 0.10"]) == ("0.500", "197")
    assert indist["Δ task pass rate vs base"].startswith("+0.250 [")
    assert dev["tasks"] == 0 and {dev[c] for c in table.columns[2:]} == {report.MISSING}
    # metrics from before the summary: no rows
    assert report.detectability_table({k: v for k, v in evaluate.items() if k != "summary"}).empty


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def test_the_bar_chart_has_a_panel_per_pool_with_error_bars(evaluate):
    fig = report.plot_comparison(report.comparison_frame(evaluate))
    benchmark, dev = fig.axes
    assert benchmark.get_title() == "benchmark (4 tasks)"
    assert [t.get_text() for t in benchmark.get_xticklabels()] == [
        report.TABLE_METRICS[m] for m in report.BAR_METRICS]
    assert len(benchmark.containers) == 2 * 2  # bars and error bars of two models
    assert "no tasks in this pool" in [t.get_text() for t in dev.texts]
    assert _png(fig).startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- per domain


def test_acceptance_and_domain_pass_rates_plot_with_and_without_rows():
    by_domain = pd.DataFrame({"domain_id": ["a", "b"], "rollouts": [4, 4], "accepted": [0, 1],
                              "acceptance": [0.0, 0.25]})
    fig = report.plot_acceptance(by_domain)
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0/4", "1/4"]
    assert "1 of 8" in fig.axes[0].get_title()
    domains = pd.DataFrame({"model": ["base", "base", "rft", "rft"], "pool": ["benchmark"] * 4,
                            "domain_id": ["x", "y", "x", "y"], "tasks": [2] * 4, "episodes": [2] * 4,
                            "pass_rate": [0.0, 0.5, 1.0, 0.5]})
    table = report.domain_pass_rates(domains)
    assert list(table.columns) == ["base", "rft"]
    assert table.loc[("benchmark", "x"), "rft"] == 1.0
    fig = report.plot_domain_pass_rates(domains)
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == 4
    for empty in (report.plot_acceptance(by_domain.iloc[:0]),
                  report.plot_domain_pass_rates(domains.iloc[:0])):
        assert _png(empty).startswith(b"\x89PNG")


def test_training_curves_list_a_stage_that_took_no_step():
    fig = report.plot_losses({"demo_sft": pd.DataFrame({"step": [1, 2], "loss": [3.0, 2.5]}),
                              "rft": pd.DataFrame(columns=["step", "loss"])})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["demo_sft", "rft (no training steps)"]
    assert _png(fig).startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- one task


def _data(tmp_path: Path, tasks, admitted: set[str] | None) -> Artifacts:
    data = Artifacts(load_params(REPO / "params.yaml").paths.under(tmp_path))
    tables: dict[str, list[dict]] = {name: [] for name in schemas.GRAPH_TABLES}
    for _, _, graph, _ in tasks:
        for name, rows in graph_rows(graph).items():
            tables[name] += rows
    for name, schema in schemas.GRAPH_TABLES.items():
        write_table(data.paths.graphs / f"{name}.parquet", tables[name], schema)
    if admitted is not None:
        write_table(data.paths.verdicts, [
            {"task_id": g.task_id, "domain_id": g.domain_id, "pool": g.pool, "coverage_ok": True,
             "critic_ok": True, "controls_ok": True, "execution_ok": True, "validation_passed": False,
             "admitted": g.task_id in admitted, "reasons": []} for _, _, g, _ in tasks],
            schemas.REVIEW_TABLES["verdicts"])
    return data


def test_the_example_task_is_accepted_else_admitted_else_any_rft_task(tmp_path, tasks):
    rft = sorted(g.task_id for _, _, g, _ in tasks if g.pool == "rft")
    assert len(rft) >= 2
    assert report.example_task(_data(tmp_path / "a", tasks, admitted=None)) == rft[0]
    data = _data(tmp_path / "b", tasks, admitted={rft[1]})
    assert report.example_task(data) == rft[1]
    write_table(data.paths.accepted_table,
                [_trajectory("z.a0", rft[-1]).to_row(), _trajectory("y.a0", rft[0]).to_row()],
                schemas.TRAJECTORIES)
    assert report.example_task(data) == rft[0]  # the task of the first accepted rollout id


def test_the_graph_is_drawn_as_png(tasks):
    assert report.graph_png(tasks[0][2]).startswith(b"\x89PNG")


# ----------------------------------------------------------------------------- two trajectories


def _verdicts(rows: list[tuple[str, str, list[bool]]], judge: str = "agent") -> pd.DataFrame:
    return pd.DataFrame([{"rollout_id": r, "task_id": t, "judge": judge, "criterion_id": f"C{i + 1}",
                          "passed": p, "evidence": f"{r} C{i + 1}"}
                         for r, t, passed in rows for i, p in enumerate(passed)])


def test_an_accepted_rollout_is_set_against_a_near_miss_of_the_same_task():
    verdicts = _verdicts([("t1.a0", "t1", [True, True, True]), ("t1.a1", "t1", [True, False, False]),
                          ("t1.a2", "t1", [True, True, False]), ("t0.a0", "t0", [True, True, True]),
                          ("t2.a0", "t2", [True, True, False])])
    pair = report.pick_pair(verdicts, ["t0.a0", "t1.a0"], "agent")
    assert (pair.left, pair.right, pair.accepted) == ("t1.a0", "t1.a2", True)
    assert (pair.left_label, pair.right_label) == ("accepted", "rejected")
    assert "same task" in pair.note


def test_without_a_shared_task_the_best_rejected_rollout_of_another_task_is_shown():
    verdicts = _verdicts([("t1.a0", "t1", [True, True]), ("t2.a0", "t2", [False, False]),
                          ("t3.a0", "t3", [True, False])])
    pair = report.pick_pair(verdicts, ["t1.a0"], "agent")
    assert (pair.left, pair.right) == ("t1.a0", "t3.a0")
    assert "another task" in pair.note


def test_nothing_accepted_shows_the_most_and_fewest_passed_criteria():
    verdicts = _verdicts([("t1.a0", "t1", [True, False, False]), ("t1.a1", "t1", [True, True, False]),
                          ("t2.a0", "t2", [False, False, False]), ("t2.a1", "t2", [False, False, False])])
    pair = report.pick_pair(verdicts, [], "agent")
    assert (pair.left, pair.right, pair.accepted) == ("t1.a1", "t2.a1", False)
    assert "nothing was accepted" in pair.note
    tied = _verdicts([("a", "t", [True]), ("b", "t", [True]), ("c", "t", [True])])
    pair = report.pick_pair(tied, [], "agent")
    assert (pair.left, pair.right) == ("a", "c")  # distinct, deterministic


def test_other_judges_verdicts_and_too_few_rollouts():
    verdicts = pd.concat([_verdicts([("a", "t", [True]), ("b", "t", [False])], judge="text"),
                          _verdicts([("a", "t", [False])])])
    assert report.pick_pair(verdicts, [], "agent") is None  # one rollout judged by the agent judge
    pair = report.pick_pair(verdicts, ["a"], "text")
    assert (pair.left, pair.right) == ("a", "b")
    everything = _verdicts([("a", "t", [True]), ("b", "t", [True])])
    pair = report.pick_pair(everything, ["a", "b"], "agent")
    assert (pair.left_label, pair.right_label) == ("accepted", "accepted") and "every rollout" in pair.note


def _trajectory(rollout_id: str, task_id: str, text: str = "done") -> Trajectory:
    messages = [Message("system", "tools"), Message("user", "the request"),
                Message("assistant", text, (ToolCall("submit", {"note": text}),)),
                Message("tool", "submitted", name="submit")]
    return Trajectory(rollout_id, task_id, task_id.split(".")[0], "rft", "tiny/demo_sft", 0, 1, messages,
                      turns=1, tool_calls=1, invalid_calls=0, prompt_tokens=10, generated_tokens=5,
                      finish_reason="submitted", final_files={}, diff=[])


def test_trajectories_are_read_by_id(tmp_path):
    path = tmp_path / "trajectories.parquet"
    write_table(path, [_trajectory(f"r{i}", "t.rft.0").to_row() for i in range(3)], schemas.TRAJECTORIES)
    found = report.read_trajectories(path, ["r2", "r0"])
    assert sorted(found) == ["r0", "r2"] and found["r2"].messages[2].tool_calls[0].name == "submit"
    with pytest.raises(MissingArtifacts, match="r9"):
        report.read_trajectories(path, ["r9"])
    assert report.accepted_ids(path) == ["r0", "r1", "r2"]
    assert report.accepted_ids(tmp_path / "none.parquet") == []
    write_table(tmp_path / "empty.parquet", [], schemas.TRAJECTORIES)
    assert report.accepted_ids(tmp_path / "empty.parquet") == []


def test_verdicts_are_read_from_both_judges_tables(tmp_path):
    for judge in ("agent", "text"):
        rows = _verdicts([("a", "t", [True, False])], judge=judge).to_dict("records")
        write_table(tmp_path / f"{judge}.parquet", rows, schemas.VERDICTS)
    frame = report.read_verdicts(tmp_path / "text.parquet", tmp_path / "agent.parquet")
    assert list(frame.columns) == schemas.VERDICTS.names
    assert frame["judge"].tolist() == ["text", "text", "agent", "agent"]


def test_side_by_side_shows_each_criterion_verdict_and_transcript(tasks):
    pack = tasks[0][3]
    ids = [c.criterion_id for c in pack.rubric]
    verdicts = pd.concat([
        _verdicts([("good", pack.task_id, [True] * len(ids)), ("bad", pack.task_id, [False] * len(ids))]),
        _verdicts([("good", pack.task_id, [True] * len(ids))], judge="text")])
    verdicts = verdicts[~((verdicts["rollout_id"] == "bad") & (verdicts["criterion_id"] == ids[-1]))]
    frame = report.verdict_frame("bad", verdicts, pack)
    assert list(frame.index) == ids
    assert list(frame.columns) == ["kind", "mandatory", "agent", "evidence"]
    assert frame["agent"].tolist() == ["FAIL"] * (len(ids) - 1) + ["no verdict"]
    assert report.verdict_frame("good", verdicts, pack)["text"].eq("pass").all()
    pair = report.Pair("good", "bad", "accepted", "rejected", "a <note>", True)
    shown = {"good": _trajectory("good", pack.task_id, "<script>x</script>"),
             "bad": _trajectory("bad", pack.task_id)}
    page = report.side_by_side(pair, shown, verdicts, lambda task_id: pack)
    assert page.index("accepted") < page.index("rejected")
    assert "good" in page and "bad" in page and "a &lt;note&gt;" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count("<pre") == 2 and "the request" in page and "tools" not in page.split("<pre")[1]


def test_the_similarity_tail_is_one_line_per_sampler_in_round_order():
    rounds = pd.DataFrame([{"round": r, "sampler": s, "tail_share": share}
                           for s, shares in (("uniform", [0.2, 0.4]), ("novelty", [0.3, 0.1]))
                           for r, share in zip((2, 1), reversed(shares), strict=True)])
    ax = report.plot_similarity_tail(rounds, 0.95).axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    assert lines == {"novelty": ([1, 2], [0.3, 0.1]), "uniform": ([1, 2], [0.2, 0.4])}
    assert "0.95" in ax.get_ylabel()
    empty = report.plot_similarity_tail(pd.DataFrame(columns=["round", "sampler", "tail_share"]), 0.95)
    assert not empty.axes[0].get_lines() and "synthesis=base" in empty.axes[0].texts[0].get_text()
