"""Stage `train`: rejection-sampling fine-tuning: the starting policy on its own accepted
trajectories, once per seed.

Its library side is `interlock.training.stage.train`."""

from interlock.core.runner import run_stage
from interlock.training.stage import train

if __name__ == "__main__":
    run_stage("train", train)
