"""Per-episode grades, and the metrics of a pool with confidence intervals: Wilson score
intervals for the rates of binary outcomes, percentile bootstrap for the other metrics and for
paired deltas.

**One episode** (:func:`grade_episode`), from the per-criterion verdicts of the task's compiled
checks (the agent judge's ground truth, never a model). The rubric's criterion kinds
(:func:`interlock.synthesis.packs.scripted_rubric`) are: ``primary`` (per decision: the decision register
holds the right outcome; mandatory, weight 2), ``grounding`` (it cites the deciding clause;
optional, weight 1), ``realization`` (per effect: the decision is carried into that record;
mandatory, weight 1), ``coupling`` (a joint constraint over decisions holds; mandatory, weight 2)
``no_collateral`` (the guard; mandatory, weight 1) and ``submit`` (the episode ended by submitting).

- ``passed``: every mandatory criterion passes (a criterion without a verdict fails);
- ``score``: the weighted score, passing weight / total weight, in [0, 1]; the guard's and the
  submit's weight count only beside a criterion of work that passes (:data:`IDLE_KINDS`), so an
  episode that changes nothing, or only submits, scores 0 (the guard alone gave it 1/12);
- ``criterion_pass_rate``: passing criteria / criteria;
- ``primary_passed``: the *primary deliverable* is right: every ``primary`` criterion passes
  (every decision recorded with the right outcome); null for a rubric without primary criteria;
- ``completion_gap``: the primary deliverable is right **and** at least one ``realization``
  criterion fails: a decision was made correctly but not carried through to every record that
  must reflect it. Null for a rubric with no primary or no realization criterion. Coupling,
  grounding and the guard play no part: a coupling violation changes some decision's outcome,
  so it shows as a primary failure (a decision error, not a completion gap).

**A pool** (:func:`summarize_pool`): a task's value is the mean over its attempts, and a metric is
the mean over tasks, so every task counts once however many criteria or attempts it has.

- ``pass_rate``, ``score``, ``criterion_pass_rate``, ``primary_pass_rate``;
- ``completion_gap_rate``: the share of all episodes with a completion gap (not conditional on
  the primary deliverable being right);
- ``mean_turns``, ``mean_tool_calls``; ``finish_reasons`` are counted (no interval), so a
  benchmark whose prompts may outgrow the context window (BFCL) says how many episodes ended
  there (``context``, a failure).

A metric whose column is null for some episode of a model (a benchmark without that notion) is
left out for that model.

**Intervals of one model's metric.** The rates of binary outcomes (:data:`BINARY_RATES`: pass
rate, primary pass rate, completion-gap rate; each episode passed or not) get a Wilson score
interval (:func:`wilson_interval`), which stays informative where a percentile bootstrap over few
binary outcomes collapses: 0 passes of 16 tasks give ``0.000 [0.000, 0.194]`` at 95%, where the
bootstrap gives ``[0.000, 0.000]`` (no resample of 16 failures holds a pass). It counts
:func:`effective_outcomes`: the binomial count with the variance the bootstrap's resampling gives
the rate (tasks, and training seeds), so with one attempt on one checkpoint it is exactly the
binomial "x of n tasks"; attempts and seeds count for more where they disagree within a task, for
less where whole checkpoints disagree, never for more than there are episodes. The
other metrics (weighted score, criterion pass rate, mean turns and tool calls: not binary per
episode) get a percentile bootstrap interval over tasks, each task's value averaged over the
model's training seeds; with several seeds, every replicate also draws the seeds' own component
(:func:`seed_variance`: how much more the seeds' means differ than their episodes' noise
explains) as a normal term, since two or three seeds are too few to resample. Each pool has one
matrix of replicate weights over its tasks (:class:`Resampling`),
drawn from ``stable_seed(seed, "evaluate", pool)`` and shared by every model and metric: intervals
are deterministic. A pool with at least two tasks in every domain (the held-out benchmark) is a
stratified sample and is resampled within domains, so its intervals and MDEs are those of a new
draw of tasks from the same domains (a claim about these domains, not about domains never seen);
a pool with a domain of one task is resampled as a whole. ``resampling`` in a pool's summary says
which. A metric every task gives the same value (a criterion pass rate of 0.111 on every task) has a
bootstrap interval of that one value: nothing varies to resample.

**Paired deltas** against the reference model keep the percentile bootstrap, paired: each
resample compares the models on the same tasks. Every model must have been run on the same tasks.
Where the two models agree on every task (both pass nothing, say), every replicate difference is 0
and the delta reads ``+0.000 [+0.000, +0.000]`` with an ``mde`` of 0: no difference observed and
none that resampling could show, not evidence that the models are equal to that precision (the two
models' own Wilson intervals say how much either rate could be). Where the reference passes
nothing, the delta's interval is the other model's own bootstrap interval, with the same collapse
at few passes.

**Minimum detectable effect**: every paired delta also carries ``mde``, the smallest true
difference the run would detect at its size: :func:`minimum_detectable_effect` of the delta's
bootstrap replicates, ``(z_{1-alpha/2} + z_power) * SE`` with SE their standard deviation (at
alpha 0.05 and power 0.8, about 2.80 SE). A delta whose interval covers 0 says "no difference
found"; its ``mde`` says how large a difference would have been found. :func:`tasks_needed`
turns it around: the held-out tasks a comparison needs to detect a given effect.

**Detectability per pool** (:func:`detectability`, ``summary.<pool>`` in ``metrics/evaluate.json``):
the pool's tasks and attempts and, per model against the reference, the pass-rate delta with its
``mde``, the per-task SD of the paired difference and the tasks the pool would need for an MDE of
:data:`TARGET_MDE`: whether a pool (the held-out ``benchmark``, the in-distribution ``indist``)
can show a difference at all.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil, sqrt
from statistics import NormalDist

import numpy as np

from interlock.core.errors import InterlockError
from interlock.core.seeds import stable_seed
from interlock.judging.verdicts import accepted
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.packs import Criterion

PRIMARY_KINDS = frozenset({"primary"})
REALIZATION_KINDS = frozenset({"realization"})
#: the criteria an episode that does no work passes as well (nothing damaged; submit called):
#: their weight is earned only beside a criterion of work that passes
IDLE_KINDS = frozenset({"no_collateral", "submit"})
#: metric -> the results column it averages
METRICS = {
    "pass_rate": "passed",
    "score": "score",
    "criterion_pass_rate": "criterion_pass_rate",
    "primary_pass_rate": "primary_passed",
    "completion_gap_rate": "completion_gap",
    "mean_turns": "turns",
    "mean_tool_calls": "tool_calls",
}
#: the metrics that are fractions in [0, 1] (the ones drawn together as bars)
RATES = ("pass_rate", "score", "criterion_pass_rate", "primary_pass_rate", "completion_gap_rate")
#: the rates of a binary outcome per episode: their intervals are Wilson score intervals
BINARY_RATES = ("pass_rate", "primary_pass_rate", "completion_gap_rate")
DIGITS = 6
#: the two-sided significance level and the power a minimum detectable effect is stated at
MDE_ALPHA, MDE_POWER = 0.05, 0.8
#: the minimum detectable effect a pool's :func:`detectability` counts the tasks needed for (10
#: points of pass rate)
TARGET_MDE = 0.10


@dataclass(frozen=True)
class EpisodeResult:
    """The standard result of one evaluated episode, whatever benchmark graded it.

    ``criteria`` is how many criteria (sub-checks) were graded; ``verdicts`` optionally holds the
    per-criterion rows (:data:`interlock.core.schemas.VERDICTS`) behind the grade."""

    rollout_id: str
    task_id: str
    domain_id: str
    attempt: int
    passed: bool
    score: float
    criterion_pass_rate: float
    criteria: int
    primary_passed: bool | None
    completion_gap: bool | None
    turns: int
    tool_calls: int
    finish_reason: str
    verdicts: tuple[dict, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, trajectory: Trajectory, *, passed: bool, score: float, criterion_pass_rate: float,
           criteria: int = 0, primary_passed: bool | None = None, completion_gap: bool | None = None,
           verdicts: Sequence[dict] = ()) -> EpisodeResult:
        """A result for ``trajectory`` (ids, turns, tool calls, finish reason taken from it)."""
        return cls(trajectory.rollout_id, trajectory.task_id, trajectory.domain_id, trajectory.attempt,
                   bool(passed), float(score), float(criterion_pass_rate), int(criteria),
                   primary_passed, completion_gap, trajectory.turns, trajectory.tool_calls,
                   trajectory.finish_reason, tuple(verdicts))

    def row(self, model: str, pool: str, seed: int | None = None) -> dict:
        """A row of :data:`interlock.core.schemas.EVAL_RESULTS` (``seed``: the training seed of a model
        with one checkpoint per seed, else None)."""
        return {"model": model, "seed": seed, "pool": pool, "rollout_id": self.rollout_id,
                "task_id": self.task_id, "domain_id": self.domain_id, "attempt": self.attempt,
                "passed": self.passed, "score": self.score, "criterion_pass_rate": self.criterion_pass_rate,
                "criteria": self.criteria, "primary_passed": self.primary_passed,
                "completion_gap": self.completion_gap, "turns": self.turns, "tool_calls": self.tool_calls,
                "finish_reason": self.finish_reason}


def grade_episode(trajectory: Trajectory, rubric: Sequence[Criterion], passed: Mapping[str, bool],
                  verdicts: Sequence[dict] = ()) -> EpisodeResult:
    """Grade one episode from its criteria's verdicts (``criterion_id -> passed``)."""
    ok = {c.criterion_id: bool(passed.get(c.criterion_id, False)) for c in rubric}
    primary = [ok[c.criterion_id] for c in rubric if c.kind in PRIMARY_KINDS]
    realization = [ok[c.criterion_id] for c in rubric if c.kind in REALIZATION_KINDS]
    primary_passed = all(primary) if primary else None
    gap = (primary_passed and not all(realization)) if primary and realization else None
    return EpisodeResult.of(
        trajectory,
        passed=bool(rubric) and accepted(ok, rubric),
        score=weighted_score(rubric, ok),
        criterion_pass_rate=sum(ok.values()) / len(ok) if ok else 0.0,
        criteria=len(rubric), primary_passed=primary_passed, completion_gap=gap, verdicts=verdicts)


