"""Every stage runs the library of the checkout it runs in (``PYTHONPATH=src`` in dvc.yaml), not the
one the editable install points at: a queued experiment runs in a copy under .dvc/tmp/exps/, and
code edited in the workspace while the queue runs must not leak into its experiments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from helpers.repo import BIN, REPO, command_timeout, run


def test_every_stage_command_puts_its_checkouts_library_first() -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert {name: stage["cmd"].split()[0] for name, stage in stages.items()} == {
        name: "PYTHONPATH=src" for name in stages}


def test_a_stage_in_a_copy_imports_the_copys_library(smoke_repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(smoke_repo, copy, ignore=shutil.ignore_patterns("wandb"))
    marker = tmp_path / "imported_from.txt"
    init = copy / "src" / "interlock" / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8")
                    + f"\nimport pathlib as _p\n_p.Path({str(marker)!r}).write_text(__file__)\n",
                    encoding="utf-8")
    run([str(BIN / "dvc"), "repro", "--force", "--single-item", "sample"], copy)
    assert Path(marker.read_text(encoding="utf-8")).resolve() == init.resolve()


def test_the_sandbox_judges_with_the_checks_of_the_checkout_it_runs_in(tmp_path: Path) -> None:
    """The check workers start with ``python -I``, which keeps the caller's path out: they must
    still import the checks of the checkout the judge runs from (a queued experiment's copy), not
    the installed package's. A copy of the library grows a check op of its own; a judge started
    from the copy runs it."""
    copy = tmp_path / "src"
    shutil.copytree(REPO / "src", copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    checks = copy / "interlock" / "synthesis" / "checks.py"
    checks.write_text(checks.read_text(encoding="utf-8")
                      + '\n_OPS["copy_marker"] = lambda spec, view: (True, "the copy\'s checks")\n',
                      encoding="utf-8")
    (tmp_path / "ws").mkdir()
    probe = ("from interlock.judging.sandbox import SandboxWorkers\n"
             "with SandboxWorkers(1) as pool:\n"
             f"    print(pool.run([({str(tmp_path / 'ws')!r}, [{{'op': 'copy_marker'}}])])[0][0].evidence)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(copy)},
                          timeout=command_timeout())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the copy's checks"
