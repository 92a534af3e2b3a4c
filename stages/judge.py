"""Stage `judge`: the graders (`judge.graders`: the agent and text judges) grade the whole rollout pool.

Its library side is `interlock.judging.stage.judge`."""

from interlock.core.runner import run_stage
from interlock.judging.stage import judge

if __name__ == "__main__":
    run_stage("judge", judge)
