"""The adversarial suite against both judges, and their false rejects on correct work.

    .venv/bin/python perf/abuse_suite.py [--data data] [--tasks 32] [--attempts 8]
        [--skip-effect 0.3] [--ignore-coupling 0.5] [--json PATH]

Plays the oracle and every scripted adversary on admitted ``rft`` tasks through the rollout
engine, one rollout per task, and prints how many each judge accepts: the agent judge (compiled
checks on its own replay of the transcript, in the sandbox) and the credulous text judge
(believes the transcript). Every adversary but the two no-work controls does the oracle's whole
work and adds only its attack, so the attack alone is what can fail it
(:mod:`interlock.testing.adversaries`).

Then the forged records (:mod:`interlock.testing.forgeries`): the oracle's episodes with the
record changed around its own turns (a tool result, the request, the system prompt, a user turn,
the ending, the counts), which the agent judge must refuse while the credulous text judge takes
them.

Then the rows no rollout engine writes (:data:`interlock.testing.forgeries.ROW_FORGERIES`: JSON
nested thousands deep, a message without a role, arguments that are text, ...) and the relabelled
ones (:data:`~interlock.testing.forgeries.PLAN_FORGERIES`: the policy, the token counts, the attempt
and seed), each beside the oracle's honest rows in one table through the ``judge`` and ``accept``
stages' library: how many each accepts, and whether both finished.

Then the packs built by hand with one defect each (:data:`interlock.testing.hostile_packs.DEFECTS`:
a mandatory criterion made optional, the guard's documents widened, an outcome stated by the
case's subject or in base64, a memo asking the grader for a verdict, a request asking for more than
the contract), through the static review that admits any task, beside the template packs.

Then the false rejects on correct work, correct by construction rather than by any judge's
checks: the oracle's rollouts, the benign variations of its work
(:data:`interlock.testing.adversaries.BENIGN`: calls after the submit, a read past the disk's
limits, brackets in prose, ...), and the noisy solver's (``--attempts`` per task) whose plan
skipped no effect and ignored no coupling (:func:`interlock.rollout.scripted.noisy_gap`). Exits
with 1 where the agent judge accepts an adversary, a forged record or a bad row, or rejects
correct work.

``--data`` is a data folder with the ``domains``, ``graphs``, ``packs`` and ``review`` stages'
artifacts; when they are not all there it synthesizes the default scale's tasks into a temporary
folder first, as ``judge_throughput.py`` does (with its function).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import tempfile
from pathlib import Path

from judge_throughput import default_data

from interlock.analysis.artifacts import repository_paths
from interlock.core import schemas
from interlock.core.io import read_rows, write_row_groups
from interlock.judging.agent import AgentJudge
from interlock.judging.stage import run_accept, run_judge
from interlock.judging.text import TextJudge
from interlock.judging.verdicts import accepted
from interlock.review.static import review_pack
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.runs import RolloutPlan, episode_seed, scripted_rollouts
from interlock.rollout.scripted import ScriptedBackend, noisy_gap
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.tasks import admitted_tasks, load_domains, pack_folders
from interlock.testing.adversaries import ADVERSARIES, BENIGN, PLANS
from interlock.testing.forgeries import FORGERIES, PLAN_FORGERIES, ROW_FORGERIES
from interlock.testing.hostile_packs import DEFECTS, fits

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
            trajectories = scripted_rollouts(contexts, [policy], seed=0, workdir=work, plans=PLANS)
            suite[policy] = {"rollouts": len(trajectories), **accepts(trajectories)}
            honest = honest or trajectories  # the oracle's, played first
        forged = {name: {"rollouts": len(honest), **accepts([forgery(t, tasks[t.task_id]) for t in honest])}
                  for name, forgery in FORGERIES.items()}
        rows = bad_rows(honest, pack_folders(data), Path(tmp) / "rows")
        packs = hand_built(contexts)
        benign = {name: accepts(scripted_rollouts(contexts, [name], seed=0, workdir=work, plans=PLANS))
                  for name in BENIGN}
        noisy = scripted_rollouts(contexts, ["noisy"], seed=0, workdir=work, attempts=args.attempts, **rates)
        solver = ScriptedBackend("noisy", seed=0, **rates)
        correct = [t for t in noisy if noisy_gap(tasks[t.task_id], solver.rng(t.rollout_id), rates).complete]
        by_noisy = accepts(correct)

    oracle = suite["oracle"]
    rejects = {"oracle": {"rollouts": oracle["rollouts"],
                          **{j: oracle["rollouts"] - oracle[j] for j in JUDGES}},
               **{name: {"rollouts": len(contexts), **{j: len(contexts) - row[j] for j in JUDGES}}
                  for name, row in benign.items()},
               "noisy": {"rollouts": len(correct), "of": len(noisy), **rates,
                         **{j: len(correct) - by_noisy[j] for j in JUDGES}}}
    total = sum(row["rollouts"] for row in rejects.values())
    rate = {j: sum(row[j] for row in rejects.values()) / total for j in JUDGES}
    source = str(data.data) if ready else "the default scale, synthesized"
    result = {"tasks": len(contexts), "data": source, "suite": suite, "forged": forged, "rows": rows,
              "packs": packs,
              "false_rejects": {**rejects, "correct": total, "rate": rate}}
    result["ok"] = (oracle["agent"] == oracle["rollouts"] and rate["agent"] == 0
                    and not any(suite[name]["agent"] for name in ADVERSARIES)
                    and not any(row["agent"] for row in forged.values())
                    and not any(row["agent"] for name, row in rows.items() if name != "honest")
                    and rows["honest"]["agent"] == rows["honest"]["rows"]
                    and packs["template"]["admitted"] == packs["template"]["tasks"]
                    and not any(row["admitted"] for name, row in packs.items() if name != "template"))

    print(f"{len(contexts)} admitted rft tasks from {source}\n")
    print("| solver | rollouts | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    for policy, row in suite.items():
        print(f"| {policy} | {row['rollouts']} | {row['agent']} | {row['text']} |")
    print("\nForged records (the oracle's episodes, the record changed around its own turns):\n")
    print("| forgery | rollouts | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    for name, row in forged.items():
        print(f"| {name} | {row['rollouts']} | {row['agent']} | {row['text']} |")
    print("\nRows no engine writes, and relabelled ones, beside the oracle's honest rows in one table "
          "(the judge and accept stages; accepted under each judge):\n")
    print("| row | rows | agent judge accepts | text judge accepts |\n|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['rows']} | {row['agent']} | {row['text']} |")
    print("\nPacks built by hand with one defect each, through the static review (beside the template "
          "packs, their clean twins):\n")
    print("| pack | tasks | admitted | refused by its review |\n|---|---:|---:|---:|")
    for name, row in packs.items():
        print(f"| {name} | {row['tasks']} | {row['admitted']} | {row['refused_by_its_review']} |")
    print("\nFalse rejects on correct work (correct by construction, not by any judge's checks):\n")
    print("| correct work | rollouts | agent judge rejects | text judge rejects |\n|---|---:|---:|---:|")
    for name in ("oracle", *BENIGN):
        row = rejects[name]
        print(f"| {name} | {row['rollouts']} | {row['agent']} | {row['text']} |")
    print(f"| noisy (skip_effect {args.skip_effect:g}, ignore_coupling {args.ignore_coupling:g}): "
          f"no effect skipped, no coupling ignored | {len(correct)} of {len(noisy)} | "
          f"{rejects['noisy']['agent']} | {rejects['noisy']['text']} |")
    print(f"| false-reject rate | {total} | {rate['agent']:.3f} | {rate['text']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


def bad_rows(honest: list[Trajectory], packs: list[Path], folder: Path) -> dict[str, dict[str, int]]:
    """The honest rows, each row forgery and each relabelling (one row per task each, as its own
    attempt) in one table through the judge and accept stages' library (``packs``: the run's pack
    folders); per kind: rows, and how many each judge's accept keeps."""
    folder.mkdir(parents=True)
    plan = RolloutPlan("bench/policy", len(ROW_FORGERIES) + len(PLAN_FORGERIES) + 1, 0, RolloutLimits(), 8192)
    kinds = {"honest": None, **{n: f for n, (f, _) in {**ROW_FORGERIES, **PLAN_FORGERIES}.items()}}
    rows, what = [], {}
    for attempt, (kind, forge) in enumerate(kinds.items()):
        for trajectory in honest:
            labelled = dataclasses.replace(trajectory, rollout_id=f"{trajectory.task_id}.a{attempt}",
                                           attempt=attempt, policy=plan.policy,
                                           seed=episode_seed(plan.seed, trajectory.task_id, attempt)).to_row()
            rows.append(forge(labelled) if forge else labelled)
            what[labelled["rollout_id"]] = kind
    table = folder / "trajectories.parquet"
    with write_row_groups(table, schemas.TRAJECTORIES) as writer:
        writer.write(rows)
    run_judge(table, packs, folder / "judge", progress=False)
    counts = {kind: {"rows": len(honest), "agent": 0, "text": 0} for kind in kinds}
    for judge in JUDGES:
        run_accept(table, folder / "judge", packs, folder / f"{judge}.parquet", judge=judge, plan=plan)
        for row in read_rows(folder / f"{judge}.parquet", schemas.TRAJECTORIES):
            counts[what[row["rollout_id"]]][judge] += 1
    return counts


def hand_built(contexts: list) -> dict[str, dict[str, int]]:
    """Per defect (and ``template``, the packs as compiled): tasks that can carry it, how many the
    static review admits, and how many the review that must refuse it refuses."""
    counts = {"template": {"tasks": 0, "admitted": 0, "refused_by_its_review": 0},
              **{name: {"tasks": 0, "admitted": 0, "refused_by_its_review": 0} for name in DEFECTS}}
    for context in contexts:
        graph, domain = context.graph, context.domain
        made = {"template": (context.pack, None)}
        made.update({name: (build(graph, domain, context.pack), flag)
                     for name, (build, flag, _) in DEFECTS.items() if fits(name, graph, domain)})
        for name, (pack, flag) in made.items():
            verdict = review_pack(graph, pack, domain)["verdicts"][0]
            counts[name]["tasks"] += 1
            counts[name]["admitted"] += verdict["admitted"]
            counts[name]["refused_by_its_review"] += bool(flag) and verdict[flag] is False
    return counts


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
