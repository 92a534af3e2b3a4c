"""Stage `graphs`: one completion graph per blueprint (nodes, edges, hyperedges).

Its library side is `interlock.synthesis.stage.graphs`."""

from interlock.core.runner import run_stage
from interlock.synthesis.stage import graphs

if __name__ == "__main__":
    run_stage("graphs", graphs)
