"""The ``packs`` stage: compile every graph into its task pack, by the templates
(:func:`interlock.synthesis.stage.run_packs`) or by the model authors (``generator=llm``,
:mod:`interlock.synthesis.authors`). Here beside the authors, not in
:mod:`interlock.synthesis.stage`, because they import the model backends: the stages before it
do not depend on ``src/interlock/models`` and do not re-run when a backend changes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from interlock.core import schemas
from interlock.core.backend import ChatBackend, releasing
from interlock.core.config import Params
from interlock.core.io import batched, count_rows, write_table, write_table_set
from interlock.core.paths import Paths
from interlock.core.runner import task_progress
from interlock.synthesis.authors.agents import AuthorSettings, author_backend, settings_of
from interlock.synthesis.authors.compile import Unwritten, author_packs
from interlock.synthesis.packs import pack_rows
from interlock.synthesis.stage import run_packs
from interlock.synthesis.tasks import iter_graphs, load_domains


def run_authored_packs(domains_path: Path, graphs_dir: Path, out: Path, timings: Path, *,
                       backend: ChatBackend, settings: AuthorSettings, batch_tasks: int) -> Counter:
    """The packs the model authors write (:mod:`interlock.synthesis.authors`), ``batch_tasks`` graphs
    asked together, one row group per row group of graphs (so the review reads them side by side);
    beside them, the tasks left unwritten and every call, and the calls' seconds in ``timings``.
    Returns counts: packs, unwritten, calls, tokens."""
    catalog = load_domains(domains_path)
    tables = {**schemas.PACK_TABLES, **schemas.AUTHORING_TABLES}
    counts: Counter = Counter()
    measured: list[dict] = []
    total = count_rows(graphs_dir / "tasks.parquet", schemas.GRAPH_TABLES["tasks"])
    with write_table_set(out, tables) as writer, task_progress(total, "packs") as bar:
        for graphs in iter_graphs(graphs_dir):
            rows: dict[str, list[dict]] = {name: [] for name in tables}
            for chunk in batched(graphs, batch_tasks):
                made, calls = author_packs(chunk, catalog, backend, settings)
                for item in made:
                    if isinstance(item, Unwritten):
                        rows["unwritten"].append(item.row())
                    else:
                        for name, table_rows in pack_rows(item).items():
                            rows[name] += table_rows
                rows["author_calls"] += [c.row() for c in calls]
                measured += [c.timing() for c in calls]
                counts.update(calls=len(calls), prompt_tokens=sum(c.prompt_tokens for c in calls),
                              completion_tokens=sum(c.completion_tokens for c in calls))
                bar.update(len(chunk))
            counts.update(packs=len(rows["tasks"]), unwritten=len(rows["unwritten"]))
            writer.write(rows)
    write_table(timings, measured, schemas.AUTHOR_TIMINGS)
    return counts


def packs(params: Params, paths: Paths) -> None:
    generator = params.generator
    if generator.name == "template":
        print(f"packs: {run_packs(paths.domains, paths.graphs, paths.packs)}")
        write_table(paths.author_timings, [], schemas.AUTHOR_TIMINGS)
        return
    with releasing(author_backend(generator)) as backend:
        counts = run_authored_packs(paths.domains, paths.graphs, paths.packs, paths.author_timings,
                                    backend=backend, batch_tasks=generator.batch_tasks,
                                    settings=settings_of(generator, params.seed))
    print(f"packs: {counts['packs']} written by the {generator.backend} authors, {counts['unwritten']} not "
          f"({counts['calls']} calls, {counts['prompt_tokens']} prompt and {counts['completion_tokens']} "
          "completion tokens)")
