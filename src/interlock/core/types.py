"""Small types that the configuration and several packages share."""

from __future__ import annotations

from dataclasses import dataclass

from interlock.core.errors import InterlockError

#: the in-distribution evaluation pool: unseen tasks of the training domains, which nothing trains
#: or tunes on (whether RFT learned what it trained on, apart from whether it transfers)
INDIST_POOL = "indist"
#: task pools: ``demo``, ``rft``, ``dev`` and ``indist`` come from training domains, ``benchmark``
#: from held-out ones; every blueprint belongs to exactly one
TRAIN_POOLS = ("demo", "rft", "dev", INDIST_POOL)
HELDOUT_POOLS = ("benchmark",)
POOLS = TRAIN_POOLS + HELDOUT_POOLS


@dataclass(frozen=True)
class TaskSize:
    """The size of a task's completion graph."""

    decisions: int
    effects_per_decision: int
    couplings: int
    distractors: int

    def __post_init__(self) -> None:
        if self.couplings < 1 or self.decisions < 2 * self.couplings:
            raise InterlockError("need couplings >= 1 and decisions >= 2 x couplings "
                                 "(every coupling spans two or more decisions)",
                                 item="task_size", field="decisions")
        if self.effects_per_decision < 1 or self.distractors < 0:
            raise InterlockError("need effects_per_decision >= 1 and distractors >= 0",
                                 item="task_size", field="effects_per_decision")
        if self.decisions > 28:
            raise InterlockError("at most 28 decisions (one per day of the period)",
                                 item="task_size", field="decisions")
