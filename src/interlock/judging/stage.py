"""The ``judge`` and ``accept`` stages.

``judge``: both judges grade the whole rollout pool, streamed by row group. The verdict tables
are deterministic (no timings); cost and error rates go to the returned metrics.

``accept``: a trajectory is accepted only if every mandatory criterion of its task passes under
the configured judge's verdicts (a missing verdict fails), and it is written as its own assistant
turns make it when played again (:func:`~interlock.rollout.engine.reenacted_trajectory`): the
system prompt, the request and every tool result come from the environment, never from the
record, whichever judge accepted it, so nothing recorded but unjudged can reach a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from tqdm import tqdm

from interlock.core import schemas
from interlock.core.backend import releasing
from interlock.core.config import Params
from interlock.core.errors import InterlockError
from interlock.core.io import (
    batched,
    count_rows,
    iter_row_groups,
    open_table,
    write_row_groups,
    write_table_set,
    write_tsv,
)
from interlock.core.paths import Paths
from interlock.core.registry import JUDGES
from interlock.core.tracking import StageReport
from interlock.judging.judges import DEFAULT_EPISODE, TRUTH, JudgeContext
from interlock.judging.metrics import JudgeStats
from interlock.judging.sandbox import scratch_base
from interlock.judging.verdicts import BAD_ROW, Judgement, verdict_row
from interlock.models.backends import make_backend, model_runtime
from interlock.rollout.engine import EpisodeLimits, WorkspaceEnvironment, reenacted_trajectory
from interlock.rollout.runs import RolloutPlan
from interlock.rollout.trajectory import BadRow, BadRows, Row, Trajectory, iter_rows, report_bad_rows
from interlock.synthesis.packs import TaskPack
from interlock.synthesis.tasks import iter_packs, pack_folders

#: who grades the rollout pool unless ``judge.graders`` says otherwise
GRADERS = ("agent", "text")
#: the paper's accepted trajectories, for scale
PAPER_PER_ACCEPTED = {"turns": 27.6, "tool_calls": 42}


def _column(path: Path, name: str) -> list:
    """One column of a trajectories table, streamed."""
    handle = open_table(path, schemas.TRAJECTORIES)
    return [value for batch in handle.iter_batches(columns=[name]) for value in batch.column(0).to_pylist()]


def trajectory_task_ids(path: Path) -> set[str]:
    return {t for t in _column(path, "task_id") if isinstance(t, str)}


def repeated_rollout_ids(path: Path) -> set[str]:
    """Rollout ids that more than one row of a trajectories table holds: verdicts and acceptance
    are by rollout id, so none of those rows can be told apart, and each is a bad row."""
    counts = Counter(_column(path, "rollout_id"))
    return {r for r, n in counts.items() if n > 1 and isinstance(r, str)}


def load_packs(packs_dirs: Sequence[Path], task_ids: set[str]) -> dict[str, TaskPack]:
    """The packs of the given tasks only, from any of ``packs_dirs`` (streamed: the rest are never
    kept); a task none of them holds is left out (a row that names it is a bad row)."""
    packs = {}
    for packs_dir in packs_dirs:
        for group in iter_packs(packs_dir):
            packs.update({p.task_id: p for p in group if p.task_id in task_ids})
    return packs


def checked_rows(path: Path, tasks: Collection[str]) -> Iterator[list[Row]]:
    """A trajectories table's rows (:func:`~interlock.rollout.trajectory.iter_rows`), with what the
    table as a whole says of each besides: a rollout id another row holds too, or a task that is
    none of the run's ``tasks``, makes it a bad row."""
    repeated = repeated_rollout_ids(path)
    for group in iter_rows(path):
        checked = []
        for row in group:
            trajectory = row.parsed
            if isinstance(trajectory, Trajectory) and trajectory.rollout_id in repeated:
                row = row.refused(str(path), "rollout_id", "another row of the table has this rollout id",
                                  named=False)
            elif isinstance(trajectory, Trajectory) and trajectory.task_id not in tasks:
                row = row.refused(str(path), "task_id", f"{trajectory.task_id[:80]!r} is no task of this run")
            checked.append(row)
        yield checked


def judge_rows(judgements: list[Judgement]) -> list[dict]:
    return [row for j in judgements for row in j.verdicts]


