"""The closed vocabularies that structural signatures are built from.

Names here are kinds, never domain words: renaming a domain cannot change its signature.
"""

from typing import Literal

DecisionKindName = Literal[
    "limit_approval", "eligibility_approval", "capped_payment", "rate_payment",
    "tier_assignment", "team_routing", "option_selection", "due_date",
]
CouplingKindName = Literal["total_cap", "count_cap", "value_capacity", "all_or_none"]
EffectKindName = Literal[
    "status_update", "ledger_posting", "payment_instruction", "notification",
    "audit_note", "schedule_entry", "document",
]

#: decision kinds whose outcomes carry an amount (a total cap can bind them)
AMOUNT_DECISIONS = frozenset(
    {"limit_approval", "eligibility_approval", "capped_payment", "rate_payment", "option_selection"}
)
#: decision kinds with more than one non-fallback outcome value (a per-value capacity can bind them)
MULTI_VALUE_DECISIONS = frozenset({"tier_assignment", "team_routing", "option_selection", "due_date"})

COUPLING_COMPATIBLE: dict[str, frozenset[str]] = {
    "total_cap": AMOUNT_DECISIONS,
    "count_cap": frozenset(DecisionKindName.__args__),
    "value_capacity": MULTI_VALUE_DECISIONS,
    "all_or_none": AMOUNT_DECISIONS,
}
#: effects every decision gets, whatever its outcome; the others only for non-fallback outcomes
ALL_OUTCOME_EFFECTS = frozenset({"status_update", "notification", "audit_note"})
#: effects that post an amount, so the decision must carry one
AMOUNT_EFFECTS = frozenset({"ledger_posting", "payment_instruction"})
