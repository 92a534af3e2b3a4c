"""A new backend, benchmark, judge and sandbox provider each comes from its one registration: a
module of a lab's own package (here a namespace package in a temporary folder) and, where an option
file picks it, that file in a copy of ``conf/``. Nothing of this repository is edited, and each
test counts the files its kind needed (two at most)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from interlock.core import schemas
from interlock.core.backend import ChatRequest
from interlock.core.chat import Message
from interlock.core.config import Params, compose_params
from interlock.core.errors import InterlockError
from interlock.core.io import write_row_groups
from interlock.core.registry import BACKENDS, BENCHMARKS, JUDGES, SANDBOXES, Registry
from interlock.evaluation.stage import benchmarks_for
from interlock.judging import sandbox
from interlock.judging.judges import JudgeContext
from interlock.judging.stage import run_accept, run_judge
from interlock.models.backends import make_backend
from interlock.rollout.runs import scripted_rollouts
from interlock.testing.adversaries import PLANS

from helpers.artifacts import write_packs
from helpers.repo import REPO

#: the lab's modules and the options that pick them, by kind: (module, option file, its text)
TOYS = {
    "backend": ("toylab/echo_backend.py", "backbone/toy.yaml", None),
    "benchmark": ("toylab/one_task.py", "eval/toy.yaml", "name: toy\nmodels: [base]\n"
                  "pools: [benchmark, toylab.one_task]\nbootstrap: 1000\nconfidence: 0.95\n"),
    "judge": ("toylab/lenient_judge.py", "judge/toy.yaml", "defaults:\n  - agent\n  - _self_\n"
              "name: toylab.lenient_judge\ngraders: [agent, text, toylab.lenient_judge]\n"),
    "sandbox": ("toylab/counted_sandbox.py", None, None),  # named on the command line: sandbox.provider
}
MODULES = {
    "backend": '''
        from interlock.core.backend import Completion
        from interlock.core.registry import BACKENDS

        class Echo:
            name = "echo"
            def begin(self, key, task): pass
            def end(self, key): pass
            def complete(self, requests):
                return [Completion("echo: " + r.messages[-1].content, finish_reason="stop") for r in requests]

        @BACKENDS.register("toylab.echo_backend")
        def build(backbone, checkpoint):
            return Echo()
        ''',
    "benchmark": '''
        from interlock.core.registry import BENCHMARKS

        class OneTask:
            def __init__(self, name, limit):
                self.name, self.limit = name, limit
            def tasks(self): return [("toy-1", "toy")]
            def identity(self): return {"toy": 1}
            def rollout(self, model, policy, backend, settings, *, out, timings, work): pass
            def grade(self, trajectories): return []
            def close(self): pass

        @BENCHMARKS.register("toylab.one_task")
        def build(name, params, paths):
            return OneTask(name, params.scale.evaluation.attempts)
        ''',
    "judge": '''
        from interlock.core.registry import JUDGES
        from interlock.judging.verdicts import Judgement, verdict_row

        class Lenient:
            name = "toylab.lenient_judge"
            def judge(self, items):
                return [Judgement(t.rollout_id, t.task_id, self.name,
                                  [verdict_row(t.rollout_id, t.task_id, self.name, c.criterion_id, True,
                                               "lenient") for c in p.rubric]) for t, p in items]
            def report(self): return {"backend": "lenient"}
            def close(self): pass

        @JUDGES.register("toylab.lenient_judge")
        def build(context):
            return Lenient()
        ''',
    "sandbox": '''
        from interlock.core.registry import SANDBOXES
        from interlock.judging.sandboxes.namespaces import Namespaces

        RUNS = []

        @SANDBOXES.register("toylab.counted_sandbox")
        class Counted(Namespaces):
            name = "toylab.counted_sandbox"
            def run(self, code, workspace_dir, limits, base):
                RUNS.append(code)
                return super().run(code, workspace_dir, limits, base)
        ''',
}


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture
def lab(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """An empty plugin folder on the import path, and a copy of this repository's conf/."""
    plugins, conf = tmp_path / "plugins", tmp_path / "conf"
    (plugins / "toylab").mkdir(parents=True)
    shutil.copytree(REPO / "conf", conf)
    monkeypatch.syspath_prepend(str(plugins))
    yield plugins, conf
    for name in [m for m in sys.modules if m == "toylab" or m.startswith("toylab.")]:
        del sys.modules[name]


