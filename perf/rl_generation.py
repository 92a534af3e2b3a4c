"""GRPO steps at the default run's scale with each generation path, side by side in one run:
``train.rl.generation`` ``transformers`` (the trained weights play), ``vllm`` (an engine in the
trainer's process, given the weights after every optimizer step) and ``vllm-server`` (a managed
``vllm serve`` sent the weights through a file and its weight-update call: the GPU path).

On the checkpoints and admitted ``rft`` tasks of a finished default run (``make repro``), from
the ``rl`` stage's start (``solver.start``) with the run's ``train.rl`` settings, each path trains
``--steps`` steps (fresh work folders, nothing resumed); per path: seconds per step, the rollout
and judge seconds of the steps, and the reward and pass rate of each step. Not a test: it prints
a table, and writes the figures as JSON with ``--json``.

    .venv/bin/python perf/rl_generation.py [--steps 2] [--paths transformers vllm vllm-server] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: each path's ``train.rl.generation`` and ``train.rl.vllm_engine``
ENGINES = {"transformers": ("transformers", "auto"), "vllm": ("vllm", "in_process"),
           "vllm-server": ("vllm", "server")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--paths", nargs="+", default=["transformers", "vllm"],
                        choices=list(ENGINES))
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from interlock.analysis.artifacts import params_paths
    from interlock.core.config import load_params
    from interlock.judging.agent import AgentJudge
    from interlock.models.backends import model_runtime
    from interlock.rl.environment import TaskPool
    from interlock.rl.grpo import GRPOSettings, train_grpo
    from interlock.rl.stage import rl_limits
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    params, paths = load_params(args.params), params_paths(args.params)
    start = paths.model(params.solver.start)
    if not (start / "config.json").is_file():
        raise SystemExit(f"no checkpoint at {start}: run `make repro` first")
    runtime = model_runtime(params.backbone, "train", start, backend="transformers")
    limits = rl_limits(params)
    pool = TaskPool(admitted_tasks(paths, load_domains(paths.domains), "rft"))
    dtype = runtime["resolved_dtype"]
    results: dict = {"start": str(start), "steps": args.steps, "dtype": dtype, "paths": {}}
    for generation in args.paths:
        engine, where = ENGINES[generation]
        if engine == "vllm" and importlib.util.find_spec("vllm") is None:
            print(f"skipped {generation}: vLLM is not installed (make vllm)", flush=True)
            continue
        rl = params.train.rl.model_copy(update={"enabled": True, "steps": args.steps,
                                                "generation": engine, "vllm_engine": where})
        settings = GRPOSettings(rl, params.seed, limits, dtype, params.backbone.max_context,
                                params.train.max_grad_norm, params.backbone.server)
        with tempfile.TemporaryDirectory(prefix="interlock-rl-generation-") as tmp, \
                AgentJudge(episode=limits.episode, sandbox=params.sandbox.provider) as judge:
            metrics, rows = train_grpo(start, pool, judge, settings, Path(tmp) / "rl", Path(tmp) / "work")
        results["paths"][generation] = {
            "seconds_per_step": metrics["seconds_per_step"],
            "rollout_seconds": [r["rollout_seconds"] for r in rows],
            "judge_seconds": [r["judge_seconds"] for r in rows],
            "reward": [r["reward"] for r in rows], "pass_rate": [r["pass_rate"] for r in rows]}
    first = results["paths"].get("transformers", {}).get("seconds_per_step")
    print(f"\nGRPO steps from {start} ({dtype}), {args.steps} each")
    print("| generation | s/step | vs transformers | rollout s (steps) | judge s (steps) | reward (steps) |\n"
          "|---|---:|---:|---|---|---|")
    for generation, row in results["paths"].items():
        ratio = f"{first / row['seconds_per_step']:.2f}x" if first else "n/a"
        print(f"| {generation} | {row['seconds_per_step']:.1f} | {ratio} | {row['rollout_seconds']} | "
              f"{row['judge_seconds']} | {row['reward']} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
