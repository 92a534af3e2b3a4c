"""The `interlock` command line: list, show and draw, on a small artifact set built once."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pyarrow.parquet as pq
import pytest
from PIL import Image

from interlock.analysis.artifacts import Artifacts, repository_paths
from interlock.analysis.cli import main
from interlock.analysis.draw import draw_graph
from interlock.core.config import load_params
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.recursive.stage import run_grow
from interlock.review.stage import run_review
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.graph import build_graph
from interlock.synthesis.stage import run_blueprints, run_domains, run_graphs, run_packs
from interlock.synthesis.tasks import iter_graphs, load_domains

from helpers.config import defaults
from helpers.repo import REPO, command_timeout


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """domains -> blueprints -> graphs -> packs -> review from the real catalog, at a tiny size."""
    out = tmp_path_factory.mktemp("artifacts") / "data"
    load_catalog()  # the real catalog must load
    run_domains(out / "domains.parquet")
    run_blueprints(out / "domains.parquet", out / "blueprints.parquet", seed=11, train_domains=2,
                   heldout_domains=1, tasks_per_domain={"demo": 1, "rft": 2, "dev": 1, "benchmark": 2},
                   size=TaskSize(3, 2, 1, 1), row_group_tasks=3)
    run_graphs(out / "domains.parquet", out / "blueprints.parquet", out / "graphs")
    run_packs(out / "domains.parquet", out / "graphs", out / "packs")
    run_review(out / "graphs", out / "packs", out / "review", catalog=load_domains(out / "domains.parquet"))
    return out


@pytest.fixture(scope="module")
def tasks(data) -> list[dict]:
    return pq.read_table(data / "graphs" / "tasks.parquet").to_pylist()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_domains_lists_the_catalog(data, capsys):
    code, out, _ = run(capsys, "--data", str(data), "domains")
    assert code == 0
    rows = pq.read_table(data / "domains.parquet").to_pylist()
    assert rows
    assert f"{len(rows)} domains" in out
    for row in rows:
        assert re.search(rf"│ {re.escape(row['domain_id'])} +│", out)


def test_domains_filter_by_split(data, capsys):
    code, out, _ = run(capsys, "--data", str(data), "domains", "--split", "heldout")
    assert code == 0
    rows = pq.read_table(data / "domains.parquet").to_pylist()
    ids = set(re.findall(r"^│ (\S+) +│", out, flags=re.M))
    assert ids == {r["domain_id"] for r in rows if r["split"] == "heldout"}
    assert ids


def test_tasks_filter_by_pool(data, tasks, capsys):
    code, out, _ = run(capsys, "--data", str(data), "tasks", "--pool", "rft")
    assert code == 0
    shown = set(re.findall(r"^│ (\S+) +│", out, flags=re.M))
    assert shown == {t["task_id"] for t in tasks if t["pool"] == "rft"}
    assert len(shown) == 4  # two training domains, two rft tasks each
    assert "admitted" in out and "couplings" in out


def test_tasks_filter_by_domain_and_admitted(data, tasks, capsys):
    domain = tasks[0]["domain_id"]
    code, out, _ = run(capsys, "--data", str(data), "tasks", "--domain", domain, "--admitted")
    assert code == 0
    shown = set(re.findall(r"^│ (\S+) +│", out, flags=re.M))
    assert shown == {t["task_id"] for t in tasks if t["domain_id"] == domain}  # all clean packs


def test_task_rows_count_the_graph(data, tasks):
    rows = {r["task_id"]: r for r in Artifacts(repository_paths(REPO, data=data)).task_rows()}
    graphs = [g for batch in iter_graphs(data / "graphs") for g in batch]
    assert set(rows) == {t["task_id"] for t in tasks}
    for graph in graphs:
        row = rows[graph.task_id]
        assert row["decisions"] == len(graph.of_kind("decision")) == 3
        assert row["effects"] == len(graph.of_kind("effect"))
        assert row["couplings"] == len(graph.hyperedges) == 1
        assert row["admitted"] is True


def test_one_task_reads_the_same_graph_as_the_stream(data, tasks):
    task_id = tasks[-1]["task_id"]
    streamed = next(g for batch in iter_graphs(data / "graphs") for g in batch if g.task_id == task_id)
    loaded = Artifacts(repository_paths(REPO, data=data)).graph(task_id)
    assert loaded.nodes == streamed.nodes
    assert loaded.edges == streamed.edges
    assert loaded.hyperedges == streamed.hyperedges


def test_show_prints_request_contract_rubric_reference_and_verdict(data, tasks, capsys):
    task_id = tasks[0]["task_id"]
    pack = Artifacts(repository_paths(REPO, data=data)).pack(task_id)
    code, out, _ = run(capsys, "--data", str(data), "show", task_id)
    assert code == 0
    for line in pack.request.splitlines():
        assert line in out
    for section in ("Request", "Contract", "Rubric", "Reference solution", "Verdict"):
        assert section in out
    assert pack.rubric
    for criterion in pack.rubric:
        assert re.search(rf"│ {criterion.criterion_id} +│ {criterion.kind}", out)
    for deliverable in pack.contract:
        assert re.search(rf"│ {deliverable['deliverable_id']} +│", out)
    assert "submit" in out and "admitted" in out


def test_draw_writes_a_png(data, tasks, capsys, tmp_path):
    target = tmp_path / "figures" / "graph.png"
    code, out, _ = run(capsys, "--data", str(data), "draw", tasks[0]["task_id"], "-o", str(target))
    assert code == 0
    assert str(target) in out
    assert target.stat().st_size > 10_000
    with Image.open(target) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert width == 1500 and height > 600
    pixels = mpimg.imread(target)
    assert pixels.shape == (height, width, 4)
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def test_draw_a_large_task_grows_with_it(catalog, tmp_path):
    """Eight decisions and two coupling hyperedges: a taller figure than a three-decision task."""
    domain = next(d for d in catalog.domains if d.split == "train")
    sizes = {}
    for name, size in (("small", TaskSize(3, 2, 1, 1)), ("large", TaskSize(8, 3, 2, 3))):
        graph = build_graph(make_blueprint(domain, "rft", 0, size, stable_seed(5, domain.id)), domain)
        path = draw_graph(graph, tmp_path / f"{name}.png")
        with Image.open(path) as image:
            sizes[name] = image.size
        if name == "large":
            assert len(graph.hyperedges) == 2 and len(graph.of_kind("decision")) == 8
    assert sizes["large"][0] == sizes["small"][0]
    assert sizes["large"][1] > sizes["small"][1] * 1.5


@pytest.mark.parametrize("command", [["show"], ["draw", "-o", "unused.png"]])
def test_unknown_task_exits_2_with_a_hint(data, capsys, tmp_path, command):
    argv = ["--data", str(data), command[0], "no_such_domain.rft.9999", *command[1:]]
    if command[0] == "draw":
        argv[-1] = str(tmp_path / "unused.png")
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "unknown task 'no_such_domain.rft.9999'" in err
    assert "interlock tasks" in err
    assert "Traceback" not in err
    assert not (tmp_path / "unused.png").exists()


def test_missing_data_dir_says_to_run_dvc_repro(tmp_path, capsys):
    code, _, err = run(capsys, "--data", str(tmp_path / "nowhere"), "tasks")
    assert code == 1
    assert "dvc repro" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_artifact_is_one_line_exit_1(data, tmp_path, capsys):
    broken = tmp_path / "data"
    shutil.copytree(data, broken)
    (broken / "domains.parquet").write_bytes(b"not parquet at all")
    code, _, err = run(capsys, "--data", str(broken), "domains")
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "domains.parquet" in err


def test_admitted_without_review_is_an_error(data, tmp_path, capsys):
    partial = tmp_path / "data"
    shutil.copytree(data, partial)
    shutil.rmtree(partial / "review")
    code, out, _ = run(capsys, "--data", str(partial), "tasks")
    header = next(line for line in out.splitlines() if "task_id" in line)
    assert code == 0 and "couplings" in header and "admitted" not in header
    code, _, err = run(capsys, "--data", str(partial), "tasks", "--admitted")
    assert code == 1 and "review" in err


def test_console_script_entry_point(data):
    script = Path(sys.executable).with_name("interlock")
    found = str(script) if script.exists() else shutil.which("interlock")
    assert found, "the `interlock` console script is not installed (pip install -e .)"
    result = subprocess.run([found, "domains", "--data", str(data), "--split", "train"],
                            capture_output=True, text=True, timeout=command_timeout())
    assert result.returncode == 0, result.stderr
    assert "domains" in result.stdout and "train" in result.stdout
    assert "heldout" not in result.stdout


@pytest.fixture(scope="module")
def grown(data) -> list[dict]:
    """One round of recursive synthesis on the module's tasks, written beside them (data/grown)."""
    params = load_params(REPO / "params.yaml")
    config = defaults("synthesis=rst").synthesis.replace(rounds=1, candidates=6, compare_with=None)
    paths = params.paths.rebase(data=data, metrics=data.parent / "metrics")  # nothing lands in the repository
    run_grow(paths, load_domains(data / "domains.parquet"), config, params.seed)
    lineage = pq.read_table(data / "grown" / "lineage.parquet").to_pylist()
    assert lineage, "no child validated: pick another seed or more candidates"
    return lineage


def test_show_prints_a_grown_tasks_lineage_and_draw_outlines_its_rewrite(data, grown, capsys, tmp_path):
    child = grown[0]
    code, out, _ = run(capsys, "--data", str(data), "show", child["task_id"])
    assert code == 0
    assert "Lineage (recursive synthesis): 1 rewrite from" in out and child["operator"] in out
    assert child["parents"][0] in out and "validated by the grow stage in round 1" in out
    target = tmp_path / f"child-{'x' * 200}.png"  # a line longer than the console's width
    code, out, _ = run(capsys, "--data", str(data), "draw", child["task_id"], "--against-parent", "-o",
                       str(target))
    assert code == 0 and f"wrote {target}: " in out
    assert out.rstrip().endswith("added or changed against its parent")
    assert out.count("\n") == 1, "piped output is one line per line written, never broken by width"
    with Image.open(target) as image:
        assert image.format == "PNG"
    code, _, err = run(capsys, "--data", str(data), "draw", child["parents"][0], "--against-parent", "-o",
                       str(tmp_path / "parent.png"))
    assert code != 0 and "has no parent" in err
