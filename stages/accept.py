"""Stage `accept`: keep the trajectories whose every mandatory criterion passes under the
configured judge.

Its library side is `interlock.judging.stage.accept`."""

from interlock.core.runner import run_stage
from interlock.judging.stage import accept

if __name__ == "__main__":
    run_stage("accept", accept)
