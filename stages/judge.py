"""Stage `judge`: the agent judge and the text judge both grade the whole rollout pool.

Writes per-criterion verdicts of each (deterministic; no timings) and the agent judge's
collateral flags; cost (seconds, output tokens) and the text judge's false-accept and
false-reject rates against the compiled checks go to metrics/judge.json. The `judge` config
choice is not read here: it only decides whose verdicts `accept` uses.
"""

from pathlib import Path

from common import run_stage

from interlock.agents.backends.factory import make_backend
from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json
from interlock.judges.run import run_judge
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    # the policy's rollouts (what accept keeps), and the review's validation rollouts by the
    # scripted noisy solver: a pool with a known completion gap to measure the judges on
    model = None
    if params.scale.judging.backend == "policy":
        model = make_backend(params.backbone, data.model(params.scale.rollouts.policy))
    backends = {"agent_backend": model, "text_backend": model}
    metrics = {"rollouts": run_judge(data.trajectories, data.packs, data.judgements, **backends),
               "calibration": run_judge(data.review / "validation.parquet", data.packs,
                                        data.root / "judge" / "calibration", **backends)}
    write_json(Path("metrics/judge.json"), metrics)
    for pool, summary in metrics.items():
        for name, judge in summary["judges"].items():
            rates = judge["vs_truth"].get("all", {}).get("trajectories") or {}
            print(f"judge: {pool}: {name}: {judge['accepted']} of {judge['rollouts']} accepted, "
                  f"{judge['rollouts_per_second']} rollouts/s, {judge['output_tokens']} output tokens, "
                  f"false accepts {rates.get('false_accept_rate')}, "
                  f"false rejects {rates.get('false_reject_rate')}")
    return StageReport(metrics=metrics)


if __name__ == "__main__":
    run_stage("judge", main)
