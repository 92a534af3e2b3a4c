"""Every model backend and dtype side by side on the default run, in one run on the same episodes.

A side is ``backend[:gguf][@dtype]`` (``transformers@float32``, ``llamacpp:Q8_0``,
``vllm@bfloat16``): the run's backbone config with that backend, GGUF file and dtype, built by
``make_backend`` as the stages build it. The first side is the reference. A side whose backend's
optional package does not import here (``llama_cpp``: ``make llamacpp``; ``vllm``: ``make vllm``)
is reported as skipped, with the reason; a backend name no module registers is an error.

Two parts, on the checkpoints of a finished default run (``make repro``):

1. **Fidelity** (greedy): the same prompts (each admitted ``rft`` task's opening, then its
   reference solution's turns) through every side; the share of completions identical to the
   reference side's.
2. **The default run's rollouts and evaluation** through every side: the starting policy
   (``solver.start``) on the admitted ``rft`` tasks with the rollouts stage's attempts, and
   on the held-out ``benchmark`` pool with the evaluation's, graded by the agent judge's compiled
   checks, as the ``rollouts``/``accept`` and ``evaluate`` stages do. Per side and part: passed
   episodes and the pass rate with its 95% interval, the paired difference against the reference,
   the episodes whose outcome (passed or not) is the reference's on the same episode, the model's
   seconds and their ratio to the reference's, and tokens generated and processed per second;
   and the assistant turns whose text tokenizes again to other ids than the side sampled (what
   training on the text, not the ids, would learn instead: ``interlock retokenization``).

Every side is measured the same way, outside the backend: each ``complete`` call's wall seconds,
and the prompt and generated tokens of the completions it returns ("processed": both, prompt
tokens a backend took from its prefix cache included). Grading is the same work for every side
and is not counted.

vLLM on a CPU runs in this process with the backend's CPU defaults (eager, a KV cache of
``$VLLM_CPU_KVCACHE_SPACE`` GiB); one engine is freed before the next side's starts.

Not a test: it prints tables, and writes them as JSON with ``--json``.

    .venv/bin/python perf/backends.py [--backends transformers@float32 transformers@bfloat16
        llamacpp:Q8_0 vllm@bfloat16 vllm@float32] [--fidelity-prompts 24] [--tasks N] [--skip-run]
        [--params params.yaml] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SIDES = ["transformers@float32", "transformers@bfloat16", "llamacpp:Q8_0", "vllm@bfloat16", "vllm@float32"]
#: the optional package each optional backend imports, and what installs it
OPTIONAL = {"llamacpp": ("llama_cpp", "make llamacpp"), "vllm": ("vllm", "make vllm")}
PARTS = {"rollouts": "rft", "evaluate": "benchmark"}


def side_backbone(spec: str, backbone):
    """The backbone config of side ``spec`` (``backend[:gguf][@dtype]``), validated as a config is."""
    from pydantic import ValidationError

    rest, _, dtype = spec.partition("@")
    name, _, gguf = rest.partition(":")
    update = {"backend": name} | ({"gguf": gguf} if gguf else {}) | ({"dtype": dtype} if dtype else {})
    try:
        return type(backbone).model_validate(backbone.model_copy(update=update).model_dump())
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise SystemExit(f"side {spec!r}: {problems}") from None


def unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run here (its optional package does not import), or None. Imported
    in a child process: vLLM reads its CPU settings when imported, which the backend sets first."""
    if backend not in OPTIONAL:
        return None
    module, install = OPTIONAL[backend]
    check = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    if check.returncode == 0:
        return None
    last = (check.stderr.strip().splitlines() or [f"exit status {check.returncode}"])[-1]
    return f"{module} does not import ({last}); `{install}` installs it"


class Timed:
    """A backend whose ``complete`` calls are timed (wall seconds) and whose completions' tokens
    are counted here, so that every backend is measured the same way."""

    def __init__(self, backend) -> None:
        self.backend, self.name = backend, backend.name
        self.seconds, self.prompt_tokens, self.generated_tokens = 0.0, 0, 0

    def begin(self, key: str, task) -> None:
        self.backend.begin(key, task)

    def end(self, key: str) -> None:
        self.backend.end(key)

    def complete(self, requests):
        start = time.perf_counter()
        completions = self.backend.complete(requests)
        self.seconds += time.perf_counter() - start
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.generated_tokens += sum(c.completion_tokens for c in completions)
        return completions

    def close(self) -> None:
        """Free the backend (an engine must be gone before the next one starts); the counts stay."""
        from interlock.evaluation.run import release

        release(self.backend)
        self.backend = None

    def figures(self) -> dict:
        processed = self.prompt_tokens + self.generated_tokens
        return {"seconds": round(self.seconds, 3), "generated_tokens": self.generated_tokens,
                "processed_tokens": processed,
                "generated_tokens_per_s": round(self.generated_tokens / max(self.seconds, 1e-9), 1),
                "processed_tokens_per_s": round(processed / max(self.seconds, 1e-9), 1)}


