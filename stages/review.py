"""Stage `review`: source coverage, public-input critic and controls, then the execution gate
(a validation rollout per statically admitted task, judged by the agent judge); admitted tasks.

Its library side is `interlock.review.stage.review`."""

from interlock.core.runner import run_stage
from interlock.review.stage import review

if __name__ == "__main__":
    run_stage("review", review)
