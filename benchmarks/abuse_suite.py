"""The adversarial suite against both judges: how many of each adversary's rollouts each accepts.

    .venv/bin/python benchmarks/abuse_suite.py [--data data] [--tasks 32]

Reads the admitted tasks of a pipeline run (`make repro` first), plays the oracle and every
scripted adversary on them through the rollout engine, and prints acceptance under the agent
judge (compiled checks in the sandbox) and the credulous text judge (believes the transcript).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

from interlock.agents.scripted import ADVERSARIES
from interlock.artifacts import Artifacts
from interlock.judges.agent import AgentJudge
from interlock.judges.base import accepted
from interlock.judges.text import TextJudge
from interlock.pipeline import load_domains
from interlock.rollouts import admitted_tasks, scripted_rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--tasks", type=int, default=32)
    args = parser.parse_args()
    data = Artifacts(args.data)
    contexts = list(itertools.islice(
        admitted_tasks(data.review, data.packs, data.graphs, load_domains(data.domains), "rft"), args.tasks))
    packs = {c.task_id: c.pack for c in contexts}
    print(f"{len(contexts)} admitted rft tasks from {args.data}\n")
    print("| solver | rollouts | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as workdir, AgentJudge() as agent:
        text = TextJudge()
        for policy in ("oracle", *ADVERSARIES):
            trajectories = scripted_rollouts(contexts, [policy], seed=0, workdir=Path(workdir))
            items = [(t, packs[t.task_id]) for t in trajectories]
            counts = [sum(accepted(j.passed, packs[j.task_id].rubric) for j in judge.judge(items))
                      for judge in (agent, text)]
            print(f"| {policy} | {len(items)} | {counts[0]} | {counts[1]} |")


if __name__ == "__main__":
    main()
