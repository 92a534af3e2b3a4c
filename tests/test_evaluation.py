"""Transfer evaluation on rollouts with known truth.

Scripted solvers stand in for the evaluated models (the oracle passes everything; a noisy solver
that skips every effect has the primary deliverable right and a completion gap on every task;
claiming success without work gets nothing right), so every metric is known; the rollouts go
through the real engine and the agent judge's compiled checks grade them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from interlock.core import schemas
from interlock.core.errors import InterlockError
from interlock.core.io import read_rows
from interlock.evaluation.benchmarks import AdmittedPool, RunSettings, rollout_id
from interlock.evaluation.metrics import (
    TARGET_MDE,
    EpisodeResult,
    Resampling,
    _replicates,
    detectability,
    detectable_multiplier,
    effective_outcomes,
    grade_episode,
    minimum_detectable_effect,
    paired_delta,
    seed_noise,
    summarize_pool,
    table_rows,
    task_values,
    tasks_needed,
    wilson_interval,
)
from interlock.evaluation.run import Model, checkpoint_models, run_evaluation
from interlock.rollout.engine import RolloutLimits
from interlock.rollout.runs import plan_episodes
from interlock.rollout.scripted import ScriptedBackend
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.packs import Criterion
from interlock.testing.adversaries import PLANS

from helpers.config import defaults

SETTINGS = RunSettings(attempts=2, seed=11, limits=RolloutLimits(max_turns=12), batch_size=4)
TABLES = ("trajectories.parquet", "results.parquet", "verdicts.parquet")


def scripted(name: str, policy: str | None = None, **rates: float) -> Model:
    return Model(name, lambda: ScriptedBackend(policy or name, seed=3, plans=PLANS, **rates))


MODELS = (scripted("oracle"), scripted("noisy", skip_effect=1.0, ignore_coupling=0.0), scripted("claim_only"))


def evaluate(contexts, judge, root: Path, models=MODELS, extra=(), resamples: int = 200):
    pool = AdmittedPool("benchmark", contexts, judge=judge)
    return run_evaluation(list(models), [pool, *extra], SETTINGS, out=root / "evaluation",
                          timings=root / "timings.parquet", work=root / "work", resamples=resamples,
                          confidence=0.9, progress=False)


@pytest.fixture(scope="module")
def evaluated(contexts, agent_judge, tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluation")
    return root, evaluate(contexts, agent_judge, root)


# ----------------------------------------------------------------------------- known truth

def test_metrics_match_the_scripted_truth(evaluated, contexts) -> None:
    _, evaluation = evaluated
    pool = evaluation.metrics["pools"]["benchmark"]
    assert pool["tasks"] == len(contexts)
    oracle, noisy, claim = (pool["models"][m] for m in ("oracle", "noisy", "claim_only"))
    for metric in ("pass_rate", "score", "criterion_pass_rate", "primary_pass_rate"):
        assert oracle[metric]["value"] == 1.0
    assert oracle["completion_gap_rate"]["value"] == 0.0
    assert oracle["finish_reasons"] == {"submitted": len(contexts) * SETTINGS.attempts}
    # every effect skipped, every decision right: no pass, a completion gap on every episode
    assert noisy["pass_rate"]["value"] == 0.0 and noisy["primary_pass_rate"]["value"] == 1.0
    assert noisy["completion_gap_rate"]["value"] == 1.0
    assert 0 < noisy["score"]["value"] < 1 and 0 < noisy["criterion_pass_rate"]["value"] < 1
    # nothing right: no pass and no completion gap (the primary deliverable is wrong too)
    assert claim["pass_rate"]["value"] == 0.0 and claim["completion_gap_rate"]["value"] == 0.0
    assert claim["score"]["value"] < noisy["score"]["value"]
    assert pool["deltas"]["noisy"]["pass_rate"] == {"value": -1.0, "low": -1.0, "high": -1.0, "mde": 0.0}
    assert pool["deltas"]["noisy"]["completion_gap_rate"]["value"] == 1.0
    assert set(pool["deltas"]) == {"noisy", "claim_only"}  # against the first model only
    # the pool's detectability: the oracle passes every task and the others none, so the paired
    # difference is -1 on every task, with no spread: one task would show it
    summary = evaluation.metrics["summary"]["benchmark"]
    assert (summary["tasks"], summary["attempts"], set(summary["deltas"])) == (
        len(contexts), SETTINGS.attempts, {"noisy", "claim_only"})
    assert summary["deltas"]["noisy"] == {"value": -1.0, "low": -1.0, "high": -1.0, "mde": 0.0,
                                          "per_task_sd": 0.0, "tasks_needed": 1}


def test_every_interval_holds_its_point_estimate(evaluated) -> None:
    _, evaluation = evaluated
    pool = evaluation.metrics["pools"]["benchmark"]
    estimates = [e for m in pool["models"].values() for e in m.values() if isinstance(e, dict) and "low" in e]
    estimates += [e for d in pool["deltas"].values() for e in d.values()]
    assert len(estimates) > 20
    for e in estimates:
        assert e["low"] <= e["value"] <= e["high"], e


def test_outputs_are_written_aligned_with_model_prefixed_ids(evaluated, contexts) -> None:
    root, evaluation = evaluated
    out = root / "evaluation"
    assert sorted(p.name for p in out.iterdir()) == sorted(TABLES)
    trajectories = read_rows(out / "trajectories.parquet", schemas.TRAJECTORIES)
    results = read_rows(out / "results.parquet", schemas.EVAL_RESULTS)
    episodes = len(MODELS) * len(contexts) * SETTINGS.attempts
    assert len(trajectories) == len(results) == episodes == len(evaluation.results)
    assert [t["rollout_id"] for t in trajectories] == [r["rollout_id"] for r in results]
    assert len({r["rollout_id"] for r in results}) == episodes
    for r in results:
        assert r["rollout_id"] == rollout_id(r["model"], r["task_id"], r["attempt"])
        assert r["pool"] == "benchmark"
    verdicts = read_rows(out / "verdicts.parquet", schemas.VERDICTS)
    assert len(verdicts) == len(MODELS) * SETTINGS.attempts * sum(len(c.pack.rubric) for c in contexts)
    assert {v["judge"] for v in verdicts} == {"agent"}
    timings = read_rows(root / "timings.parquet", schemas.ROLLOUT_TIMINGS)
    assert {t["rollout_id"] for t in timings} == {r["rollout_id"] for r in results}
    assert not (root / "work").exists()
    domains = {row["domain_id"] for row in evaluation.domain_rows}
    assert domains == {c.pack.domain_id for c in contexts}
    assert {row["pass_rate"] for row in evaluation.domain_rows if row["model"] == "oracle"} == {1.0}
    assert {(r["model"], r["metric"]) for r in evaluation.model_rows} >= {("noisy", "completion_gap_rate")}
    table = {row["model"]: row for row in evaluation.table_rows}
    assert table["oracle"]["delta_pass_rate"] == 0.0 and table["noisy"]["delta_pass_rate"] == -1.0


def test_the_same_parameters_give_the_same_bytes(evaluated, contexts, agent_judge, tmp_path) -> None:
    root, first = evaluated
    again = evaluate(contexts, agent_judge, tmp_path)
    for name in TABLES:
        assert (tmp_path / "evaluation" / name).read_bytes() == (root / "evaluation" / name).read_bytes()
    assert again.metrics == first.metrics


def test_a_killed_evaluation_resumes_without_reloading_finished_models(contexts, agent_judge,
                                                                        tmp_path) -> None:
    loads: list[str] = []

    class Killed(Exception):
        pass

    def counted(name: str, fail: bool = False) -> Model:
        def load():
            loads.append(name)
            if fail:
                raise Killed  # killed while loading the second model
            return ScriptedBackend(name, seed=3, plans=PLANS)
        return Model(name, load)

    with pytest.raises(Killed):
        evaluate(contexts[:2], agent_judge, tmp_path,
                 models=[counted("oracle"), counted("claim_only", fail=True)])
    assert (tmp_path / "work").exists() and not (tmp_path / "evaluation").exists()
    loads.clear()
    evaluation = evaluate(contexts[:2], agent_judge, tmp_path,
                          models=[counted("oracle"), counted("claim_only")])
    assert loads == ["claim_only"]
    assert evaluation.metrics["pools"]["benchmark"]["models"]["oracle"]["pass_rate"]["value"] == 1.0


# ----------------------------------------------------------------------------- bootstrap

def _rows(model: str, passed: list[bool], domains: int = 1) -> list[dict]:
    """Result rows of one model, task ``t{i}`` in domain ``d{i % domains}`` (one domain: the
    pool is resampled as a whole)."""
    return [{"model": model, "task_id": f"t{i}", "domain_id": f"d{i % domains}", "passed": p,
             "score": 0.5 + 0.5 * p, "criterion_pass_rate": 0.25 + 0.75 * p, "primary_passed": True,
             "completion_gap": not p,
             "turns": 3 + i % 4, "tool_calls": 5 + i % 7, "finish_reason": "submitted"}
            for i, p in enumerate(passed)]


def test_bootstrap_is_deterministic_given_the_seed_and_a_model_against_itself_is_zero() -> None:
    rng = np.random.default_rng(0)
    base = _rows("base", list(rng.random(40) < 0.4))
    tuned = _rows("tuned", list(rng.random(40) < 0.6))
    twin = [{**r, "model": "twin"} for r in base]
    by_model = {"base": base, "tuned": tuned, "twin": twin}
    first = summarize_pool(by_model, pool="benchmark", seed=5, resamples=500, confidence=0.95)
    assert summarize_pool(by_model, pool="benchmark", seed=5, resamples=500, confidence=0.95) == first
    other = summarize_pool(by_model, pool="benchmark", seed=6, resamples=500, confidence=0.95)
    assert other != first  # other resamples, other intervals; the same point estimates
    assert other["models"]["base"]["pass_rate"]["value"] == first["models"]["base"]["pass_rate"]["value"]
    for estimate in first["deltas"]["twin"].values():
        assert estimate == {"value": 0.0, "low": 0.0, "high": 0.0, "mde": 0.0}
    delta = first["deltas"]["tuned"]["pass_rate"]
    assert delta["low"] < delta["value"] < delta["high"]
    base_rate, tuned_rate = (first["models"][m]["pass_rate"]["value"] for m in ("base", "tuned"))
    assert delta["value"] == pytest.approx(tuned_rate - base_rate)
    values = np.array([float(r["passed"]) for r in base])
    weights = Resampling.simple(len(values)).weights(300, seed=5, pool="dev")
    assert paired_delta(values, values, weights, 0.9) == {"value": 0.0, "low": 0.0, "high": 0.0, "mde": 0.0}
    assert (weights == Resampling.simple(len(values)).weights(300, seed=5, pool="dev")).all()


def test_paired_intervals_are_narrower_than_unpaired_ones_for_correlated_models() -> None:
    rng = np.random.default_rng(1)
    hard = rng.random(60) < 0.5  # tasks differ in difficulty; both models mostly agree
    base = _rows("base", list(hard))
    flipped = hard.copy()
    flipped[:6] = True
    tuned = _rows("tuned", list(flipped))
    summary = summarize_pool({"base": base, "tuned": tuned}, pool="benchmark", seed=2, resamples=400,
                             confidence=0.95)
    delta = summary["deltas"]["tuned"]["pass_rate"]
    widths = [summary["models"][m]["pass_rate"]["high"] - summary["models"][m]["pass_rate"]["low"]
              for m in ("base", "tuned")]
    assert delta["high"] - delta["low"] < min(widths)
    improved = int((~hard[:6]).sum())  # no task got worse, these got better
    assert improved > 0 and delta["value"] == pytest.approx(improved / 60)
    assert delta["low"] < delta["value"] < delta["high"]


# ----------------------------------------------------------------------------- minimum detectable effect

def test_the_minimum_detectable_effect_is_2_80_standard_errors_of_the_paired_replicates() -> None:
    assert detectable_multiplier() == pytest.approx(1.959964 + 0.841621, abs=1e-6)  # z_0.975 + z_0.8
    assert detectable_multiplier(0.05, 0.9) == pytest.approx(1.959964 + 1.281552, abs=1e-6)
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    # four hand-picked resamples of the five tasks: replicate means 0.6, 1.0, 0.0, 0.6 against 0
    tasks = np.array([[0, 1, 2, 3, 4], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [2, 3, 4, 0, 1]])
    weights = np.stack([np.bincount(row, minlength=5) / 5 for row in tasks])
    # by hand: mean 0.55, squared deviations 0.0025 + 0.2025 + 0.3025 + 0.0025 = 0.51, / 3 -> SE 0.41231
    se = (0.51 / 3) ** 0.5
    assert minimum_detectable_effect([0.6, 1.0, 0.0, 0.6]) == pytest.approx(2.801585 * se, abs=1e-5)
    delta = paired_delta(values, np.zeros(5), weights, 0.9)
    assert delta["value"] == 0.6 and delta["mde"] == pytest.approx(1.155123, abs=2e-6)  # 2.801585 x 0.412311
    assert minimum_detectable_effect([0.3]) == 0.0  # one replicate has no spread


def test_every_delta_of_a_pool_carries_its_mde_and_more_tasks_shrink_it() -> None:
    rng = np.random.default_rng(8)

    def mde(tasks: int) -> float:
        base = _rows("base", list(rng.random(tasks) < 0.3))
        tuned = _rows("tuned", list(rng.random(tasks) < 0.5))
        summary = summarize_pool({"base": base, "tuned": tuned}, pool="benchmark", seed=3, resamples=400,
                                 confidence=0.95)
        assert all(d["mde"] is not None and d["mde"] >= 0 for d in summary["deltas"]["tuned"].values())
        rows = {row["model"]: row for row in table_rows("benchmark", summary)}
        assert rows["base"]["delta_pass_rate_mde"] is None  # the reference is no comparison
        assert rows["tuned"]["delta_pass_rate_mde"] == summary["deltas"]["tuned"]["pass_rate"]["mde"]
        return summary["deltas"]["tuned"]["pass_rate"]["mde"]

    small, large = mde(16), mde(400)
    assert 0 < large < small / 3  # about 1 / sqrt(25)
    empty = paired_delta(np.zeros((1, 0)), np.zeros((1, 0)), np.zeros((10, 0)), 0.9)
    assert empty == {"value": None, "low": None, "high": None, "mde": None}


def test_tasks_needed_matches_the_hand_computation_and_is_monotonic() -> None:
    # (2.801585 * 0.5 / 0.1) ** 2 = 196.22 -> 197 tasks
    assert tasks_needed(0.5, 0.1) == 197
    # the paper's +4 points at a per-task SD of 0.4: (2.801585 * 0.4 / 0.04) ** 2 = 784.9 -> 785
    assert tasks_needed(0.4, 0.04) == 785
    # all variance within tasks (the default): 4 attempts divide it by 4 -> 49.05 -> 50
    assert tasks_needed(0.5, 0.1, attempts=4) == 50
    # none within tasks: attempts buy nothing; half within: 196.22 * (0.5 + 0.5 / 4) = 122.6 -> 123
    assert tasks_needed(0.5, 0.1, attempts=4, within_share=0.0) == 197
    assert tasks_needed(0.5, 0.1, attempts=4, within_share=0.5) == 123
    effects = [tasks_needed(0.45, e) for e in (0.02, 0.04, 0.08, 0.16)]
    assert effects == sorted(effects, reverse=True) and len(set(effects)) == 4
    spreads = [tasks_needed(sd, 0.04) for sd in (0.1, 0.2, 0.4, 0.8)]
    assert spreads == sorted(spreads) and len(set(spreads)) == 4
    attempts = [tasks_needed(0.45, 0.04, k, within_share=0.7) for k in (1, 2, 4, 8, 64)]
    assert attempts == sorted(attempts, reverse=True)
    assert attempts[-1] >= tasks_needed(0.45 * 0.3 ** 0.5, 0.04)  # the between-task floor
    assert tasks_needed(0.5, 0.1, power=0.9) > tasks_needed(0.5, 0.1) > tasks_needed(0.5, 0.1, alpha=0.2)
    # the inverse of the MDE: at that many tasks the MDE of SE = sd / sqrt(tasks) is the effect
    assert detectable_multiplier() * 0.5 / 197 ** 0.5 <= 0.1 < detectable_multiplier() * 0.5 / 196 ** 0.5
    assert tasks_needed(0.0, 0.04) == 1
    for bad in ({"effect": 0.0}, {"attempts": 0}, {"within_share": 1.5}):
        with pytest.raises(ValueError):
            tasks_needed(**{"per_task_sd": 0.4, "effect": 0.04, **bad})


def test_a_pools_detectability_matches_the_hand_computation() -> None:
    """Five tasks. base, two attempts: passes t0 twice and t3 once, so per task 1, 0, 0, 0.5, 0;
    rft, two seeds of one attempt (1 1 0 1 0 and 1 0 1 1 1): 1, 0.5, 0.5, 1, 0.5. The paired
    difference 0, 0.5, 0.5, 0.5, 0.5 has mean 0.4 and squared deviations 0.16 + 4 x 0.01 = 0.20,
    so an SD of sqrt(0.20 / 4) = 0.223607; an MDE of 0.10 needs (2.801585 x 0.223607 / 0.1)**2 =
    7.848878 x 5 = 39.24 -> 40 tasks. A twin of base differs on no task: SD 0, one task."""
    attempts = [[True, False, False, True, False], [True, False, False, False, False]]
    base = [{**row, "rollout_id": f"base-t{i}.a{a}"} for a, passed in enumerate(attempts)
            for i, row in enumerate(_rows("base", passed))]
    rft = _seeded("rft", [[True, True, False, True, False], [True, False, True, True, True]])
    by_model = {"base": base, "rft": rft, "twin": [{**r, "model": "twin"} for r in base]}
    summary = summarize_pool(by_model, pool="indist", seed=1, resamples=500, confidence=0.95)
    found = detectability(by_model, summary, attempts=2)
    assert (found["tasks"], found["attempts"], found["target_mde"], TARGET_MDE) == (5, 2, 0.1, 0.1)
    rft_delta = found["deltas"]["rft"]
    assert {k: rft_delta[k] for k in ("value", "low", "high", "mde")} == summary["deltas"]["rft"]["pass_rate"]
    assert rft_delta["value"] == pytest.approx(0.4)
    assert rft_delta["per_task_sd"] == pytest.approx(0.05 ** 0.5, abs=1e-6)
    assert rft_delta["tasks_needed"] == 40
    assert found["deltas"]["twin"] == {"value": 0.0, "low": 0.0, "high": 0.0, "mde": 0.0, "per_task_sd": 0.0,
                                       "tasks_needed": 1}
    assert set(found["deltas"]) == {"rft", "twin"}  # the reference is no comparison
    # one task has no spread to measure
    one = {m: [r for r in rows if r["task_id"] == "t0"] for m, rows in by_model.items()}
    alone = detectability(one, summarize_pool(one, pool="indist", seed=1, resamples=100, confidence=0.95), 2)
    assert alone["tasks"] == 1
    assert (alone["deltas"]["rft"]["per_task_sd"], alone["deltas"]["rft"]["tasks_needed"]) == (None, None)


def test_a_pool_with_two_tasks_in_every_domain_is_resampled_within_domains() -> None:
    """Every replicate keeps each domain's share of the pool (a new draw of the benchmark has
    new tasks of the same domains) and draws one task fewer than the domain has; a pool with a
    domain of one task, or with one domain, is resampled as a whole."""
    design = Resampling.by_domain(["b", "a", "b", "a", "b", "c", "c"])
    assert design.strata == ((1, 3), (0, 2, 4), (5, 6)) and design.draws == (1, 2, 1)
    assert design.stratified and design.describe() == {"by": "domain", "strata": 3}
    weights = design.weights(500, seed=3, pool="benchmark")
    assert weights.shape == (500, 7) and np.allclose(weights.sum(axis=1), 1.0)
    for stratum in design.strata:
        assert np.allclose(weights[:, list(stratum)].sum(axis=1), len(stratum) / 7)
    assert (weights == design.weights(500, seed=3, pool="benchmark")).all()
    for plain in (["a", "a", "b"], ["a"] * 5, []):
        assert Resampling.by_domain(plain) == Resampling.simple(len(plain))
        assert Resampling.simple(len(plain)).describe() == {"by": "task", "strata": 1}


def _redrawn_pools(seed_sd: float, draws: int = 300) -> Iterator[np.ndarray]:
    """A benchmark drawn anew ``draws`` times: eight held-out domains of very different
    difficulty (logits), six new tasks each, two training seeds (each shifting every task's logit
    by a normal of ``seed_sd``) of one attempt: seed x task pass/fail."""
    rng = np.random.default_rng(7)
    difficulty = np.repeat([0.8, -1.0, -1.2, -3.0, -3.0, -3.5, -4.0, -2.0], 6)
    for _ in range(draws):
        logits = difficulty + rng.normal(0, 0.8, difficulty.size) + rng.normal(0, seed_sd, (2, 1))
        yield (rng.random(logits.shape) < 1 / (1 + np.exp(-logits))).astype(float)


def test_the_bootstrap_measures_the_error_of_a_new_draw_of_the_benchmark() -> None:
    """The standard error of the pass rate over fresh draws of the benchmark (same domains, new
    tasks, new seeds and episodes) against the one the bootstrap finds on a single draw (the root
    mean of its replicates' variance over the draws): within domains with the seeds' component by
    moments, within 15% where the seeds differ; where they do not, the clamp at 0 overstates it, by
    less than resampling the two seeds with replacement (which counts the episodes' noise twice).
    The plain bootstrap over all 48 tasks overstates it by a quarter or more, counting the spread
    between domains that no new draw changes."""
    labels = [f"d{h}" for h in range(8) for _ in range(6)]
    stratified, plain = Resampling.by_domain(labels), Resampling.simple(len(labels))
    weights = {design: design.weights(400, seed=1, pool="benchmark") for design in (stratified, plain)}
    noise = seed_noise(400, 1, "benchmark", "rft")
    pigeonhole = np.random.default_rng(2).integers(0, 2, size=(400, 2))  # the seeds drawn with replacement

    def standard_errors(seed_sd: float) -> tuple[float, dict]:
        rates, variances = [], defaultdict(list)
        for values in _redrawn_pools(seed_sd):
            rates.append(values.mean())
            for design, w in weights.items():
                variances[design].append(np.var(_replicates(values, w, noise), ddof=1))
            resampled = (values[pigeonhole].mean(axis=1) * weights[stratified]).sum(axis=1)
            variances["pigeonhole"].append(np.var(resampled, ddof=1))
        return float(np.std(rates)), {k: float(np.mean(v)) ** 0.5 for k, v in variances.items()}

    truth, found = standard_errors(seed_sd=0.8)
    assert found[stratified] == pytest.approx(truth, rel=0.15)
    truth, found = standard_errors(seed_sd=0.0)
    assert truth < found[stratified] < 1.35 * truth
    assert found[stratified] < found["pigeonhole"]
    assert found[plain] > 1.25 * truth


def test_a_pool_resampled_within_domains_reports_it_and_sizes_comparisons_by_the_spread_within() -> None:
    """Two domains of three tasks. base passes nothing; rft passes every task of d0 and none of
    d1: the whole difference lies between the domains, so within them nothing varies: SD 0, MDE 0
    (the plain design: SD 0.547723, as the domains' spread would count). The rates' Wilson
    intervals take the same design."""
    base = _rows("base", [False] * 6, domains=2)
    rft = _rows("rft", [True, False] * 3, domains=2)
    by_model = {"base": base, "rft": rft}
    summary = summarize_pool(by_model, pool="benchmark", seed=1, resamples=300, confidence=0.95)
    assert summary["resampling"] == {"by": "domain", "strata": 2}
    found = detectability(by_model, summary, attempts=1)
    assert found["resampling"] == {"by": "domain", "strata": 2}
    assert found["deltas"]["rft"]["value"] == 0.5
    assert (found["deltas"]["rft"]["per_task_sd"], found["deltas"]["rft"]["mde"]) == (0.0, 0.0)
    assert Resampling.simple(6).task_sd(np.array([1.0, 0, 1, 0, 1, 0])) == pytest.approx(0.3 ** 0.5)
    # one task of d0 fails: the spread within d0 is sd(1, 1, 0) = 0.57735, d1's 0: sqrt(3 x 1/3 / 6)
    rft[4] = {**rft[4], "passed": False}
    found = detectability(by_model, summarize_pool(by_model, pool="benchmark", seed=1, resamples=300,
                                                   confidence=0.95), attempts=1)
    assert found["deltas"]["rft"]["per_task_sd"] == pytest.approx((1 / 6) ** 0.5, abs=1e-6)
    # two seeds that agree (12 episodes): the plain design counts 6 outcomes, within domains 8
    values = np.vstack([task_values(rft, "passed", [f"t{i}" for i in range(6)])] * 2)
    design = Resampling.by_domain([r["domain_id"] for r in rft])
    assert effective_outcomes(values, 12) == pytest.approx(6.0)
    assert effective_outcomes(values, 12, design) == pytest.approx(8.0)


def _seeded(model: str, seeds: list[list[bool]]) -> list[dict]:
    return [{**row, "seed": k} for k, passed in enumerate(seeds) for row in _rows(model, passed)]


def test_intervals_of_a_model_with_several_seeds_cover_the_seeds_too() -> None:
    rng = np.random.default_rng(3)
    base = _rows("base", list(rng.random(30) < 0.3))
    tuned = list(rng.random(30) < 0.6)
    # three identical seeds: nothing to add, so the same intervals as one checkpoint
    same = summarize_pool({"base": base, "rft": _seeded("rft", [tuned] * 3), "one": _rows("one", tuned)},
                          pool="benchmark", seed=4, resamples=400, confidence=0.95)
    assert same["models"]["rft"]["seeds"] == 3 and same["models"]["rft"]["episodes"] == 90
    assert same["models"]["one"]["seeds"] == 1
    for metric in ("pass_rate", "score"):
        assert same["models"]["rft"][metric] == same["models"]["one"][metric]
        assert same["deltas"]["rft"][metric] == same["deltas"]["one"][metric]
    # seeds that disagree as a whole (one checkpoint passes 0.2 of the tasks, another 0.8): the same
    # mean as their per-task average, and fewer outcomes than the 30 tasks, so a wider interval than
    # the tasks alone would give
    spread = [list(rng.random(30) < p) for p in (0.2, 0.5, 0.8)]
    average = [{**row, "passed": sum(s[i] for s in spread) / 3}
               for i, row in enumerate(_rows("average", [False] * 30))]
    seeded_rows = _seeded("rft", spread)
    summary = summarize_pool({"base": base, "rft": seeded_rows, "average": average},
                             pool="benchmark", seed=4, resamples=400, confidence=0.95)
    seeded, flat = summary["models"]["rft"]["pass_rate"], summary["models"]["average"]["pass_rate"]
    assert seeded["value"] == pytest.approx(flat["value"])
    outcomes = effective_outcomes(task_values(seeded_rows, "passed", [f"t{i}" for i in range(30)]), 90)
    assert outcomes < 30
    assert (seeded["low"], seeded["high"]) == pytest.approx(wilson_interval(seeded["value"], outcomes, 0.95),
                                                            abs=1e-6)
    tasks_alone = wilson_interval(seeded["value"], 30, 0.95)
    assert seeded["high"] - seeded["low"] > 1.4 * (tasks_alone[1] - tasks_alone[0])
    # the bootstrap metrics cover the seeds by resampling them: wider than the one checkpoint's
    score, one = summary["models"]["rft"]["score"], same["models"]["one"]["score"]
    assert score["high"] - score["low"] > one["high"] - one["low"]


# ----------------------------------------------------------------------------- Wilson

def test_the_wilson_interval_matches_published_values() -> None:
    """Newcombe (1998, Statistics in Medicine 17:857), Table II, method 3 (the Wilson score
    interval without continuity correction), and the issue's 0 of 16 at 95%: [0, 0.194]."""
    published = {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605), (0, 20): (0.0, 0.1611),
                 (1, 29): (0.0061, 0.1718)}
    for (passes, n), bounds in published.items():
        assert wilson_interval(passes / n, n, 0.95) == pytest.approx(bounds, abs=5e-5), (passes, n)
    low, high = wilson_interval(0.0, 16, 0.95)
    assert low == 0.0 and round(high, 3) == 0.194
    z2 = NormalDist().inv_cdf(0.975) ** 2
    assert high == pytest.approx(z2 / (16 + z2), abs=1e-12)  # at 0 passes: z² / (n + z²)
    assert wilson_interval(1.0, 16, 0.95) == pytest.approx((1 - high, 1.0), abs=1e-12)  # mirrored
    z2 = NormalDist().inv_cdf(0.95) ** 2
    assert wilson_interval(0.0, 16, 0.9)[1] == pytest.approx(z2 / (16 + z2), abs=1e-12)
    for bad in ((-0.1, 16, 0.95), (0.5, 0, 0.95), (0.5, 16, 1.0)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)


def test_a_pools_binary_rates_carry_wilson_intervals_and_the_rest_the_bootstrap() -> None:
    """Over 16 tasks at one attempt, each binary rate is the binomial "x of 16" (0 passes:
    ``0.000 [0.000, 0.194]``, where the percentile bootstrap gave [0, 0]); score, criterion pass
    rate, turns and tool calls keep the bootstrap, which collapses where every task has the same
    value; paired deltas keep the paired bootstrap: two models that both pass nothing differ by
    ``0 [0, 0]`` (MDE 0: nothing varies), and one pass against none by the one's own bootstrap."""
    none = _rows("none", [False] * 16)
    by_model = {"none": none, "twin": [{**r, "model": "twin"} for r in none]}
    by_model.update({f"x{x}": _rows(f"x{x}", [True] * x + [False] * (16 - x)) for x in range(1, 17)})
    summary = summarize_pool(by_model, pool="benchmark", seed=0, resamples=1000, confidence=0.95)
    models = summary["models"]
    assert models["none"]["pass_rate"] == {"value": 0.0, "low": 0.0, "high": 0.193608}
    assert models["x1"]["pass_rate"] == {"value": 0.0625, "low": 0.011119, "high": 0.283287}
    for x in range(1, 17):
        low, high = wilson_interval(x / 16, 16, 0.95)
        assert (models[f"x{x}"]["pass_rate"]["low"], models[f"x{x}"]["pass_rate"]["high"]) == pytest.approx(
            (low, high), abs=1e-6)
        # the completion gap is the complement here (every failure has one): the mirrored interval
        gap = models[f"x{x}"]["completion_gap_rate"]
        assert (gap["low"], gap["high"]) == pytest.approx((1 - high, 1 - low), abs=2e-6)
    assert models["none"]["primary_pass_rate"] == {"value": 1.0, "low": 0.806392, "high": 1.0}
    assert models["none"]["score"] == {"value": 0.5, "low": 0.5, "high": 0.5}
    assert models["none"]["criterion_pass_rate"] == {"value": 0.25, "low": 0.25, "high": 0.25}
    assert models["none"]["mean_turns"]["low"] < 4.5 < models["none"]["mean_turns"]["high"]
    deltas = summary["deltas"]
    assert deltas["twin"]["pass_rate"] == {"value": 0.0, "low": 0.0, "high": 0.0, "mde": 0.0}
    assert deltas["x1"]["pass_rate"]["value"] == 0.0625 and deltas["x1"]["pass_rate"]["low"] == 0.0
    replicates = _replicates(task_values(by_model["x1"], "passed", [f"t{i}" for i in range(16)]),
                             Resampling.simple(16).weights(1000, 0, "benchmark"), None)
    assert deltas["x1"]["pass_rate"]["high"] == pytest.approx(float(np.quantile(replicates, 0.975)), abs=1e-6)


def test_effective_outcomes_count_what_the_bootstrap_resamples() -> None:
    """One attempt on one checkpoint: the tasks; attempts and seeds that agree within each task:
    still the tasks; that split every task evenly: every episode; seeds that disagree as a whole:
    fewer than the tasks. ``p(1-p) / n`` is the variance of the rate under the bootstrap's own
    resampling (here checked against 40,000 resamples of it)."""
    rng = np.random.default_rng(12)
    binary = (rng.random((1, 20)) < 0.3).astype(float)
    assert effective_outcomes(binary, 20) == pytest.approx(20, abs=1e-9)
    assert effective_outcomes(np.vstack([binary] * 3), 60) == pytest.approx(20, abs=1e-9)
    assert effective_outcomes(np.full((2, 20), 0.5), 80) == 80  # 2 seeds x 2 attempts, each split
    assert effective_outcomes(np.zeros((2, 20)), 40) == effective_outcomes(np.ones((1, 20)), 60) == 20
    # one checkpoint passes every task, the other none: no noise within a task, so the seed component
    # is the seeds' sample variance over S: V = 1/2 / 2, and p(1-p) / V = 1
    assert effective_outcomes(np.vstack([np.ones(20), np.zeros(20)]), 40) == pytest.approx(1.0)
    for seeds, attempts in ((1, 3), (2, 1), (3, 2)):
        episodes = (rng.random((seeds, 20, attempts)) < rng.random((seeds, 1, 1)) * 0.4
                    + rng.random((1, 20, 1)) * 0.5)
        values = episodes.mean(axis=2)
        draws = seed_noise(40_000, 1, "pool", "model")
        # the plain design, and within 4 domains of 2 to 14 tasks
        within = Resampling.by_domain([f"d{min(i // 2, 3)}" for i in range(20)])
        for design in (Resampling.simple(20), within):
            variance = float(_replicates(values, design.weights(40_000, 1, "pool"), draws).var())
            rate, outcomes = float(values.mean()), effective_outcomes(values, episodes.size, design)
            assert 0 < outcomes <= episodes.size
            if outcomes < episodes.size:  # not capped: the same variance
                assert rate * (1 - rate) / outcomes == pytest.approx(variance, rel=0.03), (seeds, attempts)
            else:  # capped at the episodes: never credited with less variance than they have
                assert rate * (1 - rate) / outcomes >= variance / 1.03


def test_a_seed_missing_a_task_is_an_error() -> None:
    rows = _seeded("rft", [[True, False, True], [True, False, True]])[:-1]
    with pytest.raises(InterlockError, match="seed 1 of model 'rft' has no episode of task t2"):
        summarize_pool({"base": _rows("base", [True, False, True]), "rft": rows}, pool="benchmark", seed=0,
                       resamples=100, confidence=0.9)


def test_models_must_be_compared_on_the_same_tasks() -> None:
    with pytest.raises(InterlockError, match="same tasks"):
        summarize_pool({"a": _rows("a", [True, False]), "b": _rows("b", [True])}, pool="benchmark", seed=0,
                       resamples=100, confidence=0.9)


# ----------------------------------------------------------------------------- grading

def _trajectory() -> Trajectory:
    return Trajectory("m-t.a0", "t", "d", "benchmark", "m", 0, 0, [], 4, 6, 0, 0, 0, "submitted", {}, [])


KINDS = [("primary", True, 2.0), ("grounding", False, 1.0), ("realization", True, 1.0),
         ("realization", True, 1.0), ("coupling", True, 2.0), ("no_collateral", True, 1.0)]
RUBRIC = [Criterion(f"C{i + 1}", kind, (), mandatory, weight, "")
          for i, (kind, mandatory, weight) in enumerate(KINDS)]


@pytest.mark.parametrize(("failed", "passed", "gap", "score"), [
    ((), True, False, 1.0),
    (("C2",), True, False, 7 / 8),  # an optional criterion: still a pass
    (("C3",), False, True, 7 / 8),  # the decision is right but not carried into every record
    (("C1", "C3"), False, False, 5 / 8),  # the decision itself is wrong: no completion gap
    (("C5",), False, False, 6 / 8),
])
def test_completion_gap_is_a_right_primary_deliverable_with_a_realization_missed(failed, passed, gap,
                                                                                  score) -> None:
    verdicts = {c.criterion_id: c.criterion_id not in failed for c in RUBRIC}
    result = grade_episode(_trajectory(), RUBRIC, verdicts)
    assert result.passed is passed and result.completion_gap is gap
    assert result.primary_passed is ("C1" not in failed)
    assert result.score == pytest.approx(score)
    assert result.criterion_pass_rate == pytest.approx((6 - len(failed)) / 6)
    assert result.turns == 4 and result.tool_calls == 6 and result.criteria == 6
    del verdicts["C6"]  # a criterion without a verdict fails
    unjudged = grade_episode(_trajectory(), RUBRIC, verdicts)
    assert not unjudged.passed and unjudged.score == pytest.approx(score - 1 / 8)
    effects_only = grade_episode(_trajectory(), [c for c in RUBRIC if c.kind != "primary"], verdicts)
    assert effects_only.completion_gap is None and effects_only.primary_passed is None


@pytest.mark.parametrize(("passing", "score"), [
    ({"C6"}, 0.0),  # nothing changed: the guard holds, and earns nothing alone
    ({"C6", "C7"}, 0.0),  # nothing done, then submit
    ({"C2", "C6", "C7"}, 3 / 9),  # one clause cited: the guard and the submit count beside it
    ({"C2"}, 1 / 9),  # damage done and no submit: the cited clause alone
    ({"C1", "C2", "C3", "C4", "C5", "C6", "C7"}, 1.0),
])
def test_an_episode_that_does_nothing_scores_nothing(passing, score) -> None:
    rubric = [*RUBRIC, Criterion("C7", "submit", (), True, 1.0, "")]
    result = grade_episode(_trajectory(), rubric, {c.criterion_id: c.criterion_id in passing for c in rubric})
    assert result.score == pytest.approx(score)
    assert result.criterion_pass_rate == pytest.approx(len(passing) / 7)  # still every passing criterion


# ----------------------------------------------------------------------------- adapters and checkpoints

class SubmitBench:
    """A second, tiny adapter: its own episode loop, its own grading (the episode submitted), no
    notion of a completion gap."""

    name = "submits"

    def __init__(self, contexts) -> None:
        self.contexts = contexts
        self.closed = False

    def tasks(self):
        return [(c.task_id, "category") for c in self.contexts]

    def identity(self):
        return [c.task_id for c in self.contexts]

    def episodes(self, policy, attempts, seed):
        return (dataclasses.replace(e, domain_id="category")
                for e in plan_episodes(iter(self.contexts), policy=policy, attempts=attempts, seed=seed))

    def grade(self, trajectories):
        return [EpisodeResult.of(t, passed=t.finish_reason == "submitted", score=1.0, criterion_pass_rate=1.0)
                for t in trajectories]

    def close(self) -> None:
        self.closed = True


def test_an_external_adapter_brings_its_own_tasks_episodes_and_grading(contexts, agent_judge,
                                                                       tmp_path) -> None:
    extra = SubmitBench(contexts[:2])
    models = [scripted("oracle"), scripted("loop", "tool_loop")]
    evaluation = evaluate(contexts[:2], agent_judge, tmp_path, models=models, extra=[extra])
    assert extra.closed
    pools = evaluation.metrics["pools"]
    assert list(pools) == ["benchmark", "submits"]
    submits = pools["submits"]
    assert submits["models"]["oracle"]["pass_rate"]["value"] == 1.0
    assert submits["models"]["loop"]["pass_rate"]["value"] == 0.0
    assert submits["models"]["loop"]["finish_reasons"] == {"max_turns": 2 * SETTINGS.attempts}
    assert "completion_gap_rate" not in submits["models"]["oracle"]  # the adapter has no such notion
    assert "completion_gap_rate" not in submits["deltas"]["loop"]
    results = read_rows(tmp_path / "evaluation" / "results.parquet", schemas.EVAL_RESULTS)
    assert {r["pool"] for r in results} == {"benchmark", "submits"}
    assert all(r["completion_gap"] is None for r in results if r["pool"] == "submits")
    assert [r["domain_id"] for r in evaluation.domain_rows if r["pool"] == "submits"] == ["category"] * 2


def test_a_missing_checkpoint_names_the_stage_that_makes_it(tmp_path) -> None:
    backbone = defaults("backbone=tiny").backbone.replace(
        max_context=512,
        generation={"temperature": 0.0, "max_new_tokens": 8})
    (tmp_path / "base").mkdir()
    with pytest.raises(InterlockError) as error:
        checkpoint_models(["base", "demo_sft", "rft"], tmp_path, backbone)
    message = str(error.value)
    for name, stage in (("base", "base_model"), ("demo_sft", "demo_sft"), ("rft", "train")):
        assert f"model {name!r} has no checkpoint" in message and f"`dvc repro {stage}`" in message
    with pytest.raises(InterlockError, match="listed twice"):
        run_evaluation([scripted("oracle"), scripted("oracle")], [], SETTINGS, out=tmp_path / "o",
                       timings=tmp_path / "t.parquet", work=tmp_path / "w", resamples=100, confidence=0.9)
