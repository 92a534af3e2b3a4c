"""Stage `evaluate`: every model in `eval.models` on every pool in `eval.pools`.

Its library side is `interlock.evaluation.stage.evaluate`."""

from interlock.core.runner import run_stage
from interlock.evaluation.stage import evaluate

if __name__ == "__main__":
    run_stage("evaluate", evaluate)