def collateral_rows(judgements: list[Judgement]) -> list[dict]:
    return [{"rollout_id": j.rollout_id, "task_id": j.task_id, "file": c["file"],
             "record": None if c["record"] is None else str(c["record"]), "reason": c["reason"]}
            for j in judgements for c in j.collateral]


def run_judge(trajectories: Path, packs_dirs: Sequence[Path], out: Path, *,
              graders: Sequence[str] = GRADERS, context: JudgeContext | None = None, batch_size: int = 64,
              progress: bool = True) -> dict:
    """Every grader over every rollout (played under ``context.episode``'s rules); writes one
    verdict table per grader and ``collateral.parquet`` (the truth's) into ``out``, aligned by row
    group with the trajectories; returns the metrics (cost, error rates against the truth, and the
    bad rows: each fails every criterion of its task with the reason, where its id and task name
    them, and none stops the others)."""
    graders = _with_truth(graders)
    context = context or JudgeContext()
    packs = load_packs(packs_dirs, trajectory_task_ids(trajectories))
    total = count_rows(trajectories, schemas.TRAJECTORIES)
    stats, bad = JudgeStats(), BadRows()
    with contextlib.ExitStack() as stack:
        judges = {}
        for name in graders:
            judges[name] = JUDGES.get(name)(context)
            stack.callback(judges[name].close)
        tables = stack.enter_context(write_table_set(out, schemas.judge_tables(graders)))
        bar = stack.enter_context(tqdm(total=total, desc="judge", unit="rollout", mininterval=1.0,
                                       dynamic_ncols=True, disable=not progress))
        for group in checked_rows(trajectories, packs):
            rows: dict[str, list[dict]] = {name: [] for name in schemas.judge_tables(graders)}
            for chunk in batched(group, batch_size):
                good = [row.parsed for row in chunk if isinstance(row.parsed, Trajectory)]
                items = [(t, packs[t.task_id]) for t in good]
                judged = {name: _judge(name, grader, items, stats, str(trajectories))
                          for name, grader in judges.items()}
                if items:
                    stats.add(good, [pack for _, pack in items], judged[TRUTH], judged)
                for name in graders:
                    rows[name] += judge_rows(judged[name])
                rows["collateral"] += collateral_rows(judged[TRUTH])
                for row in chunk:
                    if isinstance(row.parsed, BadRow):
                        bad.add(row.parsed)
                        for name in graders:
                            rows[name] += bad_row_verdicts(row.parsed, packs, name)
                bar.update(len(chunk))
            tables.write(rows)
        reports = {name: grader.report() for name, grader in judges.items()}
    summary = stats.summary()
    summary["bad_rows"] = bad.summary()
    summary["sandbox"] = reports[TRUTH].get("sandbox")
    summary["backends"] = {name: report.get("backend") for name, report in reports.items()}
    return summary


def _judge(name: str, grader, items: list, stats: JudgeStats, source: str) -> list[Judgement]:
    """One grader's judgements of ``items``, timed; a grader that loses or adds one is an error."""
    if not items:
        return []
    start = time.perf_counter()
    judged = grader.judge(items)
    stats.add_wall(name, time.perf_counter() - start)
    if len(judged) != len(items):
        raise InterlockError(f"the {name!r} judge gave {len(judged)} judgements for {len(items)} rollouts",
                             file=source, field="judge.graders")
    return judged


def bad_row_verdicts(error: BadRow, packs: dict[str, TaskPack], judge: str) -> list[dict]:
    """A bad row's verdicts by ``judge``: every criterion of its task failed, with the reason (none
    where the row names no rollout or no task of the run: nothing could be accepted under it)."""
    pack = packs.get(error.task_id or "")
    if error.rollout_id is None or pack is None:
        return []
    evidence = f"{BAD_ROW} row {error.row}, {error.field}: {error.reason}"
    return [verdict_row(error.rollout_id, pack.task_id, judge, c.criterion_id, False, evidence)
            for c in pack.rubric]


def _with_truth(graders: Sequence[str]) -> tuple[str, ...]:
    if TRUTH not in graders:
        raise InterlockError(f"the graders must include the {TRUTH!r} judge, whose compiled verdicts are "
                             f"the ground truth (got {', '.join(graders)})", field="judge.graders")
    if "collateral" in graders:  # the name of the truth's collateral table beside the verdicts
        raise InterlockError("no grader may be named 'collateral'", field="judge.graders")
    return tuple(dict.fromkeys(graders))


# ----------------------------------------------------------------------------- accept

