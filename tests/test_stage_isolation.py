"""Every stage runs the library of the checkout it runs in (``PYTHONPATH=src`` in dvc.yaml), not the
one the editable install points at: a queued experiment runs in a copy under .dvc/tmp/exps/, and
code edited in the workspace while the queue runs must not leak into its experiments."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from helpers.repo import BIN, REPO, run


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
