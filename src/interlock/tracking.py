"""W&B tracking for the stages that produce numbers (work in progress: the API is stable)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageReport:
    """What a stage hands to tracking: summary metrics and optional tables.

    ``metrics`` may nest (``{"rft": {"admitted": 3}}`` is logged as ``rft/admitted``); only numbers
    (and booleans) are logged. ``tables`` maps a table name to its rows, one dict per row with the
    same keys (e.g. per-domain or per-benchmark results); each becomes a ``wandb.Table``.
    """

    metrics: dict
    tables: dict[str, list[dict]] = field(default_factory=dict)