def share(part: int, whole: int) -> float:
    return round(part / max(whole, 1), 3)


def timed_backend(backbone, checkpoint: Path) -> Timed:
    from interlock.models.backends import make_backend

    return Timed(make_backend(backbone, checkpoint))


def load_into(backends: dict, spec: str, backbone, checkpoint: Path) -> Timed:
    """A side's backend for an evaluation, kept in ``backends`` to be read after it is freed."""
    backends[spec] = timed_backend(backbone, checkpoint)
    return backends[spec]


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


def fidelity(sides: dict, params, checkpoint: Path, contexts, prompts: int) -> dict:
    """Greedy completions of the same prompts by every side, against the first's."""
    from interlock.core.backend import ChatRequest
    from interlock.core.chat import Message, ToolCall
    from interlock.evaluation.run import free_memory, release
    from interlock.rollout.engine import SYSTEM_PROMPT
    from interlock.synthesis.workspace import TOOL_SPECS

    requests = []
    for context in contexts:
        messages = [Message("system", SYSTEM_PROMPT), Message("user", context.pack.request)]
        for step in context.pack.reference:
            requests.append(ChatRequest(f"{context.task_id}/{len(requests)}", tuple(messages),
                                        tuple(TOOL_SPECS),
                                        max_new_tokens=params.backbone.generation.max_new_tokens))
            call = ToolCall(step["tool"], json.loads(step["arguments"]))
            messages += [Message("assistant", "", (call,)),
                         Message("tool", step["observation"], name=step["tool"])]
            if len(requests) >= prompts:
                break
        if len(requests) >= prompts:
            break
    texts, seconds = {}, {}
    for spec, backbone in sides.items():
        backend = timed_backend(backbone, checkpoint)
        texts[spec] = [c.text for i in range(0, len(requests), 8)
                       for c in backend.complete(requests[i:i + 8])]
        seconds[spec] = backend.seconds
        release(backend)
        free_memory()
    reference = texts[next(iter(sides))]
    report = {}
    for spec, out in texts.items():
        identical = sum(a == b for a, b in zip(out, reference, strict=True))
        report[spec] = {"prompts": len(requests), "identical": identical,
                        "share": share(identical, len(requests)), "seconds": round(seconds[spec], 3)}
    return report


def default_run(sides: dict, params, paths, checkpoint: Path, tasks: int | None) -> dict:
    """Rollouts on ``rft`` and evaluation on ``benchmark`` through every side, graded alike."""
    from interlock.evaluation.benchmarks import AdmittedPool, RunSettings
    from interlock.evaluation.run import Model, run_evaluation
    from interlock.rollout.engine import RolloutLimits
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    catalog = load_domains(paths.domains)
    limits = RolloutLimits.of(params.scale.rollouts, params.backbone.generation)
    attempts = {"rollouts": params.scale.rollouts.attempts, "evaluate": params.scale.evaluation.attempts}
    names = {spec: re.sub(r"[^A-Za-z0-9_.-]", "-", spec) for spec in sides}
    first = next(iter(sides))
    report: dict = {spec: {} for spec in sides}
    for part, pool in PARTS.items():
        backends: dict[str, Timed] = {}
        models = [Model(names[spec], partial(load_into, backends, spec, sides[spec], checkpoint),
                        policy=f"{params.backbone.name}/{spec}") for spec in sides]
        settings = RunSettings(attempts=attempts[part], seed=params.seed, limits=limits,
                               batch_size=params.scale.rollouts.batch_size)
        benchmark = AdmittedPool(pool, list(admitted_tasks(paths, catalog, pool))[:tasks])
        with tempfile.TemporaryDirectory(prefix="interlock-backends-bench-") as tmp:
            out = Path(tmp)
            evaluation = run_evaluation(models, [benchmark], settings, out=out / "eval",
                                        timings=out / "timings.parquet", work=out / "work",
                                        resamples=params.eval.bootstrap, confidence=params.eval.confidence)
            turns = retokenized(out / "eval" / "trajectories.parquet", checkpoint)
        summary = evaluation.metrics["pools"][pool]
        outcomes = {spec: {(r["task_id"], r["attempt"]): r["passed"] for r in evaluation.results
                           if r["model"] == names[spec]} for spec in sides}
        reference, first_seconds = outcomes[first], backends[first].seconds
        for spec in sides:
            entry = summary["models"][names[spec]]
            same = sum(passed == reference.get(episode) for episode, passed in outcomes[spec].items())
            report[spec][part] = {
                "pool": pool, "episodes": entry["episodes"], "passed": sum(outcomes[spec].values()),
                "pass_rate": entry["pass_rate"], "criterion_pass_rate": entry["criterion_pass_rate"],
                "delta_vs_first": summary["deltas"].get(names[spec], {}).get("pass_rate"),
                "same_outcome_as_first": {"episodes": same, "share": share(same, entry["episodes"])},
                "speed_vs_first": round(first_seconds / max(backends[spec].seconds, 1e-9), 2),
                "assistant_turns": turns[f"{params.backbone.name}/{spec}"],
                **backends[spec].figures(),
            }
    return report


