"""The adversarial suite against both judges, and their false rejects on correct work.

    .venv/bin/python benchmarks/abuse_suite.py [--data data] [--tasks 32] [--attempts 8]
        [--skip-effect 0.3] [--ignore-coupling 0.5] [--json PATH]

Plays the oracle and every scripted adversary on admitted ``rft`` tasks through the rollout
engine, one rollout per task, and prints how many each judge accepts: the agent judge (compiled
checks on its own replay of the transcript, in the sandbox) and the credulous text judge
(believes the transcript). Every adversary but the two no-work controls does the oracle's whole
work and adds only its attack, so the attack alone is what can fail it
(:mod:`interlock.rollout.scripted`).

Then the forged records (:mod:`interlock.rollout.forgeries`): the oracle's episodes with the
record changed around its own turns (a tool result, the request, the system prompt, a user turn,
the ending, the counts), which the agent judge must refuse while the credulous text judge takes
them.

Then the false rejects on correct work, correct by construction rather than by any judge's
checks: the oracle's rollouts, and the noisy solver's (``--attempts`` per task) whose plan skipped
no effect and ignored no coupling (:func:`interlock.rollout.scripted.noisy_gap`). Exits with 1
where the agent judge accepts an adversary or a forged record, or rejects correct work.

``--data`` is a data folder with the ``domains``, ``graphs``, ``packs`` and ``review`` stages'
artifacts; when they are not all there it synthesizes the default scale's tasks into a temporary
folder first, as ``judge_throughput.py`` does (with its function).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

from judge_throughput import default_data

from interlock.analysis.artifacts import repository_paths
from interlock.judging.agent import AgentJudge
from interlock.judging.text import TextJudge
from interlock.judging.verdicts import accepted
from interlock.rollout.forgeries import FORGERIES
from interlock.rollout.runs import scripted_rollouts
from interlock.rollout.scripted import ADVERSARIES, ScriptedBackend, noisy_gap
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import admitted_tasks, load_domains

ROOT = Path(__file__).resolve().parents[1]
JUDGES = ("agent", "text")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the artifacts' folder (default: the repository's)")
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--attempts", type=int, default=8, help="noisy rollouts per task")
    parser.add_argument("--skip-effect", type=float, default=0.3, help="the noisy solver's rate")
    parser.add_argument("--ignore-coupling", type=float, default=0.5, help="the noisy solver's rate")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rates = {"skip_effect": args.skip_effect, "ignore_coupling": args.ignore_coupling}

    paths = repository_paths(ROOT, data=args.data)
    with tempfile.TemporaryDirectory() as tmp, AgentJudge() as agent:
        ready = all(path.exists() for path in (paths.domains, paths.graphs, paths.packs, paths.review))
        data = paths if ready else default_data(Path(tmp) / "data")
        contexts = list(itertools.islice(admitted_tasks(data, load_domains(data.domains), "rft"), args.tasks))
        tasks = {c.task_id: c for c in contexts}
        judges = {"agent": agent, "text": TextJudge()}

        def accepts(trajectories: list[Trajectory]) -> dict[str, int]:
            """How many of ``trajectories`` each judge accepts."""
            items = [(t, tasks[t.task_id].pack) for t in trajectories]
            return {name: sum(accepted(j.passed, tasks[j.task_id].pack.rubric) for j in judge.judge(items))
                    for name, judge in judges.items()}

        work = Path(tmp) / "rollouts"
        suite, honest = {}, []
        for policy in ("oracle", *ADVERSARIES):
            trajectories = scripted_rollouts(contexts, [policy], seed=0, workdir=work)
            suite[policy] = {"rollouts": len(trajectories), **accepts(trajectories)}
            honest = honest or trajectories  # the oracle's, played first
        forged = {name: {"rollouts": len(honest), **accepts([forgery(t, tasks[t.task_id]) for t in honest])}
                  for name, forgery in FORGERIES.items()}
        noisy = scripted_rollouts(contexts, ["noisy"], seed=0, workdir=work, attempts=args.attempts, **rates)
        solver = ScriptedBackend("noisy", seed=0, **rates)
        correct = [t for t in noisy if noisy_gap(tasks[t.task_id], solver.rng(t.rollout_id), rates).complete]
        by_noisy = accepts(correct)

    oracle = suite["oracle"]
    rejects = {"oracle": {"rollouts": oracle["rollouts"],
                          **{j: oracle["rollouts"] - oracle[j] for j in JUDGES}},
               "noisy": {"rollouts": len(correct), "of": len(noisy), **rates,
                         **{j: len(correct) - by_noisy[j] for j in JUDGES}}}
    total = oracle["rollouts"] + len(correct)
    rate = {j: (rejects["oracle"][j] + rejects["noisy"][j]) / total for j in JUDGES}
    source = str(data.data) if ready else "the default scale, synthesized"
    result = {"tasks": len(contexts), "data": source, "suite": suite, "forged": forged,
              "false_rejects": {**rejects, "correct": total, "rate": rate}}
    result["ok"] = (oracle["agent"] == oracle["rollouts"] and rate["agent"] == 0
                    and not any(suite[name]["agent"] for name in ADVERSARIES)
                    and not any(row["agent"] for row in forged.values()))

    print(f"{len(contexts)} admitted rft tasks from {source}\n")
    print("| solver | rollouts | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    for policy, row in suite.items():
        print(f"| {policy} | {row['rollouts']} | {row['agent']} | {row['text']} |")
    print("\nForged records (the oracle's episodes, the record changed around its own turns):\n")
    print("| forgery | rollouts | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    for name, row in forged.items():
        print(f"| {name} | {row['rollouts']} | {row['agent']} | {row['text']} |")
    print("\nFalse rejects on correct work (correct by construction, not by any judge's checks):\n")
    print("| correct work | rollouts | agent judge rejects | text judge rejects |\n|---|---:|---:|---:|")
    print(f"| oracle | {oracle['rollouts']} | {rejects['oracle']['agent']} | {rejects['oracle']['text']} |")
    print(f"| noisy (skip_effect {args.skip_effect:g}, ignore_coupling {args.ignore_coupling:g}): "
          f"no effect skipped, no coupling ignored | {len(correct)} of {len(noisy)} | "
          f"{rejects['noisy']['agent']} | {rejects['noisy']['text']} |")
    print(f"| false-reject rate | {total} | {rate['agent']:.3f} | {rate['text']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
