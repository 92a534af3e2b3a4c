"""Stage `sample`: the training set of the chosen domain breadth.

Its library side is `interlock.training.stage.sample`."""

from interlock.core.runner import run_stage
from interlock.training.stage import sample

if __name__ == "__main__":
    run_stage("sample", sample)
