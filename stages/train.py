"""Stage `train`: rejection-sampling fine-tuning: the starting policy on its own accepted
trajectories (none accepted: an untrained copy, said plainly in the metrics)."""

from common import run_stage

from interlock.training.stage import run_fine_tuning

if __name__ == "__main__":
    run_stage("train", lambda params, data: run_fine_tuning(params, data, "rft"))
