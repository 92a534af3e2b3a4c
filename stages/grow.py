"""Stage `grow`: recursive synthesis on the admitted rft tasks (`synthesis=rst`; with `base`,
empty tables).

Its library side is `interlock.recursive.stage.grow`."""

from interlock.core.runner import run_stage
from interlock.recursive.stage import grow

if __name__ == "__main__":
    run_stage("grow", grow)
