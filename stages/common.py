"""What every stage script shares: read params.yaml, find the artifacts, report errors plainly."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from interlock.artifacts import Artifacts
from interlock.config import Params, load_params
from interlock.errors import InterlockError
from interlock.pipeline import StageTimer


def run_stage(name: str, main: Callable[[Params, Artifacts], None]) -> None:
    """Call ``main(params, artifacts)`` timed; bad input exits with one clear line, no traceback."""
    try:
        params = load_params()
        with StageTimer(Path("metrics/timing") / f"{name}.json"):
            main(params, Artifacts(Path(params.data_dir)))
    except InterlockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
