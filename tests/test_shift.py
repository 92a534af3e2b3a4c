"""The distribution-shift filter of rollout-time intervention: a threshold relative to the policy's
own accepted turns, capped likelihood-ratio weights, and the rows of its NLL plot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from interlock.core.errors import InterlockError
from interlock.intervention.shift import (
    FilterDecision,
    filter_corrections,
    histogram,
    nll_plot_rows,
    shift_weight,
    threshold,
)

REFERENCE = [1.0, 2.0, 3.0, 4.0, 5.0]


def test_the_threshold_is_a_quantile_of_the_reference_plus_the_slack() -> None:
    assert threshold(REFERENCE, 0.5, 0.0) == 3.0
    assert threshold(REFERENCE, 0.9, 0.0) == pytest.approx(4.6)  # linear interpolation
    assert threshold(REFERENCE, 1.0, 1.25) == pytest.approx(6.25)
    assert threshold([5.0, 1.0, None, math.nan, 3.0], 0.5, 0.0) == 3.0  # unscored values left out
    assert threshold(REFERENCE, 0.75, 0.1) == pytest.approx(float(np.quantile(REFERENCE, 0.75)) + 0.1)


def test_the_slack_bounds_the_per_token_likelihood_ratio_at_any_reference_scale() -> None:
    """The same slack keeps the same corrections relative to the policy's own turns whether those
    sit near 0 nats a token (a confident fine-tuned policy) or far from it: a correction 0.05 nats
    a token less likely than the median is kept, one 0.2 nats less likely is dropped. A multiple of
    the reference would keep neither at the first scale and both at the last."""
    for scale in (0.004, 0.4, 4.0):
        reference = [scale * x for x in REFERENCE]
        median = float(np.median(reference))
        decisions = filter_corrections([median + 0.05, median + 0.2], reference, quantile=0.5, slack=0.1,
                                       cap=1.0)
        assert [d.kept for d in decisions] == [True, False], scale
        assert decisions[0].weight == pytest.approx(math.exp(-0.05))


@pytest.mark.parametrize("reference", [[], [None], [math.inf]])
def test_an_empty_reference_is_a_clear_error(reference) -> None:
    with pytest.raises(InterlockError, match="no reference NLL") as caught:
        threshold(reference, 0.5, 0.0)
    assert caught.value.field == "reference_nll"


@pytest.mark.parametrize("slack", [-0.1, math.inf, math.nan])
def test_bad_quantiles_and_slacks_are_clear_errors(slack) -> None:
    with pytest.raises(InterlockError, match="quantile"):
        threshold(REFERENCE, 1.5, 0.0)
    with pytest.raises(InterlockError, match="slack") as caught:
        threshold(REFERENCE, 0.5, slack)
    assert caught.value.field == "slack"


def test_the_weight_is_the_capped_per_token_likelihood_ratio_to_the_median() -> None:
    assert shift_weight(3.0, 3.0, 2.0) == 1.0
    assert shift_weight(4.0, 3.0, 2.0) == pytest.approx(math.exp(-1))
    assert shift_weight(1.0, 3.0, 2.0) == 2.0  # exp(2) capped
    assert shift_weight(2.5, 3.0, 2.0) == pytest.approx(math.exp(0.5))
    # less likely, less weight
    assert shift_weight(5.0, 3.0, 2.0) < shift_weight(4.0, 3.0, 2.0) < shift_weight(3.5, 3.0, 2.0)


def test_filter_keeps_what_is_as_likely_as_the_policys_own_turns() -> None:
    decisions = filter_corrections([2.0, 4.5, 4.0, None, 9.0], REFERENCE, quantile=0.75, slack=0.0, cap=1.5)
    assert [d.kept for d in decisions] == [True, False, True, False, False]
    assert decisions[0].weight == pytest.approx(1.5)  # exp(3 - 2) > cap
    assert decisions[2].weight == pytest.approx(math.exp(-1.0))  # at the threshold (4.0): kept
    assert decisions[0].reason.startswith("kept") and "4.0000" in decisions[0].reason
    assert decisions[1] == FilterDecision(False, 0.0, "shifted: NLL 4.5000 > threshold 4.0000")
    assert decisions[3].reason.startswith("not scored: ") and decisions[3].weight == 0.0
    assert all(d.weight == 0.0 for d in decisions if not d.kept)
    assert filter_corrections([], REFERENCE, quantile=0.5, slack=0.0, cap=1.0) == []
    with pytest.raises(InterlockError, match="no reference NLL"):
        filter_corrections([1.0], [], quantile=0.5, slack=0.0, cap=1.0)
    with pytest.raises(AttributeError):
        decisions[0].kept = False  # frozen


def test_histogram_rows_are_bin_centres_and_counts() -> None:
    rows = histogram([0.1, 0.2, 1.5, None, 2.0], [0.0, 1.0, 2.0])
    assert rows == [{"nll": 0.5, "count": 2}, {"nll": 1.5, "count": 2}]  # the last bin is closed


def test_plot_rows_share_bins_and_draw_the_threshold_as_a_line() -> None:
    accepted, corrections = [1.0, 1.5, 2.0, 2.5], [2.0, 5.0, None]
    rows = nll_plot_rows(accepted, corrections, 3.0, bins=4)
    assert sorted(rows) == ["accepted", "corrections", "threshold"]
    assert [r["nll"] for r in rows["accepted"]] == [r["nll"] for r in rows["corrections"]]
    assert [r["nll"] for r in rows["accepted"]] == [1.5, 2.5, 3.5, 4.5]  # edges 1, 2, 3, 4, 5
    assert [sum(r["count"] for r in rows[series]) for series in ("accepted", "corrections")] == [4, 2]
    tallest = max(r["count"] for series in ("accepted", "corrections") for r in rows[series])
    assert rows["threshold"] == [{"nll": 3.0, "count": 0}, {"nll": 3.0, "count": tallest}]
    assert all(set(r) == {"nll", "count"} for series in rows.values() for r in series)
    # the bins stretch to a threshold beyond every value, so the line is on the plot
    wide = nll_plot_rows([1.0, 2.0], [1.5], 9.0, bins=8)
    assert wide["accepted"][-1]["nll"] == pytest.approx(8.5)
    assert nll_plot_rows([], [None], 3.0) == {"accepted": [], "corrections": [], "threshold": []}
    same = nll_plot_rows([2.0, 2.0], [], 2.0, bins=2)  # one value: numpy widens the range to draw it
    assert sum(r["count"] for r in same["accepted"]) == 2
