"""What judging cost, and how each judge's verdicts compare with the ground truth.

Ground truth is the compiled checks on the real final workspace (what the scripted agent judge
runs). A *false accept* is a verdict of pass where the truth is fail; a *false reject* the
reverse. Rates are over the truly failing and truly passing cases respectively, per criterion
(overall and by criterion kind) and per trajectory (accepted: every mandatory criterion passes),
by solver policy. Counters only: the pool streams through in bounded memory.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from interlock.judging.verdicts import Judgement, accepted
from interlock.rollout.trajectory import Trajectory
from interlock.synthesis.packs import TaskPack

ALL = "all"


def _rate(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


class _Confusion:
    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def add(self, judged: bool, truth: bool) -> None:
        self.counts[("pass" if judged else "fail") + "/" + ("pass" if truth else "fail")] += 1

    def summary(self) -> dict:
        c = self.counts
        false_accept, true_fail = c["pass/fail"], c["fail/fail"]
        false_reject, true_pass = c["fail/pass"], c["pass/pass"]
        return {"n": sum(c.values()), "truth_pass": true_pass + false_reject,
                "truth_fail": false_accept + true_fail, "judged_pass": true_pass + false_accept,
                "false_accepts": false_accept, "false_rejects": false_reject,
                "false_accept_rate": _rate(false_accept, false_accept + true_fail),
                "false_reject_rate": _rate(false_reject, false_reject + true_pass)}


class _Cost:
    def __init__(self) -> None:
        self.rollouts = self.criteria = self.tokens = self.accepted = 0
        self.seconds = 0.0
        self.kind_seconds: Counter = Counter()
        self.kind_tokens: Counter = Counter()
        self.kind_count: Counter = Counter()

    def add(self, judgement: Judgement, pack: TaskPack) -> None:
        self.rollouts += 1
        self.criteria += len(judgement.verdicts)
        self.seconds += judgement.seconds
        self.tokens += judgement.output_tokens
        self.accepted += accepted(judgement.passed, pack.rubric)
        for criterion in pack.rubric:
            cid = criterion.criterion_id
            self.kind_count[criterion.kind] += 1
            self.kind_seconds[criterion.kind] += judgement.criterion_seconds.get(cid, 0.0)
            self.kind_tokens[criterion.kind] += judgement.criterion_tokens.get(cid, 0)

    def summary(self, wall: float | None) -> dict:
        seconds = wall if wall is not None else self.seconds
        return {
            "rollouts": self.rollouts, "criteria": self.criteria,
            "accepted": self.accepted, "acceptance": _rate(self.accepted, self.rollouts),
            "seconds": round(seconds, 3),
            "rollouts_per_second": round(self.rollouts / seconds, 2) if seconds else None,
            "seconds_per_rollout": round(seconds / self.rollouts, 6) if self.rollouts else None,
            "seconds_per_criterion": round(seconds / self.criteria, 6) if self.criteria else None,
            "output_tokens": self.tokens,
            "output_tokens_per_rollout": round(self.tokens / self.rollouts, 2) if self.rollouts else None,
            "output_tokens_per_criterion": round(self.tokens / self.criteria, 3) if self.criteria else None,
            "by_kind": {kind: {"criteria": n,
                               "seconds_per_criterion": round(self.kind_seconds[kind] / n, 6),
                               "output_tokens_per_criterion": round(self.kind_tokens[kind] / n, 3)}
                        for kind, n in sorted(self.kind_count.items())},
        }


class JudgeStats:
    """Accumulates cost and error counts over batches of judged rollouts."""

    def __init__(self) -> None:
        self.cost: dict[str, _Cost] = defaultdict(_Cost)
        self.wall: Counter = Counter()
        # (judge, policy, level, kind) -> confusion against the truth
        self.errors: dict[tuple[str, str, str, str], _Confusion] = defaultdict(_Confusion)
        self.collateral: Counter = Counter()
        self.policies: Counter = Counter()

    def add_wall(self, judge: str, seconds: float) -> None:
        self.wall[judge] += seconds

    def add(self, trajectories: list[Trajectory], packs: list[TaskPack], truth: list[Judgement],
            judged: dict[str, list[Judgement]]) -> None:
        """``truth``: agent-judge judgements (their ``compiled`` is the ground truth)."""
        for index, (trajectory, pack) in enumerate(zip(trajectories, packs, strict=True)):
            reference = truth[index].compiled
            policy = trajectory.policy
            self.policies[policy] += 1
            true_accept = accepted(reference, pack.rubric)
            flags = truth[index].collateral
            self.collateral["rollouts_flagged"] += bool(flags)
            self.collateral["records_flagged"] += len(flags)
            self.collateral["flagged_but_no_collateral_passed"] += bool(flags) and all(
                reference.get(c.criterion_id, False) for c in pack.rubric if c.kind == "no_collateral")
            for name, judgements in judged.items():
                judgement = judgements[index]
                self.cost[name].add(judgement, pack)
                verdicts = judgement.passed
                for scope in (policy, ALL):
                    self.errors[name, scope, "trajectories", ALL].add(accepted(verdicts, pack.rubric),
                                                                      true_accept)
                    for criterion in pack.rubric:
                        cid = criterion.criterion_id
                        judged_pass, true_pass = verdicts.get(cid, False), reference.get(cid, False)
                        self.errors[name, scope, "criteria", ALL].add(judged_pass, true_pass)
                        self.errors[name, scope, "criteria", criterion.kind].add(judged_pass, true_pass)

    def summary(self) -> dict:
        judges = {}
        for name, cost in sorted(self.cost.items()):
            vs_truth: dict = {}
            for (judge, scope, level, kind), confusion in sorted(self.errors.items()):
                if judge != name:
                    continue
                entry = vs_truth.setdefault(scope, {"criteria": {}, "trajectories": None})
                if level == "trajectories":
                    entry["trajectories"] = confusion.summary()
                else:
                    entry["criteria"][kind] = confusion.summary()
            judges[name] = {**cost.summary(self.wall.get(name)), "vs_truth": vs_truth}
        headline = {name: {scope: {k: entry["trajectories"][k] for k in ("false_accept_rate",
                                                                         "false_reject_rate")}
                           for scope, entry in judge["vs_truth"].items()}
                    for name, judge in judges.items()}
        return {"rollouts": sum(self.policies.values()), "policies": dict(sorted(self.policies.items())),
                "acceptance_errors_by_policy": headline,
                "judges": judges, "collateral": dict(sorted(self.collateral.items())),
                "truth": "the compiled checks on the real final workspace"}
