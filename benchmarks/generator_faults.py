"""The model generators' reviews against an author that makes mistakes: for every class of mistake
(:data:`interlock.testing.authors.FAULTS`), one task of each training domain written with it by
the scripted author over a real loopback HTTP server, reviewed as the ``review`` stage reviews
(static reviews; the execution gate is the templates' own and is left out); and every domain's
task written cleanly. Prints, per class, the review that must refuse it, how many were refused
and how many by that review (the recall), and an example reason; for the clean paraphrases, how
many were refused. Then the diversity of what the authors wrote against the templates' packs of
the same graphs: each task's nearest-neighbour similarity (recursive synthesis's index), mean
and tail.

    .venv/bin/python benchmarks/generator_faults.py [--domains N] [--json PATH]

Not a test: the tests plant each class on one task (tests/test_generator_agents.py); this
measures every class over the catalog's training domains.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.models.openai_backend import OpenAIBackend
from interlock.recursive.similarity import nearest_neighbours, tail_share, task_signature
from interlock.synthesis.authors.agents import AuthorSettings
from interlock.synthesis.authors.compile import Unwritten, author_packs
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.graph import build_graph
from interlock.synthesis.packs import compile_pack
from interlock.testing.authors import FAULTS, ScriptedAuthor, reviewed
from interlock.testing.loopback_server import LoopbackServer

SIZE = TaskSize(2, 1, 1, 1)  # the default scale's task size
TAIL = 0.95  # recursive synthesis's similarity threshold (conf/synthesis)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=None, help="training domains (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    catalog = load_catalog()
    domains = catalog.split("train")[:args.domains]
    classes = ["clean", *FAULTS]
    graphs = {(name, d.id): build_graph(make_blueprint(d, "rft", index, SIZE, stable_seed(5, d.id, index)), d)
              for index, name in enumerate(classes) for d in domains}
    faults = {g.task_id: name for (name, _), g in graphs.items() if name != "clean"}
    outcomes = {g.task_id: {n.attrs["case_id"]: n.attrs["outcome"] for n in g.of_kind("decision")}
                for g in graphs.values()}
    start = time.perf_counter()
    with LoopbackServer(ScriptedAuthor(faults, outcomes), endpoints=1, max_seconds=3600) as server:
        backend = OpenAIBackend(server.urls, "scripted-author", max_in_flight=16, max_retries=0,
                                timeout_s=120)
        made, calls = author_packs(list(graphs.values()), catalog, backend, AuthorSettings())
    authored_s = time.perf_counter() - start
    rows: dict[str, dict] = {}
    start = time.perf_counter()
    packs = {}
    for ((name, _), graph), item in zip(graphs.items(), made, strict=True):
        if not isinstance(item, Unwritten):
            packs[graph.task_id] = item
        catchers, reasons = reviewed(graph, item, catalog[graph.domain_id])
        row = rows.setdefault(name, {"reviews": list(FAULTS[name][0]) if name in FAULTS else [], "tasks": 0,
                                     "refused": 0, "by_review": 0, "refused_by": Counter(), "example": ""})
        row["tasks"] += 1
        if catchers:
            row["refused"] += 1
            row["refused_by"].update(catchers)
            row["by_review"] += int(bool(set(row["reviews"]) & set(catchers)))
            row["example"] = row["example"] or reasons[0][:140]
    reviewed_s = time.perf_counter() - start
    print(f"{len(graphs)} tasks over {len(domains)} training domains: authored in {authored_s:.1f} s "
          f"({len(calls)} calls over HTTP), reviewed in {reviewed_s:.1f} s\n")
    print("| mistake | reviews that may refuse it | tasks | refused | by those (recall) | refused by | "
          "example |")
    print("|---|---|---:|---:|---:|---|---|")
    for name in classes:
        row = rows[name]
        recall = "" if name == "clean" else f"{row['by_review']} ({row['by_review'] / row['tasks']:.3f})"
        what = "clean paraphrase" if name == "clean" else f"`{name}`: {FAULTS[name][1]}"
        by = ", ".join(f"{k} {v}" for k, v in sorted(row["refused_by"].items()))
        print(f"| {what} | {' or '.join(row['reviews']) or '(none: admitted)'} | {row['tasks']} | "
              f"{row['refused']} | {recall} | {by} | {row['example'].replace('|', '/')} |")

    clean = [(graphs[("clean", d.id)], d) for d in domains]
    authored = [task_signature(g, packs[g.task_id]) for g, _ in clean if g.task_id in packs]
    template = [task_signature(g, compile_pack(g, d)) for g, d in clean]
    diversity = {}
    for name, signatures in (("template", template), ("scripted author", authored)):
        nearest = [s for _, s in nearest_neighbours(signatures)]
        diversity[name] = {"tasks": len(nearest), "mean_nearest": round(sum(nearest) / len(nearest), 4),
                           "tail_share": round(tail_share(nearest, TAIL), 4)}
    print(f"\nNearest-neighbour similarity of the clean tasks (tail: >= {TAIL}):")
    for name, figures in diversity.items():
        print(f"  {name}: {figures['tasks']} tasks, mean nearest {figures['mean_nearest']}, "
              f"tail {figures['tail_share']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = {"domains": len(domains), "authored_seconds": round(authored_s, 1), "calls": len(calls),
               "diversity": diversity,
               "classes": {name: {**row, "refused_by": dict(row["refused_by"])}
                           for name, row in rows.items()}}
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
