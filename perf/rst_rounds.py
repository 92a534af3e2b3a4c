"""Recursive synthesis benchmark: rounds of rewriting toward a number of validated tasks, with the
time and resident memory of every round.

Seeds the pool with ``--seeds`` synthesized ``rft`` tasks (scripted generators, the default task
size), then runs ``--rounds`` rounds; each round attempts as many candidates as it needs to stay on
course for ``--target`` validated tasks in all (from the previous round's validation rate), every
candidate rewritten, compiled and validated exactly as the ``grow`` stage does (reviews, contract
conformance, oracle execution), single process. Not a test: it prints a table per round and the
totals, and checks the issue's targets (the published run's 37,484 validated tasks in 15 rounds
within 15 minutes; memory flat across rounds).

    .venv/bin/python perf/rst_rounds.py [--target 37484] [--rounds 15] [--seeds 256]
        [--sampler uniform|novelty] [--json PATH]

A shorter run (``--target 1500``) measures seconds per validated task; the full target at that
rate is printed as an extrapolation, never as a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from interlock.core.config import default_params  # noqa: E402
from interlock.recursive.rounds import Pool, RoundsConfig, grow_rounds  # noqa: E402
from interlock.recursive.similarity import tail_share  # noqa: E402
from interlock.recursive.validation import compile_task  # noqa: E402
from interlock.synthesis.blueprints import generate_blueprints  # noqa: E402
from interlock.synthesis.catalog import load_catalog  # noqa: E402

PUBLISHED_TASKS, PUBLISHED_ROUNDS = 37_484, 15
DEFAULTS = default_params(["synthesis=rst"])  # the default scale's task size
RST = DEFAULTS.synthesis  # operators, novelty power and tail threshold
TARGET_SECONDS = 15 * 60
TARGET_RSS_RATIO = 1.5  # last round's peak resident memory against the first's


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def seed_tasks(count: int, seed: int) -> tuple[list, object]:
    catalog = load_catalog(None)
    size = DEFAULTS.scale.task_size.build()
    domains = len(catalog.split("train"))
    per_domain = math.ceil(count / domains)
    blueprints = list(generate_blueprints(catalog, seed=seed, train_domains=domains, heldout_domains=0,
                                          tasks_per_domain={"demo": 0, "rft": per_domain, "dev": 0,
                                                            "benchmark": 0}, size=size))[:count]
    return [compile_task(b, catalog[b.domain_id]) for b in blueprints], catalog


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=int, default=PUBLISHED_TASKS, help="validated tasks to reach")
    parser.add_argument("--rounds", type=int, default=PUBLISHED_ROUNDS)
    parser.add_argument("--seeds", type=int, default=256, help="synthesized rft tasks the pool starts from")
    parser.add_argument("--sampler", choices=("uniform", "novelty"), default="uniform")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    seeds, catalog = seed_tasks(args.seeds, args.seed)
    seeding = time.perf_counter() - start
    pool = Pool(catalog, seeds, [t.blueprint for t in seeds])
    print(f"seeded {len(seeds)} tasks in {seeding:.1f} s; target {args.target} validated in "
          f"{args.rounds} rounds")
    print(f"{'round':>5} {'cand.':>6} {'valid':>6} {'pool':>7} {'s':>7} {'s/valid':>8} {'tail':>6} "
          f"{'RSS MiB':>8}")
    rows, validated, rate = [], 0, 0.5
    for number in range(1, args.rounds + 1):
        remaining = max(0, args.target - validated)
        candidates = math.ceil(remaining / (args.rounds - number + 1) / max(rate, 0.05))
        config = RoundsConfig.of(RST.replace(rounds=1, candidates=candidates), args.sampler, args.seed)
        clock = time.perf_counter()
        report, _ = next(grow_rounds(pool, config, first=number))
        seconds = time.perf_counter() - clock
        validated += report.validated
        rate = report.validated / report.candidates if report.candidates else rate
        tail = tail_share(report.nearest, RST.similarity_threshold)
        row = {"round": number, "candidates": report.candidates, "validated": report.validated,
               "pool": len(pool.members), "seconds": round(seconds, 2),
               "seconds_per_validated": round(seconds / report.validated, 4) if report.validated else None,
               "tail_share_0.95": round(tail, 4), "peak_rss_mib": round(rss_mib(), 1)}
        rows.append(row)
        print(f"{number:>5} {row['candidates']:>6} {row['validated']:>6} {row['pool']:>7} "
              f"{seconds:>7.1f} {row['seconds_per_validated'] or float('nan'):>8.4f} {tail:>6.3f} "
              f"{row['peak_rss_mib']:>8.0f}")
    total = sum(r["seconds"] for r in rows)
    per_task = total / validated if validated else math.inf
    summary = {"target": args.target, "rounds": args.rounds, "seeds": len(seeds), "sampler": args.sampler,
               "validated": validated, "seconds": round(total, 1),
               "seconds_per_validated": round(per_task, 4),
               "extrapolated_seconds_for_published": round(per_task * PUBLISHED_TASKS, 0),
               "rss_ratio_last_first": round(rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"], 3),
               "by_round": rows}
    summary["checks"] = {
        "reached_target": validated >= args.target,
        "within_15_minutes_measured": args.target >= PUBLISHED_TASKS and total <= TARGET_SECONDS,
        "within_15_minutes_extrapolated": per_task * PUBLISHED_TASKS <= TARGET_SECONDS,
        "memory_flat": summary["rss_ratio_last_first"] <= TARGET_RSS_RATIO}
    print(f"\n{validated} validated in {total:.0f} s ({per_task * 1000:.1f} ms per validated task); "
          f"{PUBLISHED_TASKS} at this rate: {per_task * PUBLISHED_TASKS / 60:.1f} min "
          f"(target {TARGET_SECONDS / 60:.0f} min); peak RSS last/first round "
          f"{summary['rss_ratio_last_first']}")
    print("checks: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in summary["checks"].items()))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