def _register(kind: str, plugins: Path, conf: Path) -> set[Path]:
    """Write the kind's module and option (where it has one) the way docs/authoring.md says; the
    files that took."""
    before = _files(plugins) | _files(conf)
    module, option, text = TOYS[kind]
    (plugins / module).write_text(textwrap.dedent(MODULES[kind]).lstrip())
    if kind == "backend":  # a backbone option: the tiny one, served by the new backend
        text = (conf / "backbone" / "tiny.yaml").read_text().replace("name: tiny ", "name: toy ").replace(
            "backend: transformers ", "backend: toylab.echo_backend ")
    if option is not None:
        (conf / option).write_text(text)
    return (_files(plugins) | _files(conf)) - before


def _params(conf: Path, override: str) -> Params:
    return Params.model_validate(compose_params(conf, [override]))


def test_a_toy_backend_serves_a_backbone(lab, tmp_path: Path) -> None:
    plugins, conf = lab
    touched = _register("backend", plugins, conf)
    assert len(touched) == 2  # the module and a backbone option
    backbone = _params(conf, "backbone=toy").backbone
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    backend = make_backend(backbone, checkpoint)
    (reply,) = backend.complete([ChatRequest("k", (Message("user", "ping"),))])
    assert reply.text == "echo: ping" and BACKENDS.get("toylab.echo_backend") is not None


def test_a_toy_benchmark_joins_the_evaluation_pools(lab, tmp_path: Path) -> None:
    plugins, conf = lab
    touched = _register("benchmark", plugins, conf)
    assert len(touched) == 2  # the module and an eval option
    params = _params(conf, "eval=toy")
    assert params.eval.pools == ["benchmark", "toylab.one_task"]
    built = BENCHMARKS.get("toylab.one_task")("toylab.one_task", params, params.paths)
    assert (built.name, built.tasks(), built.limit) == ("toylab.one_task", [("toy-1", "toy")],
                                                         params.scale.evaluation.attempts)
    toy_pools = params.eval.model_copy(update={"pools": ["toylab.one_task"]})
    only_toy = params.model_copy(update={"eval": toy_pools})
    assert [b.name for b in benchmarks_for(only_toy, params.paths)] == ["toylab.one_task"]


def test_a_toy_judge_grades_the_pool_and_accept_uses_it(lab, tmp_path: Path, contexts) -> None:
    plugins, conf = lab
    touched = _register("judge", plugins, conf)
    assert len(touched) == 2  # the module and a judge option
    judge = _params(conf, "judge=toy").judge
    packs_dir, table, out = tmp_path / "packs", tmp_path / "trajectories.parquet", tmp_path / "judge"
    write_packs(packs_dir, [c.pack for c in contexts[:2]])
    with tempfile.TemporaryDirectory() as workdir:
        made = scripted_rollouts(contexts[:2], ("oracle", "claim_only"), seed=0, workdir=Path(workdir),
                                 skip_effect=1.0, ignore_coupling=0.0, plans=PLANS)
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write([t.to_row() for t in made])
    summary = run_judge(table, [packs_dir], out, graders=judge.graders, context=JudgeContext(workers=1),
                        progress=False)
    assert sorted(summary["judges"]) == ["agent", "text", "toylab.lenient_judge"]
    assert summary["backends"]["toylab.lenient_judge"] == "lenient"
    lenient, _ = run_accept(table, out, [packs_dir], tmp_path / "accepted.parquet", judge=judge.name)
    strict, _ = run_accept(table, out, [packs_dir], tmp_path / "strict.parquet", judge="agent")
    assert lenient["accepted"] == len(made) == 4 and strict["accepted"] == 2  # only the oracle's


def test_a_toy_sandbox_provider_runs_model_written_checks(lab, tmp_path: Path) -> None:
    plugins, conf = lab
    touched = _register("sandbox", plugins, conf)
    assert len(touched) == 1  # the module: sandbox.provider names it
    provider = _params(conf, "sandbox.provider=toylab.counted_sandbox").sandbox.provider
    if not sandbox.boundary_mode("namespaces").available:
        pytest.skip("the toy provider wraps the namespaces provider, unavailable here")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "out.csv").write_text("case_id\nC-1\n")
    result = sandbox.run_script("assert open('out.csv').read().startswith('case_id')", workspace,
                                provider=provider)
    assert result.passed, (result.reason, result.output)
    runs = sys.modules["toylab.counted_sandbox"].RUNS
    assert len(runs) == 2 and "open('out.csv')" in runs[1]  # the probe, then the check


