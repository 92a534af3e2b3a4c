"""The model generators' reviews against an author that makes mistakes: for every class of mistake
(:data:`interlock.review.scripted_author.FAULTS`), one task of each training domain written with it by
the scripted author over a real loopback HTTP server, reviewed as the ``review`` stage reviews
(static reviews; the execution gate is the templates' own and is left out); and every domain's
task written cleanly. Prints, per class, the review that must refuse it, how many were refused
and how many by that review (the recall), and an example reason; for the clean paraphrases, how
many were refused. Then the diversity of what the authors wrote against the templates' packs of
the same graphs: each task's nearest-neighbour similarity (recursive synthesis's index), mean
and tail.

    .venv/bin/python perf/generator_faults.py [--domains N] [--json PATH]

Not a test: the tests plant each class on one task (tests/test_generator_agents.py); this
measures every class over the catalog's training domains.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

from interlock.core.config import default_params
from interlock.recursive.similarity import nearest_neighbours, tail_share, task_signature
from interlock.review.author_faults import fault_graphs, fault_table, write_with_faults
from interlock.review.scripted_author import FAULTS
from interlock.synthesis.authors.agents import settings_of
from interlock.synthesis.authors.compile import Unwritten
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.packs import compile_pack
from interlock.testing.authors import served

DEFAULTS = default_params(["generator=llm"])  # the sizes are the default scale's
SIZE = DEFAULTS.scale.task_size.build()  # the default scale's task size
SEED = 5
TAIL = DEFAULTS.synthesis.similarity_threshold  # recursive synthesis's similarity threshold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=None, help="training domains (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    catalog = load_catalog()
    domains = catalog.split("train")[:args.domains]
    graphs = fault_graphs(domains, SIZE, SEED)
    start = time.perf_counter()
    generator = DEFAULTS.generator
    run = write_with_faults(graphs, catalog, settings_of(generator, seed=0),
                            serve=functools.partial(served, max_in_flight=generator.server.max_in_flight))
    authored_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = fault_table(run, catalog)
    reviewed_s = time.perf_counter() - start
    print(f"{len(graphs)} tasks over {len(domains)} training domains: authored in {authored_s:.1f} s "
          f"({run.calls} calls over HTTP), reviewed in {reviewed_s:.1f} s\n")
    print("| mistake | reviews that may refuse it | tasks | refused | by those (recall) | refused by | "
          "example |")
    print("|---|---|---:|---:|---:|---|---|")
    for name, row in rows.items():
        recall = "" if name == "clean" else f"{row['by_review']} ({row['recall']:.3f})"
        what = "clean paraphrase" if name == "clean" else f"`{name}`: {FAULTS[name][1]}"
        by = ", ".join(f"{k} {v}" for k, v in row["refused_by"].items())
        print(f"| {what} | {' or '.join(row['reviews']) or '(none: admitted)'} | {row['tasks']} | "
              f"{row['refused']} | {recall} | {by} | {row['example'].replace('|', '/')} |")

    clean = [(graphs[("clean", d.id)], d) for d in domains]
    packs = {domain_id: made for (name, domain_id), made in run.made.items()
             if name == "clean" and not isinstance(made, Unwritten)}
    authored = [task_signature(g, packs[d.id]) for g, d in clean if d.id in packs]
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
        out = {"domains": len(domains), "authored_seconds": round(authored_s, 1), "calls": run.calls,
               "diversity": diversity, "classes": rows}
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
