"""The ``evaluate`` stage as a library: every model on every benchmark, graded, aggregated.

For each model in order: its backend is loaded (only if some benchmark still needs its
rollouts), every benchmark rolls it out, and the backend is freed before the next model loads.
A finished model x benchmark run is kept under the work folder, named by its fingerprint (the
run settings, the model's identity such as its checkpoint manifest, the benchmark's identity),
so a run that is killed and started again redoes only what was unfinished (and the benchmark's
own rollouts resume inside a run). Then each run is graded by its benchmark and written, one
model x benchmark at a time, into the output folder's aligned tables
(:data:`~interlock.core.schemas.EVALUATION_TABLES`): ``trajectories``, ``results``, ``verdicts``.
Measured seconds go to a separate timings table, so the output folder is the same bytes for the
same parameters and a deterministic backend.
"""

from __future__ import annotations

import gc
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from interlock.core import schemas
from interlock.core.backend import ChatBackend, release
from interlock.core.errors import InterlockError
from interlock.core.io import fingerprint, read_rows, write_table, write_table_set
from interlock.evaluation.benchmarks import Benchmark, RunSettings, roll_out
from interlock.evaluation.metrics import detectability, domain_rows, model_rows, summarize_pool, table_rows
from interlock.rollout.trajectory import own_trajectories


@dataclass(frozen=True)
class Model:
    """One evaluated model: its name (the results' ``model`` column and the rollout-id prefix), how
    to load its backend, the trajectories' ``policy`` label (default: the name) and what identifies
    it (JSON-able; e.g. the checkpoint manifest and backend settings: a change re-runs it)."""

    name: str
    load: Callable[[], ChatBackend]
    policy: str | None = None
    identity: object = None
    seed: int | None = None  # the training seed, where a model has one checkpoint per seed

    @property
    def key(self) -> str:
        """Unique per checkpoint: the name, and the seed where there is one (rollout-id prefix)."""
        return self.name if self.seed is None else f"{self.name}.seed-{self.seed}"


@dataclass
class Evaluation:
    """What an evaluation returns: the metrics file's content, the result rows (one per episode),
    and the rows of the plots (per model x pool x rate metric; per model x domain) and of the
    tracking table (per model x pool)."""

    metrics: dict
    results: list[dict] = field(default_factory=list)
    model_rows: list[dict] = field(default_factory=list)
    domain_rows: list[dict] = field(default_factory=list)
    table_rows: list[dict] = field(default_factory=list)


def run_evaluation(models: Sequence[Model], benchmarks: Sequence[Benchmark], settings: RunSettings, *,
                   out: Path, timings: Path, work: Path, resamples: int, confidence: float,
                   progress: bool = True) -> Evaluation:
    """Roll out, grade and summarize; write ``out/{trajectories,results,verdicts}.parquet`` and
    ``timings``; return the metrics (deltas against the first model) and the plot rows."""
    _check_names([m.key for m in models], "model", "eval.models")
    _check_names([b.name for b in benchmarks], "benchmark", "eval.pools")
    runs = {(m.key, b.name): _run_file(work, m, b, settings) for m in models for b in benchmarks}
    _remove_stale(work, set(runs.values()))
    results: dict[str, dict[str, list[dict]]] = {b.name: {} for b in benchmarks}
    try:
        with tqdm(total=len(models), desc="evaluate", unit="model", dynamic_ncols=True,
                  disable=not progress) as bar:
            for model in models:
                bar.set_postfix_str(model.key)
                _roll_out(model, benchmarks, settings, runs, work)
                bar.update(1)
        with write_table_set(out, schemas.EVALUATION_TABLES) as tables:
            for model in models:
                for benchmark in benchmarks:
                    done = runs[model.key, benchmark.name]
                    rows = _grade(model, benchmark, done, tables, progress)
                    results[benchmark.name].setdefault(model.name, []).extend(rows)
    finally:
        for benchmark in benchmarks:
            benchmark.close()
    write_table(timings, [row for m in models for b in benchmarks
                          for row in _timings(runs[m.key, b.name])], schemas.ROLLOUT_TIMINGS)
    evaluation = _summarize(models, benchmarks, results, settings, resamples, confidence)
    shutil.rmtree(work, ignore_errors=True)
    return evaluation


