"""Stage `intervene`: rollout-time intervention on the rollouts the configured judge rejected
(`intervention=rti`; with `none`, an empty table).

Its library side is `interlock.intervention.stage.intervene`."""

from interlock.core.runner import run_stage
from interlock.intervention.stage import intervene

if __name__ == "__main__":
    run_stage("intervene", intervene)