def mandatory_criteria(packs_dirs: Sequence[Path]) -> dict[str, set[str]]:
    """task id -> its mandatory criterion ids."""
    mandatory: dict[str, set[str]] = defaultdict(set)
    for rows in (r for d in packs_dirs for r in iter_row_groups(d / "rubrics.parquet",
                                                                  schemas.PACK_TABLES["rubrics"])):
        for row in rows:
            if row["mandatory"]:
                mandatory[row["task_id"]].add(row["criterion_id"])
            else:
                mandatory.setdefault(row["task_id"], set())
    return dict(mandatory)


def accepted_rollouts(verdicts_path: Path, mandatory: dict[str, set[str]], judge: str) -> set[str]:
    """Rollouts whose every mandatory criterion has a passing verdict from ``judge``."""
    passing: dict[str, set[str]] = defaultdict(set)
    failed: set[str] = set()
    tasks: dict[str, str] = {}
    for rows in iter_row_groups(verdicts_path, schemas.VERDICTS):
        for row in rows:
            if row["judge"] != judge:
                raise InterlockError(f"a verdict by {row['judge']!r} in the {judge!r} table",
                                     file=str(verdicts_path), item=row["rollout_id"], field="judge")
            rollout, task = row["rollout_id"], row["task_id"]
            tasks[rollout] = task
            if row["criterion_id"] not in mandatory.get(task, ()):
                continue
            if row["passed"]:
                passing[rollout].add(row["criterion_id"])
            else:
                failed.add(rollout)
    return {r for r, task in tasks.items()
            if r not in failed and task in mandatory and passing[r] >= mandatory[task]}


def replayed_row(trajectory: Trajectory, pack: TaskPack, episode: EpisodeLimits) -> dict:
    """A trajectory as its assistant turns make it when played again on ``pack``, under its task's
    domain and pool: everything the record holds that the task and the replay can tell."""
    with tempfile.TemporaryDirectory(prefix="interlock-accept-", dir=scratch_base()) as folder:
        environment = WorkspaceEnvironment(pack, Path(folder) / "workspace")
        again = reenacted_trajectory(trajectory, environment, episode)
    return dataclasses.replace(again, domain_id=pack.domain_id, pool=pack.pool).to_row()


def run_accept(trajectories: Path, judge_dir: Path, packs_dirs: Sequence[Path], out: Path, *,
               judge: str, episode: EpisodeLimits = DEFAULT_EPISODE,
               plan: RolloutPlan | None = None) -> tuple[dict, list[dict]]:
    """Write the accepted trajectories (TRAJECTORIES schema; an empty table if none), each as its
    assistant turns make it under ``episode``'s rules; return the metrics and the per-domain rows
    of the acceptance plot. A bad row (:func:`checked_rows`), and one whose labels are not what
    ``plan`` (the run's rollouts) records, is refused with its reason and counted nowhere else."""
    if not (judge_dir / f"{judge}.parquet").is_file():
        raise InterlockError(f"no verdicts by the {judge!r} judge: is it among judge.graders?",
                             file=str(judge_dir), field="judge.name")
    mandatory = mandatory_criteria(packs_dirs)
    accepted = accepted_rollouts(judge_dir / f"{judge}.parquet", mandatory, judge)
    packs = load_packs(packs_dirs, trajectory_task_ids(trajectories))
    by_domain: dict[str, Counter] = defaultdict(Counter)
    by_policy: dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    bad = BadRows()
    with write_row_groups(out, schemas.TRAJECTORIES) as writer:
        for group in checked_rows(trajectories, packs):
            kept = []
            for row in group:
                problem = plan.problem(row.parsed) if plan and isinstance(row.parsed, Trajectory) else None
                if problem:
                    row = row.refused(str(trajectories), *problem)
                if isinstance(row.parsed, BadRow):
                    bad.add(row.parsed)
                    continue
                t = row.parsed
                ok = t.rollout_id in accepted
                for counter in (by_domain[t.domain_id], by_policy[t.policy], totals):
                    counter["rollouts"] += 1
                    counter["accepted"] += ok
                if ok:
                    totals["turns"] += t.turns
                    totals["tool_calls"] += t.tool_calls
                    kept.append(replayed_row(t, packs[t.task_id], episode))
            if kept:
                writer.write(kept)
    n, k = totals["rollouts"], totals["accepted"]
    plot = [{"domain_id": d, "rollouts": c["rollouts"], "accepted": c["accepted"],
             "acceptance": round(c["accepted"] / c["rollouts"], 4)} for d, c in sorted(by_domain.items())]
    metrics = {
        "judge": judge, "rollouts": n, "accepted": k,
        "acceptance": round(k / n, 4) if n else None,
        "nothing_accepted": k == 0,
        "message": (f"{k} of {n} trajectories accepted under the {judge} judge" if k else
                    f"nothing accepted: none of the {n} trajectories passed every mandatory criterion "
                    f"under the {judge} judge; the accepted table is empty"),
        "bad_rows": bad.summary(),
        "domains": len(by_domain),
        "domains_with_accepted": sum(1 for c in by_domain.values() if c["accepted"]),
        "by_domain": {row["domain_id"]: {k_: row[k_] for k_ in ("rollouts", "accepted", "acceptance")}
                      for row in plot},
        "by_policy": {p: {"rollouts": c["rollouts"], "accepted": c["accepted"],
                          "acceptance": round(c["accepted"] / c["rollouts"], 4)}
                      for p, c in sorted(by_policy.items())},
        "per_accepted": {"turns": round(totals["turns"] / k, 2) if k else None,
                         "tool_calls": round(totals["tool_calls"] / k, 2) if k else None},
        "paper_per_accepted": PAPER_PER_ACCEPTED,
    }
    return metrics, plot


