"""Benchmarks for transfer evaluation: the adapter interface, and the built-in benchmark.

**The interface.** A benchmark is any object with the :class:`Benchmark` methods. It brings its
own tasks, its own episode execution (environment) and its own grading, and hands back standard
per-episode results; :func:`interlock.evaluation.run.run_evaluation` does the rest the same way for
every benchmark (which models, resuming, the output tables, metrics with paired bootstrap
intervals, plots). The contract:

- ``name``: a short identifier, unique among the benchmarks of a run: the ``pool`` column of the
  results and the key under ``pools`` in ``metrics/evaluate.json``;
- ``tasks()``: ``(task_id, domain_id)`` of every task (the domain is whatever groups tasks in the
  per-domain picture: a held-out domain, a benchmark category); task ids unique within it;
- ``identity()``: JSON-able data that changes whenever the tasks (or how they are graded) change;
  a finished run is reused on resume only while it is the same;
- ``episodes(policy, attempts, seed)``: every task ``attempts`` times as an
  :class:`~interlock.rollout.engine.Episode`: the task, the environment it opens in (one fresh
  :class:`~interlock.rollout.engine.Environment` per episode) and its limits. The evaluation loop
  owns the rollout (:func:`roll_out`): it plays them through the rollout engine with the model's
  backend, resumably, sets the rollout ids (:func:`rollout_id`, unique across models) and writes the
  trajectories and their timings;
- ``grade(trajectories)``: one :class:`~interlock.evaluation.metrics.EpisodeResult` per trajectory,
  in order (``EpisodeResult.of(trajectory, passed=..., score=..., criterion_pass_rate=...)``; leave
  ``primary_passed`` / ``completion_gap`` as None where the benchmark has no such notion, and they
  are left out of its metrics);
- ``close()``: release what grading held (sandbox workers, servers).

**Adding an external benchmark** (AutomationBench, JobBench and Harvey LAB are not available
offline; BFCL v4 multi-turn is in :mod:`interlock.evaluation.bfcl`, a pool per category): write a
class with these methods and register a factory ``(name, params, paths) -> Benchmark`` for its
pool name by one line in the entry-point group ``interlock.benchmarks``
(:data:`~interlock.core.registry.BENCHMARKS`); ``eval.pools`` then takes the name
(docs/authoring.md).

- *AutomationBench-style* (a business workflow with an end-state check): ``tasks()`` from its task
  files; ``episodes`` turns each starting state into a workspace and a request
  (``plan_episodes`` over task contexts, :class:`TaskContext`, whose ``pack`` has ``files`` and ``request``);
  ``grade`` runs its end-state checker on
  ``trajectory.final_files`` applied to the initial files: ``passed`` = the checker's verdict,
  ``score`` = ``criterion_pass_rate`` = the share of its sub-checks that hold.
- *JobBench-style* (deliverables scored by a weighted rubric): ``score`` = the rubric's weighted
  score scaled to [0, 1], ``passed`` = every required item, ``criteria`` = rubric items.
- *Harvey-LAB-style* (per-criterion grading of a work product): ``criterion_pass_rate`` = passing
  criteria / criteria, ``passed`` = all of them, ``score`` = their weighted share; the grader is
  the benchmark's own checks (a model grader would need its own, documented, backend).
- *BFCL v4 multi-turn* (:class:`~interlock.evaluation.bfcl.BfclMultiTurn`, one category per pool,
  read from the installed ``bfcl-eval``): ``tasks()`` = BFCL's entries (``domain_id`` = the API
  set, e.g. ``GorillaFileSystem+TwitterAPI``); each episode opens a
  :class:`~interlock.evaluation.bfcl.BfclEnvironment` (an
  :class:`~interlock.rollout.engine.Environment`: BFCL's docs as the tools, BFCL's user turns one
  by one, each parsed call executed against the episode's simulated API instances; BFCL's limits,
  not the run's, carried by its episodes), recording the
  same :class:`~interlock.rollout.trajectory.Trajectory` (the calls in ``messages``, the final API
  state in ``final_files`` as JSON); ``grade`` runs BFCL's own multi-turn checker: ``passed`` =
  BFCL's verdict, ``criterion_pass_rate`` = ``score`` = the share of turns passing before the
  first failing one, ``completion_gap`` = None.

**The built-in benchmark** (:class:`AdmittedPool`): the admitted tasks of one pool. ``benchmark``
holds only held-out domains, which never enter the synthesis pools, the demonstrations or RFT
(transfer); ``indist`` holds unseen tasks of the training domains, which nothing trains or tunes
on (whether RFT learned what it trained on); ``dev`` (training domains) is the only pool anything
may be tuned on. Episodes run through the rollout engine on the task workspaces; grading is the
agent judge's compiled checks (the ground truth; no model).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from interlock.core.backend import ChatBackend
from interlock.core.config import Params
from interlock.core.errors import InterlockError
from interlock.core.io import batched, dumps
from interlock.core.paths import Paths
from interlock.evaluation.metrics import EpisodeResult, grade_episode
from interlock.rollout.engine import Episode, EpisodeLimits, RolloutLimits
from interlock.rollout.runs import plan_episodes, run_rollouts
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.catalog import Catalog
from interlock.synthesis.tasks import TaskContext, admitted_tasks, load_domains

#: the built-in pools, and the split their domains must come from
BUILTIN_POOLS = {"dev": "train", "benchmark": "heldout", "indist": "train"}


@dataclass(frozen=True)
class RunSettings:
    """How every benchmark runs a model: attempts per task, seed, episode limits, batch size."""

    attempts: int
    seed: int
    limits: RolloutLimits
    batch_size: int = 16

    def identity(self) -> dict:
        return {"attempts": self.attempts, "seed": self.seed, "limits": dataclasses.asdict(self.limits),
                "batch_size": self.batch_size}


def rollout_id(model: str, task_id: str, attempt: int) -> str:
    """An evaluation rollout's id: prefixed by the model, so ids are unique across models."""
    return f"{model}-{task_id}.a{attempt}"


