"""The llamacpp backend against the transformers backend on the default run, side by side in one run.

Two parts, on the checkpoints of a finished default run (``make repro``):

1. **Fidelity** (greedy): the same prompts (each admitted ``rft`` task's opening, then its
   reference solution's turns) through the transformers backend, the F32 GGUF and the Q8_0 GGUF;
   how many completions are identical to the transformers backend's.
2. **The default run's rollouts and evaluation** through each backend: the starting policy
   (``scale.rollouts.policy``) on the admitted ``rft`` tasks with the rollouts stage's attempts, and
   on the held-out ``benchmark`` pool with the evaluation's, graded by the agent judge's compiled
   checks, as the ``rollouts``/``accept`` and ``evaluate`` stages do. Per backend: the model's
   seconds per part (prefill and decoding, as the backend counts them; grading is the same work),
   tokens generated and processed per second, accepted rollouts and pass rates with their 95%
   intervals, and the paired difference against the transformers backend.

Not a test: it prints tables and the speed ratio, and writes them as JSON with ``--json``.

    .venv/bin/python benchmarks/llamacpp_backend.py [--backends transformers llamacpp:Q8_0 llamacpp:F32]
        [--fidelity-prompts 24] [--tasks N] [--skip-run] [--params params.yaml] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def backend_for(spec: str, params, checkpoint: Path):
    """``transformers`` or ``llamacpp:<precision>`` for ``checkpoint``, as make_backend builds them."""
    from interlock.models.backends import make_backend

    name, _, precision = spec.partition(":")
    update = {"backend": name} | ({"gguf": precision} if precision else {})
    return make_backend(params.backbone.model_copy(update=update), checkpoint)


def with_gguf(checkpoint: Path, scratch: Path) -> Path:
    """``checkpoint``, or where it lacks its GGUF files (a run from before they were written), a
    folder under ``scratch`` of links to its files with the GGUF files written beside them."""
    from interlock.models.checkpoint import load_checkpoint, read_manifest
    from interlock.models.gguf_export import GGUF_FILES, write_gguf

    if all((checkpoint / name).is_file() for name in GGUF_FILES.values()):
        return checkpoint
    folder = scratch / checkpoint.name
    folder.mkdir()
    for path in checkpoint.iterdir():
        (folder / path.name).symlink_to(path.resolve())
    model, tokenizer = load_checkpoint(checkpoint)
    manifest = read_manifest(checkpoint)
    for precision, name in GGUF_FILES.items():
        write_gguf(model, tokenizer, folder / name, precision, name=manifest["name"],
                   max_context=manifest["max_context"])
    print(f"wrote the GGUF files of {checkpoint} into {folder}", flush=True)
    return folder


def fidelity(specs: list[str], params, checkpoint: Path, contexts, prompts: int) -> dict:
    """Greedy completions of the same prompts by every backend, against the first's."""
    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message, ToolCall
    from interlock.evaluation.run import release
    from interlock.rollout.engine import SYSTEM_PROMPT

    requests = []
    for context in contexts:
        messages = [Message("system", SYSTEM_PROMPT), Message("user", context.pack.request)]
        for step in context.pack.reference:
            requests.append(ChatRequest(f"{context.task_id}/{len(requests)}", tuple(messages),
                                        _tools(), max_new_tokens=params.backbone.generation.max_new_tokens))
            call = ToolCall(step["tool"], json.loads(step["arguments"]))
            messages += [Message("assistant", "", (call,)),
                         Message("tool", step["observation"], name=step["tool"])]
            if len(requests) >= prompts:
                break
        if len(requests) >= prompts:
            break
    texts = {}
    seconds = {}
    for spec in specs:
        backend = backend_for(spec, params, checkpoint)
        start = time.perf_counter()
        out = []
        for i in range(0, len(requests), 8):
            out += backend.complete(requests[i:i + 8])
        seconds[spec] = time.perf_counter() - start
        texts[spec] = [c.text for c in out]
        release(backend)
    reference = texts[specs[0]]
    return {spec: {"prompts": len(requests), "identical": sum(a == b for a, b in zip(texts[spec], reference,
                                                                                     strict=True)),
                   "seconds": round(seconds[spec], 1)} for spec in specs}


def _tools():
    from interlock.synthesis.workspace import TOOL_SPECS

    return tuple(TOOL_SPECS)