# ----------------------------------------------------------------------------- the stages

def judge(params: Params, paths: Paths) -> StageReport:
    """Both judges grade the policy's rollouts (what ``accept`` keeps) and the review's validation
    rollouts (a pool with a known completion gap, to measure the judges on). The ``judge`` choice is
    not read here: it only decides whose verdicts ``accept`` uses."""
    model = runtime = None
    if params.judge.backed_by == "model":
        checkpoint = paths.model(params.solver.start)
        model = make_backend(params.backbone, checkpoint)
        runtime = model_runtime(params.backbone, "generate", checkpoint)
    # the rules the rollouts and the review's validation rollouts were both played under
    options = {"graders": params.judge.graders,
               "context": JudgeContext(backend=model, episode=EpisodeLimits.of(params.scale.rollouts),
                                       sandbox=params.sandbox.provider)}
    folders = pack_folders(paths)
    with releasing(model):
        metrics = {"rollouts": run_judge(paths.trajectories, folders, paths.judgements, **options),
                   "calibration": run_judge(paths.validation, folders, paths.calibration, **options)}
    for pool, summary in metrics.items():
        report_bad_rows(f"judge: {pool}", summary["bad_rows"])
        for name, judged in summary["judges"].items():
            rates = judged["vs_truth"].get("all", {}).get("trajectories") or {}
            print(f"judge: {pool}: {name}: {judged['accepted']} of {judged['rollouts']} accepted, "
                  f"{judged['rollouts_per_second']} rollouts/s, {judged['output_tokens']} output tokens, "
                  f"false accepts {rates.get('false_accept_rate')}, "
                  f"false rejects {rates.get('false_reject_rate')}")
    return StageReport(metrics, config={"runtime": runtime})


def accept(params: Params, paths: Paths) -> StageReport:
    """Keep the trajectories whose every mandatory criterion passes under the configured judge
    (``judge=agent`` or ``judge=text``); report acceptance per domain."""
    plan = RolloutPlan.of(params)
    metrics, plot = run_accept(paths.trajectories, paths.judgements, pack_folders(paths),
                               paths.accepted_table, judge=params.judge.name, episode=plan.limits.episode,
                               plan=plan)
    write_tsv(paths.accept_plot, plot, ["domain_id", "rollouts", "accepted", "acceptance"])
    print(f"accept: {metrics['message']}")
    report_bad_rows("accept", metrics["bad_rows"])
    if not metrics["nothing_accepted"]:
        per = metrics["per_accepted"]
        print(f"accept: {metrics['domains_with_accepted']} of {metrics['domains']} domains; per accepted "
              f"trajectory {per['turns']} turns and {per['tool_calls']} tool calls "
              f"(the paper: ~{PAPER_PER_ACCEPTED['turns']} and ~{PAPER_PER_ACCEPTED['tool_calls']})")
    # per domain as a table (the plot's rows), not as hundreds of summary keys
    return StageReport(metrics, tables={"by_domain": plot})
