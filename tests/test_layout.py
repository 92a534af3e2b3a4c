"""The library's shape: one package per area of the pipeline, in layers that import only downwards
(declared once, for import-linter, in pyproject.toml), no import cycles, and every stage's library
side in its package's ``stage`` module. Read from the source (every import statement, also those
inside functions), so an import added anywhere counts."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers.imports import PACKAGE, closure, imports_of, module_name, module_path, package_imports, packages
from helpers.repo import REPO, command_timeout

#: top to bottom, as pyproject.toml's import-linter contract declares them: a package may import only
#: packages of lower layers (those of one layer, joined by ``|``, are independent of each other);
#: ``testing`` (test doubles shipped for users) is above all, so no library module imports it
(CONTRACT,) = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
    "contracts"]
LAYERS = tuple(tuple(name.strip().removeprefix("interlock.") for name in layer.split("|"))
               for layer in CONTRACT["layers"])
STAGES = sorted(p.stem for p in (REPO / "stages").glob("*.py"))


def test_every_package_has_a_layer_and_nothing_lies_outside_the_packages() -> None:
    assert sorted(p for layer in LAYERS for p in layer) == packages()
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside an area package: {loose}"
    assert not imports_of(PACKAGE / "__init__.py")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the library under ``root/src``, with ``root/pyproject.toml``'s contracts."""
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=root, text=True,
                          capture_output=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "src")},
                          timeout=command_timeout())


def test_import_linter_keeps_the_layers() -> None:
    linted = _lint_imports(REPO)
    assert linted.returncode == 0 and "1 kept, 0 broken" in linted.stdout, linted.stdout + linted.stderr


def test_an_import_upwards_breaks_the_layers_even_inside_a_function(tmp_path: Path) -> None:
    """The twin: the core reaching up into the analysis package, in a function body."""
    shutil.copytree(REPO / "src" / "interlock", tmp_path / "src" / "interlock",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with (tmp_path / "src" / "interlock" / "core" / "errors.py").open("a") as module:
        module.write("\n\ndef _upwards():\n    import interlock.analysis.report  # noqa: F401\n")
    linted = _lint_imports(tmp_path)
    assert linted.returncode == 1 and "interlock.core.errors -> interlock.analysis.report" in linted.stdout


def test_the_core_imports_nothing_above_it() -> None:
    assert package_imports()["core"] == set()


def _cycles() -> list[list[str]]:
    """Every import cycle among the library's modules (Tarjan's strongly connected components)."""
    graph = {module_name(p): set(imports_of(p)) for p in PACKAGE.rglob("*.py")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            # a package imports its own modules through ``__init__`` re-exports: not a cycle of code
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    assert _cycles() == []


def test_no_library_module_is_imported_by_name_at_run_time() -> None:
    """``importlib.import_module("interlock...")`` would hide an import from the layering and from
    the stages' dependencies, which are read from import statements."""
    def imports_by_name(node: ast.AST) -> bool:
        called = getattr(node, "func", None)
        return (isinstance(node, ast.Call) and bool(node.args)
                and getattr(called, "attr", getattr(called, "id", None)) in {"import_module", "__import__"}
                and any(isinstance(n, ast.Constant) and str(n.value).startswith("interlock")
                        for n in ast.walk(node.args[0])))

    hidden = [f"{path.relative_to(REPO)}:{node.lineno}" for path in PACKAGE.rglob("*.py")
              for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if imports_by_name(node)]
    assert hidden == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_script_only_hands_its_packages_stage_function_to_the_runner(stage: str) -> None:
    """Thin stages: the script imports the runner and one function of one ``<package>.stage``
    module, named after the stage, and runs it; the logic lives in the library."""
    tree = ast.parse((REPO / "stages" / f"{stage}.py").read_text(encoding="utf-8"))
    imports = sorted((node.module, tuple(a.name for a in node.names)) for node in tree.body
                     if isinstance(node, ast.ImportFrom))
    library = [(m, names) for m, names in imports if m != "interlock.core.runner"]
    assert ("interlock.core.runner", ("run_stage",)) in imports
    assert len(library) == 1 and library[0][0].endswith(".stage") and library[0][1] == (stage,)
    assert module_path(library[0][0]) is not None
    assert f"run_stage('{stage}', {stage})" in ast.unparse(tree)


@pytest.mark.parametrize("package", ["analysis", "testing"])
def test_no_stage_reaches_the_analysis_or_testing_package(package: str) -> None:
    reached = {stage: sorted(m for m in closure(REPO / "stages" / f"{stage}.py")
                             if m.startswith(f"interlock.{package}")) for stage in STAGES}
    assert not any(reached.values()), reached
