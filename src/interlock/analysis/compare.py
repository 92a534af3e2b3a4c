"""Whether two runs of the pipeline wrote the same artifacts, stage by stage: what a refactor
must leave unchanged (``interlock compare-runs A B``).

Read from each run's ``dvc.lock``, the md5 DVC recorded for every output. An output whose bytes
differ is looked at again: a metrics JSON that is equal once its measured timings are dropped, or
a file of timings (``metrics/timing/``, ``*timings.parquet``), differs only in what the machine
measured; anything else is a difference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from interlock.core.errors import InterlockError

#: keys of measured time, speed and memory (``seconds``, ``tokens_per_second``, ``peak_rss_mib``)
TIMING_KEY = re.compile(r"seconds|per_second|rss|mib")


@dataclass(frozen=True)
class StageComparison:
    stage: str
    same: tuple[str, ...]  # outputs with the same bytes
    timings_only: tuple[str, ...]  # outputs that differ only in measured timings
    differing: tuple[str, ...]  # outputs that differ otherwise, or that one run lacks


def compare_runs(first: Path, second: Path) -> list[StageComparison]:
    """Every stage of ``first``'s lock file against ``second``'s, in the lock file's order."""
    locks = [_outputs(Path(root)) for root in (first, second)]
    comparisons = []
    for stage, outputs in locks[0].items():
        others = locks[1].get(stage, {})
        same, timings, differing = [], [], []
        for path, md5 in outputs.items():
            if others.get(path) == md5:
                same.append(path)
            elif path in others and _timings_only(Path(first) / path, Path(second) / path):
                timings.append(path)
            else:
                differing.append(path)
        differing += [path for path in others if path not in outputs]
        comparisons.append(StageComparison(stage, tuple(same), tuple(timings), tuple(differing)))
    comparisons += [StageComparison(stage, (), (), tuple(outputs)) for stage, outputs in locks[1].items()
                    if stage not in locks[0]]
    return comparisons


def _outputs(root: Path) -> dict[str, dict[str, str]]:
    """stage -> output path -> the md5 DVC recorded for it."""
    path = root / "dvc.lock"
    try:
        stages = yaml.safe_load(path.read_text(encoding="utf-8"))["stages"]
        return {name: {out["path"]: out["md5"] for out in stage.get("outs", [])}
                for name, stage in stages.items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise InterlockError(f"not a lock file of a finished run: {exc}", file=str(path)) from None


def _timings_only(first: Path, second: Path) -> bool:
    if "timing" in first.name or "timing" in first.parent.name:
        return True
    if first.suffix != ".json":
        return False
    try:
        return _untimed(json.loads(first.read_text())) == _untimed(json.loads(second.read_text()))
    except (OSError, ValueError):
        return False


def _untimed(value: object) -> object:
    if isinstance(value, dict):
        return {key: _untimed(item) for key, item in value.items() if not TIMING_KEY.search(str(key))}
    if isinstance(value, list):
        return [_untimed(item) for item in value]
    return value
