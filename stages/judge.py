"""Stage `judge`: the agent judge and the text judge both grade the whole rollout pool.

Its library side is `interlock.judging.stage.judge`."""

from interlock.core.runner import run_stage
from interlock.judging.stage import judge

if __name__ == "__main__":
    run_stage("judge", judge)
