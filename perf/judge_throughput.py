"""Agent-judge throughput benchmark: rollouts judged per second on 2 cores, and cost per criterion.

Rollouts come from the rollout engine playing four scripted solvers on every admitted task of
every pool (the oracle; a noisy solver that skips effects and claims success; success claimed
without the work; the work plus collateral damage), so the truth is known and no model is
needed. They are made before the clock starts. The process (and so every sandbox worker it
starts) is pinned to ``--cores`` CPUs. Not a test: it prints a table and checks the target of
issue 3 (at least 50 rollouts/s for the default tasks).

    .venv/bin/python perf/judge_throughput.py [--data data] [--cores 2]
        [--workers 2] [--rollouts 2000] [--batch 64] [--json PATH]

``--data`` is a data folder with the ``domains``, ``graphs``, ``packs`` and ``review`` stages'
artifacts (laid out as ``conf/paths`` says); when they are not all there it synthesizes the
default scale's tasks into a temporary folder first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from interlock.analysis.artifacts import repository_paths
from interlock.core.paths import Paths

ROOT = Path(__file__).resolve().parents[1]
TARGET_ROLLOUTS_PER_SECOND = 50.0
POLICIES = ("oracle", "noisy", "claim_only", "collateral_damage")


def pin(cores: int) -> list[int]:
    available = sorted(os.sched_getaffinity(0))
    chosen = available[:cores]
    os.sched_setaffinity(0, chosen)
    return chosen


def default_data(folder: Path) -> Paths:
    """The default scale's tasks, synthesized and reviewed with the real stage functions into
    ``folder`` (laid out as the pipeline lays out its data folder)."""
    from interlock.core.config import Params, compose_params
    from interlock.review.stage import run_review
    from interlock.synthesis.authors.stage import packs
    from interlock.synthesis.stage import blueprints, domains, graphs
    from interlock.synthesis.tasks import load_domains

    params = Params.model_validate(compose_params(ROOT / "conf"))
    paths = params.paths.rebase(data=folder)
    for stage in (domains, blueprints, graphs, packs):
        stage(params, paths)
    # the static reviews (no execution gate)
    run_review(paths.graphs, paths.packs, paths.review, catalog=load_domains(paths.domains))
    return paths


def scripted_pool(paths: Paths, workdir: Path) -> list:
    """(trajectory, pack) for every admitted task of every pool x scripted policy (task by task,
    so any prefix of the pool mixes the policies evenly)."""
    from interlock.core.types import POOLS
    from interlock.rollout.runs import scripted_rollouts
    from interlock.synthesis.tasks import admitted_tasks, load_domains
    from interlock.testing.adversaries import PLANS

    catalog = load_domains(paths.domains)
    contexts = [c for pool in POOLS for c in admitted_tasks(paths, catalog, pool)]
    trajectories = scripted_rollouts(contexts, POLICIES, seed=0, workdir=workdir, skip_effect=0.5,
                                     ignore_coupling=0.0, plans=PLANS)  # in plan order: policy by policy
    n = len(contexts)
    return [(trajectories[i * n + j], contexts[j].pack) for j in range(n) for i in range(len(POLICIES))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the artifacts' folder (default: the repository's)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: --cores)")
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--scratch", type=Path, help="where workspace copies and the rollouts' "
                        "workspaces go (default: /dev/shm if writable, else the temporary folder)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    cores = pin(args.cores)

    from interlock.judging.agent import AgentJudge
    from interlock.judging.metrics import JudgeStats
    from interlock.judging.sandbox import scratch_base
    from interlock.judging.text import TextJudge

    workspaces = args.scratch or scratch_base()  # many small folders: memory-backed where possible
    with (tempfile.TemporaryDirectory() as tmp,
          tempfile.TemporaryDirectory(prefix="judge-bench-rollouts-", dir=workspaces) as work):
        paths = repository_paths(ROOT, data=args.data)
        ready = all(path.exists() for path in (paths.domains, paths.graphs, paths.packs, paths.review))
        data = paths if ready else default_data(Path(tmp) / "data")
        tick = time.perf_counter()
        pool = scripted_pool(data, Path(work))
        rollout_seconds = time.perf_counter() - tick
    packs = {p.task_id: p for _, p in pool}
    items = list(itertools.islice(itertools.cycle(pool), args.rollouts))
    criteria = sum(len(p.rubric) for _, p in items)

    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="judge-bench-", dir=args.scratch)) if args.scratch else None
    judge = AgentJudge(workers=args.workers or args.cores, scratch=scratch)
    judge.pool.start()
    startup = time.perf_counter() - start
    stats = JudgeStats()
    try:
        judge.judge(items[:args.batch])  # warm: first batch's imports and caches
        start = time.perf_counter()
        for offset in range(0, len(items), args.batch):
            chunk = items[offset:offset + args.batch]
            tick = time.perf_counter()
            by_agent = judge.judge(chunk)
            stats.add_wall("agent", time.perf_counter() - tick)
            tick = time.perf_counter()
            by_text = TextJudge().judge(chunk)
            stats.add_wall("text", time.perf_counter() - tick)
            stats.add([t for t, _ in chunk], [p for _, p in chunk], by_agent,
                      {"agent": by_agent, "text": by_text})
        tick = time.perf_counter()
        judge.flush()  # removing the copies is part of the cost, even when it runs alongside
        stats.add_wall("agent", time.perf_counter() - tick)
        total = time.perf_counter() - start
        network = judge.pool.network
    finally:
        judge.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    summary = stats.summary()
    agent, text = summary["judges"]["agent"], summary["judges"]["text"]
    result = {
        "cores": cores, "workers": args.workers or args.cores, "packs": len(packs),
        "scripted_rollouts": len(pool), "scripted_rollout_seconds": round(rollout_seconds, 3),
        "rollouts": len(items), "criteria": criteria, "criteria_per_rollout": round(criteria / len(items), 2),
        "pool_startup_seconds": round(startup, 3), "sandbox_network": network,
        "scratch": str(judge.scratch.parent),
        "agent": {k: agent[k] for k in ("seconds", "rollouts_per_second", "seconds_per_rollout",
                                        "seconds_per_criterion", "output_tokens_per_criterion", "by_kind")},
        "text": {k: text[k] for k in ("seconds", "rollouts_per_second", "seconds_per_criterion")},
        "both_seconds": round(total, 3),
        "text_false_accept_rate_by_policy": {
            policy: entry["trajectories"]["false_accept_rate"]
            for policy, entry in text["vs_truth"].items() if policy != "all"},
        "target_rollouts_per_second": TARGET_ROLLOUTS_PER_SECOND,
    }
    result["target_met"] = agent["rollouts_per_second"] >= TARGET_ROLLOUTS_PER_SECOND

    print(f"agent judge on {len(cores)} core(s) {cores}, {result['workers']} sandbox workers "
          f"(network: {network}); pool start {startup:.2f} s; copies under {judge.scratch.parent}")
    print(f"{len(items)} rollouts ({len(packs)} admitted tasks x {len(POLICIES)} scripted policies = "
          f"{len(pool)}, made in {rollout_seconds:.1f} s, cycled), "
          f"{result['criteria_per_rollout']} criteria per rollout")
    print(f"{'judge':<8}{'rollouts/s':>12}{'ms/rollout':>12}{'ms/criterion':>14}{'tokens/criterion':>18}")
    for name, entry in (("agent", agent), ("text", text)):
        print(f"{name:<8}{entry['rollouts_per_second']:>12.1f}{entry['seconds_per_rollout'] * 1e3:>12.2f}"
              f"{entry['seconds_per_criterion'] * 1e3:>14.3f}{entry['output_tokens_per_criterion']:>18}")
    print("agent judge, per criterion kind (check in the sandbox + share of the copy and diff):")
    for kind, entry in agent["by_kind"].items():
        print(f"  {kind:<14}{entry['seconds_per_criterion'] * 1e3:>8.3f} ms")
    print("text judge (credulous) false-accept rate per trajectory, by policy: "
          + ", ".join(f"{p} {r}" for p, r in result["text_false_accept_rate_by_policy"].items()))
    verdict = "met" if result["target_met"] else "NOT met"
    print(f"target >= {TARGET_ROLLOUTS_PER_SECOND:g} rollouts/s: {verdict} "
          f"({agent['rollouts_per_second']:.1f})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["target_met"] else 1)
