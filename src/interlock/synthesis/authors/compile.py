"""Packs written by the three authors: each role asked for every task of a batch, then each task
compiled by :func:`~interlock.synthesis.packs.compile_pack` from what its authors wrote and what
stays compiled from the graph (the deliverable files, the contract, the checks, the reference).

A task whose author never answered in form, or whose authored workspace the checks cannot be
compiled over or the reference solution cannot be carried out in (a row an effect updates left
out), is not a pack: it comes back as an :class:`Unwritten` with the reason, and the review
rejects it with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from interlock.core.backend import ChatBackend
from interlock.core.errors import InterlockError
from interlock.synthesis.authors.agents import Ask, AuthorSettings, Call, Refusal, ask
from interlock.synthesis.authors.forms import WorkspaceDraft, request_form, rubric_form, workspace_form
from interlock.synthesis.authors.prompts import request_prompt, rubric_prompt, workspace_prompt
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.graph import CompletionGraph
from interlock.synthesis.packs import (
    REQUEST_PATH,
    TaskPack,
    authored_index_row,
    compile_pack,
    compiled_contract,
    deliverable_targets,
    scripted_request,
    scripted_rubric,
    scripted_workspace,
)


@dataclass(frozen=True)
class Unwritten:
    """A task its authors did not make into a pack, and why."""

    task_id: str
    domain_id: str
    pool: str
    reason: str

    def row(self) -> dict:
        return {"task_id": self.task_id, "domain_id": self.domain_id, "pool": self.pool,
                "reason": self.reason}


def author_packs(graphs: list[CompletionGraph], catalog: Catalog, backend: ChatBackend,
                 settings: AuthorSettings) -> tuple[list[TaskPack | Unwritten], list[Call]]:
    """A pack (or why not) for every graph, in order, and every model call made for them."""
    outcome: dict[str, TaskPack | Unwritten] = {}
    domains = {g.task_id: catalog[g.domain_id] for g in graphs}

    def refuse(graph: CompletionGraph, reason: object) -> None:
        outcome[graph.task_id] = Unwritten(graph.task_id, graph.domain_id, graph.pool, str(reason))

    targets = {g.task_id: deliverable_targets(g, domains[g.task_id]) for g in graphs}
    asks = []
    for graph in graphs:
        domain, reserved = domains[graph.task_id], {REQUEST_PATH, *targets[graph.task_id]}
        evidence = {path: text for path, text in scripted_workspace(graph, domain)[0].items()
                    if path not in reserved}
        form = workspace_form({n.node_id: n.attrs["path"] for n in graph.of_kind("evidence")}, reserved,
                              settings.limits)
        asks.append(Ask(graph.task_id, workspace_prompt(graph, domain, evidence, sorted(reserved), form,
                                                       settings.limits), form))
    drafts, calls = ask(backend, asks, settings)

    live = []
    for graph in graphs:
        draft = drafts[graph.task_id]
        if isinstance(draft, Refusal):
            refuse(graph, draft)
        else:
            live.append((graph, {**draft.files, **targets[graph.task_id]}))
    form = request_form(settings.limits)
    requests, made = ask(backend, [Ask(g.task_id, request_prompt(g.task_id, domains[g.task_id],
                                                                 scripted_request(g, domains[g.task_id])[0],
                                                                 [*files, REQUEST_PATH], form), form)
                                   for g, files in live], settings)
    calls += made

    rubrics, briefs = [], {}
    for graph, files in live:
        request = requests[graph.task_id]
        if isinstance(request, Refusal):
            refuse(graph, request)
            continue
        files = {**files, REQUEST_PATH: request}
        try:
            criteria, checks = scripted_rubric(graph, domains[graph.task_id], files)
        except InterlockError as exc:  # the guard cannot be compiled over what the author wrote
            refuse(graph, f"compiling the authored workspace: {exc.reason}")
            continue
        briefs[graph.task_id] = (files, criteria, checks)
        form = rubric_form([c.criterion_id for c in criteria], settings.limits)
        prompt = rubric_prompt(graph.task_id, criteria, compiled_contract(graph), form)
        rubrics.append(Ask(graph.task_id, prompt, form))
    described, made = ask(backend, rubrics, settings)
    calls += made

    for graph in graphs:
        if graph.task_id in outcome:
            continue
        texts = described[graph.task_id]
        if isinstance(texts, Refusal):
            refuse(graph, texts)
            continue
        files, criteria, checks = briefs[graph.task_id]
        criteria = [replace(c, description=texts[c.criterion_id]) for c in criteria]
        try:
            outcome[graph.task_id] = _compile(graph, catalog, drafts[graph.task_id], files, criteria, checks)
        except InterlockError as exc:
            refuse(graph, f"compiling the authored workspace: {exc.reason}")
    return [outcome[g.task_id] for g in graphs], calls


def _compile(graph: CompletionGraph, catalog: Catalog, draft: WorkspaceDraft, files: dict[str, str],
             criteria: list, checks: dict) -> TaskPack:
    """The pack of what the authors wrote, through the one way to compile a task."""
    index = [authored_index_row(graph.by_id[node_id], where.path, where.locator, where.ref)
             for node_id, where in sorted(draft.index.items())]
    workspace = {path: text for path, text in files.items() if path != REQUEST_PATH}
    return compile_pack(graph, catalog[graph.domain_id],
                        workspace=lambda *_: (workspace, index),
                        request=lambda *_: (files[REQUEST_PATH], compiled_contract(graph)),
                        rubric=lambda *_: (criteria, checks), made_by_domain=True)