def weighted_score(rubric: Sequence[Criterion], ok: Mapping[str, bool]) -> float:
    """Passing weight over total weight, in [0, 1], where the weight of the criteria an idle
    episode passes too (:data:`IDLE_KINDS`) counts only if some other criterion passes: doing
    nothing earns nothing."""
    total = sum(c.weight for c in rubric)
    worked = any(ok[c.criterion_id] for c in rubric if c.kind not in IDLE_KINDS)
    earned = sum(c.weight for c in rubric if ok[c.criterion_id] and (worked or c.kind not in IDLE_KINDS))
    return earned / total if total else 0.0


# ----------------------------------------------------------------------------- bootstrap

@dataclass(frozen=True)
class Resampling:
    """How the bootstrap redraws a pool's tasks: ``strata`` (each a tuple of task positions, in the
    pool's task order) and ``draws``, the tasks drawn with replacement from each stratum per
    replicate. A replicate's value is each stratum's mean over its drawn tasks, weighted by the
    stratum's share of the pool (:meth:`weights`).

    A pool whose every domain holds at least two tasks is a stratified sample (the benchmark:
    the same count of tasks in each held-out domain), so it is resampled **within domains**
    (:meth:`by_domain`): a new draw of the pool has new tasks of the same domains, and the
    spread between domains, which no such draw changes, is no part of its error. Each domain
    draws one task fewer than it has (McCarthy and Snowden, 1985): with few tasks per domain the
    plain bootstrap understates a stratum mean's variance by ``(n - 1) / n``; with ``n - 1``
    draws it is unbiased. A pool with a domain of one task (``indist``: one task per training
    domain) cannot measure the spread within a domain, and is resampled as one stratum of all its
    tasks, ``T`` draws (the plain bootstrap)."""

    strata: tuple[tuple[int, ...], ...]
    draws: tuple[int, ...]

    @classmethod
    def simple(cls, tasks: int) -> Resampling:
        return cls((tuple(range(tasks)),), (tasks,))

    @classmethod
    def by_domain(cls, domains: Sequence[str]) -> Resampling:
        """The design of a pool whose tasks (in pool order) are in ``domains``."""
        groups: dict[str, list[int]] = defaultdict(list)
        for position, domain in enumerate(domains):
            groups[domain].append(position)
        if len(groups) < 2 or min(len(g) for g in groups.values()) < 2:
            return cls.simple(len(domains))
        strata = tuple(tuple(groups[d]) for d in sorted(groups))
        return cls(strata, tuple(len(s) - 1 for s in strata))

    @property
    def tasks(self) -> int:
        return sum(len(s) for s in self.strata)

    @property
    def stratified(self) -> bool:
        return len(self.strata) > 1

    def describe(self) -> dict:
        """What ``metrics/evaluate.json`` says of the design."""
        return {"by": "domain" if self.stratified else "task", "strata": len(self.strata)}

    def weights(self, resamples: int, seed: int, pool: str) -> np.ndarray:
        """``resamples`` x ``tasks`` replicate weights (each row sums to 1: a task drawn k times in
        a stratum of share w with d draws weighs k w / d), seeded by (seed, pool); every model of a
        pool shares them, so deltas are paired by task. The one-stratum design draws the plain
        bootstrap's task indices."""
        rng = np.random.default_rng(stable_seed(seed, "evaluate", pool))
        out = np.zeros((resamples, self.tasks))
        if not self.tasks:
            return out
        rows = np.arange(resamples)[:, None]
        for stratum, draws in zip(self.strata, self.draws, strict=True):
            picked = np.asarray(stratum)[rng.integers(0, len(stratum), size=(resamples, draws))]
            np.add.at(out, (np.broadcast_to(rows, picked.shape), picked), len(stratum) / self.tasks / draws)
        return out

    def task_sd(self, values: np.ndarray) -> float:
        """The per-task standard deviation that sizes a comparison under this design: of per-task
        ``values`` (a task vector), the square root of the share-weighted mean of each stratum's
        sample variance (``ddof=1``); for one stratum, the plain SD. The design's variance of a
        pool mean is this squared over the tasks."""
        within = [len(s) * float(np.var(values[list(s)], ddof=1)) for s in self.strata]
        return sqrt(sum(within) / self.tasks)


