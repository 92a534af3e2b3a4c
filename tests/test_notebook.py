"""The results notebook (notebooks/results.ipynb) runs end to end on the smoke pipeline's artifacts.

The notebook is executed with nbclient in a kernel of this interpreter (the venv's), from a folder
outside any repository, so it finds the smoke run only through ``$INTERLOCK_REPO``."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from interlock.core.config import load_params

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"
CELL_TIMEOUT = 120


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
    NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name=venv_kernel,
                   resources={"metadata": {"path": str(elsewhere)}}).execute()

    cells = {c.id: c for c in notebook.cells if c.cell_type == "code"}
    outputs = [o for c in cells.values() for o in _outputs(c)]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors
    assert str(smoke_repo) in "".join(_text(o) for o in _outputs(cells["setup"]))

    # the comparison table: a row per evaluated model, with the metrics and their deltas
    table = "".join(o.get("data", {}).get("text/html", "") for o in _outputs(cells["comparison-table"]))
    evaluation = load_params(smoke_repo / "params.yaml").eval
    for model in evaluation.models:
        assert f"<th>{model}</th>" in table
    assert "bfcl" in evaluation.pools  # the smoke run's BFCL pool, beside the benchmark
    for pool in evaluation.pools:
        assert f">{pool}</th>" in table
    for column in ("task pass rate", "completion-gap rate", "Δ task pass rate vs base", "ref",
                   "context failures"):
        assert column in table

    # figures: the bars, the two per-domain plots, the completion graph, the training curves
    images = {name for name, cell in cells.items()
              for o in _outputs(cell) if "image/png" in o.get("data", {})}
    assert images == {"comparison-bars", "acceptance", "domain-pass-rates", "graph", "training"}

    # two trajectories side by side, said plainly when nothing was accepted
    pair = "".join(_text(o) for o in _outputs(cells["pair"]))
    assert pair.count("<pre") == 2 and "mandatory" in pair
    accept = json.loads((smoke_repo / "metrics" / "accept.json").read_text())
    assert ("Nothing was accepted" in pair) == accept["nothing_accepted"]
