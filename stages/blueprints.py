"""Stage `blueprints`: seeded task blueprints per domain, split into disjoint pools.

Its library side is `interlock.synthesis.stage.blueprints`."""

from interlock.core.runner import run_stage
from interlock.synthesis.stage import blueprints

if __name__ == "__main__":
    run_stage("blueprints", blueprints)
