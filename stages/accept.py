"""Stage `accept`: keep the trajectories whose every mandatory criterion passes under the
configured judge (`judge=agent` or `judge=text`); report acceptance per domain."""

from pathlib import Path

from common import run_stage

from interlock.artifacts import Artifacts
from interlock.config import Params
from interlock.io import write_json, write_tsv
from interlock.judges.run import run_accept
from interlock.tracking import StageReport


def main(params: Params, data: Artifacts) -> StageReport:
    metrics, plot = run_accept(data.trajectories, data.judgements,
                               data.packs, data.accepted,
                               judge=params.judge.name)
    write_json(Path("metrics/accept.json"), metrics)
    write_tsv(Path("metrics/plots/accept_by_domain.tsv"), plot,
              ["domain_id", "rollouts", "accepted", "acceptance"])
    print(f"accept: {metrics['message']}")
    if not metrics["nothing_accepted"]:
        per = metrics["per_accepted"]
        print(f"accept: {metrics['domains_with_accepted']} of {metrics['domains']} domains; per accepted "
              f"trajectory {per['turns']} turns and {per['tool_calls']} tool calls "
              f"(the paper: ~27.6 and ~42)")
    # per domain as a table (the plot's rows), not as hundreds of summary keys
    return StageReport(metrics={k: v for k, v in metrics.items() if k != "by_domain"},
                       tables={"by_domain": plot})


if __name__ == "__main__":
    run_stage("accept", main)
