"""What every stage script shares: read params.yaml, find the artifacts, report errors plainly,
and hand what the stage measured to W&B tracking."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from interlock.artifacts import Artifacts
from interlock.config import Params, load_params
from interlock.errors import InterlockError
from interlock.pipeline import StageTimer
from interlock.tracking import StageReport, log_stage


def run_stage(name: str, main: Callable[[Params, Artifacts], StageReport | None]) -> None:
    """Call ``main(params, artifacts)`` timed; bad input exits with one clear line, no traceback.

    When ``main`` returns a :class:`StageReport` (the stages that produce numbers), it is logged
    to W&B after the stage's work succeeded (outside the timer: ``metrics/timing`` measures the
    stage, not the logging). A W&B failure never fails the stage: it prints one warning line and
    the stage still exits 0. The stage's outputs and its DVC metrics are the record; W&B is a copy
    of them for browsing. A non-zero exit would make DVC drop the stage's result (no dvc.lock
    entry, nothing cached), and a queued experiment would lose its temporary workspace, and with
    it hours of rollouts or training, over an unreachable server or a full disk. The warning names
    the stage in the ``dvc repro`` / queue log; its numbers are still in ``metrics/``.
    """
    try:
        params = load_params()
        with StageTimer(Path("metrics/timing") / f"{name}.json"):
            report = main(params, Artifacts(Path(params.data_dir)))
    except InterlockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    if report is not None:
        track(params, name, report)


def track(params: Params, name: str, report: StageReport) -> Path | None:
    """Log ``report`` to W&B; on any failure print one warning line and return None."""
    try:
        run_dir = log_stage(params, name, report)
    except Exception as exc:  # tracking must never cost the stage its outputs
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"warning: {name}: W&B tracking failed ({type(exc).__name__}: {reason}); the stage's "
              f"outputs and DVC metrics are kept", file=sys.stderr)
        return None
    if run_dir is not None:
        print(f"{name}: W&B run written to {run_dir}")
    return run_dir
