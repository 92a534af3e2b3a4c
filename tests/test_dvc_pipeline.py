"""``dvc.yaml`` tells the truth: each stage depends on exactly the code it imports and the data it
reads, so an edit re-runs exactly the stages it can change (and DVC skips the ones after them whose
inputs come out byte-identical); every stage runs under its declared parameters, with the smoke
choices and with the paper scale's; and `dvc exp show` leads with the transfer metrics."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
import yaml

from interlock.core.config import compose_params, load_params, write_params
from interlock.core.resources import RESOURCES

from helpers.imports import PACKAGE, closure, package_dep, package_of
from helpers.repo import REPO, SMOKE, commit, dvc, stages_run

PIPELINE = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
STAGES = list(PIPELINE["stages"])
RESOURCE_DEPS = "src/interlock/resources/"
#: what computes the tiny backbone's model in every stage that runs one (it pins float32)
FLOAT32 = {"backend": "transformers", "engine": "transformers", "served": False, "dtype": "float32",
           "resolved_dtype": "float32"}


def _code_deps(stage: str) -> set[str]:
    return {d for d in PIPELINE["stages"][stage]["deps"] if d.startswith(("src/", "stages/"))}


def _importers(package: str) -> set[str]:
    """The stages whose import closure holds a module of ``package`` (from the source, not dvc.yaml)."""
    return {stage for stage in STAGES
            if any(package_of(m) == package for m in closure(REPO / "stages" / f"{stage}.py"))}


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_depends_on_its_script_and_exactly_the_packages_it_imports(stage: str) -> None:
    expected = {f"stages/{stage}.py"} | {package_dep(package_of(m))
                                         for m in closure(REPO / "stages" / f"{stage}.py")}
    declared = {d for d in _code_deps(stage) if not d.startswith(RESOURCE_DEPS)}
    assert declared == expected, (f"stage {stage}: add {sorted(expected - declared)}, "
                                  f"remove {sorted(declared - expected)}")


def test_package_data_lives_in_resources_and_every_file_there_is_a_stages_dependency() -> None:
    """Which stage reads a resource is held at run time (the runner refuses an undeclared read,
    tests/test_runner.py); here: every resource is declared somewhere, and no data hides inside a
    code package, where it would be a dependency of every stage importing that package."""
    files = {p.relative_to(REPO).as_posix() for p in RESOURCES.rglob("*") if p.is_file()}
    declared = {d for stage in STAGES for d in _code_deps(stage) if d.startswith(RESOURCE_DEPS)}
    assert files and declared == files
    hidden = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix not in {".py", ".pyc"}
              and RESOURCES not in p.parents]
    assert not hidden


def test_every_path_a_stage_names_comes_from_the_paths_config() -> None:
    """Artifacts, metrics and plots are templated from conf/paths; only code is written literally."""
    literal = {stage: [p for key in ("deps", "outs", "metrics", "plots")
                       for entry in PIPELINE["stages"][stage].get(key, [])
                       for p in ([entry] if isinstance(entry, str) else list(entry))
                       if not p.startswith(("src/", "stages/", "${paths."))]
               for stage in STAGES}
    assert not any(literal.values()), literal
    assert all(str(p).startswith("${paths.") for p in PIPELINE["metrics"])


# ----------------------------------------------------------------------------- edits on a real run

def _edit(path, text: str = "\n# an edit that changes no behaviour\n") -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_editing_an_analysis_module_reruns_nothing(smoke_copy) -> None:
    _edit(smoke_copy / "src" / "interlock" / "analysis" / "report.py")
    assert "up to date" in dvc("status", cwd=smoke_copy)
    assert stages_run(dvc("repro", cwd=smoke_copy)) == []


@pytest.mark.parametrize(("edited", "package"), [("review/critic.py", "review"),
                                                  ("resources/domains.yaml", None)])
def test_an_edit_reruns_the_stages_that_use_it_and_dvc_skips_what_comes_out_the_same(
        smoke_copy, edited: str, package: str | None) -> None:
    """A module of a package: the stages importing that package; the catalog: the stage reading it.
    Their outputs come out byte-identical, so DVC runs nothing after them (every later stage reads
    the review's or the catalog's output)."""
    _edit(smoke_copy / "src" / "interlock" / edited)
    expected = _importers(package) if package else {"domains"}
    assert set(json.loads(dvc("status", "--json", cwd=smoke_copy, stdout_only=True))) == expected
    assert sorted(stages_run(dvc("repro", cwd=smoke_copy))) == sorted(expected)
    assert "up to date" in dvc("status", cwd=smoke_copy)


def test_switching_the_intervention_reaches_only_intervene_and_what_follows(smoke_copy) -> None:
    """Only `intervene` reads the choice (`sample` reads its `mask`, the same in both options), so
    nothing before it changes; what follows re-runs because the interventions table does."""
    write_params(smoke_copy / "conf", smoke_copy / "params.yaml",
                 [*(s for s in SMOKE if not s.startswith("intervention=")), "intervention=none"])
    assert set(json.loads(dvc("status", "--json", cwd=smoke_copy, stdout_only=True))) == {"intervene"}


def test_switching_the_synthesis_reaches_only_grow_before_it_runs(smoke_copy) -> None:
    """Only `grow` reads the choice (`rollouts` reads `match_rollouts`, the same in both options);
    what reads the grown pool re-runs only because its table does."""
    write_params(smoke_copy / "conf", smoke_copy / "params.yaml",
                 [*(s for s in SMOKE if not s.startswith("synthesis=")), "synthesis=base"])
    assert set(json.loads(dvc("status", "--json", cwd=smoke_copy, stdout_only=True))) == {"grow"}


# ----------------------------------------------------------------------------- the paper's choices

#: the choices the paper experiment makes that the smoke one does not: who starts RFT (the base
#: checkpoint), who rolls out and validates (the model), and model-backed judging; and
#: rollout-time intervention's critic and corrector as models too (the tiny backbone)
MODEL_ROLES = ("intervention.critic=model", "intervention.corrector=model")
PAPER_CHOICES = ("solver.start", "solver.rollouts", "solver.validation", "judge.backed_by")


def _get(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def _paper_choices() -> list[str]:
    paper = compose_params(REPO / "conf", ["experiment=paper"])
    return [f"{key}={_get(paper, key)}" for key in PAPER_CHOICES]


@pytest.fixture(scope="module")
def paper_choices_run(smoke_repo, tmp_path_factory):
    """The smoke run's copy re-run with the paper scale's choices on the tiny backbone: every stage
    they reach reads, through the runner's view, only the parameters it declares."""
    root = tmp_path_factory.mktemp("paper-choices") / "repo"
    shutil.copytree(smoke_repo, root, ignore=shutil.ignore_patterns("wandb"))
    write_params(root / "conf", root / "params.yaml", [*SMOKE, *_paper_choices(), *MODEL_ROLES])
    commit(root, "the paper scale's choices")
    return root, stages_run(dvc("repro", cwd=root))