@pytest.mark.parametrize(("registry", "field"), [(BACKENDS, "backbone.backend"), (BENCHMARKS, "eval.pools"),
                                                  (JUDGES, "judge.graders"), (SANDBOXES, "sandbox.provider")])
def test_an_unknown_name_lists_the_known_ones(registry: Registry, field: str) -> None:
    with pytest.raises(InterlockError, match=r"no \w+ named 'nope' \(known: .+\)") as error:
        registry.get("nope")
    assert error.value.field == field
    assert registry.names() and all(registry.check(name) == name for name in registry.names())
    with pytest.raises(InterlockError, match="no .* named 'nolab.missing'"):
        registry.get("nolab.missing")


def test_every_option_names_a_registered_provider() -> None:
    """Each option of conf/ composes and validates, so every name it holds is registered (a file
    named ``_...`` is what a group's options share, not an option)."""
    named = (("backbone", "backend"), ("judge", "name"), ("sandbox", "provider"), ("eval", "pools"))
    for group, key in named:
        for option in sorted(p for p in (REPO / "conf" / group).glob("*.yaml") if not p.stem.startswith("_")):
            composed = compose_params(REPO / "conf", [f"{group}={option.stem}"])
            Params.model_validate(composed)
            assert composed[group][key], f"{option} names no provider"


def test_a_registry_finds_providers_by_reading_modules_not_importing_them(tmp_path: Path,
                                                                          monkeypatch) -> None:
    """In-package providers are found from their module's source; only the one asked for is
    imported (a sibling that would fail to import stays unimported)."""
    package = tmp_path / "toyproviders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "good.py").write_text("from tests_registry_home import TOYS\n"
                                     "@TOYS.register('good')\n@TOYS.register('also_good')\n"
                                     "def build():\n    return 'built'\n")
    (package / "broken.py").write_text("raise ImportError('never imported')\nTOYS.register('broken')\n")
    (tmp_path / "tests_registry_home.py").write_text(
        "from interlock.core.registry import Registry\nTOYS = Registry('toy', 'toyproviders', 'TOYS')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    home = __import__("tests_registry_home")
    try:
        assert home.TOYS.names() == ["also_good", "broken", "good"]
        assert home.TOYS.get("also_good")() == "built" and "toyproviders.broken" not in sys.modules
        with pytest.raises(ImportError, match="never imported"):
            home.TOYS.get("broken")
    finally:
        for name in [m for m in sys.modules if m.startswith(("toyproviders", "tests_registry_home"))]:
            del sys.modules[name]


def test_a_judge_that_loses_rollouts_or_takes_a_table_name_is_refused(tmp_path: Path, contexts) -> None:
    """A grader's judgements must line up with the rollouts, one each; and no grader may take the
    name of the truth's collateral table."""
    from interlock.core.registry import JUDGES as registry

    @registry.register("tests.judge_that_loses_one")
    def build(context):
        class LosesOne:
            name = "tests.judge_that_loses_one"
            def judge(self, items): return []  # noqa: E704
            def report(self): return {}  # noqa: E704
            def close(self): pass  # noqa: E704
        return LosesOne()

    packs_dir, table = tmp_path / "packs", tmp_path / "trajectories.parquet"
    write_packs(packs_dir, [contexts[0].pack])
    with tempfile.TemporaryDirectory() as workdir:
        made = scripted_rollouts(contexts[:1], ("oracle",), seed=0, workdir=Path(workdir), skip_effect=1.0,
                                 ignore_coupling=0.0)
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write([t.to_row() for t in made])
    with pytest.raises(InterlockError, match="gave 0 judgements for 1 rollouts") as error:
        run_judge(table, [packs_dir], tmp_path / "out", graders=["agent", "tests.judge_that_loses_one"],
                  context=JudgeContext(workers=1), progress=False)
    assert error.value.field == "judge.graders"
    with pytest.raises(InterlockError, match="no grader may be named 'collateral'"):
        run_judge(table, [packs_dir], tmp_path / "out2", graders=["agent", "collateral"], progress=False)
