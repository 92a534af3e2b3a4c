"""The ``intervene`` stage: rollout-time intervention on the rollouts the configured judge rejected.

For each rejected rollout: the intervention point (:mod:`~interlock.intervention.diagnosis`); the
critic's note and the corrected turns (:mod:`~interlock.intervention.correction`; the corrections
run through the rollout engine, resumable like the rollouts stage); verification, the corrected
trajectory replayed in a fresh workspace and judged by the agent judge; the distribution-shift
filter and the weights (:mod:`~interlock.intervention.shift`), scored by the starting checkpoint.
One row per rejected rollout goes to the interventions table, kept or not and why; ``sample``
draws the kept corrections beside the accepted rollouts.

With ``intervention=none`` the table is written empty, so switching the option re-runs this
stage and the ones after it, and nothing before.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock.core import schemas
from interlock.core.backend import ChatBackend, releasing
from interlock.core.config import InterventionConfig, Params
from interlock.core.errors import InterlockError
from interlock.core.io import batched, dumps, fingerprint, iter_row_groups, open_table, write_table, write_tsv
from interlock.core.paths import Paths
from interlock.core.tracking import StageReport
from interlock.intervention.correction import (
    SUFFIX,
    Case,
    NotedBackend,
    ScriptedCorrector,
    model_notes,
    scripted_notes,
)
from interlock.intervention.diagnosis import Diagnosis, diagnose
from interlock.intervention.shift import FilterDecision, filter_corrections, nll_plot_rows, threshold
from interlock.judging.agent import AgentJudge
from interlock.judging.stage import checked_rows
from interlock.judging.verdicts import accepted
from interlock.models.backends import make_backend, model_runtime
from interlock.rollout.engine import EpisodeLimits, RolloutLimits
from interlock.rollout.runs import run_rollouts
from interlock.rollout.trajectory import BadRow, BadRows, Trajectory, own_trajectories, report_bad_rows
from interlock.synthesis.tasks import TaskContext, admitted_tasks, load_domains
from interlock.training.scoring import checkpoint_nll

DOMAIN_COLUMNS = ["domain_id", "rollouts", "failed", "diagnosed", "corrected", "verified", "kept"]


@dataclass(frozen=True)
class Roles:
    """Who writes the critic's notes and the corrected turns: ``None`` for the scripted programs,
    else the model backend."""

    critic: ChatBackend | None
    corrector: ChatBackend | None
    label: str  # the corrections' ``policy`` label


def read_failed(verdicts: Path, rollout_ids: set[str],
                tasks: dict[str, TaskContext]) -> dict[str, dict[str, str]]:
    """rollout id -> {criterion id: evidence} for the mandatory criteria the judge failed."""
    failed: dict[str, dict[str, str]] = defaultdict(dict)
    for rows in iter_row_groups(verdicts, schemas.VERDICTS):
        for row in rows:
            if row["rollout_id"] not in rollout_ids or row["passed"]:
                continue
            rubric = tasks[row["task_id"]].pack.rubric
            if any(c.criterion_id == row["criterion_id"] and c.mandatory for c in rubric):
                failed[row["rollout_id"]][row["criterion_id"]] = row["evidence"]
    return failed


def run_intervention(trajectories: Path, verdicts: Path, accepted_ids: set[str],
                     tasks: dict[str, TaskContext], *, config: InterventionConfig, roles: Roles,
                     checkpoint: Path, scorer_dtype: str, max_context: int, limits: RolloutLimits, work: Path,
                     run_id: str, batch_size: int,
                     judge: AgentJudge) -> tuple[list[dict], dict, dict[str, list[dict]]]:
    """Diagnose, correct, verify, filter and weigh every rejected rollout (the corrections and the
    policy's own turns scored under ``checkpoint`` in ``scorer_dtype``); return the interventions
    table's rows, the metrics and the plots' rows (by domain; NLL histograms and threshold)."""
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    bad = BadRows()
    rollouts = []
    for row in (row for group in checked_rows(trajectories, tasks)
                for row in group):
        if isinstance(row.parsed, BadRow):
            bad.add(row.parsed)
        else:
            rollouts.append(row.parsed)
    rejected = [t for t in rollouts if t.rollout_id not in accepted_ids]
    failed = read_failed(verdicts, {t.rollout_id for t in rejected}, tasks)
    diagnoses = {t.rollout_id: diagnose(t.messages, tasks[t.task_id]) for t in rejected}
    cases = [Case(t, tasks[t.task_id], diagnoses[t.rollout_id], failed.get(t.rollout_id, {}))
             for t in rejected if diagnoses[t.rollout_id].turn is not None]
    seconds["diagnose"] = time.perf_counter() - clock

    clock = time.perf_counter()
    notes = (scripted_notes(cases) if roles.critic is None
             else model_notes(cases, roles.critic, config.critic_max_new_tokens))
    seconds["critic"] = time.perf_counter() - clock

    clock = time.perf_counter()
    corrector = ScriptedCorrector() if roles.corrector is None else NotedBackend(roles.corrector, notes)
    corrected = _corrections(cases, corrector, roles.label, limits, work, run_id, batch_size)
    seconds["correct"] = time.perf_counter() - clock

    clock = time.perf_counter()
    verified = _verify([corrected[c.rollout_id] for c in cases], tasks, judge)
    seconds["verify"] = time.perf_counter() - clock

    clock = time.perf_counter()
    passing = [c for c in cases if verified[c.rollout_id][0]]
    reference_kind = "accepted"
    own = [(t, 0) for t in rollouts if t.rollout_id in accepted_ids]
    if not own:  # nothing accepted: the policy's own turns of every rollout
        own, reference_kind = [(t, 0) for t in rollouts], "rollouts"
    # one load of the checkpoint scores the corrected turns and the policy's own
    fixes = [(corrected[c.rollout_id], len(c.prefix)) for c in passing]
    scores = _nll(checkpoint, scorer_dtype, [*fixes, *own], max_context)
    nll = dict(zip([c.rollout_id for c in passing], scores[:len(passing)], strict=True))
    reference = [x for x in scores[len(passing):] if x is not None]
    scored = [rid for rid, x in nll.items() if x is not None]
    shift = config.filter
    limit = threshold(reference, shift.quantile, shift.slack) if reference else None
    if limit is None:  # nothing of the policy's own could be scored: nothing to measure a shift against
        unmeasured = FilterDecision(False, 0.0, "not kept: no reference NLL (no turn of the policy's own "
                                                "could be scored)")
        decisions = dict.fromkeys(nll, unmeasured)
    else:
        decisions = dict(zip(nll, filter_corrections(list(nll.values()), reference, quantile=shift.quantile,
                                                     slack=shift.slack, cap=config.weight_cap),
                             strict=True))
    seconds["filter"] = time.perf_counter() - clock

    rows = [_row(t, diagnoses[t.rollout_id], failed.get(t.rollout_id, {}), notes.get(t.rollout_id),
                 corrected.get(t.rollout_id), verified.get(t.rollout_id), nll.get(t.rollout_id),
                 decisions.get(t.rollout_id))
            for t in sorted(rejected, key=lambda t: t.rollout_id)]
    metrics = {**_metrics(rollouts, rows, accepted_ids, reference, reference_kind, limit, seconds),
               "bad_rows": bad.summary()}
    plots = {"domains": _domain_rows(rollouts, rows),
             **nll_plot_rows(reference, [nll[rid] for rid in scored], math.nan if limit is None else limit)}
    return rows, metrics, plots


def _nll(checkpoint: Path, dtype: str, items: list[tuple[Trajectory, int]],
         max_context: int) -> list[float | None]:
    """Mean token NLL under ``checkpoint`` (in ``dtype``) of each trajectory's assistant turns from
    message ``n`` on."""
    if not items:
        return []
    return checkpoint_nll(checkpoint, [([m.to_dict() for m in t.messages], n) for t, n in items],
                          max_length=max_context, dtype=dtype)


def _corrections(cases: Sequence[Case], corrector: ChatBackend, label: str, limits: RolloutLimits, work: Path,
                 run_id: str, batch_size: int) -> dict[str, Trajectory]:
    """Every case continued from its prefix through the rollout engine; resumable (finished
    corrections are kept under ``work`` and skipped by a second run)."""
    if not cases:
        return {}
    with tempfile.TemporaryDirectory(prefix="interlock-corrections-") as tmp:
        out = Path(tmp) / "corrections.parquet"
        run_rollouts(iter(c.episode(label) for c in cases), corrector, limits, total=len(cases), out=out,
                     timings=Path(tmp) / "timings.parquet", work=work, run_id=run_id, batch_size=batch_size,
                     desc="corrections")
        by_id = {t.rollout_id: t for group in own_trajectories(out) for t in group}
    return {c.rollout_id: by_id[c.episode(label).rollout_id] for c in cases}


def _verify(corrections: Sequence[Trajectory], tasks: dict[str, TaskContext],
            judge: AgentJudge) -> dict[str, tuple[bool, str]]:
    """Each correction replayed in a fresh workspace and judged by the agent judge: original
    rollout id -> (every mandatory criterion passes, the verdict in words)."""
    verdicts = {}
    for chunk in batched(list(corrections), 64):
        for trajectory, judgement in zip(chunk, judge.judge([(t, tasks[t.task_id].pack) for t in chunk]),
                                         strict=True):
            passed = {v["criterion_id"]: v["passed"] for v in judgement.verdicts}
            rubric = tasks[trajectory.task_id].pack.rubric
            ok = accepted(passed, rubric)
            failing = sorted(c.criterion_id for c in rubric if c.mandatory and not passed.get(c.criterion_id))
            original = trajectory.rollout_id.removesuffix(SUFFIX)
            verdicts[original] = ok, "pass" if ok else "fail: " + ", ".join(failing)
    return verdicts


def _row(trajectory: Trajectory, diagnosis: Diagnosis, failed: dict[str, str], note: str | None,
         corrected: Trajectory | None, verified: tuple[bool, str] | None, nll: float | None,
         decision: FilterDecision | None) -> dict:
    if diagnosis.turn is None:
        reason = f"no intervention point: {diagnosis.reason}"
    elif verified is None:
        reason = "no correction was made"
    elif not verified[0]:
        reason = f"the correction fails the agent judge ({verified[1]})"
    else:
        reason = decision.reason if decision else "not scored"
    ok, verdict = verified if verified else (None, None)
    return {"rollout_id": trajectory.rollout_id, "task_id": trajectory.task_id,
            "domain_id": trajectory.domain_id, "turn": diagnosis.turn, "failure": diagnosis.failure,
            "failed_criteria": sorted(failed), "critic_note": note, "prefix_messages": diagnosis.message,
            "corrected": None if corrected is None else dumps(corrected.to_row()),
            "verified": ok, "verdict": verdict,
            "nll": None if nll is None else round(nll, 6), "weight": decision.weight if decision else None,
            "kept": bool(decision and decision.kept), "reason": reason, "source": "rti"}


def _metrics(rollouts: list[Trajectory], rows: list[dict], accepted_ids: set[str], reference: list[float],
             reference_kind: str, threshold: float | None, seconds: dict[str, float]) -> dict:
    kept = [r for r in rows if r["kept"]]
    accepted_domains = {t.domain_id for t in rollouts if t.rollout_id in accepted_ids}
    accepted_tasks = {t.task_id for t in rollouts if t.rollout_id in accepted_ids}
    domains = {t.domain_id for t in rollouts}
    tasks = {t.task_id for t in rollouts}
    new_domains = sorted({r["domain_id"] for r in kept} - accepted_domains)
    new_tasks = sorted({r["task_id"] for r in kept} - accepted_tasks)
    failures = Counter(r["failure"] for r in rows)
    return {
        "intervention": "rti", "rollouts": len(rollouts), "failed": len(rows),
        "diagnosed": sum(r["turn"] is not None for r in rows),
        "by_failure": dict(sorted(failures.items())),
        "corrected": sum(r["corrected"] is not None for r in rows),
        "verified": sum(bool(r["verified"]) for r in rows), "kept": len(kept),
        "mean_kept_weight": round(sum(r["weight"] for r in kept) / len(kept), 6) if kept else None,
        "threshold": None if threshold is None else round(threshold, 6),
        "reference": {"of": reference_kind, "turns_scored": len(reference),
                      "median_nll": round(sorted(reference)[len(reference) // 2], 6) if reference else None},
        "domains": len(domains), "domains_without_accepted": len(domains - accepted_domains),
        "domains_made_trainable": len(new_domains), "tasks": len(tasks),
        "tasks_without_accepted": len(tasks - accepted_tasks), "tasks_made_trainable": len(new_tasks),
        "message": (f"{len(rows)} rejected rollouts: {sum(r['turn'] is not None for r in rows)} diagnosed, "
                    f"{sum(r['corrected'] is not None for r in rows)} corrected, "
                    f"{sum(bool(r['verified']) for r in rows)} verified, {len(kept)} kept after the shift "
                    f"filter; {len(new_domains)} domains and {len(new_tasks)} tasks without an accepted "
                    f"rollout became trainable"),
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
    }


def _domain_rows(rollouts: Iterable[Trajectory], rows: list[dict]) -> list[dict]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for t in rollouts:
        counts[t.domain_id]["rollouts"] += 1
    for r in rows:
        c = counts[r["domain_id"]]
        c["failed"] += 1
        c["diagnosed"] += r["turn"] is not None
        c["corrected"] += r["corrected"] is not None
        c["verified"] += bool(r["verified"])
        c["kept"] += r["kept"]
    return [{"domain_id": d, **{k: c[k] for k in DOMAIN_COLUMNS[1:]}} for d, c in sorted(counts.items())]


# ----------------------------------------------------------------------------- the stage

def _roles(params: Params, paths: Paths) -> Roles:
    config = params.intervention
    model = None
    if "model" in (config.critic, config.corrector):
        model = make_backend(params.backbone, paths.model(params.solver.start))
    label = ("rti/scripted" if config.corrector == "scripted"
             else f"rti/{params.backbone.name}/{params.solver.start}")
    return Roles(model if config.critic == "model" else None,
                 model if config.corrector == "model" else None, label)


def _accepted_ids(path: Path) -> set[str]:
    handle = open_table(path, schemas.TRAJECTORIES)
    return {r for batch in handle.iter_batches(columns=["rollout_id"]) for r in batch.column(0).to_pylist()}


def write_plots(paths: Paths, plots: dict[str, list[dict]]) -> None:
    write_tsv(paths.intervene_domains_plot, plots.get("domains", []), DOMAIN_COLUMNS)
    for name in ("accepted", "corrections", "threshold"):
        write_tsv(paths.intervene_nll_plot / f"{name}.tsv", plots.get(name, []), ["nll", "count"])


def intervene(params: Params, paths: Paths) -> StageReport:
    """Rollout-time intervention (``intervention=rti``); with ``none``, an empty table."""
    config = params.intervention
    if not config.enabled:
        write_table(paths.interventions_table, [], schemas.INTERVENTIONS)
        write_plots(paths, {})
        print("intervene: intervention=none: nothing corrected (rejection sampling alone)")
        return StageReport({"intervention": "none", "failed": 0, "kept": 0,
                            "message": "intervention=none: rejection sampling alone"},
                           config={"runtime": None, "scorer_runtime": None})
    policy = params.solver.start
    tasks = {t.task_id: t for t in admitted_tasks(paths, load_domains(paths.domains), "rft")}
    roles = _roles(params, paths)
    backbone, checkpoint = params.backbone, paths.model(policy)
    # what ran the critic or corrector (None: the scripted programs) and the shift filter's scorer
    scripted = roles.critic is None and roles.corrector is None
    resolved = {"runtime": None if scripted else model_runtime(backbone, "generate", checkpoint),
                "scorer_runtime": model_runtime(backbone, "generate", checkpoint, backend="transformers")}
    run_id = fingerprint(params.seed, config.model_dump(), backbone.name, resolved, backbone.max_context,
                         backbone.generation.model_dump(), params.scale.rollouts.model_dump())
    # which rollouts were rejected is the configured judge's say (the accepted table); what failed,
    # with evidence, is the agent judge's compiled checks'
    verdicts = paths.judgements / "agent.parquet"
    if not verdicts.exists():
        raise InterlockError("no verdicts of the agent judge; run `dvc repro judge`", file=str(verdicts))
    with releasing(roles.critic or roles.corrector), \
            AgentJudge(episode=EpisodeLimits.of(params.scale.rollouts)) as judge:
        rows, metrics, plots = run_intervention(
            paths.trajectories, verdicts, _accepted_ids(paths.accepted_table), tasks, config=config,
            roles=roles, checkpoint=checkpoint, scorer_dtype=resolved["scorer_runtime"]["resolved_dtype"],
            max_context=backbone.max_context,
            limits=RolloutLimits.of(params.scale.rollouts, backbone.generation),
            work=paths.interventions_work, run_id=run_id, batch_size=params.scale.rollouts.batch_size,
            judge=judge)
    write_table(paths.interventions_table, rows, schemas.INTERVENTIONS)
    write_plots(paths, plots)
    print(f"intervene: {metrics['message']}")
    report_bad_rows("intervene", metrics["bad_rows"])
    return StageReport(metrics, tables={"by_domain": plots["domains"]}, config=resolved)
