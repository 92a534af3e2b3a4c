"""Author-fault controls: the reviews against an author that makes mistakes.

As the mutation controls hold the compiled checks against wrong answers, these hold the reviews
against wrong authors. For every class of mistake an LLM author makes
(:data:`interlock.review.scripted_author.FAULTS`), one task of each training domain is written
with it by the scripted author, through the same author loop a model run uses (in-process here,
in the request bodies a server would get; over a loopback HTTP server in the tests and the
benchmark), and reviewed statically as the ``review`` stage reviews; beside them, each domain's task
written as a clean paraphrase. Per class: how many were refused, by which reviews, and the recall
of the reviews that must refuse it; clean paraphrases refused should be none. The ``review`` stage
writes the table to ``metrics/review.json`` (``author_faults``) on every run, the templates'
included (a few seconds), so a change that lets a class of mistake through shows in the next run's
metrics; ``perf/generator_faults.py`` runs it over the whole catalog.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from interlock.core.backend import ChatBackend
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.scripted_author import FAULTS, ScriptedAuthor, ScriptedAuthorBackend
from interlock.review.static import review_pack
from interlock.synthesis.authors.agents import AuthorSettings
from interlock.synthesis.authors.compile import Unwritten, author_packs
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import Catalog, Domain
from interlock.synthesis.graph import CompletionGraph, build_graph
from interlock.synthesis.packs import TaskPack

#: the verdict's flags, one per static review
REVIEWS = ("coverage", "critic", "leaks", "controls", "mutations")
#: the clean paraphrase, then every class of mistake
CLASSES = ("clean", *FAULTS)
#: how much of the first reason each class's row keeps as its example
EXAMPLE_CHARS = 140


@dataclass(frozen=True)
class FaultRun:
    """What the scripted author wrote: per (class, domain id) the graph and its pack (or why it
    was never written), and the calls it took."""

    graphs: dict[tuple[str, str], CompletionGraph]
    made: dict[tuple[str, str], TaskPack | Unwritten]
    calls: int


def fault_graphs(domains: list[Domain], size: TaskSize, seed: int) -> dict[tuple[str, str], CompletionGraph]:
    """One fresh ``rft`` graph per class and domain, seeded, so that every class meets the same
    domains (and no task carries two mistakes)."""
    return {(name, d.id): build_graph(make_blueprint(d, "rft", index, size,
                                                     stable_seed(seed, "author-faults", d.id, index)), d)
            for index, name in enumerate(CLASSES) for d in domains}


def case_outcomes(graphs: Iterable[CompletionGraph]) -> dict[str, dict[str, str]]:
    """Each task's cases' outcomes, what the scripted author leaks when told to."""
    return {g.task_id: {n.attrs["case_id"]: n.attrs["outcome"] for n in g.of_kind("decision")}
            for g in graphs}


def in_process(author: ScriptedAuthor) -> AbstractContextManager[ChatBackend]:
    return nullcontext(ScriptedAuthorBackend(author))


def write_with_faults(graphs: dict[tuple[str, str], CompletionGraph], catalog: Catalog,
                      settings: AuthorSettings,
                      serve: Callable[[ScriptedAuthor], AbstractContextManager[ChatBackend]] = in_process
                      ) -> FaultRun:
    """Have the scripted author write every graph, making its class's mistake, through the
    backend ``serve`` puts it behind (in-process by default)."""
    faults = {g.task_id: name for (name, _), g in graphs.items() if name != "clean"}
    with serve(ScriptedAuthor(faults, case_outcomes(graphs.values()))) as backend:
        made, calls = author_packs(list(graphs.values()), catalog, backend, settings)
    return FaultRun(graphs, dict(zip(graphs, made, strict=True)), len(calls))


def reviewed(graph: CompletionGraph, made: TaskPack | Unwritten,
             domain: Domain) -> tuple[list[str], list[str]]:
    """What refused an authored task (the static reviews whose verdict flag is false, or
    ``authoring`` / ``compile`` for one never written; none where it is admitted) and the reasons."""
    if isinstance(made, Unwritten):
        return ["compile" if made.reason.startswith("compiling") else "authoring"], [made.reason]
    verdict = review_pack(graph, made, domain, authored=True)["verdicts"][0]
    return [r for r in REVIEWS if verdict[f"{r}_ok"] is False], verdict["reasons"]


def fault_table(run: FaultRun, catalog: Catalog) -> dict[str, dict]:
    """Per class (every one, in :data:`CLASSES` order): the reviews that must refuse it, tasks,
    how many refused, how many by those reviews and that recall (None without tasks, and for the
    clean paraphrases), every review that refused one (a task may be refused by several), and the
    first reason given."""
    rows = {name: {"reviews": list(FAULTS[name][0]) if name in FAULTS else [], "tasks": 0, "refused": 0,
                   "by_review": 0, "refused_by": Counter(), "example": ""} for name in CLASSES}
    for (name, domain_id), graph in run.graphs.items():
        catchers, reasons = reviewed(graph, run.made[(name, domain_id)], catalog[domain_id])
        row = rows[name]
        row["tasks"] += 1
        if catchers:
            row["refused"] += 1
            row["refused_by"].update(catchers)
            row["by_review"] += int(bool(set(row["reviews"]) & set(catchers)))
            row["example"] = row["example"] or reasons[0][:EXAMPLE_CHARS]
    for name, row in rows.items():
        row["refused_by"] = dict(sorted(row["refused_by"].items()))
        counted = name != "clean" and row["tasks"]
        row["recall"] = round(row["by_review"] / row["tasks"], 4) if counted else None
    return rows


def author_fault_controls(domains: list[Domain], catalog: Catalog, *, size: TaskSize, seed: int,
                          settings: AuthorSettings) -> dict:
    """The controls over ``domains``: the table of :func:`fault_table`, and the calls taken (the
    scripted author asked as ``settings`` say, the generator's)."""
    run = write_with_faults(fault_graphs(domains, size, seed), catalog, settings)
    return {"domains": len(domains), "calls": run.calls, "classes": fault_table(run, catalog)}
