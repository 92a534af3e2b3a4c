"""``interlock compare-runs``: two runs' artifacts stage by stage, measured timings aside."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from interlock.analysis.cli import main
from interlock.analysis.compare import compare_runs
from interlock.core.errors import InterlockError


def _run(root: Path, files: dict[str, str]) -> Path:
    """A finished run at ``root`` of one stage, ``judge``, that wrote ``files``: its lock file
    records their md5 as DVC does."""
    outs = []
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        outs.append({"path": path, "md5": hashlib.md5(text.encode()).hexdigest()})
    (root / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"judge": {"outs": outs}}}))
    return root


def _metrics(seconds: float, accepted: int) -> str:
    return json.dumps({"accepted": accepted, "seconds": seconds,
                       "by_pool": {"rft": {"tokens_per_second": seconds}}})


FIRST = {"data/judge/verdicts.parquet": "rows", "metrics/judge.json": _metrics(1.5, 3),
         "metrics/timing/judge.json": '{"seconds": 9}'}


def test_measured_timings_are_no_difference_and_anything_else_is(tmp_path: Path) -> None:
    first = _run(tmp_path / "a", FIRST)
    timed = _run(tmp_path / "b", {**FIRST, "metrics/judge.json": _metrics(2.5, 3),
                                  "metrics/timing/judge.json": '{"seconds": 7}'})
    (judge,) = compare_runs(first, timed)
    assert (judge.same, judge.differing) == (("data/judge/verdicts.parquet",), ())
    assert set(judge.timings_only) == {"metrics/judge.json", "metrics/timing/judge.json"}
    changed = _run(tmp_path / "c", {**FIRST, "metrics/judge.json": _metrics(1.5, 4),
                                    "data/judge/verdicts.parquet": "other rows"})
    (judge,) = compare_runs(first, changed)
    assert set(judge.differing) == {"data/judge/verdicts.parquet", "metrics/judge.json"}


def test_the_command_fails_naming_the_stages_that_differ(tmp_path: Path, capsys) -> None:
    first = _run(tmp_path / "a", FIRST)
    assert main(["compare-runs", str(first), str(_run(tmp_path / "b", FIRST))]) == 0
    assert "every stage wrote the same artifacts" in capsys.readouterr().out
    missing = _run(tmp_path / "c", {k: v for k, v in FIRST.items() if "parquet" not in k})
    assert main(["compare-runs", str(first), str(missing)]) == 1
    assert "1 stages wrote other artifacts: judge" in capsys.readouterr().err


def test_a_run_without_a_lock_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InterlockError, match="not a lock file") as error:
        compare_runs(tmp_path, tmp_path)
    assert error.value.file == str(tmp_path / "dvc.lock")
