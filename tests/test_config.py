"""The Hydra config under conf/ composes, and the committed params.yaml is its composed default.

`dvc repro` never composes: stages read the committed params.yaml. So params.yaml must be
exactly what DVC's Hydra integration (`dvc exp run`) would write for the default choices.
To regenerate it after changing conf/: `interlock params`.
"""

from __future__ import annotations

import ast
import configparser
import json
import typing
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from interlock.core.config import Params, compose_params, load_params, params_text, write_params
from interlock.core.errors import InterlockError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PARAMS = ROOT / "params.yaml"

SCALE_TRAIN_DOMAINS = {"smoke": 4, "default": 16, "paper": 128}
BREADTHS = [2, 4, 8, 16, 32, 64, 128]  # domains.count: the breadth ablation's levels
JUDGE_OPTIONS = ["agent", "text"]
#: backbone option -> its source
BACKBONE_SOURCES = {"tiny": "tiny", "smollm2": "gguf_wheel", "hub": "pretrained"}
#: experiment -> the choices it presets: (scale, backbone, RFT seeds)
#: experiment -> its scale, backbone, RFT seeds, and the method choices it makes
EXPERIMENTS = {"default": ("default", "smollm2", 2, {}),
               "smoke": ("smoke", "tiny", 3, {"solver.rollouts": "noisy"}),
               "paper": ("paper", "hub", 3, {"solver.start": "base", "solver.validation": "model",
                                             "judge.backed_by": "model"})}


def compose_config(overrides: list[str] | None = None) -> dict:
    return compose_params(CONF, overrides)


