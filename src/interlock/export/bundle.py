"""One standard-library script made of interlock's own functions (the exported Harbor verifier).

From an entry function, every top-level definition it reaches is copied verbatim from its module,
dependencies first, under the standard-library imports those definitions use. Whatever else it
would reach (a third-party import such as pyarrow, a name that is no top-level definition, two
modules defining one name) is refused with the module and the name. So the script runs where only
Python is installed, and what it runs is the code the pipeline itself runs, never a second copy
kept in step by hand.
"""

from __future__ import annotations

import ast
import builtins
import heapq
import inspect
import symtable
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from interlock.core.errors import InterlockError

FUTURE = "from __future__ import annotations"
#: where the plugins a script is given come from, in its section comments
PLUGINS = "plugins"


@dataclass(frozen=True)
class Definitions:
    """A module's top-level statements by the names they bind, and its imports by bound name
    (``(module, attribute)``; attribute None for ``import module``)."""

    module: str
    lines: tuple[str, ...]
    statements: dict[str, ast.stmt]
    imports: dict[str, tuple[str, str | None]]

    @classmethod
    def of(cls, name: str) -> Definitions:
        module = sys.modules.get(name)
        if module is None:
            raise InterlockError("the bundle reaches a module that was never imported", item=name)
        source = inspect.getsource(module)
        statements: dict[str, ast.stmt] = {}
        imports: dict[str, tuple[str, str | None]] = {}
        for node in ast.parse(source).body:
            for bound in _bound_names(node):
                statements[bound] = node
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    imports[alias.asname or alias.name] = (node.module, alias.name)
        return cls(name, tuple(source.splitlines()), statements, imports)

    def source(self, node: ast.stmt) -> str:
        """A statement's text with its decorators and the comment lines right above it."""
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
        while start > 0 and self.lines[start - 1].startswith("#"):
            start -= 1
        return "\n".join(self.lines[start:node.end_lineno])


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


#: symbol tables that run where they are defined (a module-level comprehension), not when called
_INLINE_SCOPES = {"listcomp", "dictcomp", "setcomp", "genexpr"}


def _global_references(source: str) -> tuple[set[str], set[str]]:
    """The module-level names a statement uses: (when it is defined, only when it is called).
    Annotations are never evaluated, so they count for neither."""
    at_definition: set[str] = set()
    at_call: set[str] = set()

    def visit(table: symtable.SymbolTable, called: bool) -> None:
        called = called or (table.get_type() == "function" and table.get_name() not in _INLINE_SCOPES)
        (at_call if called else at_definition).update(
            s.get_name() for s in table.get_symbols()
            if s.is_referenced() and s.is_global() and not s.is_local())
        for child in table.get_children():
            visit(child, called)

    visit(symtable.symtable(f"{FUTURE}\n{source}", "<bundle>", "exec"), False)
    return at_definition, at_call - at_definition


@dataclass
class _Chunk:
    text: str
    after: set[tuple[str, int]]  # the chunks whose names it uses when it is defined


