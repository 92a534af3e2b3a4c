"""A plugin of every kind (model backend, benchmark, judge, sandbox provider, rewrite operator,
decision, coupling and effect kind) comes from one module and one registration line, and the
pipeline's own code then uses it. Outside this repository: a lab's package (its modules and its
``pyproject.toml``), installed by pip. Inside: a line added to this repository's ``pyproject.toml``
(read from the checkout, no reinstall). Nothing of this repository is edited, and each kind's
files are counted (two at most)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from interlock.core import registry, schemas
from interlock.core.backend import ChatRequest
from interlock.core.chat import Message
from interlock.core.config import Params, compose_params
from interlock.core.errors import InterlockError
from interlock.core.io import write_row_groups
from interlock.core.registry import (
    BACKENDS,
    BENCHMARKS,
    COUPLING_KINDS,
    DECISION_KINDS,
    EFFECT_KINDS,
    JUDGES,
    OPERATORS,
    SANDBOXES,
    Registry,
)
from interlock.core.types import TaskSize
from interlock.evaluation.stage import benchmarks_for
from interlock.export import harbor
from interlock.judging import sandbox
from interlock.judging.judges import JudgeContext
from interlock.judging.stage import run_accept, run_judge
from interlock.models.backends import make_backend
from interlock.recursive.operators import NotApplicable
from interlock.review.controls import run_reference
from interlock.review.critic import critic_problems
from interlock.rollout.runs import scripted_rollouts
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import Domain
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack
from interlock.synthesis.tasks import TaskContext
from interlock.synthesis.workspace import materialize
from interlock.testing.adversaries import PLANS

from helpers.artifacts import write_packs
from helpers.config import defaults
from helpers.repo import REPO

#: kind -> (entry-point group, registered name, module, its source)
TOYS = {
    "backend": ("interlock.backends", "echo", "toy_backend", '''
        from interlock.core.backend import Completion

        class Echo:
            name = "echo"
            def begin(self, key, task): pass
            def end(self, key): pass
            def complete(self, requests):
                return [Completion("echo: " + r.messages[-1].content, finish_reason="stop") for r in requests]

        def build(backbone, checkpoint):
            return Echo()
        '''),
    "benchmark": ("interlock.benchmarks", "one_task", "toy_benchmark", '''
        class OneTask:
            def __init__(self, name, limit):
                self.name, self.limit = name, limit
            def tasks(self): return [("toy-1", "toy")]
            def identity(self): return {"toy": 1}
            def episodes(self, policy, attempts, seed): return iter(())
            def grade(self, trajectories): return []
            def close(self): pass

        def build(name, params, paths):
            return OneTask(name, params.scale.evaluation.attempts)
        '''),
    "judge": ("interlock.judges", "lenient", "toy_judge", '''
        from interlock.judging.verdicts import Judgement, verdict_row

        class Lenient:
            name = "lenient"
            def judge(self, items):
                return [Judgement(t.rollout_id, t.task_id, self.name,
                                  [verdict_row(t.rollout_id, t.task_id, self.name, c.criterion_id, True,
                                               "lenient") for c in p.rubric]) for t, p in items]
            def report(self): return {"backend": "lenient"}
            def close(self): pass

        class LosesOne(Lenient):
            name = "loses_one"
            def judge(self, items): return []

        def build(context):
            return Lenient()

        def losing(context):
            return LosesOne()
        '''),
    "sandbox": ("interlock.sandboxes", "counted", "toy_sandbox", '''
        from interlock.judging.sandboxes.namespaces import Namespaces

        RUNS = []

        class Counted(Namespaces):
            name = "counted"
            def run(self, code, workspace_dir, limits, base):
                RUNS.append(code)
                return super().run(code, workspace_dir, limits, base)
        '''),
    "operator": ("interlock.rewrite_operators", "idle_echo", "toy_operator", '''
        from dataclasses import replace

        from interlock.recursive.operators import AddIdleClause, Operator, Rewrite

        class IdleEcho(Operator):
            """One more idle clause, declared under this operator's own name and demand."""
            name, adds_requirement = "idle_echo", False
            demands = "recognise a clause that repeats the form of a coupling but binds no case"

            def _rewrite(self, parents, domain, task_id, seed, rng):
                made = AddIdleClause().rewrite(parents, domain, task_id, seed)
                return Rewrite(made.child, replace(made.contract, operator=self.name, demands=self.demands))
        '''),
    "decision kind": ("interlock.decision_kinds", "even_approval", "toy_decision", '''
        from interlock.synthesis.kinds.decisions import DecisionKind, Outcome
        from interlock.synthesis.text import Template

        class EvenApproval(DecisionKind):
            name = "even_approval"
            reads, positive_word, carries_amount = ("amount",), True, True
            template = Template("A {noun} is {positive} when its {amount} is an even number; "
                                "otherwise it is {fallback}.")

            def alternatives(self, row, rule, options):
                amount = int(str(row[rule["amount"]]))
                fallback = Outcome(rule["fallback"], fallback=True)
                return [Outcome(rule["positive"], amount), fallback] if amount % 2 == 0 else [fallback]
        '''),
    "coupling kind": ("interlock.coupling_kinds", "pair_cap", "toy_coupling", '''
        from interlock.synthesis.kinds.couplings import CouplingKind
        from interlock.synthesis.text import Template

        class PairCap(CouplingKind):
            name = "pair_cap"
            template = Template("{group_column} {group}: no more than a pair of {plural} may be "
                                "other than {fallback}; in order of {date}, earliest first, one that "
                                "would go over gets its next outcome.")

            def admits(self, chosen, candidate, rule):
                return candidate.fallback or sum(not o.fallback for o in chosen) < 2
        '''),
    "effect kind": ("interlock.effect_kinds", "tally", "toy_effect", '''
        from interlock.synthesis.kinds.effects import EffectKind, Realization
        from interlock.synthesis.text import Template

        class Tally(EffectKind):
            name, columns = "tally", ("case_id", "outcome")
            template = Template("For each {noun} that is not {fallback}, append a row to `{file}` "
                                "(the {label}) with case_id and outcome.")

            def realize(self, words, case, outcome, basis):
                return Realization("append_csv", words["file"], str(case["id"]),
                                   {"case_id": str(case["id"]), "outcome": outcome.value})
        '''),
}
#: registrations beside the toys' own: a judge that loses rollouts (one more line, same module)
EXTRA = {"interlock.judges": {"loses_one": "toy_judge:losing"}}
CLASSES = {"sandbox": "Counted", "operator": "IdleEcho", "decision kind": "EvenApproval",
           "coupling kind": "PairCap", "effect kind": "Tally"}


def _target(kind: str) -> str:
    _, _, module, _ = TOYS[kind]
    return f"{module}:{CLASSES.get(kind, 'build')}"


def _lines(groups: dict[str, dict[str, str]]) -> str:
    return "".join(f'\n[project.entry-points."{group}"]\n' + "".join(f'{name} = "{value}"\n'
                                                                     for name, value in lines.items())
                   for group, lines in groups.items())


def _added(groups: dict[str, dict[str, str]]) -> str:
    """This repository's project file with ``groups``' lines added to its tables, as a contributor
    would add them."""
    text = (REPO / "pyproject.toml").read_text()
    for group, lines in groups.items():
        header = f'[project.entry-points."{group}"]\n'
        assert header in text, group
        added = "".join(f'{name} = "{value}"\n' for name, value in lines.items())
        text = text.replace(header, header + added)
    return text


def _registrations() -> dict[str, dict[str, str]]:
    groups: dict[str, dict[str, str]] = {}
    for kind, (group, name, _, _) in TOYS.items():
        groups.setdefault(group, {})[name] = _target(kind)
    for group, lines in EXTRA.items():
        groups[group].update(lines)
    return groups


def _write_modules(folder: Path) -> set[Path]:
    written = set()
    for _, _, module, source in TOYS.values():
        path = folder / f"{module}.py"
        path.write_text(textwrap.dedent(source).lstrip())
        written.add(path)
    return written


@pytest.fixture(scope="module")
def toylab(tmp_path_factory) -> tuple[Path, set[Path]]:
    """The lab's package, written as a plugin author would (its modules and a ``pyproject.toml``)
    and installed by pip into a folder of its own: (that folder, the files the author wrote)."""
    source, installed = tmp_path_factory.mktemp("toylab"), tmp_path_factory.mktemp("site")
    written = _write_modules(source)
    modules = ", ".join(f'"{module}"' for _, _, module, _ in TOYS.values())
    project = source / "pyproject.toml"
    project.write_text('[build-system]\nrequires = ["setuptools>=68"]\n'
                       'build-backend = "setuptools.build_meta"\n'
                       f'[project]\nname = "toylab"\nversion = "0.1"\n'
                       f'[tool.setuptools]\npy-modules = [{modules}]\n' + _lines(_registrations()))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(installed), str(source)], check=True, capture_output=True)
    return installed, written | {project}


@pytest.fixture
def lab(toylab, monkeypatch) -> Path:
    """The installed lab on the import path (its modules unloaded afterwards)."""
    installed, _ = toylab
    monkeypatch.syspath_prepend(str(installed))
    yield installed
    for name in [m for m in sys.modules if m.startswith("toy_")]:
        del sys.modules[name]


@pytest.mark.parametrize("kind", list(TOYS))
def test_each_kind_takes_one_module_and_one_registration(toylab, kind: str) -> None:
    _, written = toylab
    _, name, module, _ = TOYS[kind]
    took = {p.name for p in written if p.name in (f"{module}.py", "pyproject.toml")}
    assert took == {f"{module}.py", "pyproject.toml"}
    project = next(p for p in written if p.name == "pyproject.toml")
    assert f'{name} = "{_target(kind)}"' in project.read_text()


def test_installed_plugins_are_listed_without_being_imported(lab) -> None:
    registries = {"interlock.backends": BACKENDS, "interlock.benchmarks": BENCHMARKS,
                  "interlock.judges": JUDGES, "interlock.sandboxes": SANDBOXES,
                  "interlock.rewrite_operators": OPERATORS,
                  "interlock.decision_kinds": DECISION_KINDS, "interlock.coupling_kinds": COUPLING_KINDS,
                  "interlock.effect_kinds": EFFECT_KINDS}
    for group, name, _, _ in TOYS.values():
        assert name in registries[group].names()
    assert not [m for m in sys.modules if m.startswith("toy_")]


def test_a_toy_backend_serves_a_backbone(lab, tmp_path: Path) -> None:
    backbone = Params.model_validate(compose_params(REPO / "conf", ["backbone=tiny",
                                                                    "backbone.backend=echo"])).backbone
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (reply,) = make_backend(backbone, checkpoint).complete([ChatRequest("k", (Message("user", "ping"),))])
    assert reply.text == "echo: ping"


def test_a_toy_benchmark_joins_the_evaluation_pools(lab) -> None:
    params = defaults("eval.pools=[benchmark,one_task]")
    assert params.eval.pools == ["benchmark", "one_task"]
    only_toy = params.model_copy(update={"eval": params.eval.replace(pools=["one_task"])})
    (built,) = benchmarks_for(only_toy, params.paths)
    assert (built.name, built.tasks(), built.limit) == ("one_task", [("toy-1", "toy")],
                                                        params.scale.evaluation.attempts)


def _judged(contexts, tmp_path: Path, graders: list[str], policies=("oracle", "claim_only")):
    packs_dir, table, out = tmp_path / "packs", tmp_path / "trajectories.parquet", tmp_path / "judge"
    write_packs(packs_dir, [c.pack for c in contexts])
    with tempfile.TemporaryDirectory() as workdir:
        made = scripted_rollouts(contexts, policies, seed=0, workdir=Path(workdir), skip_effect=1.0,
                                 ignore_coupling=0.0, plans=PLANS)
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write([t.to_row() for t in made])
    summary = run_judge(table, [packs_dir], out, graders=graders, context=JudgeContext(workers=1),
                        progress=False)
    return summary, made, (table, out, packs_dir)


def test_a_toy_judge_grades_the_pool_and_accept_uses_it(lab, tmp_path: Path, contexts) -> None:
    judge = defaults("judge.name=lenient", "judge.graders=[agent,text,lenient]").judge
    summary, made, (table, out, packs_dir) = _judged(contexts[:2], tmp_path, judge.graders)
    assert sorted(summary["judges"]) == ["agent", "lenient", "text"]
    assert summary["backends"]["lenient"] == "lenient"
    lenient, _ = run_accept(table, out, [packs_dir], tmp_path / "accepted.parquet", judge=judge.name)
    strict, _ = run_accept(table, out, [packs_dir], tmp_path / "strict.parquet", judge="agent")
    assert lenient["accepted"] == len(made) == 4 and strict["accepted"] == 2  # only the oracle's


def test_a_judge_that_loses_rollouts_or_takes_a_table_name_is_refused(lab, tmp_path: Path, contexts) -> None:
    """A grader's judgements must line up with the rollouts, one each; and no grader may take the
    name of the truth's collateral table."""
    with pytest.raises(InterlockError, match="gave 0 judgements for 1 rollouts") as error:
        _judged(contexts[:1], tmp_path, ["agent", "loses_one"], policies=("oracle",))
    assert error.value.field == "judge.graders"
    with pytest.raises(InterlockError, match="no grader may be named 'collateral'"):
        _judged(contexts[:1], tmp_path / "again", ["agent", "collateral"], policies=("oracle",))


def test_a_toy_sandbox_provider_runs_model_written_checks(lab, tmp_path: Path) -> None:
    provider = defaults("sandbox.provider=counted").sandbox.provider
    if not sandbox.boundary_mode("namespaces").available:
        pytest.skip("the toy provider wraps the namespaces provider, unavailable here")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "out.csv").write_text("case_id\nC-1\n")
    result = sandbox.run_script("assert open('out.csv').read().startswith('case_id')", workspace,
                                provider=provider)
    assert result.passed, (result.reason, result.output)
    runs = sys.modules["toy_sandbox"].RUNS
    assert len(runs) == 2 and "open('out.csv')" in runs[1]  # the probe, then the check


def test_a_toy_rewrite_operator_grows_a_declared_child(lab, tasks) -> None:
    operator = OPERATORS["idle_echo"]
    assert defaults("synthesis=rst", "synthesis.operators=[idle_echo]").synthesis.operators == ["idle_echo"]
    for domain, blueprint, _, _ in tasks:
        try:
            rewrite = operator.rewrite([blueprint], domain, "toy-child", 11)
        except NotApplicable:  # a task without a spare group
            continue
        assert (rewrite.contract.operator, rewrite.contract.adds_requirement) == ("idle_echo", False)
        assert len(rewrite.child.distractor_clauses) == len(blueprint.distractor_clauses) + 1
        build_graph(rewrite.child, domain)  # the child compiles like any task
        return
    pytest.fail("no fixture task takes an idle clause")


def test_toy_kinds_make_a_domain_whose_tasks_compile_solve_and_judge(lab, catalog, tmp_path: Path) -> None:
    """A domain declared with the toy decision, coupling and effect kinds passes the catalog's
    checks (derived from the kinds' facts), its tasks compile, the public-input critic solves them
    from the request and workspace alone, the agent judge accepts the oracle and no other, and the
    exported Harbor verifier (standard library only: the toy coupling copied in) gives the oracle's
    work reward 1."""
    base = next(d for d in catalog.domains if d.decision.kind == "limit_approval" and d.split == "train")
    declared = base.model_dump(mode="json")
    declared.update(id="toy_domain", couplings=["pair_cap"])
    declared["decision"]["kind"] = "even_approval"
    declared["effects"][1] = {"kind": "tally", "label": "tally sheet", "file": "out/tally.csv", "code": None}
    domain = Domain.model_validate(declared)
    assert domain.structure_problem() is None and "decision=even_approval" in domain.signature
    contexts = []
    for index in range(2):
        blueprint = make_blueprint(domain, "rft", index, TaskSize(4, 3, 2, 2), 100 + index)
        graph = build_graph(blueprint, domain)
        pack = compile_pack(graph, domain)
        assert critic_problems(pack) == [], critic_problems(pack)
        assert {"even_approval", "tally"} <= {node.subkind for node in graph.nodes}
        contexts.append(TaskContext(pack.task_id, pack, graph, domain))
    summary, made, (table, out, packs_dir) = _judged(contexts, tmp_path, ["agent"])
    accepted, _ = run_accept(table, out, [packs_dir], tmp_path / "accepted.parquet", judge="agent")
    assert accepted["accepted"] == 2 == len(made) // 2  # the oracle's two, not claim_only's
    pack = contexts[0].pack
    (folder,) = harbor.write_tasks([pack], tmp_path / "harbor")
    materialize(run_reference(pack).final.contents, tmp_path / "oracle")
    done = subprocess.run([sys.executable, "-I", "-S", str(folder / "tests" / "verify.py"), "--checks",
                           str(folder / "tests" / "checks.json"), "--workspace", str(tmp_path / "oracle"),
                           "--out", str(tmp_path / "logs")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "logs" / "reward.txt").read_text().strip() == "1"
    assert "class PairCap(CouplingKind):" in (folder / "tests" / "verify.py").read_text()


def test_a_kind_whose_class_names_another_name_is_refused(lab, tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "misnamed"
    home.mkdir()
    (home / "toy_misnamed.py").write_text("from toy_decision import EvenApproval\n")
    project = tmp_path / "pyproject.toml"
    project.write_text(_added({"interlock.decision_kinds": {"odd_approval": "toy_misnamed:EvenApproval"}}))
    monkeypatch.setattr(registry, "CHECKOUT_PROJECT", project)
    monkeypatch.syspath_prepend(str(home))
    with pytest.raises(InterlockError, match="registered as 'odd_approval' but names itself 'even_approval'"):
        DECISION_KINDS["odd_approval"]


def test_a_line_in_this_repositorys_pyproject_registers_without_reinstalling(tmp_path: Path,
                                                                          monkeypatch) -> None:
    """Inside the repository: a module and a line in the checkout's project file (read directly,
    so the installed metadata, older than the line, does not hide it)."""
    home = tmp_path / "src"
    home.mkdir()
    written = _write_modules(home)
    project = tmp_path / "pyproject.toml"
    project.write_text(_added(_registrations()))
    monkeypatch.setattr(registry, "CHECKOUT_PROJECT", project)
    monkeypatch.syspath_prepend(str(home))
    try:
        for kind, (_, _, module, _) in TOYS.items():
            took = {p for p in written if p.name == f"{module}.py"} | {project}
            assert len(took) == 2, kind
        assert JUDGES["lenient"].__module__ == "toy_judge" and "agent" in JUDGES.names()
        assert DECISION_KINDS["even_approval"].carries_amount and "tally" in EFFECT_KINDS
        assert defaults("sandbox.provider=counted").sandbox.provider == "counted"
    finally:
        for name in [m for m in sys.modules if m.startswith("toy_")]:
            del sys.modules[name]


@pytest.mark.parametrize(("value", "problem"), [("no_such_module:build", "no module 'no_such_module'"),
                                                ("toy_judge:no_such_factory", "no_such_factory"),
                                                ("toy_judge:", "")])
def test_a_line_that_points_at_nothing_is_refused_naming_it(lab, tmp_path: Path, monkeypatch, value: str,
                                                            problem: str) -> None:
    project = tmp_path / "pyproject.toml"
    project.write_text(_added({"interlock.judges": {"broken": value}}))
    monkeypatch.setattr(registry, "CHECKOUT_PROJECT", project)
    with pytest.raises(InterlockError, match="judge 'broken' is registered by interlock as") as error:
        JUDGES["broken"]
    assert problem in str(error.value) and error.value.field == "judge.graders"
    assert JUDGES["lenient"].__module__ == "toy_judge"  # the others still load


def test_two_distributions_registering_one_name_are_refused(lab, tmp_path: Path) -> None:
    clash = tmp_path / "clash-0.1.dist-info"
    clash.mkdir()
    (clash / "METADATA").write_text("Metadata-Version: 2.1\nName: clash\nVersion: 0.1\n")
    (clash / "entry_points.txt").write_text("[interlock.judges]\nlenient = clash_module:build\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(InterlockError, match=r"two plugins are registered as 'lenient'.*clash"):
            JUDGES.names()
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(("registry_", "field"), [(BACKENDS, "backbone.backend"), (BENCHMARKS, "eval.pools"),
                                                   (JUDGES, "judge.graders"), (SANDBOXES, "sandbox.provider"),
                                                   (OPERATORS, "synthesis.operators"),
                                                   (DECISION_KINDS, "decision.kind")])
def test_an_unknown_name_lists_the_known_ones(registry_: Registry, field: str) -> None:
    with pytest.raises(InterlockError, match=r"no [\w ]+ named 'nope' \(known: .+\)") as error:
        registry_.get("nope")
    assert error.value.field == field
    assert registry_.names() and all(registry_.check(name) == name for name in registry_.names())
    with pytest.raises(ValueError, match="no .* named 'nolab.missing'"):
        registry_.check("nolab.missing")


def test_every_option_names_a_registered_provider() -> None:
    """Each option of conf/ composes and validates, so every name it holds is registered (a file
    named ``_...`` is what a group's options share, not an option)."""
    named = (("backbone", "backend"), ("judge", "name"), ("sandbox", "provider"), ("eval", "pools"))
    for group, key in named:
        for option in sorted(p for p in (REPO / "conf" / group).glob("*.yaml") if not p.stem.startswith("_")):
            composed = compose_params(REPO / "conf", [f"{group}={option.stem}"])
            Params.model_validate(composed)
            assert composed[group][key], f"{option} names no provider"
