"""Providers of one kind (model backends, benchmarks, judges, sandboxes) by the name an option
gives them. Each registers itself once, in its own module, so adding one touches its module and
the option that picks it, nothing else (docs/authoring.md, tests/test_registries.py). The four
registries are declared here, at the bottom layer, so the typed config can check a name against
them without importing any provider; what each kind must provide is its protocol, beside its
users (``interlock.models.backends``, ``interlock.evaluation.benchmarks``,
``interlock.judging.judges``, ``interlock.judging.sandboxes``).

- A module of the kind's package registers with ``@REGISTRY.register("name")`` (several names per
  module are fine: one per BFCL category). The registry finds a name by reading the package's
  modules (``ast``, nothing imported) and imports only the one that registers it: some providers
  pull in torch, vLLM or a C library, and a stage needs one of them.
- A dotted name, ``mylab.fast_backend``, is a module of your own outside this repository: it is
  imported and must register that very name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Generic, TypeVar

from interlock.core.errors import InterlockError

T = TypeVar("T")


class Registry(Generic[T]):
    """Providers of one ``kind``, the built-in ones in the modules of ``package``."""

    def __init__(self, kind: str, package: str, variable: str, *, field: str | None = None) -> None:
        """``variable``: the module-level name the registry is bound to (``BACKENDS``), by which
        registrations are recognised in a module's source; ``field``: the config field that names
        providers of this kind, for errors."""
        self.kind, self.package, self.variable, self.field = kind, package, variable, field
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated class or function under ``name``."""

        def decorate(provider: T) -> T:
            if self._entries.get(name, provider) is not provider:
                raise InterlockError(f"two {self.kind}s are registered as {name!r}", field=self.field)
            self._entries[name] = provider
            return provider

        return decorate

    def get(self, name: str) -> T:
        """The provider registered as ``name``, importing its module first if need be."""
        if name not in self._entries:
            module = self._module_for(name)
            if module is not None:
                importlib.import_module(module)
        try:
            return self._entries[name]
        except KeyError:
            raise InterlockError(f"no {self.kind} named {name!r} (known: {', '.join(self.names())}); "
                                 f"docs/authoring.md shows how to add one", field=self.field) from None

    def check(self, name: str) -> str:
        """``name`` if some module provides it, without importing it (for validating configs)."""
        if name not in self._entries and self._module_for(name) is None:
            raise ValueError(f"no {self.kind} named {name!r} (known: {', '.join(self.names())})")
        return name

    def names(self) -> list[str]:
        """Every name registered, or registered by a module of the package (read, not imported)."""
        return sorted(set(self._entries) | {name for _, names in self._declarations() for name in names})

    def _module_for(self, name: str) -> str | None:
        if "." in name:
            try:
                return name if importlib.util.find_spec(name) is not None else None
            except ModuleNotFoundError:  # a parent package that does not exist
                return None
        return next((module for module, names in self._declarations() if name in names), None)

    def _declarations(self) -> Iterator[tuple[str, set[str]]]:
        """``(module, names it registers)`` for each module of the package, from its source."""
        spec = importlib.util.find_spec(self.package)
        for info in pkgutil.iter_modules(spec.submodule_search_locations if spec else []):
            module = f"{self.package}.{info.name}"
            origin = importlib.util.find_spec(module).origin
            if info.ispkg or not origin or not origin.endswith(".py"):
                continue
            yield module, _registered_in(origin, os.stat(origin).st_mtime_ns, self.variable)


@cache
def _registered_in(path: str, mtime_ns: int, variable: str) -> frozenset[str]:
    """The literal names of a module's ``<variable>.register("name")`` calls (cached per version of
    the file: configs are validated often)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    return frozenset(call.args[0].value for call in ast.walk(tree)
                     if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                     and call.func.attr == "register" and isinstance(call.func.value, ast.Name)
                     and call.func.value.id == variable and call.args
                     and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str))


#: model backends (``backbone.backend``): factories ``(BackboneConfig, checkpoint) -> ChatBackend``
BACKENDS: Registry[Any] = Registry("backend", "interlock.models", "BACKENDS", field="backbone.backend")
#: benchmarks (``eval.pools``): factories ``(name, Params, Paths) -> Benchmark``
BENCHMARKS: Registry[Any] = Registry("benchmark", "interlock.evaluation", "BENCHMARKS", field="eval.pools")
#: judges (``judge.name``, ``judge.graders``): factories ``(JudgeContext) -> Judge``
JUDGES: Registry[Any] = Registry("judge", "interlock.judging", "JUDGES", field="judge.graders")
#: sandboxes for model-written checks (``sandbox.provider``): :class:`SandboxProvider` classes
SANDBOXES: Registry[Any] = Registry("sandbox", "interlock.judging.sandboxes", "SANDBOXES",
                                    field="sandbox.provider")
