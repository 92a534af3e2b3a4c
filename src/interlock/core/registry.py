"""Plugins of one kind (model backends, benchmarks, judges, sandbox providers, rewrite operators,
decision, coupling and effect kinds), found by name through Python entry points: one mechanism,
the one pytest and Inspect AI use, so a plugin can live in this repository or in a package of
your own, and is registered by one line (docs/authoring.md, tests/test_registries.py).

- Registering: a line in the ``[project.entry-points."interlock.<group>"]`` table of a
  ``pyproject.toml``, ``name = "module:attribute"``. This repository's own plugins are the lines of
  its ``pyproject.toml``; where the package runs from a checkout (``pip install -e .``), that file
  is read directly, so a line added there counts without reinstalling. A package of your own
  declares its lines in its ``pyproject.toml`` and is installed.
- Finding: names are read from the metadata (nothing imported); ``get`` imports the one module a
  name points to. Some plugins pull in torch, vLLM or a C library, and a stage needs one of them.
- Two distributions that register one name are refused, naming both.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Iterator
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

from interlock.core.errors import InterlockError

T = TypeVar("T")

#: the distribution this package is
DISTRIBUTION = "interlock"
#: the project file of a checkout this package runs from (``src/interlock/core/registry.py``)
CHECKOUT_PROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


#: every registry's entry-point group
GROUPS: list[str] = []


class Registry(Generic[T]):
    """Plugins of one ``kind``, registered in the entry-point group ``group``."""

    def __init__(self, kind: str, group: str, *, field: str | None = None,
                 build: Callable[[str, Any], T] | None = None) -> None:
        """``field``: the config field that names plugins of this kind, for errors; ``build``: what
        makes the registered object into the plugin, once (a kind's class into its instance)."""
        self.kind, self.group, self.field, self.build = kind, group, field, build
        self._loaded: dict[tuple[str, str], T] = {}
        GROUPS.append(group)

    def get(self, name: str) -> T:
        """The plugin registered as ``name``, its module imported on first use."""
        target = self._targets().get(name)
        if target is None:
            raise InterlockError(f"no {self.kind} named {name!r} (known: {', '.join(sorted(self.names()))}); "
                                 f"a plugin registers in the entry-point group {self.group!r} "
                                 "(docs/authoring.md)", field=self.field)
        if target not in self._loaded:
            loaded = self._load(name, *target)
            self._loaded[target] = self.build(name, loaded) if self.build else loaded
        return self._loaded[target]

    def _load(self, name: str, owner: str, value: str) -> Any:
        """What a registration line points at; a line that points at nothing is an error naming it
        (an import that fails inside the plugin's own module is the plugin's, and propagates)."""
        entry = metadata.EntryPoint(name, value, self.group)
        try:
            return entry.load()
        except ModuleNotFoundError as error:
            if error.name is None or not entry.module.startswith(error.name):
                raise
            problem = f"no module {error.name!r}"
        except (AttributeError, ValueError) as error:
            problem = str(error)
        raise InterlockError(f"{self.kind} {name!r} is registered by {owner} as {value!r}, which points at "
                             f"nothing: {problem}", field=self.field)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._targets()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def check(self, name: str) -> str:
        """``name`` if some plugin is registered as it, nothing imported (for validating configs)."""
        if name not in self._targets():
            raise ValueError(f"no {self.kind} named {name!r} (known: {', '.join(sorted(self.names()))})")
        return name

    def names(self) -> list[str]:
        """Every registered name, in the order this package declares its own, then the others'."""
        return list(self._targets())

    def items(self) -> list[tuple[str, T]]:
        """Every plugin, each loaded (for the kinds, which are read together)."""
        return [(name, self.get(name)) for name in self.names()]

    def values(self) -> list[T]:
        return [plugin for _, plugin in self.items()]

    def _targets(self) -> dict[str, tuple[str, str]]:
        """name -> (distribution, ``module:attribute``)."""
        return _registered(self.group, tuple(sys.path), _checkout_version())


def plugin_folders() -> list[str]:
    """The folders holding the installed distributions that register plugins, this package aside:
    what an interpreter started isolated (``python -I``: the judge's check workers) puts on its
    path to find the same plugins as this process."""
    return sorted({str(entry.dist.locate_file("")) for group in GROUPS
                   for entry in metadata.entry_points(group=group)
                   if entry.dist is not None and _normal(entry.dist.name) != DISTRIBUTION})


def _checkout_version() -> tuple[str, int] | None:
    """The project file and its modification time where this package runs from a checkout, else
    None."""
    try:
        return str(CHECKOUT_PROJECT), CHECKOUT_PROJECT.stat().st_mtime_ns
    except OSError:
        return None


@cache
def _registered(group: str, path: tuple[str, ...],
                checkout: tuple[str, int] | None) -> dict[str, tuple[str, str]]:
    """The group's registrations on this import path (cached per path and version of the checkout's
    project file: configs are checked often). The checkout's own lines stand in for the metadata
    installed from them, which may be older."""
    tables = _checkout_tables(*checkout) if checkout is not None else None
    own = None if tables is None else tables.get(group, {})
    found: dict[str, tuple[str, str]] = {}
    if own is not None:
        found.update((name, (DISTRIBUTION, value)) for name, value in own.items())
    for entry in metadata.entry_points(group=group):
        owner = entry.dist.name if entry.dist is not None else "?"
        if own is not None and _normal(owner) == DISTRIBUTION:
            continue
        if entry.name in found and found[entry.name] != (owner, entry.value):
            first, where = found[entry.name]
            raise InterlockError(f"two plugins are registered as {entry.name!r} in {group!r}: "
                                 f"{first} ({where}) and {owner} ({entry.value})")
        found[entry.name] = (owner, entry.value)
    return found


@cache
def _checkout_tables(project_file: str, version: int) -> dict[str, dict[str, str]] | None:
    """The entry-point tables of the checkout's project file (read once per ``version``, its
    modification time), or None where the file is not this project's."""
    try:
        with open(project_file, "rb") as handle:
            project = tomllib.load(handle).get("project", {})
    except tomllib.TOMLDecodeError as error:
        raise InterlockError(f"cannot read the plugins: {error}", file=project_file) from None
    if _normal(project.get("name", "")) != DISTRIBUTION:
        return None
    return {group: dict(lines) for group, lines in project.get("entry-points", {}).items()}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def _instance(name: str, plugin: type) -> Any:
    """A class registered as ``name`` (a kind, an operator), made once; its ``name`` is the
    registered one, since graphs, contracts and reports record it."""
    if getattr(plugin, "name", name) != name:
        raise InterlockError(f"{plugin.__module__}.{plugin.__qualname__} is registered as {name!r} "
                             f"but names itself {plugin.name!r}")
    return plugin()


#: model backends (``backbone.backend``): factories ``(BackboneConfig, checkpoint) -> ChatBackend``
BACKENDS: Registry[Any] = Registry("backend", "interlock.backends", field="backbone.backend")
#: benchmarks (``eval.pools``): factories ``(name, Params, Paths) -> Benchmark``
BENCHMARKS: Registry[Any] = Registry("benchmark", "interlock.benchmarks", field="eval.pools")
#: judges (``judge.name``, ``judge.graders``): factories ``(JudgeContext) -> Judge``
JUDGES: Registry[Any] = Registry("judge", "interlock.judges", field="judge.graders")
#: sandboxes for model-written checks (``sandbox.provider``): :class:`SandboxProvider` classes
SANDBOXES: Registry[Any] = Registry("sandbox", "interlock.sandboxes", field="sandbox.provider")
#: rewrite operators of recursive synthesis (``synthesis.operators``): :class:`Operator` classes
OPERATORS: Registry[Any] = Registry("rewrite operator", "interlock.rewrite_operators",
                                    field="synthesis.operators", build=_instance)
#: the three node kinds of a completion graph, each a class whose instance the graph code asks
DECISION_KINDS: Registry[Any] = Registry("decision kind", "interlock.decision_kinds",
                                         field="decision.kind", build=_instance)
COUPLING_KINDS: Registry[Any] = Registry("coupling kind", "interlock.coupling_kinds",
                                         field="couplings", build=_instance)
EFFECT_KINDS: Registry[Any] = Registry("effect kind", "interlock.effect_kinds",
                                       field="effects.kind", build=_instance)
