"""The ``evaluate`` stage: every model in ``eval.models`` on every pool in ``eval.pools``.

Each checkpoint under the models folder (the original, the demonstration SFT, RFT) is rolled out
``scale.evaluation.attempts`` times on every task of each pool, with the rollout limits of
``scale.rollouts`` and the backbone's generation settings: the admitted tasks of ``benchmark``
(held-out domains only), ``indist`` (unseen tasks of the training domains) or ``dev``, graded by
the agent judge's compiled checks, and the BFCL
pools (``bfcl``: multi_turn_base; ``bfcl_miss_param``, ``bfcl_miss_func``, ``bfcl_long_context``),
the first ``scale.evaluation.bfcl_tasks`` of that BFCL v4 multi-turn category each, graded by
BFCL's own checker (one pool per category: BFCL's leaderboard columns).
Writes the evaluation folder (trajectories, per-episode results, verdicts; deterministic), the
measured seconds beside it, the metrics (per pool: metrics per model with bootstrap intervals,
finish reasons, deltas against the first model with paired intervals; under ``summary``, per pool
the pass-rate deltas with their minimum detectable effect and the tasks an MDE of 0.10 would
need; under ``runtime``, the backend and the dtype it resolved to,
:func:`~interlock.models.backends.model_runtime`), their headline (the transfer metrics a
comparison of runs leads with) and the plots.
"""

from __future__ import annotations

from interlock.core.config import Params
from interlock.core.io import write_json, write_tsv
from interlock.core.paths import Paths
from interlock.core.registry import BENCHMARKS
from interlock.core.tracking import StageReport
from interlock.evaluation.benchmarks import Benchmark, RunSettings
from interlock.evaluation.metrics import TARGET_MDE, headline
from interlock.evaluation.run import checkpoint_models, run_evaluation, untrained_models
from interlock.models.backends import model_runtime
from interlock.rollout.engine import RolloutLimits


def benchmarks_for(params: Params, paths: Paths) -> list[Benchmark]:
    """One benchmark per name in ``eval.pools``, in that order, each built by what registered its
    name (:data:`~interlock.core.registry.BENCHMARKS`)."""
    return [BENCHMARKS.get(pool)(pool, params, paths) for pool in params.eval.pools]


def evaluate(params: Params, paths: Paths) -> StageReport:
    backbone, rollouts = params.backbone, params.scale.rollouts
    untrained = untrained_models(params.eval.models, paths.models)
    models = checkpoint_models([name for name in params.eval.models if name not in untrained], paths.models,
                               backbone)
    for name, reason in untrained.items():
        print(f"evaluate: {name} left out: {reason}")
    settings = RunSettings(
        attempts=params.scale.evaluation.attempts, seed=params.seed, batch_size=rollouts.batch_size,
        limits=RolloutLimits.of(rollouts, backbone.generation))
    evaluation = run_evaluation(models, benchmarks_for(params, paths), settings, out=paths.evaluation,
                                timings=paths.evaluation_timings, work=paths.evaluation_work,
                                resamples=params.eval.bootstrap, confidence=params.eval.confidence)
    write_json(paths.transfer, headline(evaluation.metrics))
    write_tsv(paths.evaluate_models_plot, evaluation.model_rows,
              ["label", "model", "pool", "metric", "value", "low", "high"])
    write_tsv(paths.evaluate_domains_plot, evaluation.domain_rows,
              ["label", "model", "pool", "domain_id", "tasks", "episodes", "pass_rate"])
    for pool, summary in evaluation.metrics["pools"].items():
        for model, entry in summary["models"].items():
            delta = summary["deltas"].get(model, {}).get("pass_rate")
            versus = (f", {delta['value']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}] vs "
                      f"{evaluation.metrics['reference']}" if delta and delta["value"] is not None else "")
            rate = entry.get("pass_rate", {}).get("value")
            print(f"evaluate: {pool}: {model}: {entry['episodes']} episodes on {summary['tasks']} tasks, "
                  f"pass rate {rate}{versus}; finish reasons {entry['finish_reasons']}")
        for model, delta in evaluation.metrics["summary"][pool]["deltas"].items():
            if delta["tasks_needed"] is not None:  # two tasks or more
                print(f"evaluate: {pool}: {model}: pass-rate MDE {delta['mde']:.3f} at {summary['tasks']} "
                      f"tasks (per-task SD {delta['per_task_sd']:.3f}; {delta['tasks_needed']} tasks for an "
                      f"MDE of {TARGET_MDE:.2f})")
    # every evaluated model is a checkpoint of the backbone: its sizes, so the base's resolution
    runtime = model_runtime(backbone, "generate", paths.base_model)
    return StageReport({**evaluation.metrics, "not_evaluated": untrained},
                       tables={"per_benchmark": evaluation.table_rows},
                       config={"runtime": runtime})
