"""Stage `evaluate`: transfer evaluation of every model in `eval.models` on the `eval.pools`.

Each checkpoint under data/models/ (the original, the demonstration SFT, RFT) is rolled out
`scale.evaluation.attempts` times on every admitted task of each pool (`benchmark`: held-out
domains only; `dev`), with the rollout limits of `scale.rollouts` and the backbone's generation
settings; the agent judge's compiled checks grade every episode. Writes data/evaluation/
(trajectories, per-episode results, verdicts; deterministic), data/evaluation_timings.parquet
(measured seconds), metrics/evaluate.json (per pool: metrics per model with bootstrap intervals,
deltas against the first model with paired intervals) and the plots under metrics/plots/.
"""

from pathlib import Path

from common import run_stage

from interlock.agents.rollout import RolloutLimits
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.evaluation import AdmittedPool, RunSettings, checkpoint_models, run_evaluation
from interlock.io import write_json, write_tsv
from interlock.pipeline import load_domains
from interlock.tracking import StageReport

PLOTS = Path("metrics/plots")


def main(params: Params, data: Artifacts) -> StageReport:
    backbone, rollouts = params.backbone, params.scale.rollouts
    models = checkpoint_models(params.eval.models, data.root / "models", backbone)
    catalog = load_domains(data.domains)
    benchmarks = [AdmittedPool.from_artifacts(data, catalog, pool) for pool in params.eval.pools]
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