def _check_names(names: list[str], what: str, field_name: str) -> None:
    if not names:
        raise InterlockError(f"no {what} to evaluate", field=field_name)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InterlockError(f"{what} {twice[0]!r} is listed twice", field=field_name)


def _run_file(work: Path, model: Model, benchmark: Benchmark, settings: RunSettings) -> Path:
    run_id = fingerprint(settings.identity(), model.key, model.policy or model.name, model.identity,
                         benchmark.name, benchmark.identity())
    return work / "done" / f"{model.key}.{benchmark.name}.{run_id}.parquet"


def _remove_stale(work: Path, keep: set[Path]) -> None:
    """Finished runs and parts of other configurations."""
    wanted = {path.name.removesuffix(".parquet") for path in keep}
    for path in sorted((work / "done").glob("*.parquet")):
        if path.name.removesuffix(".parquet").removesuffix(".timings") not in wanted:
            path.unlink()
    for path in sorted((work / "parts").glob("*")):
        if path.name not in wanted:
            shutil.rmtree(path, ignore_errors=True)


def _roll_out(model: Model, benchmarks: Sequence[Benchmark], settings: RunSettings,
              runs: dict[tuple[str, str], Path], work: Path) -> None:
    """Every benchmark's rollouts of one model not finished yet; the backend is freed after."""
    todo = [b for b in benchmarks if not runs[model.key, b.name].exists()]
    if not todo:
        return
    backend = model.load()
    try:
        for benchmark in todo:
            done = runs[model.key, benchmark.name]
            done.parent.mkdir(parents=True, exist_ok=True)
            parts = work / "parts" / done.name.removesuffix(".parquet")
            roll_out(benchmark, model.key, model.policy or model.name, backend, settings, out=done,
                              timings=_timings_path(done), work=parts)
            if not done.exists():
                raise InterlockError(f"benchmark {benchmark.name!r} wrote no trajectories", file=str(done))
    finally:
        release(backend)
        del backend
        free_memory()


def _timings_path(done: Path) -> Path:
    return done.with_name(done.name.removesuffix(".parquet") + ".timings.parquet")


def _timings(done: Path) -> list[dict]:
    path = _timings_path(done)
    return read_rows(path, schemas.ROLLOUT_TIMINGS) if path.exists() else []


def _grade(model: Model, benchmark: Benchmark, done: Path, tables, progress: bool) -> list[dict]:
    """Grade one finished run row group by row group, writing its aligned row groups."""
    domains = dict(benchmark.tasks())
    rows: list[dict] = []
    with tqdm(total=_count(done), desc=f"grade {model.key} on {benchmark.name}", unit="episode",
              dynamic_ncols=True, disable=not progress) as bar:
        for trajectories in own_trajectories(done):
            graded = benchmark.grade(trajectories)
            if [r.rollout_id for r in graded] != [t.rollout_id for t in trajectories]:
                raise InterlockError(f"benchmark {benchmark.name!r} graded other episodes than it was given",
                                     file=str(done))
            for result in graded:
                listed = domains.get(result.task_id)
                if listed != result.domain_id:
                    raise InterlockError(
                        f"benchmark {benchmark.name!r} graded an episode of task {result.task_id} in domain "
                        f"{result.domain_id!r}, but " + (f"lists the task in {listed!r}" if listed else
                                                         "does not list the task"),
                        file=str(done), item=result.rollout_id)
            result_rows = [r.row(model.name, benchmark.name, model.seed) for r in graded]
            tables.write({"trajectories": [t.to_row() for t in trajectories], "results": result_rows,
                          "verdicts": [v for r in graded for v in r.verdicts]})
            rows += result_rows
            bar.update(len(trajectories))
    return rows


def _count(path: Path) -> int:
    from interlock.core.io import count_rows

    return count_rows(path, schemas.TRAJECTORIES)


