"""What the tests that run model-written checks need of this machine's sandbox boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.judging.boundary import Mode
from interlock.judging.sandbox import boundary_mode, run_script


def require_boundary(workspace: Path) -> Mode:
    """The mode model-written checks run under here. Where the machine has no boundary, a check
    must be refused with the recorded reason (asserted), and a test that needs the boundary to
    run one stops there: skipped, saying why."""
    mode = boundary_mode()
    if not mode.available:
        refused = run_script("pass", workspace)
        assert not refused.passed and refused.reason.startswith("refused") and mode.detail in refused.reason
        pytest.skip(f"no sandbox boundary on this machine (recorded: {mode.detail})")
    return mode
