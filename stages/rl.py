"""Stage `rl`: reinforcement learning on verified tasks (`train=grpo`: GRPO through TRL, the
agent judge as the reward; otherwise a note that no RL policy was trained).

Its library side is `interlock.rl.stage.rl`."""

from interlock.core.runner import run_stage
from interlock.rl.stage import rl

if __name__ == "__main__":
    run_stage("rl", rl)
