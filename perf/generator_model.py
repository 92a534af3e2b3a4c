"""A real model as the three authors (``generator=llm``), honestly: a local checkpoint through a
backend of interlock.models (llama.cpp constrains each reply to its role's JSON schema with a
grammar; transformers decodes freely) writes the packs of some training tasks, and the reviews
read them. Prints the admission rate, how many tasks each review refused, the most common
reasons, and what each admitted task cost (calls, tokens, seconds).

    .venv/bin/python perf/generator_model.py --checkpoint data/models/base \\
        [--backend llamacpp|transformers] [--tasks 8] [--max-new-tokens 1536] [--max-attempts 2]
        [--json PATH]

SmolLM2-135M is expected to fail most tasks; the point is that the reviews say why and nothing
bad gets through (no task with a refusal is admitted, nothing raises).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from interlock.core.config import default_params
from interlock.core.seeds import stable_seed
from interlock.core.types import TaskSize
from interlock.review.author_faults import reviewed
from interlock.synthesis.authors.agents import author_backend, settings_of
from interlock.synthesis.authors.compile import author_packs
from interlock.synthesis.blueprints import make_blueprint
from interlock.synthesis.catalog import load_catalog
from interlock.synthesis.graph import build_graph

SIZE = TaskSize(2, 1, 1, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--backend", default="llamacpp")
    parser.add_argument("--tasks", type=int, default=8, help="one task of each of this many training domains")
    parser.add_argument("--max-new-tokens", type=int, default=1536)
    parser.add_argument("--max-attempts", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    catalog = load_catalog()
    domains = catalog.split("train")[:args.tasks]
    graphs = [build_graph(make_blueprint(d, "rft", 0, SIZE, stable_seed(9, d.id)), d) for d in domains]
    generator = default_params(["generator=llm"]).generator.replace(
        backend=args.backend, model=str(args.checkpoint), max_new_tokens=args.max_new_tokens,
        max_attempts=args.max_attempts)
    backend = author_backend(generator)
    settings = settings_of(generator, seed=0)
    start = time.perf_counter()
    made, calls = author_packs(graphs, catalog, backend, settings)
    seconds = time.perf_counter() - start
    refused_by: Counter = Counter()
    reasons: Counter = Counter()
    admitted = 0
    for graph, item in zip(graphs, made, strict=True):
        catchers, said = reviewed(graph, item, catalog[graph.domain_id])
        admitted += not catchers
        refused_by.update(catchers)
        reasons.update({reason[:100] for reason in said})
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in calls)
    print(f"{args.backend} {args.checkpoint}: {len(graphs)} tasks, {admitted} admitted, {len(calls)} calls, "
          f"{tokens} tokens, {seconds:.0f} s ({seconds / len(graphs):.0f} s a task)")
    print("refused by:", dict(refused_by))
    by_role = Counter((c.role, c.problem.split(" (")[0][:60]) for c in calls if not c.accepted)
    print("refused replies by role and reason:")
    for (role, problem), count in by_role.most_common(10):
        print(f"  {count:3d}  {role}: {problem}")
    print("most common task rejection reasons:")
    for reason, count in reasons.most_common(8):
        print(f"  {count:3d}  {reason}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "backend": args.backend, "tasks": len(graphs), "admitted": admitted, "calls": len(calls),
            "tokens": tokens, "seconds": round(seconds, 1), "refused_by": dict(refused_by),
            "refused_replies": [{"role": r, "problem": p, "count": n}
                                for (r, p), n in by_role.most_common(10)],
            "reasons": dict(reasons.most_common(8))}, indent=1) + "\n")


if __name__ == "__main__":
    main()
