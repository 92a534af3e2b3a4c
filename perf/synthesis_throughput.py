"""Synthesis throughput benchmark: tasks per second and peak memory, one core, per size.

Runs the real stage functions end to end (domains -> blueprints -> graphs -> packs -> review)
into a fresh temporary directory, once per size, each in a child process of its own pinned to
one core, so the peak resident memory of every size is measured independently. Not a test:
it prints a table and checks the targets of the "Bad input, determinism, scale" section
(10k tasks in at most 60 s; peak memory at 100k at most 1.5x that at 10k).

    .venv/bin/python perf/synthesis_throughput.py [--sizes 1000 10000 100000]
        [--task-size default|paper] [--row-group-tasks 256] [--catalog PATH] [--json PATH]

Task counts: every size uses as many catalog domains as it can (training domains for the
``demo``/``rft``/``dev`` pools, held-out domains for ``benchmark``), with the same number of
tasks per domain in each pool, chosen so the total is exactly the size asked for; the
training tasks are split over ``demo``/``rft``/``dev`` in the default scale's proportions and
the benchmark pool gets about the default scale's share. The table reports the plan used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
STAGES = ("domains", "blueprints", "graphs", "packs", "review")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")
TARGET_10K_SECONDS = 60.0
TARGET_RSS_RATIO = 1.5


# ----------------------------------------------------------------------------- configuration

@cache
def composed(*overrides: str) -> dict:
    """``conf/`` composed as DVC composes it (with these Hydra overrides)."""
    from interlock.core.config import compose_params

    return compose_params(CONF, list(overrides))


def scale_conf(name: str) -> dict:
    return composed(f"scale={name}")["scale"]


def git_revision() -> str:
    """The commit measured, with ``+dirty`` when src/ or conf/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "conf"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def default_seed() -> int:
    return int(composed()["seed"])


