"""Stage `packs`: compile each graph to workspace + index, request + contract, rubric +
checks, with the oracle's reference solution.

Its library side is `interlock.synthesis.authors.stage.packs`."""

from interlock.core.runner import run_stage
from interlock.synthesis.authors.stage import packs

if __name__ == "__main__":
    run_stage("packs", packs)