def _summarize(models: Sequence[Model], benchmarks: Sequence[Benchmark],
               results: dict[str, dict[str, list[dict]]], settings: RunSettings, resamples: int,
               confidence: float) -> Evaluation:
    names = list(dict.fromkeys(m.name for m in models))  # a model's seeds are one entry
    metrics: dict = {"models": names, "reference": names[0], "attempts": settings.attempts,
                     "bootstrap": resamples, "confidence": confidence, "pools": {}, "summary": {}}
    evaluation = Evaluation(metrics)
    for benchmark in benchmarks:
        by_model = results[benchmark.name]
        summary = summarize_pool(by_model, pool=benchmark.name, seed=settings.seed, resamples=resamples,
                                 confidence=confidence)
        metrics["pools"][benchmark.name] = summary
        metrics["summary"][benchmark.name] = detectability(by_model, summary, settings.attempts)
        evaluation.model_rows += model_rows(benchmark.name, summary)
        evaluation.domain_rows += domain_rows(by_model, benchmark.name)
        evaluation.table_rows += table_rows(benchmark.name, summary)
        evaluation.results += [row for name in names for row in by_model[name]]
    return evaluation


# ----------------------------------------------------------------------------- memory

def free_memory() -> None:
    """Collect garbage and hand freed accelerator memory back, so the next model fits."""
    gc.collect()
    if "vllm" in sys.modules:  # vLLM's engine keeps its distributed state until told otherwise
        try:
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:  # noqa: BLE001 - best effort: an older vLLM, or nothing initialized
            pass
        gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- checkpoints

#: the stage that writes each checkpoint the default configuration evaluates
CHECKPOINT_STAGES = {"base": "base_model", "demo_sft": "demo_sft", "rft": "train", "rl": "rl"}


def untrained_models(names: Sequence[str], models_dir: Path) -> dict[str, str]:
    """The models in ``names`` whose stage was configured not to train them (``rl`` unless
    ``train=grpo``), with its reason: evaluation leaves them out and reports why."""
    from interlock.models.checkpoint import untrained_reason

    reasons = {name: untrained_reason(Path(models_dir) / name) for name in names}
    return {name: reason for name, reason in reasons.items() if reason is not None}


def checkpoint_models(names: Sequence[str], models_dir: Path, backbone) -> list[Model]:
    """The checkpoints ``models_dir/<name>`` as evaluated models (backend from ``backbone``, a
    :class:`~interlock.core.config.BackboneConfig`); a folder of per-seed checkpoints (``rft/seed-0``
    ...) is one model with several seeds. Every one is checked to exist before anything runs."""
    from interlock.models.backends import make_backend, model_runtime
    from interlock.models.checkpoint import read_manifest, seed_checkpoints

    found = {name: seed_checkpoints(Path(models_dir) / name) for name in names}
    missing = [name for name in names if not found[name]]
    if missing:
        lines = []
        for name in missing:
            stage = CHECKPOINT_STAGES.get(name)
            lines.append(f"model {name!r} has no checkpoint at {Path(models_dir) / name}; " + (
                f"it is made by the `{stage}` stage (`dvc repro {stage}`)" if stage else
                f"no stage of the pipeline makes {name!r}: put a checkpoint there or remove it"))
        raise InterlockError("; ".join(lines), file=str(Path(models_dir) / missing[0]), field="eval.models")
    settings = {"name": backbone.name, "max_context": backbone.max_context,
                "generation": backbone.generation.model_dump()}
    models = []
    for name in names:
        for seed, checkpoint in found[name].items():
            policy = f"{backbone.name}/{name}" + ("" if seed is None else f"/seed-{seed}")
            # the backend and the dtype it resolves to (auto: measured) are part of what is evaluated
            runtime = model_runtime(backbone, "generate", checkpoint)
            models.append(Model(name, lambda checkpoint=checkpoint: make_backend(backbone, checkpoint),
                                policy=policy, seed=seed, identity={"manifest": read_manifest(checkpoint),
                                                                    "backbone": {**settings, **runtime}}))
    return models