def _options(group: str) -> list[str]:
    """The group's options (a file named ``_...`` is what its options share, not an option)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


def test_params_yaml_is_composed_default() -> None:
    composed = compose_config()
    committed = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    assert committed == composed, (
        "params.yaml differs from the composed default of conf/; regenerate it with `interlock params`"
    )


def test_params_yaml_text_matches_dvc_dump() -> None:
    # Byte-for-byte what DVC writes, so that `dvc exp run` with no overrides changes nothing.
    assert PARAMS.read_text(encoding="utf-8") == params_text(compose_config())


def test_scale_options_are_the_expected_ones() -> None:
    assert _options("scale") == sorted(SCALE_TRAIN_DOMAINS)


def test_the_default_trains_on_every_accepted_trajectory() -> None:
    assert compose_config()["domains"] == {"count": None}


@pytest.mark.parametrize("option", sorted(SCALE_TRAIN_DOMAINS))
def test_scale_option_composes(option: str) -> None:
    cfg = compose_config([f"scale={option}"])
    scale = Params.model_validate(cfg).scale  # the stages accept it
    assert scale.name == option
    assert scale.train_domains == SCALE_TRAIN_DOMAINS[option]
    assert scale.heldout_domains > 0
    assert set(scale.tasks_per_domain) == {"demo", "rft", "dev", "benchmark", "indist"}
    assert set(scale.task_size.model_dump()) == {"decisions", "effects_per_decision", "couplings",
                                                 "distractors"}
    assert all(isinstance(v, int) and v > 0 for v in scale.tasks_per_domain.values())
    assert scale.row_group_tasks > 0 and scale.breadth_trajectories > 0
    # a scale sets sizes and nothing else: every other group and key stays at its default
    default = compose_config()
    assert {k: v for k, v in cfg.items() if k != "scale"} == {
        k: v for k, v in default.items() if k != "scale"}


@pytest.mark.parametrize(("option", "tasks"), [("smoke", 1), ("default", 1), ("paper", 2)])
def test_each_scale_sizes_the_indist_pool_and_none_may_leave_it_out(option: str, tasks: int) -> None:
    """`scale.tasks_per_domain.indist`: unseen tasks per training domain, evaluated by default."""
    cfg = compose_config([f"scale={option}"])
    assert Params.model_validate(cfg).scale.tasks_per_domain["indist"] == tasks
    del cfg["scale"]["tasks_per_domain"]["indist"]
    with pytest.raises(ValueError, match="tasks_per_domain needs exactly the pools demo, rft, dev, indist, "
                                         "benchmark"):
        Params.model_validate(cfg)


@pytest.mark.parametrize("count", BREADTHS)
def test_a_breadth_composes(count: int) -> None:
    cfg = compose_config([f"domains.count={count}"])
    assert cfg["domains"] == {"count": count}
    # `domains` must not change anything the synthesis stages read.
    assert cfg["scale"] == compose_config()["scale"]


@pytest.mark.parametrize(("scale", "valid"), [("smoke", [2, 4]), ("default", [2, 4, 8, 16]),
                                               ("paper", BREADTHS)])
def test_a_breadth_is_valid_only_where_the_scale_has_that_many_training_domains(
        scale: str, valid: list[int], tmp_path: Path) -> None:
    for count in BREADTHS:
        path = tmp_path / f"{scale}-{count}.yaml"
        write_params(CONF, path, [f"scale={scale}", f"domains.count={count}"])
        if count in valid:
            assert load_params(path).domains.count == count
        else:
            expected = rf"breadth d{count} needs .* scale {scale} has"
            with pytest.raises(InterlockError, match=expected) as error:
                load_params(path)
            assert error.value.field == "domains.count" and error.value.file == str(path)


def test_judge_options_are_the_expected_ones() -> None:
    assert _options("judge") == JUDGE_OPTIONS
    assert compose_config()["judge"] == {"name": "agent", "graders": ["agent", "text"],
                                         "backed_by": "scripted"}


@pytest.mark.parametrize("option", JUDGE_OPTIONS)
def test_judge_option_composes(option: str) -> None:
    cfg = compose_config([f"judge={option}"])
    assert Params.model_validate(cfg).judge.name == option
    # `judge` changes nothing but itself: every other group stays at its default.
    default = compose_config()
    assert {k: v for k, v in cfg.items() if k != "judge"} == {
        k: v for k, v in default.items() if k != "judge"}


def test_only_accept_depends_on_the_judge_choice() -> None:
    """The graders always grade the whole pool; switching `judge` re-runs only `accept`."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    readers = {key: {name for name, stage in stages.items() if key in map(str, stage.get("params", []))}
               for key in ("judge", "judge.name", "judge.graders")}
    assert readers == {"judge": {"accept"}, "judge.name": set(), "judge.graders": {"judge"}}
    assert {compose_config([f"judge={option}"])["judge"]["graders"] == ["agent", "text"]
            for option in JUDGE_OPTIONS} == {True}


@pytest.mark.parametrize(("judge", "reason"), [
    ({"name": "nope", "graders": ["agent", "text", "nope"]}, "no judge named 'nope' .*agent, text"),
    ({"name": "text", "graders": ["agent"]}, "must be among judge.graders"),
    ({"name": "text", "graders": ["text"]}, "must include the agent judge")])