def split_counts(total: int, weights: dict[str, int]) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` (largest remainder), every part at least 1."""
    names = list(weights)
    if total < len(names):
        raise ValueError(f"cannot split {total} tasks over {len(names)} pools")
    spare = total - len(names)
    weight_sum = sum(weights.values())
    exact = {n: spare * weights[n] / weight_sum for n in names}
    counts = {n: 1 + int(exact[n]) for n in names}
    remainder = total - sum(counts.values())
    for n in sorted(names, key=lambda n: (-(exact[n] - int(exact[n])), names.index(n)))[:remainder]:
        counts[n] += 1
    return counts


def plan_tasks(n: int, n_train: int, n_heldout: int, pools: dict[str, int]) -> dict:
    """Domain counts and tasks per domain and pool whose total is ``n`` (exactly when possible).

    Prefers an exact total, then a benchmark share within about 1 point of that of ``pools`` (a
    scale's ``tasks_per_domain``, weighted by the default scale's domain counts), then the most
    domains, then the closest share.
    """
    train_pools = {p: pools[p] for p in ("demo", "rft", "dev")}
    default = scale_conf("default")
    train_weight = default["train_domains"] * sum(train_pools.values())
    bench_weight = default["heldout_domains"] * pools["benchmark"]
    share = bench_weight / (train_weight + bench_weight)
    best = None
    for t in range(1, n_train + 1):
        for h in range(1, n_heldout + 1):
            b0 = max(1, round(share * n / h))
            for b in range(max(1, b0 - 64), b0 + 65):
                rest = n - h * b
                k = rest // t
                if k < len(train_pools):
                    continue
                total = t * k + h * b
                off = abs(h * b / total - share)
                key = (total == n, -abs(n - total), -round(off * 50), t + h, -off, t)
                if best is None or key > best[0]:
                    best = (key, t, h, k, b)
    if best is None:
        raise ValueError(f"{n} tasks is too few for the pools (need at least {len(train_pools) + 1})")
    _, t, h, k, b = best
    tasks_per_domain = {**split_counts(k, train_pools), "benchmark": b}
    return {"train_domains": t, "heldout_domains": h, "tasks_per_domain": tasks_per_domain,
            "tasks": t * k + h * b}


# ----------------------------------------------------------------------------- child process

def _peak_kib() -> int | None:
    """VmHWM of this process in KiB (peak resident set since start or the last reset)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def child(args: argparse.Namespace) -> None:
    """Run every stage once for one size; write the measurements as JSON to ``args.child_out``."""
    import resource

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)

    from interlock.core.types import TaskSize
    from interlock.review.stage import run_review
    from interlock.synthesis.stage import run_blueprints, run_domains, run_graphs, run_packs
    from interlock.synthesis.tasks import load_domains

    plan = json.loads(args.child_plan)
    size = TaskSize(**plan["task_size"])
    base_kib = _peak_kib()
    can_reset = _reset_peak()
    seconds: dict[str, float] = {}
    peak_kib: dict[str, int | None] = {}
    out = Path(args.child_dir)
    data = {
        "domains": lambda: run_domains(out / "domains.parquet", Path(args.catalog)),
        "blueprints": lambda: run_blueprints(
            out / "domains.parquet", out / "blueprints.parquet", seed=args.seed,
            train_domains=plan["train_domains"], heldout_domains=plan["heldout_domains"],
            tasks_per_domain=plan["tasks_per_domain"], size=size,
            row_group_tasks=args.row_group_tasks),
        "graphs": lambda: run_graphs(out / "domains.parquet", out / "blueprints.parquet", out / "graphs"),
        "packs": lambda: run_packs(out / "domains.parquet", out / "graphs", out / "packs"),
        "review": lambda: run_review(out / "graphs", out / "packs", out / "review",
                                     catalog=load_domains(out / "domains.parquet")),
    }
    results = {}
    cpu_start = time.process_time()
    for stage in STAGES:
        start = time.perf_counter()
        try:
            results[stage] = data[stage]()
        except BaseException as exc:
            Path(args.child_out).write_text(json.dumps(
                {"failed_stage": stage, "error": f"{type(exc).__name__}: {exc}"}))
            raise
        seconds[stage] = time.perf_counter() - start
        peak_kib[stage] = _peak_kib()
        if can_reset:
            _reset_peak()
    cpu_seconds = time.process_time() - cpu_start
    ru_maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    stage_peaks = [p for p in peak_kib.values() if p is not None]
    peak = max([ru_maxrss_kib, *stage_peaks])
    files = [p for p in out.rglob("*") if p.is_file()]
    report = {
        "seconds": seconds, "cpu_seconds": cpu_seconds,
        "peak_rss_kib": peak, "stage_peak_rss_kib": peak_kib if can_reset else None,
        "baseline_rss_kib": base_kib, "output_bytes": sum(p.stat().st_size for p in files),
        "output_files": len(files), "blueprint_counts": dict(results["blueprints"]),
        "review_summary": results["review"], "cpus": sorted(os.sched_getaffinity(0)),
    }
    Path(args.child_out).write_text(json.dumps(report))


# ----------------------------------------------------------------------------- parent

def run_size(n: int, args: argparse.Namespace, task_size: dict, pools: dict, n_train: int,
             n_heldout: int) -> dict:
    plan = plan_tasks(n, n_train, n_heldout, pools)
    plan["task_size"] = task_size
    env = {**os.environ, **dict.fromkeys(THREAD_VARS, "1"), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix=f"interlock-bench-{n}-", dir=args.workdir) as tmp:
        result_path = Path(tmp) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child-dir", str(Path(tmp) / "data"),
                   "--child-out", str(result_path), "--child-plan", json.dumps(plan),
                   "--catalog", str(args.catalog), "--seed", str(args.seed),
                   "--row-group-tasks", str(args.row_group_tasks), "--cpu", str(args.cpu)]
        wall = time.perf_counter()
        done = subprocess.run(command, env=env, check=False)
        wall = time.perf_counter() - wall
        measured = json.loads(result_path.read_text()) if result_path.exists() else {}
    if done.returncode != 0 or "error" in measured:
        return {"size": n, **plan, "failed_stage": measured.get("failed_stage", "?"),
                "error": measured.get("error", f"child process exited with {done.returncode}")}
    total = sum(measured["seconds"][s] for s in STAGES)
    synthesis = sum(measured["seconds"][s] for s in STAGES if s != "domains")
    return {"size": n, **plan, **measured, "total_seconds": total, "synthesis_seconds": synthesis,
            "tasks_per_second": plan["tasks"] / synthesis, "process_seconds": wall,
            "peak_rss_mib": measured["peak_rss_kib"] / 1024}


def summarize(runs: list[dict]) -> dict:
    by_size = {r["size"]: r for r in runs if "error" not in r}
    checks: dict = {}
    if 10_000 in by_size:
        seconds = by_size[10_000]["synthesis_seconds"]
        checks["seconds_10k"] = seconds
        checks["seconds_10k_ok"] = seconds <= TARGET_10K_SECONDS
    if 10_000 in by_size and 100_000 in by_size:
        ratio = by_size[100_000]["peak_rss_kib"] / by_size[10_000]["peak_rss_kib"]
        checks["rss_ratio_100k_10k"] = ratio
        checks["rss_ratio_ok"] = ratio <= TARGET_RSS_RATIO
    return checks


def fmt_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def table(runs: list[dict]) -> str:
    head = ["N (tasks)", *[f"{s} s" for s in STAGES], "total s", "tasks/s", "peak RSS MiB", "output"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['tasks']:,} | failed in {r['failed_stage']}: {r['error']} |")
            continue
        cells = [f"{r['tasks']:,}", *[f"{r['seconds'][s]:.2f}" for s in STAGES],
                 f"{r['synthesis_seconds']:.1f}", f"{r['tasks_per_second']:.0f}",
                 f"{r['peak_rss_mib']:.0f}", fmt_bytes(r["output_bytes"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def details(runs: list[dict]) -> str:
    lines = []
    for r in runs:
        if "error" in r:
            continue
        pools = ", ".join(f"{p} {n}" for p, n in sorted(r["blueprint_counts"].items()))
        stage_peaks = r["stage_peak_rss_kib"] or {}
        peaks = ", ".join(f"{s} {v / 1024:.0f}" for s, v in stage_peaks.items() if v)
        per_train = sum(r["tasks_per_domain"][p] for p in ("demo", "rft", "dev"))
        lines.append(
            f"N={r['tasks']:,}: {r['train_domains']} train x {per_train}"
            f" + {r['heldout_domains']} held-out x {r['tasks_per_domain']['benchmark']} tasks ({pools});"
            f" CPU {r['cpu_seconds']:.1f} s of {r['total_seconds']:.1f} s wall;"
            f" RSS after imports {r['baseline_rss_kib'] / 1024:.0f} MiB; peak RSS MiB during each stage"
            f" (memory kept from earlier stages included): {peaks}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000],
                        help="task counts to run, each in its own process (default: 1000 10000 100000)")
    parser.add_argument("--task-size", choices=("default", "paper"), default="default",
                        help="task size of conf/scale/<name>.yaml (default: default)")
    parser.add_argument("--row-group-tasks", type=int, default=None,
                        help="tasks per Parquet row group (default: the chosen scale's, 256 for default)")
    parser.add_argument("--catalog", type=Path, default=None,
                        help="domain catalog YAML (default: the package's domains.yaml)")
    parser.add_argument("--seed", type=int, default=None, help="master seed (default: conf/config.yaml)")
    parser.add_argument("--cpu", type=int, default=0, help="the core every child is pinned to (default: 0)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the temporary output directories go (default: the system temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    for hidden in ("--child-dir", "--child-out", "--child-plan"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_out:
        child(args)
        return

    scale = scale_conf(args.task_size)
    if args.row_group_tasks is None:
        args.row_group_tasks = int(scale["row_group_tasks"])
    if args.seed is None:
        args.seed = default_seed()
    from interlock.core.resources import resource
    from interlock.synthesis.catalog import CATALOG, load_catalog

    args.catalog = (args.catalog or resource(CATALOG)).resolve()
    catalog = load_catalog(args.catalog)
    n_train, n_heldout = len(catalog.split("train")), len(catalog.split("heldout"))
    task_size = dict(scale["task_size"])
    pools = dict(scale_conf("default")["tasks_per_domain"])
    revision = git_revision()
    print(f"interlock {revision}; catalog {args.catalog} ({n_train} train, {n_heldout} held-out domains); "
          f"task size "
          f"{args.task_size} {task_size}; {args.row_group_tasks} tasks per row group; seed {args.seed}; "
          f"one core (cpu {args.cpu}) per size; {os.cpu_count()} cores on this machine", flush=True)

    runs = []
    for n in args.sizes:
        print(f"\n== {n:,} tasks ==", file=sys.stderr, flush=True)
        run = run_size(n, args, task_size, pools, n_train, n_heldout)
        runs.append(run)
        if "error" in run:
            print(f"{run['tasks']:,} tasks: FAILED in {run['failed_stage']}: {run['error']}",
                  file=sys.stderr, flush=True)
            continue
        print(f"{run['tasks']:,} tasks: {run['synthesis_seconds']:.1f} s, "
              f"{run['tasks_per_second']:.0f} tasks/s, peak RSS {run['peak_rss_mib']:.0f} MiB",
              file=sys.stderr, flush=True)

    checks = summarize(runs)
    print("\n" + table(runs))
    print("\ntotal s and tasks/s cover blueprints -> graphs -> packs -> review (domains excluded);")
    print("peak RSS is the whole child process's (interpreter and imports included).\n")
    print(details(runs))
    if "seconds_10k" in checks:
        verdict = "met" if checks["seconds_10k_ok"] else "NOT met"
        print(f"\n10k tasks: {checks['seconds_10k']:.1f} s (target <= {TARGET_10K_SECONDS:.0f} s): {verdict}")
    if "rss_ratio_100k_10k" in checks:
        verdict = "met" if checks["rss_ratio_ok"] else "NOT met"
        print(f"peak RSS 100k / 10k: {checks['rss_ratio_100k_10k']:.2f} "
              f"(target <= {TARGET_RSS_RATIO}): {verdict}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "revision": revision, "catalog": str(args.catalog), "task_size_name": args.task_size,
            "task_size": task_size,
            "row_group_tasks": args.row_group_tasks, "seed": args.seed, "cpu": args.cpu,
            "machine_cpus": os.cpu_count(), "runs": runs, "targets": checks,
        }, indent=2, sort_keys=True) + "\n")
        print(f"\nresults written to {args.json}")
    failed = [r for r in runs if "error" in r]
    if failed:
        raise SystemExit(f"{len(failed)} size(s) failed: "
                         + "; ".join(f"{r['size']}: {r['error']}" for r in failed))


if __name__ == "__main__":
    main()
