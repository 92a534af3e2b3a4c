"""What every stage script shares: read params.yaml, name the data paths, report errors plainly."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from interlock.config import Params, load_params
from interlock.errors import InterlockError


def run_stage(main: Callable[[Params, Path], None]) -> None:
    """Call ``main(params, data_dir)``; bad input exits with one clear line, not a traceback."""
    try:
        params = load_params()
        main(params, Path(params.data_dir))
    except InterlockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