def seed_variance(values: np.ndarray) -> float:
    """The variance a model's mean over its training seeds (``values``: seed x task) owes to the
    seeds themselves, beyond its episodes' own noise: ``max(0, var_s(m) - MS_E / T) / S``, with
    ``m`` each seed's mean over the ``T`` tasks (sample variance, ``ddof=1``) and ``MS_E`` the
    seed x task residual mean square (what the episodes vary by within a task). The moment
    estimator of the seed component of a two-way random-effects model (seed and task effects
    plus noise), divided by the ``S`` seeds averaged; 0 with one seed. Resampling the seeds with
    replacement instead counts the episodes' noise twice (once in each seed's mean, once in each
    task's), and with two seeds overstated a pass rate's standard error by a fifth to two fifths
    where the seeds did not differ (tests/test_evaluation.py simulates it); the clamp at 0 still
    overstates it there, less (two seeds give the seed component one degree of freedom)."""
    seeds, tasks = values.shape
    if seeds < 2 or tasks < 2:
        return 0.0
    by_seed, by_task, grand = values.mean(axis=1), values.mean(axis=0), values.mean()
    residual = values - by_seed[:, None] - by_task[None, :] + grand
    mean_square = float((residual ** 2).sum()) / ((seeds - 1) * (tasks - 1))
    return max(0.0, float(by_seed.var(ddof=1)) - mean_square / tasks) / seeds


