"""Stage `rollouts`: the starting policy on every admitted `rft` task, `attempts` times each
(resumable).

Its library side is `interlock.rollout.stage.rollouts`."""

from interlock.core.runner import run_stage
from interlock.rollout.stage import rollouts

if __name__ == "__main__":
    run_stage("rollouts", rollouts)
