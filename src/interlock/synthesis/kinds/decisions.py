"""Decision kinds: how a case's preferred outcome and its fallbacks follow from evidence.

Each kind works on a *rule*: a JSON-able dict holding the policy parameters and the words the
domain uses. The rule renders to one policy clause and parses back from it, so the graph
builder (from a blueprint) and the public-input critic (from the workspace text) compute
outcomes with the same code from different inputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from typing import ClassVar

from interlock.synthesis.catalog import Domain
from interlock.synthesis.text import Template, join_words, split_words


@dataclass(frozen=True)
class Outcome:
    """One admissible outcome; ``fallback`` marks the one every cap and capacity admits."""

    value: str
    amount: int | None = None
    fallback: bool = False


Row = dict[str, object]


def _int(row: Row, column: str) -> int:
    return int(str(row[column]))


class DecisionKind:
    """Base of the decision kinds; subclasses fill in the template and the arithmetic."""

    name: ClassVar[str]
    template: ClassVar[Template]
    #: case columns the rule reads (roles of :class:`~interlock.synthesis.catalog.CaseTable`)
    reads: ClassVar[tuple[str, ...]] = ()
    #: whether the positive outcome is a word the domain chooses ("approved", "paid")
    positive_word: ClassVar[bool] = False
    #: parameters that are whole numbers (parsed back from the clause as int)
    numbers: ClassVar[tuple[str, ...]] = ()
    #: whether an outcome other than the fallback carries an amount (a total cap can bind it)
    carries_amount: ClassVar[bool] = False
    #: whether it has more than one non-fallback outcome value (a per-value capacity can bind it)
    multi_valued: ClassVar[bool] = False
    #: the lists of the domain's decision declaration it needs (``tiers``, ``teams``, ``options``)
    takes: ClassVar[tuple[str, ...]] = ()
    #: whether its outcomes are dates (a schedule then follows from the decision itself)
    dated: ClassVar[bool] = False

    def sample_case(self, rng: random.Random, domain: Domain) -> Row:
        """Values for the case columns; every declared column is filled, used or not."""
        case = domain.case
        row: Row = {}
        if case.amount:
            row[case.amount] = rng.randrange(20, 400) * 5
        if case.quantity:
            row[case.quantity] = rng.randint(1, 12)
        if case.score:
            row[case.score] = rng.randint(20, 99)
        if case.category:
            row[case.category] = rng.choice(case.categories)
        return row

    def sample_params(self, rng: random.Random, domain: Domain, rows: list[Row]) -> dict:
        return {}

    def rule(self, domain: Domain, params: dict) -> dict:
        """The clause's content: parameters plus the domain's words and column names."""
        rule = {"noun": domain.case.noun, "fallback": domain.decision.fallback, **params}
        if self.positive_word:
            rule["positive"] = domain.decision.positive
        rule.update({role: getattr(domain.case, role) for role in self.reads})
        return rule

    def render(self, rule: dict) -> str:
        return self.template.render(**self._text_fields(rule))

    def parse(self, text: str) -> dict | None:
        fields = self.template.parse(text)
        return None if fields is None else self._rule_fields(fields)

    def _text_fields(self, rule: dict) -> dict:
        return rule

    def _rule_fields(self, fields: dict[str, str]) -> dict:
        return {k: int(v) if k in self.numbers else v for k, v in fields.items()}

    def alternatives(self, row: Row, rule: dict, options: list[Row]) -> list[Outcome]:
        """Admissible outcomes in order of preference; the last is always the fallback."""
        raise NotImplementedError

    def shifts(self, params: dict, kept: list[tuple[Row, Outcome]], domain: Domain) -> list[dict]:
        """Rule parameters one small step from ``params``, for recursive synthesis's ``shift_rule``
        (``kept``: the cases that got an outcome other than the fallback, with it). None here: the
        operator then does not apply to this kind."""
        return []


class LimitApproval(DecisionKind):
    name = "limit_approval"
    reads, positive_word, numbers = ("amount",), True, ("limit",)
    carries_amount = True
    template = Template(
        "A {noun} is {positive} when its {amount} is at most {limit}; otherwise it is {fallback}."
    )

    def sample_params(self, rng, domain, rows):
        amounts = sorted(_int(r, domain.case.amount) for r in rows)
        cut = rng.randint(max(1, len(amounts) // 2), len(amounts))
        upper = amounts[cut] if cut < len(amounts) else amounts[-1] + 500
        return {"limit": rng.randint(amounts[cut - 1], max(amounts[cut - 1], upper - 1))}

    def alternatives(self, row, rule, options):
        amount = _int(row, rule["amount"])
        rejected = Outcome(rule["fallback"], fallback=True)
        if amount > rule["limit"]:
            return [rejected]
        return [Outcome(rule["positive"], amount), rejected]

    def shifts(self, params, kept, domain):
        amount = domain.case.amount
        return [{**params, "limit": int(row[amount]) - 1} for row, _ in kept if int(row[amount]) >= 1]


class EligibilityApproval(DecisionKind):
    name = "eligibility_approval"
    reads, positive_word, carries_amount = ("amount", "category"), True, True
    template = Template(
        "A {noun} is {positive} for its full {amount} only when its {category} is one of: "
        "{allowed}; otherwise it is {fallback}."
    )

    def sample_params(self, rng, domain, rows):
        categories = list(domain.case.categories)
        allowed = rng.sample(categories, rng.randint(2, len(categories) - 1))
        return {"allowed": sorted(allowed)}

    def _text_fields(self, rule):
        return {**rule, "allowed": join_words(rule["allowed"])}

    def _rule_fields(self, fields):
        return {**fields, "allowed": split_words(fields["allowed"])}

    def alternatives(self, row, rule, options):
        rejected = Outcome(rule["fallback"], fallback=True)
        if str(row[rule["category"]]) not in rule["allowed"]:
            return [rejected]
        return [Outcome(rule["positive"], _int(row, rule["amount"])), rejected]

    def shifts(self, params, kept, domain):
        found = {str(row[domain.case.category]) for row, _ in kept}
        return [{**params, "allowed": [c for c in params["allowed"] if c != gone]}
                for gone in sorted(found) if len(params["allowed"]) > 1]


class CappedPayment(DecisionKind):
    name = "capped_payment"
    reads, positive_word, numbers = ("amount",), True, ("cap",)
    carries_amount = True
    template = Template(
        "A {noun} is {positive} its {amount} up to a maximum of {cap}; one that cannot be paid "
        "is {fallback}."
    )

    def sample_params(self, rng, domain, rows):
        amounts = sorted(_int(r, domain.case.amount) for r in rows)
        return {"cap": rng.randint(amounts[0], amounts[-1] + 200)}

    def alternatives(self, row, rule, options):
        paid = min(_int(row, rule["amount"]), rule["cap"])
        return [Outcome(rule["positive"], paid), Outcome(rule["fallback"], fallback=True)]

    def shifts(self, params, kept, domain):
        return [{**params, "cap": o.amount - 5} for _, o in kept if o.amount > 5]


class RatePayment(DecisionKind):
    name = "rate_payment"
    reads, positive_word, numbers = ("quantity",), True, ("rate",)
    carries_amount = True
    template = Template(
        "A {noun} is {positive} {rate} for each unit of {quantity}; one that cannot be paid is "
        "{fallback}."
    )

    def sample_params(self, rng, domain, rows):
        return {"rate": rng.randrange(4, 40) * 5}

    def alternatives(self, row, rule, options):
        paid = _int(row, rule["quantity"]) * rule["rate"]
        return [Outcome(rule["positive"], paid), Outcome(rule["fallback"], fallback=True)]

    def shifts(self, params, kept, domain):
        return [{**params, "rate": params["rate"] + step} for step in (-5, 5) if params["rate"] + step >= 5]


class TierAssignment(DecisionKind):
    name = "tier_assignment"
    reads, multi_valued, takes = ("score",), True, ("tiers",)
    template = Template("A {noun} is placed by its {score}: {bands}; anything lower is {fallback}.")

    def sample_params(self, rng, domain, rows):
        tiers = domain.decision.tiers
        thresholds = sorted(rng.sample(range(35, 95, 5), len(tiers)), reverse=True)
        return {"tiers": [[tier, floor] for tier, floor in zip(tiers, thresholds, strict=True)]}

    def _text_fields(self, rule):
        return {**rule, "bands": join_words([f"{tier} from {floor}" for tier, floor in rule["tiers"]])}

    def _rule_fields(self, fields):
        bands = [band.rsplit(" from ", 1) for band in split_words(fields.pop("bands"))]
        return {**fields, "tiers": [[tier, int(floor)] for tier, floor in bands]}

    def alternatives(self, row, rule, options):
        score = _int(row, rule["score"])
        eligible = [tier for tier, floor in rule["tiers"] if score >= floor]
        top = rule["tiers"][-len(eligible):] if eligible else []
        return [Outcome(tier) for tier, _ in top] + [Outcome(rule["fallback"], fallback=True)]

    def shifts(self, params, kept, domain):
        score, tiers = domain.case.score, params["tiers"]
        shifts = []
        for row, outcome in kept:
            position = next((i for i, (tier, _) in enumerate(tiers) if tier == outcome.value), None)
            if position is None:
                continue
            floor = int(row[score]) + 1
            above = tiers[position - 1][1] if position else 10 ** 6
            if floor < above:
                raised = [[t, floor if i == position else f] for i, (t, f) in enumerate(tiers)]
                shifts.append({**params, "tiers": raised})
        return shifts


class TeamRouting(DecisionKind):
    name = "team_routing"
    reads, multi_valued, takes = ("category",), True, ("teams",)
    template = Template(
        "A {noun} goes to the team for its {category}: {routes}; one that cannot go there goes "
        "to {fallback}."
    )

    def sample_params(self, rng, domain, rows):
        teams = rng.sample(domain.decision.teams, len(domain.decision.teams))
        return {"routes": [[c, teams[i % len(teams)]] for i, c in enumerate(domain.case.categories)]}

    def _text_fields(self, rule):
        return {**rule, "routes": join_words([f"{c} to {team}" for c, team in rule["routes"]])}

    def _rule_fields(self, fields):
        routes = [route.split(" to ", 1) for route in split_words(fields.pop("routes"))]
        return {**fields, "routes": [list(route) for route in routes]}

    def alternatives(self, row, rule, options):
        team = dict(rule["routes"])[str(row[rule["category"]])]
        return [Outcome(team), Outcome(rule["fallback"], fallback=True)]

    def shifts(self, params, kept, domain):
        return [{**params, "routes": [[c, other if c == category else t] for c, t in params["routes"]]}
                for category, team in params["routes"] for other in domain.decision.teams if other != team]


class OptionSelection(DecisionKind):
    name = "option_selection"
    numbers, carries_amount, multi_valued, takes = ("min_rating",), True, True, ("options",)
    template = Template(
        "Each {noun} is awarded the cheapest of its {option_plural} in `{options_table}` with a "
        "rating of at least {min_rating} (ties to the lower id); if that one cannot be taken, the "
        "next cheapest qualifying one; with none left it is {fallback}."
    )

    def sample_params(self, rng, domain, rows):
        return {"min_rating": rng.randint(2, 4)}

    def rule(self, domain, params):
        options = domain.decision.options
        return {**super().rule(domain, params), "option_plural": options.plural,
                "options_table": options.table}

    def alternatives(self, row, rule, options):
        qualifying = sorted(
            (_int(o, "cost"), str(o["id"])) for o in options if _int(o, "rating") >= rule["min_rating"]
        )
        return [Outcome(option_id, cost) for cost, option_id in qualifying] + [
            Outcome(rule["fallback"], fallback=True)
        ]

    def shifts(self, params, kept, domain):
        return [{**params, "min_rating": params["min_rating"] + 1}] if params["min_rating"] < 5 else []


class DueDate(DecisionKind):
    name = "due_date"
    reads, numbers, multi_valued, dated = ("date",), ("days",), True, True
    template = Template(
        "Each {noun} is due {days} days after its {date}; if that day cannot be used, the next "
        "day; one that cannot be scheduled is {fallback}."
    )
    #: how many later days a case may slide before it falls back
    horizon = 14

    def sample_params(self, rng, domain, rows):
        return {"days": rng.randint(3, 14)}

    def alternatives(self, row, rule, options):
        first = date.fromisoformat(str(row[rule["date"]])) + timedelta(days=rule["days"])
        days = [Outcome((first + timedelta(days=i)).isoformat()) for i in range(self.horizon)]
        return days + [Outcome(rule["fallback"], fallback=True)]

    def shifts(self, params, kept, domain):
        return [{**params, "days": params["days"] + step} for step in (-1, 1)
                if 1 <= params["days"] + step <= 30]