def seed_noise(resamples: int, seed: int, pool: str, model: str) -> np.ndarray:
    """``resamples`` standard normal numbers, one draw per model and pool: each replicate's share
    of the seed component (:func:`seed_variance`), drawn independently for each model."""
    rng = np.random.default_rng(stable_seed(seed, "evaluate", pool, model, "seeds"))
    return rng.standard_normal(resamples)


def _replicates(values: np.ndarray, weights: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
    """The mean of each bootstrap replicate (``values``: seed x task): the tasks' means over the
    seeds, weighted by the replicate's :meth:`Resampling.weights`, plus the replicate's ``noise``
    times the seed component's standard deviation (:func:`seed_variance`; None: none drawn)."""
    replicates = weights @ values.mean(axis=0)
    spread = seed_variance(values)
    return replicates if noise is None or not spread else replicates + noise * sqrt(spread)


def _interval(point: float, replicates: np.ndarray, confidence: float) -> dict:
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return {"value": _number(point), "low": _number(low), "high": _number(high)}


def estimate(values: np.ndarray, weights: np.ndarray, confidence: float,
             noise: np.ndarray | None = None) -> dict:
    """Mean of per-task ``values`` (a task vector, or seed x task) and its percentile bootstrap
    interval over tasks (``weights``: :meth:`Resampling.weights`) and, with several training
    seeds, their component too (``noise``: :func:`seed_noise`)."""
    values = np.atleast_2d(values)
    if not values.shape[1]:
        return {"value": None, "low": None, "high": None}
    return _interval(values.mean(), _replicates(values, weights, noise), confidence)


def paired_delta(values: np.ndarray, reference: np.ndarray, weights: np.ndarray, confidence: float,
                 noise: np.ndarray | None = None, reference_noise: np.ndarray | None = None) -> dict:
    """Mean of ``values - reference`` (same task order), its interval, paired by task (each side's
    seed component drawn independently: ``noise``, ``reference_noise``), and ``mde``: the minimum
    detectable effect at this size (the replicates' :func:`minimum_detectable_effect`)."""
    values, reference = np.atleast_2d(values), np.atleast_2d(reference)
    if not values.shape[1]:
        return {"value": None, "low": None, "high": None, "mde": None}
    replicates = _replicates(values, weights, noise) - _replicates(reference, weights, reference_noise)
    return {**_interval(values.mean() - reference.mean(), replicates, confidence),
            "mde": _number(minimum_detectable_effect(replicates))}


# ----------------------------------------------------------------------------- Wilson

def wilson_interval(rate: float, outcomes: float, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``rate`` of ``outcomes`` independent binary
    outcomes (a real number where it is an effective count, :func:`effective_outcomes`):
    ``(p + z²/2n ± z * sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``, ``z`` the two-sided normal quantile
    of ``confidence``. Wilson (1927); Brown, Cai and DasGupta (2001) recommend it for small ``n``:
    it is never empty at 0 or 1 and never leaves [0, 1]."""
    if not 0 <= rate <= 1 or outcomes <= 0 or not 0 < confidence < 1:
        raise ValueError(f"need 0 <= rate <= 1, outcomes > 0 and 0 < confidence < 1, got {rate}, "
                         f"{outcomes} and {confidence}")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    shrink = 1 + z * z / outcomes
    centre = (rate + z * z / (2 * outcomes)) / shrink
    half = z * sqrt(rate * (1 - rate) / outcomes + z * z / (4 * outcomes * outcomes)) / shrink
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_outcomes(values: np.ndarray, episodes: int, design: Resampling | None = None) -> float:
    """How many independent binary outcomes a rate over ``values`` (seed x task: each task's
    share of passing episodes per training seed) is worth: ``p(1-p) / V``, with ``p`` the rate and
    ``V`` the variance of the rate under the bootstrap's own replicates (:func:`_replicates`:
    ``design``, the plain one where None), in closed form:
    ``V = seed_variance + sum_h (w_h^2 / d_h) var_h(mu)`` over the design's strata ``h`` (share
    ``w_h`` of the tasks, ``d_h`` draws; ``mu``: a task's mean over seeds; population variance
    within the stratum). This is the effective sample size of Korn and Graubard (1998), the
    binomial count that would have the same variance, capped at ``episodes`` (a design effect
    below 1 is not credited). One attempt on one checkpoint, plain design: exactly ``T``, so the
    interval is the binomial "x of T tasks". Attempts and seeds that agree within each task add
    nothing; seeds that disagree as a whole (one checkpoint passes more everywhere) count for less
    than the tasks. Where every episode passed, or none did, nothing varies to tell: ``T``."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    tasks = values.shape[1]
    design = design or Resampling.simple(tasks)
    rate = float(values.mean())
    if rate <= 0.0 or rate >= 1.0:
        return float(tasks)
    by_task = values.mean(axis=0)
    variance = seed_variance(values) + sum(
        (len(stratum) / tasks) ** 2 / draws * float(by_task[list(stratum)].var())
        for stratum, draws in zip(design.strata, design.draws, strict=True))
    most = float(max(episodes, tasks))
    return most if variance <= 0.0 else min(most, rate * (1 - rate) / variance)


def rate_estimate(values: np.ndarray, episodes: int, confidence: float,
                  design: Resampling | None = None) -> dict:
    """Mean of per-task ``values`` of a binary outcome (seed x task) and its Wilson interval over
    :func:`effective_outcomes` (``episodes``: how many episodes the values are the shares of;
    ``design``: how the pool is resampled)."""
    values = np.atleast_2d(values)
    if not values.shape[1]:
        return {"value": None, "low": None, "high": None}
    rate = float(values.mean())
    low, high = wilson_interval(min(1.0, max(0.0, rate)), effective_outcomes(values, episodes, design),
                                confidence)
    return {"value": _number(rate), "low": _number(low), "high": _number(high)}


# ----------------------------------------------------------------------------- power

def detectable_multiplier(alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> float:
    """``z_{1-alpha/2} + z_power``: how many standard errors a true difference must span to be
    detected by a two-sided test at level ``alpha`` with probability ``power`` (about 2.80 at
    0.05 and 0.8)."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def minimum_detectable_effect(replicates: Sequence[float] | np.ndarray, alpha: float = MDE_ALPHA,
                              power: float = MDE_POWER) -> float:
    """The minimum detectable effect of a comparison from its bootstrap replicates of the
    difference: ``(z_{1-alpha/2} + z_power) * SE``, SE the replicates' standard deviation
    (``ddof=1``; 0 for fewer than two replicates). The normal approximation: a true difference
    this large lands outside a two-sided ``1 - alpha`` interval around 0 with probability
    ``power``. It is the difference the run's size could resolve, whatever difference it found."""
    replicates = np.asarray(replicates, dtype=float)
    se = float(np.std(replicates, ddof=1)) if replicates.size > 1 else 0.0
    return detectable_multiplier(alpha, power) * se


def tasks_needed(per_task_sd: float, effect: float, attempts: int = 1, *, within_share: float = 1.0,
                 alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> int:
    """How many held-out tasks a paired comparison needs to detect a true difference of
    ``effect`` (e.g. 0.04: the paper's +4 points of pass rate) with ``attempts`` attempts per task:
    ``ceil(((z_{1-alpha/2} + z_power) * sd_k / effect) ** 2)``, the sample size at which the
    :func:`minimum_detectable_effect` (SE = sd_k / sqrt(tasks)) falls to ``effect``.

    ``per_task_sd``: the standard deviation over tasks of the per-task paired difference (one
    model's task value minus the other's) **with one attempt per task**, as a pilot run measures
    it. Assumption on attempts: that variance splits into a within-task part (attempt-to-attempt
    sampling noise, a ``within_share`` of it) and a between-task part (tasks differ in how much
    one model beats the other). Averaging ``attempts`` independent attempts divides only the
    within-task part: ``sd_k**2 = per_task_sd**2 * (1 - within_share + within_share / attempts)``.
    The default ``within_share=1`` (all noise is sampling noise, so tasks x attempts is what
    counts) is the optimistic bound; ``within_share=0`` (attempts buy nothing) the pessimistic one.
    """
    if effect <= 0 or per_task_sd < 0:
        raise ValueError(f"need effect > 0 and per_task_sd >= 0, got {effect} and {per_task_sd}")
    if attempts < 1 or not 0 <= within_share <= 1:
        raise ValueError(f"need attempts >= 1 and 0 <= within_share <= 1, got {attempts} and {within_share}")
    sd = per_task_sd * sqrt(1 - within_share + within_share / attempts)
    # round away float noise before ceil, so an exact square is not bumped up by one
    return max(1, ceil(round((detectable_multiplier(alpha, power) * sd / effect) ** 2, 9)))


def _number(value: float) -> float:
    return round(float(value), DIGITS) + 0.0  # + 0.0: never -0.0


# ----------------------------------------------------------------------------- aggregation

def task_values(rows: Sequence[dict], column: str, tasks: Sequence[str]) -> np.ndarray | None:
    """Per training seed and task (seed x task, tasks in ``tasks`` order) the mean of ``column``
    over its episodes; None if any is null. A model with one checkpoint has one seed row."""
    sums: dict[tuple, float] = defaultdict(float)
    counts: Counter = Counter()
    for row in rows:
        if row[column] is None:
            return None
        key = (row.get("seed"), row["task_id"])
        sums[key] += float(row[column])
        counts[key] += 1
    seeds = sorted({seed for seed, _ in counts}, key=lambda s: (s is not None, s))
    for seed in seeds:
        missing = [t for t in tasks if (seed, t) not in counts]
        if missing:
            raise InterlockError(f"seed {seed} of model {rows[0]['model']!r} has no episode of task "
                                 f"{missing[0]}", field="seed")
    return np.array([[sums[s, t] / counts[s, t] for t in tasks] for s in seeds] or [[]], dtype=float)


def pool_tasks(rows_by_model: Mapping[str, Sequence[dict]]) -> list[str]:
    """The sorted task ids of a pool: those of the reference model (the first)."""
    return sorted({r["task_id"] for r in next(iter(rows_by_model.values()))})


def pool_design(rows: Sequence[dict], tasks: Sequence[str]) -> Resampling:
    """How a pool of ``tasks`` (in this order) is resampled: by domain where every domain holds
    two tasks or more (:meth:`Resampling.by_domain`), from the domain of each task in ``rows``."""
    domains = {r["task_id"]: r["domain_id"] for r in rows}
    return Resampling.by_domain([domains[t] for t in tasks])


def summarize_pool(rows_by_model: Mapping[str, Sequence[dict]], *, pool: str, seed: int, resamples: int,
                   confidence: float) -> dict:
    """Metrics of every model on one pool, with intervals, and deltas against the first model.

    ``rows_by_model``: model -> its result rows (:data:`~interlock.core.schemas.EVAL_RESULTS` columns),
    in the order the models were configured."""
    models = list(rows_by_model)
    if not models:
        raise InterlockError("no models to summarize", item=pool)
    reference = models[0]
    tasks = pool_tasks(rows_by_model)
    for model in models[1:]:
        own = {r["task_id"] for r in rows_by_model[model]}
        if own != set(tasks):
            raise InterlockError(f"model {model!r} was run on {len(own)} task(s) of pool {pool!r}, "
                                 f"{reference!r} on {len(tasks)}: a paired comparison needs the same tasks",
                                 item=pool, field=model)
    design = pool_design(rows_by_model[reference], tasks)
    weights = design.weights(resamples, seed, pool)
    values = {m: {metric: task_values(rows_by_model[m], column, tasks) for metric, column in METRICS.items()}
              for m in models}
    seeds = {m: len({r.get("seed") for r in rows_by_model[m]}) or 1 for m in models}
    noise = {m: seed_noise(resamples, seed, pool, m) for m in models}
    summary: dict = {"tasks": len(tasks),
                     "domains": len({r["domain_id"] for r in rows_by_model[reference]}),
                     "resampling": design.describe(), "models": {}, "deltas": {}}
    for model in models:
        rows = rows_by_model[model]
        entry: dict = {"episodes": len(rows), "seeds": seeds[model]}
        entry.update({metric: rate_estimate(v, len(rows), confidence, design) if metric in BINARY_RATES
                      else estimate(v, weights, confidence, noise[model])
                      for metric, v in values[model].items() if v is not None})
        entry["finish_reasons"] = dict(sorted(Counter(r["finish_reason"] for r in rows).items()))
        summary["models"][model] = entry
    for model in models[1:]:
        summary["deltas"][model] = {
            metric: paired_delta(v, values[reference][metric], weights, confidence, noise[model],
                                 noise[reference])
            for metric, v in values[model].items() if v is not None and values[reference][metric] is not None}
    return summary


def detectability(rows_by_model: Mapping[str, Sequence[dict]], summary: Mapping, attempts: int) -> dict:
    """How large a pass-rate difference one pool can show: its ``tasks`` and ``attempts``, and under
    ``deltas``, per model but the reference (the first), its pass-rate delta against the reference
    from the pool's :func:`summarize_pool` ``summary`` (``value``, ``low``, ``high``, ``mde``), with

    - ``per_task_sd``: the standard deviation over tasks (``ddof=1``; within domains, where the
      pool is resampled by domain: :meth:`Resampling.task_sd`) of the per-task paired
      difference, each task's pass rate (over its attempts and, for a model with several seeds,
      its seeds) minus the reference's;
    - ``tasks_needed``: the tasks the pool would need for an MDE of :data:`TARGET_MDE`
      (:func:`tasks_needed` of that SD, at the pool's own attempts, at which it was measured,
      spread over the same domains; the spread between seeds aside, which tasks do not divide).

    Both are None for a pool of fewer than two tasks (no spread to measure). Where the two models
    agree on every task (both pass nothing, say) the SD is 0 and ``tasks_needed`` 1, like an
    ``mde`` of 0: the pool measured no spread to size a comparison by, not that one task would do."""
    tasks = pool_tasks(rows_by_model)
    reference, *models = rows_by_model
    design = pool_design(rows_by_model[reference], tasks)

    def pass_rates(model: str) -> np.ndarray:  # per task, over its attempts and seeds
        return task_values(rows_by_model[model], "passed", tasks).mean(axis=0)

    out: dict = {"tasks": summary["tasks"], "attempts": attempts, "resampling": design.describe(),
                 "target_mde": TARGET_MDE, "deltas": {}}
    for model in models:
        delta = summary["deltas"][model]["pass_rate"]
        spread = design.task_sd(pass_rates(model) - pass_rates(reference)) if len(tasks) > 1 else None
        out["deltas"][model] = {key: delta[key] for key in ("value", "low", "high", "mde")} | {
            "per_task_sd": None if spread is None else _number(spread),
            "tasks_needed": None if spread is None else tasks_needed(spread, TARGET_MDE)}
    return out


def domain_rows(rows_by_model: Mapping[str, Sequence[dict]], pool: str) -> list[dict]:
    """Pass rate per model x domain of one pool (point estimates), for the per-domain picture."""
    out = []
    for model, rows in rows_by_model.items():
        by_domain: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            by_domain[row["domain_id"]].append(row)
        for domain, group in sorted(by_domain.items()):
            out.append({"label": f"{pool} {domain} {model}", "model": model, "pool": pool,
                        "domain_id": domain, "tasks": len({r["task_id"] for r in group}),
                        "episodes": len(group),
                        "pass_rate": _number(sum(r["passed"] for r in group) / len(group))})
    return out


def model_rows(pool: str, summary: dict) -> list[dict]:
    """One row per model x rate metric of one pool's summary: value, low, high (for bars)."""
    return [{"label": f"{pool} {metric} {model}", "model": model, "pool": pool, "metric": metric,
             **entry[metric]}
            for metric in RATES for model, entry in summary["models"].items() if metric in entry]


def table_rows(pool: str, summary: dict) -> list[dict]:
    """One row per model of one pool's summary, every metric and its delta flattened into columns
    (the reference model's deltas are 0: it is compared with itself; its ``delta_*_mde`` is None,
    as it is no comparison), and how many episodes ended for the context window (0 when none did:
    the count is shown even where it is nothing)."""
    rows = []
    reference = next(iter(summary["models"]), None)
    for model, entry in summary["models"].items():
        row: dict = {"model": model, "pool": pool, "tasks": summary["tasks"], "episodes": entry["episodes"],
                     "context_failures": entry["finish_reasons"].get("context", 0)}
        for metric in METRICS:
            if metric not in entry:
                continue
            row.update({metric: entry[metric]["value"], f"{metric}_low": entry[metric]["low"],
                        f"{metric}_high": entry[metric]["high"]})
            delta = ({"value": 0.0, "low": 0.0, "high": 0.0, "mde": None} if model == reference
                     else summary["deltas"][model].get(metric))
            if delta is not None:
                row.update({f"delta_{metric}": delta["value"], f"delta_{metric}_low": delta["low"],
                            f"delta_{metric}_high": delta["high"], f"delta_{metric}_mde": delta.get("mde")})
        rows.append(row)
    return rows


#: the transfer metrics a comparison of runs leads with
HEADLINE = ("pass_rate", "score", "criterion_pass_rate", "completion_gap_rate")


def headline(metrics: Mapping) -> dict:
    """The comparison of runs at a glance (what ``dvc exp show`` lists first): per pool and model,
    the point value of each headline metric the pool has, and each model's pass-rate delta against
    the reference model (the intervals are in the full metrics)."""
    out: dict = {}
    for pool, summary in metrics["pools"].items():
        for model, entry in summary["models"].items():
            row = {metric: entry[metric]["value"] for metric in HEADLINE if metric in entry}
            delta = summary["deltas"].get(model, {}).get("pass_rate")
            if delta is not None:
                row["pass_rate_delta"] = delta["value"]
            out.setdefault(pool, {})[model] = row
    return out