def retokenized(table: Path, checkpoint: Path) -> dict:
    """Per policy of a trajectories table, its assistant turns by how training learns them
    (:class:`~interlock.training.examples.TurnCounts`)."""
    from collections import defaultdict

    from transformers import AutoTokenizer

    from interlock.core.errors import InterlockError
    from interlock.rollout.trajectory import own_trajectories
    from interlock.training.examples import TurnCounts, trajectory_tokens

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    counts: dict = defaultdict(TurnCounts)
    refused: dict = defaultdict(int)
    for group in own_trajectories(table):
        for trajectory in group:
            try:
                trajectory_tokens(tokenizer, trajectory, counts=counts[trajectory.policy])
            except InterlockError:  # a record whose ids are not its text: a backend's bug, counted
                refused[trajectory.policy] += 1
    return {policy: {**counts[policy].summary(), "refused": refused[policy]}
            for policy in {*counts, *refused}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=SIDES, metavar="SIDE",
                        help="backend[:gguf][@dtype] each; the first is the reference")
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
    backbones = {spec: side_backbone(spec, params.backbone) for spec in dict.fromkeys(args.backends)}
    skipped = {spec: reason for spec, backbone in backbones.items()
               if (reason := unavailable(backbone.backend)) is not None}
    if args.backends[0] in skipped:
        raise SystemExit(f"the reference side {args.backends[0]!r} cannot run: {skipped[args.backends[0]]}")
    for spec, reason in skipped.items():
        print(f"skipped {spec}: {reason}", flush=True)
    sides = {spec: backbone for spec, backbone in backbones.items() if spec not in skipped}
    checkpoint = paths.model(params.solver.start)
    if not (checkpoint / "config.json").is_file():
        raise SystemExit(f"no checkpoint at {checkpoint}: run `make repro` first")
    with tempfile.TemporaryDirectory(prefix="interlock-gguf-") as scratch:
        if any(backbone.backend == "llamacpp" for backbone in sides.values()):
            checkpoint = with_gguf(checkpoint, Path(scratch))
        results = measure(args, sides, params, paths, checkpoint) | {"skipped": skipped}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def measure(args: argparse.Namespace, sides: dict, params, paths, checkpoint: Path) -> dict:
    """Both parts on ``checkpoint``; print the tables; return the figures."""
    from interlock.synthesis.tasks import admitted_tasks, load_domains

    first = next(iter(sides))
    contexts = list(admitted_tasks(paths, load_domains(paths.domains), "rft"))
    results = {"checkpoint": str(checkpoint), "backends": list(sides)}
    results["fidelity"] = fidelity(sides, params, checkpoint, contexts, args.fidelity_prompts)
    print("\nGreedy fidelity against", first)
    print("| side | prompts | identical completions | share | seconds |\n|---|---:|---:|---:|---:|")
    for spec, row in results["fidelity"].items():
        print(f"| {spec} | {row['prompts']} | {row['identical']} | {row['share']:.3f} | "
              f"{row['seconds']:.1f} |")
    if args.skip_run:
        return results
    results["run"] = run = default_run(sides, params, paths, checkpoint, args.tasks)
    print(f"\nThe default run's rollouts (rft) and evaluation (benchmark) through every side, "
          f"against {first}")
    print("| side | part | episodes | passed | pass rate [95%] | vs first [95%] | same outcome as first | "
          "model s | speed vs first | generated tok/s | processed tok/s |\n"
          "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for part in PARTS:
        for spec, parts in run.items():
            row = parts[part]
            rate, delta, same = row["pass_rate"], row["delta_vs_first"], row["same_outcome_as_first"]
            versus = (f"{delta['value']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}]" if delta
                      else "reference")
            print(f"| {spec} | {part} | {row['episodes']} | {row['passed']} | {rate['value']:.3f} "
                  f"[{rate['low']:.3f}, {rate['high']:.3f}] | {versus} | {same['episodes']} "
                  f"({same['share']:.3f}) | {row['seconds']:.1f} | {row['speed_vs_first']:.2f}x | "
                  f"{row['generated_tokens_per_s']:.0f} | {row['processed_tokens_per_s']:.0f} |")
    print("\nSampled assistant turns whose text tokenizes again to other ids")
    print("| side | part | sampled turns | re-tokenized differ | share | refused |\n"
          "|---|---|---:|---:|---:|---:|")
    for part in PARTS:
        for spec, parts in run.items():
            turns = parts[part]["assistant_turns"]
            share = turns["retokenized_differ_share"]
            print(f"| {spec} | {part} | {turns['sampled']} | {turns['retokenized_differ']} | "
                  f"{'n/a' if share is None else f'{share:.3f}'} | {turns['refused']} |")
    return results


if __name__ == "__main__":
    main()
