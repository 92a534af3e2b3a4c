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

from interlock.analysis.artifacts import repository_paths
from interlock.judging.agent import AgentJudge
from interlock.judging.text import TextJudge
from interlock.judging.verdicts import accepted
from interlock.rollout.runs import scripted_rollouts
from interlock.rollout.scripted import ADVERSARIES
from interlock.synthesis.tasks import admitted_tasks, load_domains

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the artifacts' folder (default: the repository's)")
    parser.add_argument("--tasks", type=int, default=32)
    args = parser.parse_args()
    paths = repository_paths(ROOT, data=args.data)
    contexts = list(itertools.islice(admitted_tasks(paths, load_domains(paths.domains), "rft"), args.tasks))
    packs = {c.task_id: c.pack for c in contexts}
    print(f"{len(contexts)} admitted rft tasks from {paths.data}\n")
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
