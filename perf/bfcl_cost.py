"""BFCL multi-turn cost per checkpoint: what each BFCL task costs a model on this machine.

Runs the ``bfcl`` pool's adapter (the same episodes as the ``evaluate`` stage: the rollout
engine, the ``transformers`` backend, the limits and seed of ``params.yaml``) on the first BFCL
tasks, one checkpoint at a time, and prints per episode: assistant steps, tool calls, generated
tokens, the longest prompt and why it ended, with its model's wall seconds and their prefill /
decode split (``model_*``: all of that model's episodes, which decode together). Not a test: it
sizes ``scale.evaluation.bfcl_tasks`` against the default run's 30-minute budget.

    .venv/bin/python perf/bfcl_cost.py [--models base demo_sft rft/seed-0] [--tasks 2]
        [--pool bfcl_long_context] [--models-dir data/models] [--params params.yaml] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from interlock.analysis.artifacts import params_paths
    from interlock.core.config import load_params
    from interlock.core.io import read_rows
    from interlock.core.schemas import TRAJECTORIES
    from interlock.evaluation.benchmarks import RunSettings, roll_out
    from interlock.evaluation.bfcl import CATEGORIES, BfclMultiTurn
    from interlock.models.backends import make_backend
    from interlock.rollout.engine import RolloutLimits
    from interlock.rollout.trajectory import Trajectory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["base", "demo_sft", "rft/seed-0", "rft/seed-1"])
    parser.add_argument("--models-dir", type=Path, default=None,
                        help="the checkpoints' folder (default: the one params.yaml names)")
    parser.add_argument("--tasks", type=int, default=1, help="the first N BFCL tasks (id order)")
    parser.add_argument("--pool", choices=list(CATEGORIES), default="bfcl",
                        help="the BFCL pool, i.e. the multi-turn category (default: multi_turn_base)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                        help="the composed config whose limits and seed the episodes use")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()

    params = load_params(args.params)
    models = args.models_dir or params_paths(args.params).models
    rollouts, backbone = params.scale.rollouts, params.backbone
    if backbone.backend != "transformers":
        raise SystemExit(f"the prefill/decode split is the transformers backend's, not {backbone.backend!r}")
    settings = RunSettings(attempts=1, seed=params.seed, batch_size=rollouts.batch_size,
                           limits=RolloutLimits.of(rollouts, backbone.generation))
    benchmark = BfclMultiTurn(args.pool, limit=args.tasks)
    rows = []
    for name in args.models:
        backend = make_backend(backbone, models / name)
        with tempfile.TemporaryDirectory(prefix="bfcl-cost-") as tmp:
            out = Path(tmp) / "trajectories.parquet"
            start = time.perf_counter()
            roll_out(benchmark, name.replace("/", "."), name, backend, settings, out=out,
                              timings=Path(tmp) / "timings.parquet", work=Path(tmp) / "work")
            wall = time.perf_counter() - start
            trajectories = [Trajectory.from_row(r, str(out)) for r in read_rows(out, TRAJECTORIES)]
        results = benchmark.grade(trajectories)
        stats = backend.stats
        for trajectory, result in zip(trajectories, results, strict=True):
            rows.append({"model": name, "pool": args.pool, "task": trajectory.task_id,
                         "model_seconds": round(wall, 1),
                         "steps": trajectory.turns, "tool_calls": trajectory.tool_calls,
                         "generated_tokens": trajectory.generated_tokens,
                         "prompt_tokens": trajectory.prompt_tokens, "ended": trajectory.finish_reason,
                         "score": round(result.score, 3), "passed": result.passed,
                         "model_prefill_s": round(stats.prefill_seconds, 1),
                         "model_decode_s": round(stats.decode_seconds, 1),
                         "model_decode_steps": stats.decode_steps})
            print(json.dumps(rows[-1]), flush=True)
        del backend
    total = sum({r["model"]: r["model_seconds"] for r in rows}.values())
    print(f"\n{len(args.models)} checkpoints x {args.tasks} BFCL task(s): {total:.0f} s of rollouts in all")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
