"""Stage `evaluate`: transfer evaluation of every model in `eval.models` on the `eval.pools`.

Each checkpoint under data/models/ (the original, the demonstration SFT, RFT) is rolled out
`scale.evaluation.attempts` times on every task of each pool, with the rollout limits of
`scale.rollouts` and the backbone's generation settings: the admitted tasks of `benchmark`
(held-out domains only) or `dev`, graded by the agent judge's compiled checks, and `bfcl`, the
first `scale.evaluation.bfcl_tasks` of BFCL v4 multi_turn_base, graded by BFCL's own checker
(interlock.evaluation.bfcl). Writes data/evaluation/ (trajectories, per-episode results,
verdicts; deterministic), data/evaluation_timings.parquet (measured seconds),
metrics/evaluate.json (per pool: metrics per model with bootstrap intervals, finish reasons,
deltas against the first model with paired intervals) and the plots under metrics/plots/.
"""

from pathlib import Path

from common import run_stage

from interlock.agents.rollout import RolloutLimits
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.evaluation import (
    AdmittedPool,
    Benchmark,
    BfclMultiTurn,
    RunSettings,
    checkpoint_models,
    run_evaluation,
)
from interlock.io import write_json, write_tsv
from interlock.pipeline import load_domains
from interlock.tracking import StageReport

PLOTS = Path("metrics/plots")


def benchmarks_for(params: Params, data: Artifacts) -> list[Benchmark]:
    """One benchmark per name in `eval.pools`, in that order: BFCL's adapter for `bfcl`, else the
    admitted tasks of the built-in pool of that name."""
    catalog = load_domains(data.domains)
    return [BfclMultiTurn(pool, limit=params.scale.evaluation.bfcl_tasks) if pool == "bfcl"
            else AdmittedPool.from_artifacts(data, catalog, pool) for pool in params.eval.pools]


def main(params: Params, data: Artifacts) -> StageReport:
    backbone, rollouts = params.backbone, params.scale.rollouts
    models = checkpoint_models(params.eval.models, data.root / "models", backbone)
    benchmarks = benchmarks_for(params, data)
    settings = RunSettings(
        attempts=params.scale.evaluation.attempts, seed=params.seed, batch_size=rollouts.batch_size,
        limits=RolloutLimits.of(rollouts, backbone.generation))
    evaluation = run_evaluation(models, benchmarks, settings, out=data.evaluation,
                                timings=data.root / "evaluation_timings.parquet",
                                work=data.root / ".evaluation-partial", resamples=params.eval.bootstrap,
                                confidence=params.eval.confidence)
    write_json(Path("metrics/evaluate.json"), evaluation.metrics)
    write_tsv(PLOTS / "evaluate_models.tsv", evaluation.model_rows,
              ["label", "model", "pool", "metric", "value", "low", "high"])
    write_tsv(PLOTS / "evaluate_domains.tsv", evaluation.domain_rows,
              ["label", "model", "pool", "domain_id", "tasks", "episodes", "pass_rate"])
    for pool, summary in evaluation.metrics["pools"].items():
        for model, entry in summary["models"].items():
            delta = summary["deltas"].get(model, {}).get("pass_rate")
            versus = (f", {delta['value']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}] vs "
                      f"{evaluation.metrics['reference']}" if delta and delta["value"] is not None else "")
            rate = entry.get("pass_rate", {}).get("value")
            print(f"evaluate: {pool}: {model}: {entry['episodes']} episodes on {summary['tasks']} tasks, "
                  f"pass rate {rate}{versus}; finish reasons {entry['finish_reasons']}")
    return StageReport(metrics=evaluation.metrics, tables={"per_benchmark": evaluation.table_rows})


if __name__ == "__main__":
    run_stage("evaluate", main)
