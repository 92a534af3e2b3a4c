"""Stage `demos`: reference demonstrations, the oracle's trajectories on the admitted `demo`
tasks.

Its library side is `interlock.rollout.stage.demos`."""

from interlock.core.runner import run_stage
from interlock.rollout.stage import demos

if __name__ == "__main__":
    run_stage("demos", demos)