def roll_out(benchmark: Benchmark, model: str, policy: str, backend: ChatBackend, settings: RunSettings, *,
             out: Path, timings: Path, work: Path) -> None:
    """Play every episode of ``benchmark`` with ``backend`` through the rollout engine (resumable
    parts under ``work``); trajectories to ``out``, seconds to ``timings``. The benchmark supplies
    the episodes and grades them; the loop is the same for all."""
    episodes = (dataclasses.replace(e, rollout_id=rollout_id(model, e.task.task_id, e.attempt))
                for e in benchmark.episodes(policy, settings.attempts, settings.seed))
    run_rollouts(episodes, backend, settings.limits, total=len(benchmark.tasks()) * settings.attempts,
                 out=out, timings=timings, work=work, run_id="parts", batch_size=settings.batch_size)


class Benchmark(Protocol):
    """What an evaluation benchmark provides (see the module's docstring for the contract)."""

    name: str

    def tasks(self) -> list[tuple[str, str]]:
        """``(task_id, domain_id)`` of every task."""

    def identity(self) -> object:
        """JSON-able data that changes when the tasks or their grading change."""

    def episodes(self, policy: str, attempts: int, seed: int) -> Iterator[Episode]:
        """Every task x attempt as an episode: the task, the environment it opens in and its
        limits (the rollout id is the loop's to set, :func:`roll_out`)."""

    def grade(self, trajectories: Sequence[Trajectory]) -> list[EpisodeResult]:
        """One result per trajectory, in order."""

    def close(self) -> None:
        """Release what grading held."""


class BenchmarkFactory(Protocol):
    def __call__(self, name: str, params: Params, paths: Paths) -> Benchmark:
        """The benchmark an ``eval.pools`` entry names, for this run's parameters and artifacts."""


