"""The rollouts stage as a library: starting policy x admitted task x attempt, resumable.

Finished episodes are flushed in small Parquet parts under a work folder named by the run's
fingerprint; a run that is killed and started again skips the rollouts its parts already hold,
so none are lost and none duplicated. The final table is sorted by rollout id, so it does not
depend on how often the run was interrupted (for deterministic backends, byte for byte).

:func:`scripted_rollouts` runs the scripted solvers in memory instead: rollouts with known
ground truth (oracle, noisy; adversaries, given their plans) for the judges' tests and benchmark.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from interlock.core import schemas
from interlock.core.backend import ChatBackend
from interlock.core.config import Params
from interlock.core.io import batched, iter_row_groups, read_rows, write_row_groups, write_table
from interlock.core.seeds import stable_seed
from interlock.rollout.engine import Episode, RolloutLimits, run_episodes
from interlock.rollout.scripted import PLANS, Plan, ScriptedBackend
from interlock.rollout.solvers import policy_label
from interlock.rollout.trajectory import Trajectory, own_trajectories
from interlock.synthesis.tasks import TaskContext


@dataclass(frozen=True)
class RolloutPlan:
    """What the ``rollouts`` stage records beside each episode it plays (its policy, its attempt
    and seed, its token counts within the limits it sampled under), so a stage that reads its table
    can check the labels of every row it did not write: the ones it cannot re-derive from the
    episode itself (:func:`~interlock.rollout.engine.reenacted_trajectory` re-derives the rest)."""

    policy: str
    attempts: int
    seed: int
    limits: RolloutLimits
    max_context: int

    @classmethod
    def of(cls, params: Params) -> RolloutPlan:
        config, solver = params.scale.rollouts, params.solver
        return cls(policy_label(solver.rollouts, params, solver.start), config.attempts, params.seed,
                   RolloutLimits.of(config, params.backbone.generation), params.backbone.max_context)

    def problem(self, trajectory: Trajectory) -> tuple[str, str] | None:
        """(field, reason) where the row is not what the plan records for its episode, or None."""
        t = trajectory
        if t.policy != self.policy:
            return "policy", f"{t.policy[:80]!r}, where the run's rollouts are by {self.policy!r}"
        if t.attempt >= self.attempts or t.rollout_id != f"{t.task_id}.a{t.attempt}":
            return "attempt", (f"attempt {t.attempt} as {t.rollout_id!r}, where the run plays attempts "
                               f"0-{self.attempts - 1} of each task as '<task>.a<attempt>'")
        if t.seed != episode_seed(self.seed, t.task_id, t.attempt):
            return "seed", f"{t.seed}, not the seed the run draws for this task and attempt"
        most = t.turns * (self.limits.max_new_tokens + 1)
        if t.generated_tokens > most:
            return "generated_tokens", f"{t.generated_tokens}, more than {t.turns} turns can sample ({most})"
        # a prompt may outgrow the window by one turn's observations before the episode ends
        longest = self.max_context + self.limits.max_new_tokens + 4 * self.limits.max_calls_per_turn * (
            self.limits.max_observation_chars + 64)
        if t.prompt_tokens > longest:
            return "prompt_tokens", f"{t.prompt_tokens}, more than any prompt of the run can hold ({longest})"
        return None


def episode_seed(seed: int, task_id: str, attempt: int) -> int:
    """The sampling seed of one task x attempt (every benchmark's episodes draw it the same way)."""
    return stable_seed(seed, "rollout", task_id, attempt) % 2**31


def plan_episodes(tasks: Iterator[TaskContext], *, policy: str, attempts: int,
                  seed: int) -> Iterator[Episode]:
    for task in tasks:
        for attempt in range(attempts):
            yield Episode(f"{task.task_id}.a{attempt}", task, task.domain.id, task.pack.pool, policy, attempt,
                          episode_seed(seed, task.task_id, attempt))


def scripted_rollouts(contexts: Iterable[TaskContext], policies: Iterable[str], *, seed: int, workdir: Path,
                      attempts: int = 1, limits: RolloutLimits | None = None, skip_effect: float = 0.3,
                      ignore_coupling: float = 0.5, plans: Mapping[str, Plan] = PLANS) -> list[Trajectory]:
    """Rollouts with known ground truth, in memory: every scripted policy of ``plans`` named in
    ``policies`` (``oracle``, ``noisy`` with the given rates; an adversary, with
    :data:`interlock.testing.adversaries.PLANS`) x task x attempt, through the rollout engine.

    Rollout ids are ``{policy}-{task_id}.a{attempt}`` (unique across policies); trajectories come
    back in plan order (policy, task, attempt). Episode workspaces live under ``workdir``."""
    contexts = list(contexts)
    trajectories = []
    for policy in policies:
        episodes = [dataclasses.replace(e, rollout_id=f"{policy}-{e.rollout_id}")
                    for e in plan_episodes(iter(contexts), policy=policy, attempts=attempts, seed=seed)]
        backend = ScriptedBackend(policy, seed=seed, skip_effect=skip_effect, ignore_coupling=ignore_coupling,
                                  plans=plans)
        order = {e.rollout_id: i for i, e in enumerate(episodes)}
        finished = run_episodes(episodes, backend, limits or RolloutLimits(), workdir)
        trajectories += sorted(finished, key=lambda t: order[t.rollout_id])
    return trajectories


def write_demonstrations(tasks: Iterable[TaskContext], out: Path, *, seed: int, workdir: Path) -> dict:
    """Reference demonstrations: the oracle through the rollout engine on ``tasks`` (the admitted
    ``demo`` pool), written like any rollouts (TRAJECTORIES schema, sorted by rollout id)."""
    demos = sorted(scripted_rollouts(tqdm(tasks, desc="demos", unit="task", dynamic_ncols=True),
                                     ["oracle"], seed=seed, workdir=workdir),
                   key=lambda t: t.rollout_id)
    with write_row_groups(out, schemas.TRAJECTORIES) as writer:
        for group in batched([t.to_row() for t in demos], 256):
            writer.write(group)
    return summarize(demos)


def run_rollouts(episodes: Iterator[Episode], backend: ChatBackend, limits: RolloutLimits, *, total: int,
                 out: Path, timings: Path, work: Path, run_id: str, batch_size: int = 16,
                 flush_every: int = 8, desc: str = "rollouts") -> dict:
    """Run every episode not already in the work folder's parts; then write the sorted table."""
    parts = work / run_id
    for stale in (p for p in work.glob("*") if p.name != run_id):
        shutil.rmtree(stale, ignore_errors=True)  # parts of another configuration
    parts.mkdir(parents=True, exist_ok=True)
    done = {row["rollout_id"] for part in sorted(parts.glob("part-*.parquet"))
            for group in iter_row_groups(part, schemas.TRAJECTORIES) for row in group}
    todo = (e for e in episodes if e.rollout_id not in done)
    with tqdm(total=total, initial=len(done), desc=desc, unit="episode", dynamic_ncols=True) as bar:
        finished = run_episodes(todo, backend, limits, parts / "workspaces", batch_size)
        for batch in batched(finished, flush_every):
            _flush(parts, batch)
            bar.update(len(batch))
    rows = sorted((row for part in sorted(parts.glob("part-*.parquet"))
                   for group in iter_row_groups(part, schemas.TRAJECTORIES) for row in group),
                  key=lambda row: row["rollout_id"])
    timed = {row["rollout_id"]: row for part in sorted(parts.glob("timing-*.parquet"))
             for row in read_rows(part, schemas.ROLLOUT_TIMINGS)}
    seconds = [timed[row["rollout_id"]] for row in rows if row["rollout_id"] in timed]
    with write_row_groups(out, schemas.TRAJECTORIES) as writer:
        for group in batched(rows, 256):
            writer.write(group)
    write_table(timings, seconds, schemas.ROLLOUT_TIMINGS)
    shutil.rmtree(work, ignore_errors=True)
    return summarize([t for group in own_trajectories(out) for t in group])


def _flush(parts: Path, batch: list[Trajectory]) -> None:
    """One part of trajectories, then its timings (a part killed in between only lacks timings)."""
    index = len(list(parts.glob("part-*.parquet")))
    write_table(parts / f"part-{index:05d}.parquet", [t.to_row() for t in batch], schemas.TRAJECTORIES)
    write_table(parts / f"timing-{index:05d}.parquet",
                [{"rollout_id": t.rollout_id, "seconds": round(t.seconds, 4)} for t in batch],
                schemas.ROLLOUT_TIMINGS)


def summarize(trajectories: list[Trajectory]) -> dict:
    """Counts for the metrics file: why episodes ended, turns, tool calls, tokens."""
    n = len(trajectories) or 1
    reasons: dict[str, int] = {}
    for t in trajectories:
        reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
    return {
        "episodes": len(trajectories),
        "finish_reasons": dict(sorted(reasons.items())),
        "mean_turns": round(sum(t.turns for t in trajectories) / n, 3),
        "mean_tool_calls": round(sum(t.tool_calls for t in trajectories) / n, 3),
        "invalid_call_rate": round(sum(t.invalid_calls for t in trajectories)
                                   / max(1, sum(t.tool_calls + t.invalid_calls for t in trajectories)), 4),
        "prompt_tokens": sum(t.prompt_tokens for t in trajectories),
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
    }