def test_the_paper_choices_differ_from_the_smoke_ones() -> None:
    smoke = compose_params(REPO / "conf", list(SMOKE))
    assert all(_get(smoke, choice.split("=")[0]) != choice.split("=")[1] for choice in _paper_choices())


def test_every_stage_runs_under_its_declared_params_with_the_paper_choices(paper_choices_run) -> None:
    root, ran = paper_choices_run
    # each choice re-runs the stages that declare it, and each of those ran to the end
    assert {"review", "rollouts", "judge", "train"} <= set(ran)
    params = load_params(root / "params.yaml")
    assert params.judge.backed_by == "model" and params.solver.rollouts == "model"
    judged = json.loads(params.paths.under(root).metrics_of("judge").read_text())
    assert judged["rollouts"]["backends"]["agent"] != "scripted"
    rollouts = json.loads(params.paths.under(root).metrics_of("rollouts").read_text())
    assert rollouts["generated_tokens"] > 0  # the tiny model rolled out, not a scripted solver
    assert "intervene" in ran
    intervened = json.loads(params.paths.under(root).metrics_of("intervene").read_text())
    assert intervened["corrected"] == intervened["diagnosed"] > 0  # the tiny model wrote corrections
    # every stage that ran the model records what computed it
    for stage in ("review", "rollouts", "judge", "intervene", "train", "evaluate"):
        assert json.loads(params.paths.under(root).metrics_of(stage).read_text())["runtime"] == FLOAT32, stage
    assert intervened["scorer_runtime"] == FLOAT32
    assert "up to date" in dvc("status", cwd=root)


def test_the_smoke_run_ran_every_stage_under_its_declared_params(smoke_repo) -> None:
    lock = yaml.safe_load((smoke_repo / "dvc.lock").read_text(encoding="utf-8"))
    assert sorted(lock["stages"]) == sorted(STAGES)
    paths = load_params(smoke_repo / "params.yaml").paths.under(smoke_repo)
    runtime = {stage: json.loads(paths.metrics_of(stage).read_text())["runtime"]
               for stage in ("review", "rollouts", "judge", "demo_sft", "train", "evaluate")}
    # the scripted solvers and judges run no model; training and evaluation record what ran theirs
    assert runtime == {"review": None, "rollouts": None, "judge": None, "demo_sft": FLOAT32, "train": FLOAT32,
                       "evaluate": FLOAT32}
    intervened = json.loads(paths.metrics_of("intervene").read_text())
    assert (intervened["runtime"], intervened["scorer_runtime"]) == (None, FLOAT32)


# ----------------------------------------------------------------------------- comparing runs

def test_dvc_exp_show_leads_with_the_transfer_metrics_and_leaves_timings_out(smoke_repo) -> None:
    header = dvc("exp", "show", "--csv", cwd=smoke_repo, stdout_only=True).splitlines()[0].split(",")
    first_metric = next(i for i, column in enumerate(header) if "." in column)
    paths = load_params(smoke_repo / "params.yaml").paths.under(smoke_repo)
    transfer = json.loads(paths.transfer.read_text())
    leading = [f"{pool}.{model}.{metric}" for pool, models in sorted(transfer.items())
               for model, metrics in sorted(models.items()) for metric in sorted(metrics)]
    assert header[first_metric:first_metric + len(leading)] == leading
    assert not [column for column in header if "seconds" in column and "timing" in column]


#: the README's command for comparing runs at a glance
COMPARISON = ("dvc exp show --drop '.*' --keep "
              "'Experiment|.*\\.(pass_rate|pass_rate_delta|score)$|domains\\.count|judge\\.name|experiment'")


def test_the_comparison_command_shows_the_headline_and_the_sweep_choices(smoke_repo) -> None:
    args = shlex.split(COMPARISON)[1:] + ["--csv"]
    header = dvc(*args, cwd=smoke_repo, stdout_only=True).splitlines()[0].split(",")
    assert header[0] == "Experiment" and {"domains.count", "judge.name", "experiment"} <= set(header)
    metrics = [c for c in header if c.startswith(("benchmark.", "indist.", "bfcl."))]
    assert {f"{pool}.rft.{metric}" for pool in ("benchmark", "indist")
            for metric in ("pass_rate", "pass_rate_delta")} <= set(metrics)
    assert all(c.endswith(("pass_rate", "pass_rate_delta", "score")) for c in metrics)
    assert len(header) == len(metrics) + 4