def default_run(specs: list[str], params, paths, checkpoint: Path, tasks: int | None) -> dict:
    """Rollouts on ``rft`` and evaluation on ``benchmark`` through each backend, graded alike."""
    from interlock.evaluation.benchmarks import AdmittedPool, RunSettings
    from interlock.evaluation.run import Model, run_evaluation
    from interlock.rollout.engine import RolloutLimits
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    catalog = load_domains(paths.domains)
    backends: dict[str, object] = {}

    def loader(spec: str):
        def load():
            backends[spec] = backend_for(spec, params, checkpoint)
            return backends[spec]
        return load

    limits = RolloutLimits.of(params.scale.rollouts, params.backbone.generation)
    parts = {"rollouts": ("rft", params.scale.rollouts.attempts),
             "evaluate": ("benchmark", params.scale.evaluation.attempts)}
    report: dict = {}
    for part, (pool, attempts) in parts.items():
        models = [Model(spec.replace(":", "-"), loader(spec), policy=f"{params.backbone.name}/{spec}")
                  for spec in specs]
        settings = RunSettings(attempts=attempts, seed=params.seed, limits=limits,
                               batch_size=params.scale.rollouts.batch_size)
        benchmark = AdmittedPool(pool, list(admitted_tasks(paths, catalog, pool))[:tasks])
        with tempfile.TemporaryDirectory(prefix="interlock-llamacpp-bench-") as tmp:
            out = Path(tmp)
            evaluation = run_evaluation(models, [benchmark], settings, out=out / "eval",
                                        timings=out / "timings.parquet", work=out / "work",
                                        resamples=params.eval.bootstrap, confidence=params.eval.confidence)
        summary = evaluation.metrics["pools"][pool]
        for spec, model in zip(specs, models, strict=True):
            stats = backends[spec].stats
            entry = summary["models"][model.name]
            delta = summary["deltas"].get(model.name, {}).get("pass_rate")
            passed = sum(r["passed"] for r in evaluation.results if r["model"] == model.name)
            report.setdefault(spec, {})[part] = {
                "pool": pool, "episodes": entry["episodes"], "passed": passed,
                "pass_rate": entry["pass_rate"], "criterion_pass_rate": entry["criterion_pass_rate"],
                "delta_vs_first": delta,
                "seconds": round(stats.decode_seconds + stats.prefill_seconds, 1),  # the model's time
                "generated_tokens": stats.generated_tokens, "processed_tokens": stats.processed_tokens,
                "decode_seconds": round(stats.decode_seconds, 1),
                "prefill_seconds": round(stats.prefill_seconds, 1),
            }
            backends[spec].stats = type(stats)()
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["transformers", "llamacpp:Q8_0", "llamacpp:F32"])
    parser.add_argument("--fidelity-prompts", type=int, default=24)
    parser.add_argument("--skip-run", action="store_true", help="fidelity only")
    parser.add_argument("--tasks", type=int, default=None,
                        help="the first N tasks of each pool (default: all)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                        help="the composed config of the run whose checkpoints and tasks are used")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from interlock.analysis.artifacts import params_paths
    from interlock.core.config import load_params

    params, paths = load_params(args.params), params_paths(args.params)
    checkpoint = paths.model(params.scale.rollouts.policy)
    if not (checkpoint / "config.json").is_file():
        raise SystemExit(f"no checkpoint at {checkpoint}: run `make repro` first")
    with tempfile.TemporaryDirectory(prefix="interlock-gguf-") as scratch:
        measure(args, params, paths, with_gguf(checkpoint, Path(scratch)))


def measure(args: argparse.Namespace, params, paths, checkpoint: Path) -> None:
    """Both parts on ``checkpoint``; print the tables, write the JSON."""
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    contexts = list(admitted_tasks(paths, load_domains(paths.domains), "rft"))
    results = {"checkpoint": str(checkpoint), "backends": args.backends}
    results["fidelity"] = fidelity(args.backends, params, checkpoint, contexts, args.fidelity_prompts)
    print("\nGreedy fidelity against", args.backends[0])
    print("| backend | prompts | identical completions | seconds |\n|---|---:|---:|---:|")
    for spec, row in results["fidelity"].items():
        print(f"| {spec} | {row['prompts']} | {row['identical']} | {row['seconds']} |")
    if not args.skip_run:
        results["run"] = run = default_run(args.backends, params, paths, checkpoint, args.tasks)
        print("\nThe default run's rollouts (rft) and evaluation (benchmark) through each backend")
        print("| backend | part | episodes | passed | pass rate [95%] | vs first [95%] | model s | "
              "generated tok/s | processed tok/s |\n|---|---|---:|---:|---|---|---:|---:|---:|")
        for spec, parts in run.items():
            for part, row in parts.items():
                rate, delta = row["pass_rate"], row["delta_vs_first"]
                versus = (f"{delta['value']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}]" if delta
                          else "reference")
                print(f"| {spec} | {part} | {row['episodes']} | {row['passed']} | {rate['value']:.3f} "
                      f"[{rate['low']:.3f}, {rate['high']:.3f}] | {versus} | {row['seconds']} | "
                      f"{row['generated_tokens'] / max(row['decode_seconds'], 1e-9):.0f} | "
                      f"{row['processed_tokens'] / max(row['seconds'], 1e-9):.0f} |")
        first = args.backends[0]
        for spec in args.backends[1:]:
            for part in ("rollouts", "evaluate"):
                ratio = run[first][part]["seconds"] / max(run[spec][part]["seconds"], 1e-9)
                print(f"{part}: {spec} is {ratio:.2f}x {first}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
