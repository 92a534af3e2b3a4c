"""Padding-free micro-batches: whole examples packed into one row under a token budget.

Each row restarts its position ids at every example, and the model is called without an
attention mask, so transformers attends block-diagonally (each example sees only itself): no
padding token is ever computed. Which examples share a row is decided once per epoch from a
seeded shuffle with a first-fit-decreasing fill, so a rerun sees the same batches.

On a CPU attention over a packed row costs as if the row were one sequence, so the budget should
be about one long example there (``train.batch_tokens``); on a GPU with flash attention packing
is free and the budget can be as large as memory allows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interlock.training.examples import Example

if TYPE_CHECKING:  # torch is imported where a row is packed: `sample` plans no row and loads no torch
    import torch


@dataclass(frozen=True)
class PackedRow:
    """One micro-batch: ``[1, n]`` tensors of concatenated examples."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor  # positions (into the row) whose next token carries loss
    labels: torch.Tensor  # the next token at each of those positions
    weights: torch.Tensor  # the example weight of each of those positions

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def weight_sum(self) -> float:
        return float(self.weights.sum())


def plan_rows(lengths: list[int], budget: int, seed: int) -> list[list[int]]:
    """Example indices per row: rows never exceed ``budget`` tokens (an example longer than the
    budget gets a row of its own); the row order is shuffled with ``seed``."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order.sort(key=lambda i: -lengths[i])  # stable: ties keep the shuffled order
    rows: list[list[int]] = []
    room: list[int] = []
    for index in order:
        slot = next((r for r, free in enumerate(room) if free >= lengths[index]), None)
        if slot is None:
            rows.append([index])
            room.append(budget - lengths[index])
        else:
            rows[slot].append(index)
            room[slot] -= lengths[index]
    rng.shuffle(rows)
    return rows


def pack(examples: list[Example]) -> PackedRow:
    import torch

    ids, positions, targets, labels, weights = [], [], [], [], []
    for example in examples:
        offset = len(ids)
        ids.extend(example.input_ids)
        positions.extend(range(len(example)))
        # the token at position t is predicted from position t - 1
        for t in range(1, len(example)):
            if example.loss_mask[t]:
                targets.append(offset + t - 1)
                labels.append(example.input_ids[t])
                weights.append(example.weight)
    return PackedRow(torch.tensor([ids]), torch.tensor([positions]), torch.tensor(targets),
                     torch.tensor(labels), torch.tensor(weights, dtype=torch.float32))
