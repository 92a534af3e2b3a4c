"""The paper's configuration rehearsed end to end on this machine: ``experiment=paper`` with every
choice the preset makes (policy validation, model-backed judges, base as the starting policy, 64
turns, 5 attempts), at counts cut to fit 2 cores, with the tiny backbone, and every model role
served through a managed vLLM server (``backbone.serve=vllm``).

It copies the working tree (tracked and untracked-but-not-ignored files, no artifacts) into a
fresh git repository (:func:`interlock.testing.copies.working_tree_copy`), composes the
parameters, runs ``dvc repro`` there and prints, per stage, its seconds and the engine that
served it (from ``metrics/timing`` and each stage's ``runtime``),
then the counts that say what the run did: tasks admitted, episodes rolled out and accepted,
evaluated episodes per model.

    .venv/bin/python perf/paper_rehearsal.py [--size small|full] [--keep DIR] [--json PATH]

``small`` is what ``make test`` runs (tests/test_perf.py); ``full`` more domains and
tasks, the figures docs/measurements.md reports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interlock.testing.copies import working_tree_copy

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: every choice the paper preset makes stays; only the counts and the backbone change
SIZES = {
    "small": ["scale.train_domains=2", "scale.heldout_domains=1", "scale.tasks_per_domain.demo=1",
              "scale.tasks_per_domain.rft=1", "scale.tasks_per_domain.dev=1",
              "scale.tasks_per_domain.benchmark=1", "scale.tasks_per_domain.indist=1",
              "scale.breadth_trajectories=2", "scale.evaluation.attempts=1", "train.seeds=1",
              "eval.models=[base,rft]"],
    "full": ["scale.train_domains=4", "scale.heldout_domains=2", "scale.tasks_per_domain.demo=2",
             "scale.tasks_per_domain.rft=2", "scale.tasks_per_domain.dev=1",
             "scale.tasks_per_domain.benchmark=2", "scale.tasks_per_domain.indist=1",
             "scale.breadth_trajectories=4", "train.seeds=2"],
}
#: the tiny backbone served by vLLM; row groups small enough for the cut counts
COMMON = ["experiment=paper", "backbone=tiny", "backbone.serve=vllm", "scale.row_group_tasks=64"]


def rehearse(root: Path, size: str) -> dict:
    """Compose the rehearsal's parameters in ``root`` and run ``dvc repro``; return its figures."""
    env = {"WANDB_MODE": "offline", **os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1"}  # W&B offline unless the caller chose a mode
    overrides = [*COMMON, *SIZES[size]]
    subprocess.run([str(BIN / "interlock"), "params", *[f"-S{o}" for o in overrides]], cwd=root,
                   check=True, env=env)
    started = time.perf_counter()
    done = subprocess.run([str(BIN / "dvc"), "repro"], cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"dvc repro failed after {seconds:.0f} s:\n{done.stdout[-6000:]}\n"
                         f"{done.stderr[-6000:]}")
    return {"size": size, "overrides": overrides, "seconds": round(seconds), "stages": stage_figures(root),
            "counts": counts(root)}


def stage_figures(root: Path) -> dict:
    figures = {}
    for timing in sorted((root / "metrics" / "timing").glob("*.json")):
        stage = timing.stem
        metrics = root / "metrics" / f"{stage}.json"
        runtime = json.loads(metrics.read_text()).get("runtime") if metrics.is_file() else None
        figures[stage] = {"seconds": json.loads(timing.read_text())["seconds"],
                          "engine": None if not runtime else
                          f"{runtime['backend']}{' (served)' if runtime.get('served') else ''}"
                          f"@{runtime.get('resolved_dtype')}"}
    return figures


def counts(root: Path) -> dict:
    def read(stage: str) -> dict:
        path = root / "metrics" / f"{stage}.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    review, rollouts, accept, evaluate = read("review"), read("rollouts"), read("accept"), read("evaluate")
    return {"admitted": {pool: row.get("admitted") for pool, row in review.items()
                         if isinstance(row, dict) and "admitted" in row},
            "rollouts": rollouts.get("episodes"), "finish_reasons": rollouts.get("finish_reasons"),
            "accepted": accept.get("accepted"),
            "evaluated": {pool: {model: entry.get("episodes") for model, entry in summary["models"].items()}
                          for pool, summary in evaluate.get("pools", {}).items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--keep", type=Path, help="run in this folder (kept) instead of a temporary one")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="interlock-rehearsal-") as tmp:
        root = args.keep or Path(tmp) / "repo"
        root.mkdir(parents=True, exist_ok=True)
        report = rehearse(working_tree_copy(ROOT, root), args.size)
    for stage, row in report["stages"].items():
        print(f"{stage:12s} {row['seconds']:8.1f} s  {row['engine'] or ''}")
    print(f"dvc repro: {report['seconds']} s in all; {json.dumps(report['counts'])}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
