"""The distribution-shift filter and the weights of kept corrections.

A correction is written by someone other than the policy (a program, or the policy prompted with
a critic's note), so its turns may be text the policy would never write. Training on such text
teaches the policy little it can reach from its own distribution and may drag it away from it. The
starting checkpoint's mean token NLL of the corrected turns measures that shift; the reference is
the NLL of the policy's own accepted turns (what it does write, and what RFT trains on anyway):

- :func:`threshold`: a correction is kept when its NLL is at most a quantile of the reference plus
  a slack in nats per token. Additive, because mean token NLL is a log-likelihood per token: a
  slack ``s`` bounds the correction's per-token likelihood at ``exp(-s)`` times the quantile's,
  whatever the reference's scale (a multiple of a reference near 0 nats would be no bound at all
  one way and drop everything the other);
- :func:`shift_weight`: a kept correction's weight decays with how much less likely it is than
  the typical accepted turn, ``exp(reference median - NLL)`` (an importance-style ratio of
  per-token likelihoods), capped so a few very likely corrections cannot dominate a step;
- :func:`nll_plot_rows`: histograms of both NLLs on shared bins and the threshold, for a DVC plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interlock.core.errors import InterlockError


@dataclass(frozen=True)
class FilterDecision:
    kept: bool
    weight: float  # the training weight of a kept correction; 0 for a dropped one
    reason: str


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def threshold(reference_nll: Sequence[float], quantile: float, slack: float) -> float:
    """The largest NLL a kept correction may have: the ``quantile`` (linear interpolation) of the
    reference (the policy's own accepted turns; unscored and non-finite values are left out) plus
    ``slack`` nats per token. Relative to the reference, so it follows the checkpoint and the
    tokenizer rather than an absolute number of nats."""
    reference = _finite(reference_nll)
    if not reference:
        raise InterlockError("no reference NLL: the shift filter needs the starting checkpoint's NLL of "
                             "at least one accepted trajectory's turns (no rollout was accepted, or none "
                             "could be scored)", field="reference_nll")
    if not 0 <= quantile <= 1:
        raise InterlockError(f"a quantile is in [0, 1], not {quantile}", field="quantile")
    if not (math.isfinite(slack) and slack >= 0):
        raise InterlockError(f"the slack (nats per token) must be finite and >= 0, not {slack}",
                             field="slack")
    return float(np.quantile(reference, quantile, method="linear")) + slack


def shift_weight(nll: float, reference_median: float, cap: float) -> float:
    """``min(cap, exp(reference_median - nll))``: 1 for a correction as likely per token as the
    median accepted turn, less for a less likely one (its tokens are off the policy's
    distribution, so each should count less), at most ``cap``."""
    return min(cap, math.exp(reference_median - nll))


def filter_corrections(nll: Sequence[float | None], reference: Sequence[float], *, quantile: float,
                       slack: float, cap: float) -> list[FilterDecision]:
    """One decision per correction NLL (in order): kept with its :func:`shift_weight` where the NLL
    is at most the :func:`threshold` of ``reference``; dropped (weight 0) where above it or where it
    could not be scored (None: no corrected token, or too long for the context window)."""
    limit = threshold(reference, quantile, slack)
    median = float(np.median(_finite(reference)))
    decisions = []
    for value in nll:
        if value is None or not math.isfinite(value):
            decisions.append(FilterDecision(False, 0.0, "not scored: no corrected assistant token, or "
                                                          "longer than the context window"))
        elif value <= limit:
            decisions.append(FilterDecision(True, shift_weight(value, median, cap),
                                            f"kept: NLL {value:.4f} <= threshold {limit:.4f}"))
        else:
            decisions.append(FilterDecision(False, 0.0, f"shifted: NLL {value:.4f} > threshold {limit:.4f}"))
    return decisions


def histogram(values: Sequence[float | None], bin_edges: Sequence[float]) -> list[dict]:
    """Rows ``{"nll": bin centre, "count": n}`` of ``values`` (None and non-finite left out) over
    ``bin_edges`` (the last bin closed, as numpy's)."""
    counts, edges = np.histogram(_finite(values), bins=np.asarray(bin_edges, dtype=float))
    return [{"nll": round(float(lo + hi) / 2, 6), "count": int(n)}
            for lo, hi, n in zip(edges[:-1], edges[1:], counts, strict=True)]


def nll_plot_rows(accepted: Sequence[float | None], corrections: Sequence[float | None], threshold: float,
                  bins: int = 20) -> dict[str, list[dict]]:
    """The rows of the NLL plot: ``accepted`` and ``corrections`` histograms on the same ``bins``
    edges (spanning both and the threshold), and ``threshold`` as a vertical line from count 0 to
    the tallest bar; all with columns ``nll`` and ``count``, so one plot overlays them. Empty
    lists where there is nothing to draw."""
    values = _finite(accepted) + _finite(corrections)
    if not values:
        return {"accepted": [], "corrections": [], "threshold": []}
    marks = values + _finite([threshold])
    edges = np.histogram_bin_edges(marks, bins=bins, range=(min(marks), max(marks)))
    rows = {"accepted": histogram(accepted, edges), "corrections": histogram(corrections, edges)}
    tallest = max(row["count"] for series in rows.values() for row in series)
    line = round(float(threshold), 6)
    rows["threshold"] = ([{"nll": line, "count": 0}, {"nll": line, "count": tallest}]
                         if math.isfinite(threshold) else [])
    return rows