def bundle(entry: ModuleType, function: str, docstring: str, *,
           plugins: Mapping[str, Mapping[str, object]] | None = None) -> str:
    """The script that runs ``entry.function()`` as its main program, its exit status the
    function's return value. Definitions come module by module (in the order the entry reaches
    them) and in source order, except where one needs another to exist when it is defined.

    ``plugins``: registries the code looks plugins up in (``COUPLING_KINDS``), each as the plugins
    the script needs by name; the script binds the registry's name to a dict of them, each made
    again from its class (copied like any definition, with no arguments), since the registry finds
    plugins through installed metadata the script's machine does not have."""
    plugins = plugins or {}
    modules: dict[str, Definitions] = {}
    owners: dict[str, str] = {}  # a name the script binds -> where it comes from
    chunks: dict[tuple[str, int], _Chunk] = {}  # by (module, line)
    ranks: dict[str, int] = {}
    stdlib: dict[str, tuple[str, str | None]] = {}

    def bind(name: str, origin: str, module: str) -> None:
        if owners.setdefault(name, origin) != origin:
            raise InterlockError(f"{name!r} would be bound twice, from {owners[name]} and from {origin}; "
                                 "the script holds one", item=module, field=name)

    def need(module: str, name: str) -> tuple[str, int] | None:
        """Bring ``name``, as ``module`` sees it, into the script: the chunk defining it, or None
        (a standard-library import, a builtin)."""
        if module not in modules:
            modules[module] = Definitions.of(module)
            ranks[module] = len(ranks)
        definitions = modules[module]
        if name in definitions.statements:
            node = definitions.statements[name]
            key = (module, node.lineno)
            if key not in chunks:
                chunks[key] = _Chunk(definitions.source(node), set())
                for bound in _bound_names(node):
                    bind(bound, module, module)
                at_definition, at_call = _global_references(chunks[key].text)
                chunks[key].after = {need(module, r) for r in sorted(at_definition)} - {None, key}
                for reference in sorted(at_call):
                    need(module, reference)
            return key
        if name in definitions.imports:
            origin, attribute = definitions.imports[name]
            if name in plugins:
                return provide(name, module)
            if origin.split(".")[0] in sys.stdlib_module_names:
                bind(name, f"{origin}.{attribute}" if attribute else origin, module)
                stdlib[name] = (origin, attribute)
                return None
            if origin.split(".")[0] == "interlock" and attribute == name:
                return need(origin, name)
            raise InterlockError(f"{name!r} comes from {origin}, which is not the standard library "
                                 "(or is imported under another name)", item=module, field=name)
        if not hasattr(builtins, name):
            raise InterlockError(f"{name!r} is not a top-level name of the module", item=module, field=name)
        return None

    def provide(name: str, module: str) -> tuple[str, int]:
        """A registry's plugins as one definition: ``name = {"key": Class(), ...}``."""
        key = (PLUGINS, sorted(plugins).index(name))
        if key not in chunks:
            ranks.setdefault(PLUGINS, len(ranks))
            bind(name, PLUGINS, module)
            classes = {key_: type(plugin) for key_, plugin in plugins[name].items()}
            after = {need(cls.__module__, cls.__qualname__) for cls in classes.values()} - {None}
            made = ", ".join(f"{key_!r}: {cls.__qualname__}()" for key_, cls in classes.items())
            chunks[key] = _Chunk(f"{name} = {{{made}}}", after)
        return key

    need(entry.__name__, function)
    lines = ["#!/usr/bin/env python3", f'"""{docstring}"""', "", FUTURE, ""]
    lines += sorted(f"import {origin}" + ("" if origin.split(".")[0] == name else f" as {name}")
                    for name, (origin, attribute) in stdlib.items() if attribute is None)
    froms: dict[str, list[str]] = {}
    for name, (origin, attribute) in stdlib.items():
        if attribute is not None:
            froms.setdefault(origin, []).append(attribute if attribute == name else f"{attribute} as {name}")
    lines += [f"from {origin} import {', '.join(sorted(names))}" for origin, names in sorted(froms.items())]
    previous = None
    for module, line in _ordered(chunks, ranks):
        lines += ["", ""] + ([f"# --- {module}"] if module != previous else []) + [chunks[module, line].text]
        previous = module
    lines += ["", "", 'if __name__ == "__main__":', f"    raise SystemExit({function}())", ""]
    script = "\n".join(lines)
    compile(script, "<bundle>", "exec")
    return script


def _ordered(chunks: dict[tuple[str, int], _Chunk], ranks: dict[str, int]) -> list[tuple[str, int]]:
    """Module by module, in source order, each chunk after those it needs when it is defined."""
    waiting = {key: set(chunk.after) for key, chunk in chunks.items()}
    ready = [(ranks[m], line, m) for (m, line), after in waiting.items() if not after]
    heapq.heapify(ready)
    order: list[tuple[str, int]] = []
    while ready:
        _, line, module = heapq.heappop(ready)
        order.append((module, line))
        for key, after in waiting.items():
            if (module, line) in after:
                after.discard((module, line))
                if not after:
                    heapq.heappush(ready, (ranks[key[0]], key[1], key[0]))
    if len(order) < len(chunks):
        stuck = sorted(set(chunks) - set(order))
        raise InterlockError("definitions that need each other to exist when they are defined",
                             item=", ".join(f"{m}:{line}" for m, line in stuck))
    return order