class AdmittedPool:
    """The built-in benchmark: the admitted tasks of one pool, graded by their compiled checks.

    ``contexts`` are the tasks (with packs, graphs and domains, which the scripted solvers use);
    :meth:`from_paths` reads them from the pipeline's artifacts. Grading uses the agent judge
    without a model (compiled checks in the sandbox); pass ``judge`` to share one, else one is
    started on first use and stopped by :meth:`close`."""

    def __init__(self, name: str, contexts: Sequence[TaskContext], *, judge=None, workers: int | None = None,
                 judge_batch: int = 64, episode: EpisodeLimits | None = None) -> None:
        self.name = name
        self.contexts = list(contexts)
        self.packs = {c.task_id: c.pack for c in self.contexts}
        if len(self.packs) != len(self.contexts):
            raise InterlockError("a task appears twice", item=name)
        self._judge, self._own_judge = judge, None
        self.workers, self.judge_batch = workers, judge_batch
        self.episode = episode  # the rules its episodes are played under (None: the engine's defaults)

    @classmethod
    def from_paths(cls, paths: Paths, catalog: Catalog, pool: str, **options) -> AdmittedPool:
        """The admitted tasks of ``pool`` (``dev``, ``benchmark`` or ``indist``); the domains of every
        task are checked to come from the pool's split (held-out for ``benchmark``)."""
        if pool not in BUILTIN_POOLS:
            raise InterlockError(f"unknown evaluation pool {pool!r}; choose from {', '.join(BUILTIN_POOLS)}",
                                 field="eval.pools")
        contexts = list(admitted_tasks(paths, catalog, pool))
        split = BUILTIN_POOLS[pool]
        wrong = sorted({c.domain.id for c in contexts if c.domain.split != split})
        if wrong:
            raise InterlockError(f"pool {pool!r} holds tasks of {len(wrong)} domain(s) outside the {split} "
                                 f"split, e.g. {wrong[0]}", file=str(paths.admitted),
                                 item=pool)
        return cls(pool, contexts, **options)

    def tasks(self) -> list[tuple[str, str]]:
        return [(c.task_id, c.pack.domain_id) for c in self.contexts]

    def identity(self) -> dict:
        digest = hashlib.sha256()
        for c in self.contexts:
            pack = c.pack
            digest.update(dumps([pack.task_id, pack.request, pack.files, pack.checks,
                                 [dataclasses.asdict(r) for r in pack.rubric]]).encode())
        return {"pool": self.name, "tasks": len(self.contexts), "packs": digest.hexdigest()}

    def episodes(self, policy: str, attempts: int, seed: int) -> Iterator[Episode]:
        return plan_episodes(iter(self.contexts), policy=policy, attempts=attempts, seed=seed)

    def grade(self, trajectories: Sequence[Trajectory]) -> list[EpisodeResult]:
        judge = self._judge or self._start_judge()
        results = []
        for chunk in batched(trajectories, self.judge_batch):
            missing = sorted({t.task_id for t in chunk} - set(self.packs))
            if missing:
                raise InterlockError(f"a trajectory of a task outside pool {self.name!r}: {missing[0]}")
            judgements = judge.judge([(t, self.packs[t.task_id]) for t in chunk])
            results += [grade_episode(t, self.packs[t.task_id].rubric, j.passed, j.verdicts)
                        for t, j in zip(chunk, judgements, strict=True)]
        return results

    def _start_judge(self):
        from interlock.judging.agent import AgentJudge

        rules = {"episode": self.episode} if self.episode else {}
        self._own_judge = self._judge = AgentJudge(workers=self.workers, **rules).__enter__()
        return self._judge

    def close(self) -> None:
        if self._own_judge is not None:
            self._own_judge.close()
            self._own_judge = self._judge = None


def admitted_pool(name: str, params: Params, paths: Paths) -> AdmittedPool:
    """The admitted tasks of a built-in pool, played under the run's episode rules."""
    return AdmittedPool.from_paths(paths, load_domains(paths.domains), name,
                                   episode=EpisodeLimits.of(params.scale.rollouts))
