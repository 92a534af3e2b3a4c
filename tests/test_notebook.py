"""The results notebook (notebooks/results.ipynb) runs end to end on the smoke pipeline's artifacts.

The notebook is executed with nbclient in a kernel of this interpreter (the venv's), from a folder
outside any repository, so it finds the smoke run only through ``$INTERLOCK_REPO``."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

from interlock.analysis import report
from interlock.core.config import load_params

from helpers.repo import command_timeout

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"


def test_the_committed_notebook_is_valid_and_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code
    assert all(not c.outputs and c.execution_count is None for c in code), "clear outputs before committing"


def _outputs(cell) -> list[dict]:
    return list(cell.get("outputs", []))


def _text(output: dict) -> str:
    data = output.get("data", {})
    return output.get("text", "") + data.get("text/html", "") + data.get("text/markdown", "")


def test_the_results_notebook_runs_on_the_pipelines_artifacts(smoke_repo, venv_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLOCK_REPO", str(smoke_repo))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=command_timeout(), kernel_name=venv_kernel,
                   resources={"metadata": {"path": str(elsewhere)}}).execute()

    cells = {c.id: c for c in notebook.cells if c.cell_type == "code"}
    outputs = [o for c in cells.values() for o in _outputs(c)]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors
    assert str(smoke_repo) in "".join(_text(o) for o in _outputs(cells["setup"]))

    # the comparison table: a row per evaluated model, with the metrics and their deltas
    table = "".join(o.get("data", {}).get("text/html", "") for o in _outputs(cells["comparison-table"]))
    params = load_params(smoke_repo / "params.yaml")
    evaluation = params.eval
    left_out = json.loads(params.paths.under(smoke_repo).metrics_of("evaluate").read_text())["not_evaluated"]
    assert set(left_out) == {"rl"}  # the smoke run trains no RL policy (train=full)
    for model in evaluation.models:
        assert (f"<th>{model}</th>" in table) == (model not in left_out)
    assert "bfcl" in evaluation.pools  # the smoke run's BFCL pool, beside the benchmark
    for pool in evaluation.pools:
        assert f">{pool}</th>" in table
    for column in ("task pass rate", "completion-gap rate", "Δ task pass rate vs base", "ref",
                   "context failures"):
        assert column in table

    # every delta stated with its minimum detectable effect at the run's size
    assert "MDE task pass rate" in table
    # and per pool (indist beside the benchmark) what it can detect, and the tasks an MDE of 0.10 needs
    detect = "".join(o.get("data", {}).get("text/html", "") for o in _outputs(cells["detectability-table"]))
    assert "indist" in evaluation.pools and "tasks for an MDE of 0.10" in detect
    for pool in evaluation.pools:
        assert f">{pool}</th>" in detect

    # figures: the bars, the two per-domain plots, the completion graph, the training curves, and
    # the intervention filter's histograms where the run wrote them (intervention=rti)
    images = {name for name, cell in cells.items()
              for o in _outputs(cell) if "image/png" in o.get("data", {})}
    paths = load_params(smoke_repo / "params.yaml").paths.under(smoke_repo)
    nll = report.read_intervention_nll(paths.intervene_nll_plot)
    intervened = nll is not None and not nll.empty
    assert images == {"comparison-bars", "acceptance", "domain-pass-rates", "graph", "training",
                      *(["intervention"] if intervened else [])}
    if not intervened:
        said = "".join(_text(o) for o in _outputs(cells["intervention"]))
        assert said.count("\n") <= 1 and "No rollout-time intervention in this run" in said

    # two trajectories side by side, said plainly when nothing was accepted
    pair = "".join(_text(o) for o in _outputs(cells["pair"]))
    assert pair.count("<pre") == 2 and "mandatory" in pair
    accept = json.loads((smoke_repo / "metrics" / "accept.json").read_text())
    assert ("Nothing was accepted" in pair) == accept["nothing_accepted"]


def _write(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, sep="\t", index=False)


def test_the_intervention_filter_reads_as_two_histograms_and_a_threshold(tmp_path):
    folder = tmp_path / "intervene_nll"
    assert report.read_intervention_nll(folder) is None  # intervention=none: nothing written
    assert report.intervention_domains(tmp_path / "intervene_domains.tsv") is None
    _write(folder / "accepted.tsv", pd.DataFrame({"nll": [0.25, 0.75, 1.25], "count": [5, 9, 2]}))
    _write(folder / "corrections.tsv", pd.DataFrame({"nll": [0.75, 1.25, 1.75, 2.25], "count": [1, 2, 2, 1]}))
    assert report.read_intervention_nll(folder) is None  # still no threshold
    _write(folder / "threshold.tsv", pd.DataFrame({"nll": [1.4, 1.4], "count": [0, 9]}))  # a vertical line
    nll = report.read_intervention_nll(folder)
    assert nll.threshold == 1.4 and list(nll.corrections["count"]) == [1, 2, 2, 1] and not nll.empty
    fig = report.plot_intervention_nll(nll)
    accepted, corrections = fig.axes
    assert len(accepted.patches) == 3 and len(corrections.patches) == 4
    assert accepted.get_title() == "the policy's accepted turns: 16"
    assert corrections.get_title() == "corrections: 6"
    assert [line.get_xdata()[0] for line in corrections.get_lines()] == [1.4]  # the threshold
    # a filter that scored no correction and set no threshold still draws, saying so
    _write(folder / "corrections.tsv", pd.DataFrame(columns=["nll", "count"]))
    _write(folder / "threshold.tsv", pd.DataFrame(columns=["nll", "count"]))
    empty = report.plot_intervention_nll(report.read_intervention_nll(folder))
    assert "none scored" in [t.get_text() for t in empty.axes[1].texts] and not empty.axes[1].get_lines()
    # intervention=none writes the files without rows: nothing to draw
    _write(folder / "accepted.tsv", pd.DataFrame(columns=["nll", "count"]))
    assert report.read_intervention_nll(folder).empty
    columns = ["domain_id", "rollouts", "failed", "diagnosed", "corrected", "verified", "kept"]
    _write(tmp_path / "intervene_domains.tsv", pd.DataFrame(columns=columns))
    assert report.intervention_domains(tmp_path / "intervene_domains.tsv").empty
    _write(tmp_path / "intervene_domains.tsv", pd.DataFrame(
        [["d01", 8, 4, 4, 3, 2, 1], ["d02", 8, 3, 2, 1, 1, 1]], columns=columns))
    table = report.intervention_domains(tmp_path / "intervene_domains.tsv")
    assert list(table.index) == ["d01", "d02", "total"]
    assert table.loc["total"].tolist() == [16, 7, 6, 4, 3, 2]
