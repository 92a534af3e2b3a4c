"""Stage `domains`: the domain catalog, with its train / held-out split.

Its library side is `interlock.synthesis.stage.domains`."""

from interlock.core.runner import run_stage
from interlock.synthesis.stage import domains

if __name__ == "__main__":
    run_stage("domains", domains)