def test_a_judge_choice_is_checked_against_the_registered_judges(judge: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Params.model_validate({**compose_config(), "judge": {**judge, "backed_by": "scripted"}})


def test_backbone_options_are_the_expected_ones() -> None:
    assert _options("backbone") == sorted(BACKBONE_SOURCES)
    assert compose_config()["backbone"]["name"] == "smollm2"


@pytest.mark.parametrize("option", sorted(BACKBONE_SOURCES))
def test_backbone_option_composes(option: str) -> None:
    cfg = compose_config([f"backbone={option}"])
    backbone = Params.model_validate(cfg).backbone  # the stages accept it
    assert backbone.name == option and backbone.weights.source == BACKBONE_SOURCES[option]
    # the default backbone measures (auto); the tiny one and the hub's are pinned to fp32 bytes
    assert backbone.dtype == ("auto" if option == "smollm2" else "float32")
    # the tiny one decodes through transformers; the others through the fastest engine that
    # answered a probe on this machine (auto: interlock.models.engine)
    assert backbone.backend == ("transformers" if option == "tiny" else "auto")
    assert backbone.max_context == (12288 if option == "tiny" else 8192)
    assert backbone.generation.temperature == 0.7 and backbone.generation.max_new_tokens > 0
    # every option has the same keys but its weights, whose keys are its source's own (no nulls)
    assert set(cfg["backbone"]) == set(compose_config()["backbone"])
    assert None not in cfg["backbone"]["weights"].values()
    # `backbone` changes nothing but itself
    default = compose_config()
    assert {k: v for k, v in cfg.items() if k != "backbone"} == {
        k: v for k, v in default.items() if k != "backbone"}


def test_the_experiment_options_are_the_expected_ones() -> None:
    assert _options("experiment") == sorted(EXPERIMENTS)
    assert compose_config()["experiment"] == "default"


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_each_experiment_presets_scale_backbone_and_seeds(experiment: str) -> None:
    """Presets that set several groups at once are experiments, not side effects of a size."""
    cfg = compose_config([f"experiment={experiment}"])
    assert cfg["experiment"] == experiment
    scale, backbone, seeds, choices = EXPERIMENTS[experiment]
    assert (cfg["scale"]["name"], cfg["backbone"]["name"], cfg["train"]["seeds"]) == (
        scale, backbone, seeds)
    assert {key: cfg[key.split(".")[0]][key.split(".")[1]] for key in choices} == choices
    # and nothing else: every other group stays at its default
    default = compose_config()
    preset = {"experiment", "scale", "backbone", "train", *(key.split(".")[0] for key in choices)}
    for key in choices:  # the rest of a group a choice is made in
        group, name = key.split(".")
        assert {k: v for k, v in cfg[group].items() if f"{group}.{k}" not in choices} == {
            k: v for k, v in default[group].items() if f"{group}.{k}" not in choices}, name
    assert {k: v for k, v in cfg.items() if k not in preset} == {
        k: v for k, v in default.items() if k not in preset}
    assert {k: v for k, v in cfg["train"].items() if k != "seeds"} == {
        k: v for k, v in default["train"].items() if k != "seeds"}


@pytest.mark.parametrize("overrides", [["experiment=smoke", "backbone=hub"],
                                       ["backbone=hub", "experiment=smoke"],
                                       ["experiment=smoke", "backbone=smollm2"]])
def test_a_backbone_choice_beats_the_experiments(overrides: list[str]) -> None:
    cfg = compose_config(overrides)
    assert cfg["scale"]["name"] == "smoke"
    chosen = next(o for o in overrides if o.startswith("backbone=")).split("=")[1]
    assert cfg["backbone"]["name"] == chosen


def test_base_model_params_exist_in_every_backbone() -> None:
    """DVC refuses a stage whose params are missing from params.yaml: base_model lists the
    backbone keys it reads (``weights`` whole, whatever its source's keys), and every option has them."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]["base_model"]
    keys = [p.split(".", 1)[1] for p in stage["params"] if str(p).startswith("backbone.")]
    assert "weights" in keys and "generation" not in keys and "backend" not in keys
    for option in BACKBONE_SOURCES:
        assert set(keys) <= set(compose_config([f"backbone={option}"])["backbone"])


def test_dvc_hydra_integration_enabled() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".dvc" / "config", encoding="utf-8")
    assert parser.has_section("hydra")
    assert parser.getboolean("hydra", "enabled")
    assert parser.get("hydra", "config_dir") == "conf"
    assert parser.get("hydra", "config_name", fallback="config") == "config"


@pytest.mark.parametrize(("option", "lora", "rl"), [("full", False, False), ("lora", True, False),
                                                    ("grpo", False, True)])
def test_train_option_composes(option: str, lora: bool, rl: bool) -> None:
    train = Params.model_validate(compose_config([f"train={option}"])).train
    assert train.name == option and (train.lora is not None) == lora and train.rl.enabled == rl
    assert train.demo.epochs >= 1 and train.rft.epochs >= 1 and train.launcher == "python"


def test_grpo_differs_from_full_fine_tuning_only_in_turning_rl_on() -> None:
    """So `-S train=grpo` on top of the default run re-runs `rl` and `evaluate` and nothing else:
    the fine-tunings read none of what differs."""
    full, grpo = compose_config(["train=full"])["train"], compose_config(["train=grpo"])["train"]
    assert {k: v for k, v in grpo.items() if k not in ("name", "rl")} == {
        k: v for k, v in full.items() if k not in ("name", "rl")}
    assert {k: v for k, v in grpo["rl"].items() if k != "enabled"} == {
        k: v for k, v in full["rl"].items() if k != "enabled"}
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    readers = {name for name, stage in stages.items()
               if {"train.name", "train.rl", "train"} & {str(p) for p in stage.get("params", [])}}
    assert readers == {"rl"}


def test_each_fine_tuning_stage_reads_only_its_own_phase() -> None:
    """Changing the RFT schedule must not re-run the demonstration SFT, and the reverse."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    demo = {str(p) for p in stages["demo_sft"]["params"] if str(p).startswith("train")}
    rft = {str(p) for p in stages["train"]["params"] if str(p).startswith("train")}
    assert "train.demo" in demo - rft and {"train.rft", "train.seeds"} <= rft - demo
    shared = set(compose_config()["train"]) - {"name", "demo", "rft", "seeds", "launcher", "rl"}
    assert {f"train.{key}" for key in shared} <= demo & rft


@pytest.mark.parametrize("option", ["offline", "online", "disabled"])
def test_tracking_option_composes(option: str) -> None:
    cfg = compose_config([f"tracking={option}"])
    assert Params.model_validate(cfg).tracking.mode == option
    assert {k: v for k, v in cfg.items() if k != "tracking"} == {
        k: v for k, v in compose_config().items() if k != "tracking"}


def test_no_stage_depends_on_tracking() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert not [name for name, stage in stages.items()
                if any(str(p).startswith("tracking") for p in stage.get("params", []))]


def test_the_default_evaluation_compares_original_demonstration_rft_and_rl() -> None:
    """rl is listed always and evaluated where train=grpo trained it (the rl stage otherwise leaves
    a note, and evaluate leaves rl out saying why)."""
    evaluation = Params.model_validate(compose_config()).eval
    assert evaluation.models == ["base", "demo_sft", "rft", "rl"]
    assert evaluation.pools == ["benchmark", "indist"]


@pytest.mark.parametrize(("overrides", "seeds"), [
    ([], 2), (["train=lora"], 2), (["scale=smoke"], 2), (["experiment=smoke"], 3), (["experiment=paper"], 3),
    (["train.seeds=3"], 3), (["train.seeds=5", "experiment=default"], 5)])
def test_the_default_run_trains_two_seeds_and_a_command_line_count_wins(overrides, seeds) -> None:
    """`train.seeds` is 3 in the recipe; the default experiment sets 2 to fit its 30-minute budget."""
    cfg = compose_config(overrides)
    assert cfg["train"]["seeds"] == seeds
    assert Params.model_validate(cfg).train.seeds == seeds


#: the README's command that adds the BFCL pool (one experiment: a list value, not a sweep)
BFCL_ON = "eval.pools=[benchmark,indist,bfcl]"


@pytest.mark.parametrize(("scale", "tasks"), [("smoke", 2), ("default", 4), ("paper", None)])
def test_each_scale_sizes_the_bfcl_pool(scale: str, tasks: int | None) -> None:
    """`scale.evaluation.bfcl_tasks`: the first N of BFCL's tasks in id order (null: all 200)."""
    assert Params.model_validate(compose_config([f"scale={scale}"])).scale.evaluation.bfcl_tasks == tasks


def test_only_evaluate_reads_the_bfcl_pool_size() -> None:
    """Resizing the BFCL pool re-runs the evaluation and nothing else."""
    key = "scale.evaluation.bfcl_tasks"
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    readers = {name for name, stage in stages.items()
               if any(key == p or key.startswith(f"{p}.") for p in map(str, stage.get("params", [])))}
    assert readers == {"evaluate"}


def test_bfcl_is_an_opt_in_pool_and_one_override_turns_it_on(tmp_path: Path) -> None:
    """`bfcl` is an allowed pool but not a default one (the default run's budget is measured
    without it); the documented `-S` composes, through DVC's own Hydra composition, to one
    experiment with both pools."""
    from dvc.utils.hydra import compose_and_dump, to_hydra_overrides

    assert Params.model_validate(compose_config()).eval.pools == ["benchmark", "indist"]
    assert not any(o.is_sweep_override() for o in to_hydra_overrides([BFCL_ON]))
    compose_and_dump(tmp_path / "params.yaml", str(CONF), None, "config", str(ROOT), [BFCL_ON])
    params = load_params(tmp_path / "params.yaml")
    assert params.eval.pools == ["benchmark", "indist", "bfcl"] and params.scale.evaluation.bfcl_tasks == 4
    refused = compose_config(["eval.pools=[benchmark,nope]"])
    with pytest.raises(ValueError, match=r"no benchmark named 'nope' \(known: benchmark, bfcl, "):
        Params.model_validate(refused)


def test_one_override_turns_on_every_bfcl_category() -> None:
    """One pool per BFCL multi-turn category, all four through one `-S`."""
    from interlock.evaluation.bfcl import CATEGORIES

    override = f"eval.pools=[benchmark,indist,{','.join(CATEGORIES)}]"
    pools = Params.model_validate(compose_config([override])).eval.pools
    assert pools == ["benchmark", "indist", *CATEGORIES]


# ----------------------------------------------------------------------------- one declaration each

def _leaves(node: object, key: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every leaf of a config tree (an empty mapping is a leaf too)."""
    if isinstance(node, dict) and node:
        for name, value in node.items():
            yield from _leaves(value, f"{key}.{name}" if key else str(name))
    else:
        yield key, node


def _written(path: Path, conf: Path = CONF) -> Iterator[tuple[str, str]]:
    """(dotted key, value as JSON) of every leaf ``path`` writes itself (not what its defaults list
    brings), under the package the file lands in: its group's, or the root for ``_global_``."""
    text = path.read_text(encoding="utf-8")
    group = path.parent.relative_to(conf).as_posix().replace("/", ".")
    package = "" if "@package _global_" in text or group == "." else group
    written = yaml.safe_load(text) or {}
    written.pop("defaults", None)
    yield from ((key, json.dumps(value)) for key, value in _leaves(written, package))


def test_no_value_is_written_by_two_files_of_conf() -> None:
    """One declaration per option: a value several options share is written once, in the file they
    extend (a group's ``_shared.yaml``, the option the others list first in their defaults, or
    ``conf/server/``), so a change to it is one edit and cannot leave a copy behind."""
    writers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(CONF.rglob("*.yaml")):
        for key, value in _written(path):
            writers[key, value].append(path.relative_to(CONF).as_posix())
    assert {f"{key} = {value}": files for (key, value), files in writers.items() if len(files) > 1} == {}


def test_the_no_duplicate_check_sees_a_copy(tmp_path: Path) -> None:
    """The check above reads what a file writes under its group's package."""
    (tmp_path / "backbone").mkdir()
    (tmp_path / "backbone" / "a.yaml").write_text("defaults:\n  - _shared\nserver:\n  max_retries: 5\n")
    assert list(_written(tmp_path / "backbone" / "a.yaml", tmp_path)) == [
        ("backbone.server.max_retries", "5")]


def _sections(annotation: object) -> Iterator[type[BaseModel]]:
    """Every pydantic model an annotation holds (through unions, lists and ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        for field in annotation.model_fields.values():
            yield from _sections(field.annotation)
    for argument in typing.get_args(annotation):
        yield from _sections(argument)


def test_the_typed_config_declares_no_default() -> None:
    """conf/ declares every default; the models that check the composed values write none of
    their own (a section built in code takes conf's: ``interlock.core.config.default_params``)."""
    defaulted = {f"{model.__name__}.{name}" for model in _sections(Params)
                 for name, field in model.model_fields.items() if not field.is_required()}
    assert defaulted == set()


#: literal defaults in src/ that equal a conf value of the same name but are not that option's
#: default: the pipeline always passes the option where it has one, and these are the library's
#: own defaults for callers outside it, free to differ. (file, name) -> why.
LIBRARY_DEFAULTS = {
    ("core/backend.py", "max_new_tokens"): "a request's token budget when its caller sets none",
    ("rollout/engine.py", "max_new_tokens"): "RolloutLimits for scripted and test runs; stages use .of(...)",
    ("rollout/engine.py", "temperature"): "RolloutLimits for scripted and test runs; stages use .of(...)",
    ("judging/text.py", "max_new_tokens"): "a model judge's reply budget, no option sets it",
    ("judging/agent.py", "max_new_tokens"): "a model judge's reply budget, no option sets it",
    ("judging/sandbox.py", "provider"): "auto: the first boundary this machine builds, if none is named",
    ("evaluation/metrics.py", "attempts"): "the MDE formula's attempts per task",
    ("rollout/runs.py", "attempts"): "scripted rollouts for tests and controls",
    ("recursive/rounds.py", "candidates"): "a round report's counter, starting at 0",
    ("models/checkpoint.py", "dtype"): "a checkpoint loads in fp32 unless told",
    ("models/transformers_backend.py", "dtype"): "a checkpoint loads in fp32 unless told",
    ("training/scoring.py", "dtype"): "a checkpoint loads in fp32 unless told",
}


def _library_defaults(source: Path) -> Iterator[tuple[str, int, object]]:
    """(name, line, value) of every literal default in ``source``: function parameters, and
    annotated class fields (``Field(default=...)`` included)."""
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        pairs: list[tuple[str, ast.expr]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            positional = node.args.posonlyargs + node.args.args
            pairs += [(a.arg, d) for a, d in zip(positional[len(positional) - len(node.args.defaults):],
                                                 node.args.defaults, strict=True)]
            keywords = zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
            pairs += [(a.arg, d) for a, d in keywords if d]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "Field":
                value = {k.arg: k.value for k in value.keywords}.get("default")
            if value is not None:
                pairs.append((node.target.id, value))
        for name, default in pairs:
            try:
                yield name, default.lineno, ast.literal_eval(default)
            except ValueError:
                continue


def test_the_library_writes_no_default_of_conf_again() -> None:
    """A literal default in src/ equal to a conf value of the same name (``max_retries: int = 5``
    beside conf/server's ``max_retries: 5``) is the option's default written twice: the caller
    passes the option instead. The exceptions are the library's own defaults, listed with why."""
    conf = defaultdict(list)
    for key, value in _leaves(compose_config()):
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            conf[key.rsplit(".", 1)[-1]].append(value)
    library = ROOT / "src" / "interlock"
    found = {}
    for source in sorted(library.rglob("*.py")):
        for name, line, value in _library_defaults(source):
            if isinstance(value, int | float | str) and not isinstance(value, bool) and value in conf[name]:
                found[source.relative_to(library).as_posix(), name] = line
    assert {key: f"line {line}" for key, line in found.items() if key not in LIBRARY_DEFAULTS} == {}
    assert set(LIBRARY_DEFAULTS) <= set(found), "an exception no longer applies: remove it"


def test_the_library_scan_sees_a_keyword_default_and_a_field_default(tmp_path: Path) -> None:
    """The check above reads parameter defaults and annotated fields, ``Field(default=...)`` too."""
    source = tmp_path / "client.py"
    source.write_text("class Limits:\n    timeout_s: float = Field(default=600.0, gt=0)\n\n\n"
                      "def connect(url, *, max_retries: int = 5, log=print): ...\n")
    assert sorted(_library_defaults(source)) == [("max_retries", 5, 5), ("timeout_s", 2, 600.0)]
