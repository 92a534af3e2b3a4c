"""The stage runner holds a stage to what its entry in ``dvc.yaml`` declares: the parameters it may
read (a view of params.yaml) and the package data it may read; it writes the stage's metrics and
timing, and turns bad input into one line and exit status 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from interlock.core.config import Params, load_params, write_params
from interlock.core.errors import InterlockError
from interlock.core.runner import Declared, ParamsView, run_stage
from interlock.core.tracking import StageReport
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.stage import domains

from helpers.repo import REPO


@pytest.fixture(scope="module")
def params() -> Params:
    return load_params(REPO / "params.yaml")


def view(params: Params, *declared: str) -> Params:
    return ParamsView(params, declared, "a_stage")  # type: ignore[return-value]


def test_a_declared_key_gives_its_value_and_everything_under_it(params) -> None:
    seen = view(params, "seed", "scale.rollouts", "backbone.generation", "train.lora")
    assert seen.seed == params.seed
    assert seen.scale.rollouts == params.scale.rollouts  # the value itself: model_dump works on it
    assert seen.scale.rollouts.model_dump() == params.scale.rollouts.model_dump()
    assert seen.backbone.generation.temperature == params.backbone.generation.temperature
    assert seen.train.lora == params.train.lora  # null is a value too


@pytest.mark.parametrize(("declared", "read"), [
    (("scale.rollouts",), lambda p: p.solver.rollouts),
    (("scale.rollouts",), lambda p: p.seed),
    (("backbone.name",), lambda p: p.backbone.backend),
    (("solver.noisy",), lambda p: p.solver.validation),
    (("seed",), lambda p: p.tracking),
])
def test_reading_an_undeclared_key_is_an_error_that_names_it(params, declared, read) -> None:
    with pytest.raises(InterlockError, match="do not declare") as error:
        read(view(params, *declared))
    assert error.value.file == "dvc.yaml" and error.value.item == "a_stage"


def test_reading_a_partly_declared_group_as_a_whole_is_an_error(params) -> None:
    with pytest.raises(InterlockError, match="reads backbone as a whole"):
        view(params, "backbone.name").backbone.model_dump()


def test_a_config_method_runs_on_the_view_so_its_reads_are_checked(params) -> None:
    shared = ("train.batch_tokens", "train.gradient_accumulation", "train.warmup_steps", "train.weight_decay",
              "train.max_grad_norm", "train.lora")
    recipe = view(params, "train.demo", *shared).train.recipe("demo", seed=3)
    assert recipe == params.train.recipe("demo", seed=3)
    with pytest.raises(InterlockError, match="train.rft"):
        view(params, "train.demo", *shared).train.recipe("rft", seed=3)
    with pytest.raises(InterlockError, match="train.weight_decay"):
        view(params, "train.demo", *(k for k in shared if k != "train.weight_decay")).train.recipe("demo", 3)


def test_declared_reads_the_stage_entry_of_the_pipeline() -> None:
    declared = Declared.read("rollouts", REPO / "dvc.yaml")
    assert "scale.rollouts" in declared.params and "stages/rollouts.py" in declared.deps
    with pytest.raises(InterlockError, match="no stage 'nope'"):
        Declared.read("nope", REPO / "dvc.yaml")


def _project(root: Path, *, catalog_declared: bool) -> Path:
    """params.yaml and a dvc.yaml whose domains stage does or does not list the catalog."""
    write_params(REPO / "conf", root / "params.yaml", ["experiment=smoke"])
    pipeline = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    if not catalog_declared:
        deps = pipeline["stages"]["domains"]["deps"]
        deps.remove("src/interlock/resources/domains.yaml")
    (root / "dvc.yaml").write_text(yaml.safe_dump(pipeline), encoding="utf-8")
    (root / "src").symlink_to(REPO / "src")  # dependencies are paths from the stage's folder, as DVC runs it
    return root


@pytest.mark.parametrize("declared", [True, False])
def test_a_stage_reads_package_data_only_where_it_declares_it(tmp_path, monkeypatch, capsys,
                                                              declared) -> None:
    root = _project(tmp_path, catalog_declared=declared)
    monkeypatch.chdir(root)
    if declared:
        run_stage("domains", domains)
        assert load_params("params.yaml").paths.domains.exists()
        return
    with pytest.raises(SystemExit) as stopped:
        run_stage("domains", domains)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "stage domains reads domains.yaml, which its deps in dvc.yaml do not list" in err
    assert "Traceback" not in err
    load_catalog()  # outside a stage nothing is guarded


def test_a_stage_that_reads_an_undeclared_parameter_exits_with_one_line(tmp_path, monkeypatch,
                                                                       capsys) -> None:
    write_params(REPO / "conf", tmp_path / "params.yaml", ["experiment=smoke"])
    shutil.copy2(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        run_stage("graphs", lambda params, paths: print(params.seed))  # graphs declares no params
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stage graphs reads seed" in err


def test_the_runner_writes_the_reported_metrics_and_the_seconds(tmp_path, monkeypatch) -> None:
    write_params(REPO / "conf", tmp_path / "params.yaml", ["experiment=smoke", "tracking=disabled"])
    shutil.copy2(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_stage("sample", lambda params, paths: StageReport({"trajectories": params.seed % 7}))
    paths = load_params("params.yaml").paths
    assert json.loads(paths.metrics_of("sample").read_text()) == {"trajectories": load_params().seed % 7}
    assert list(json.loads(paths.timing_of("sample").read_text())) == ["seconds"]
    run_stage("graphs", lambda params, paths: None)  # no numbers: no metrics file
    assert not paths.metrics_of("graphs").exists() and paths.timing_of("graphs").exists()
