"""The library's import graph, read from the source (every import, also those inside functions
and behind ``TYPE_CHECKING``), and what it says about packages and stages."""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

from helpers.repo import REPO

SRC = REPO / "src"
PACKAGE = SRC / "interlock"


def module_path(module: str) -> Path | None:
    """The source file of an ``interlock`` module (a package's ``__init__.py``), or None."""
    base = SRC.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    parts = path.resolve().relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imports_of(path: Path) -> frozenset[str]:
    """The ``interlock`` modules a file imports, wherever the import statement stands. A package
    imported is its ``__init__``; importing a module also runs every package ``__init__`` above it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    modules = set()
    for name in found:
        if name == "interlock" or name.startswith("interlock."):
            parts = name.split(".")
            modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(m for m in modules if module_path(m) is not None)


@cache
def registries() -> dict[str, str]:
    """Each registry of ``interlock.core.registry``: its variable -> its entry-point group."""
    tree = ast.parse((PACKAGE / "core" / "registry.py").read_text(encoding="utf-8"))
    return {node.targets[0].id if isinstance(node, ast.Assign) else node.target.id: node.value.args[1].value
            for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "Registry"}


@cache
def plugins() -> dict[str, frozenset[str]]:
    """Each entry-point group -> the modules of this repository's plugins in it (pyproject.toml)."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        groups = tomllib.load(handle)["project"]["entry-points"]
    return {group: frozenset(value.split(":")[0] for value in lines.values())
            for group, lines in groups.items() if group.startswith("interlock.")}


@cache
def providers_of(path: Path) -> frozenset[str]:
    """The modules a file may import by name through a registry (``BACKENDS.get(name)``,
    ``DECISION_KINDS[name]``, ``EFFECT_KINDS.items()``): every plugin of that registry. (Not an
    import statement, so not part of the cycle check: a plugin may import what looks it up.)"""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    for variable, group in registries().items():
        if re.search(rf"\b{variable}(?:\[|\.get\(|\.items\(|\.values\()", text):
            found.update(plugins().get(group, ()))
    return frozenset(found)


def closure(start: Path) -> set[str]:
    """Every ``interlock`` module ``start`` (a stage script, a module) imports, directly or not,
    the providers its registries may load included."""
    seen: set[str] = set()
    todo = list(imports_of(start))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imports_of(module_path(module)) | providers_of(module_path(module))
    return seen


def package_of(module: str) -> str:
    """The area package a module belongs to (``interlock.rollout.engine`` -> ``rollout``), or
    ``interlock`` for the top-level package module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "interlock"


def package_dep(package: str) -> str:
    """How ``dvc.yaml`` names a package it depends on."""
    return "src/interlock/__init__.py" if package == "interlock" else f"src/interlock/{package}"


def packages() -> list[str]:
    """The area packages of the library."""
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def package_imports() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    graph: dict[str, set[str]] = {p: set() for p in packages()}
    for path in PACKAGE.rglob("*.py"):
        source = package_of(module_name(path))
        if source in graph:
            graph[source] |= {package_of(m) for m in imports_of(path)} - {source, "interlock"}
    return graph
