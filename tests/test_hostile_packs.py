"""Hand-built packs through the pipeline's own review stage on the smoke run: in a copy of the smoke
run, some admitted tasks' packs are replaced by the same tasks built by hand with one defect each
(a mandatory criterion made optional, the guard's documents widened, an outcome stated by the
subject's name or in base64, a memo asking the grader for a verdict, a request asking for work its
contract does not require), then `dvc repro -s review` runs the review again. Each hand-built pack
is refused with its reason; every other task (the clean twins: the same packs the smoke run
admitted) is admitted as before.
"""

from __future__ import annotations

import shutil

import pytest

from interlock.analysis.artifacts import params_paths
from interlock.core import schemas
from interlock.core.io import read_rows, write_table_set
from interlock.synthesis.packs import pack_rows
from interlock.synthesis.tasks import iter_graphs, iter_packs, load_domains
from interlock.testing.hostile_packs import DEFECTS, fits

from helpers.repo import dvc


def _verdicts(paths) -> dict[str, dict]:
    rows = read_rows(paths.review / "verdicts.parquet", schemas.REVIEW_TABLES["verdicts"])
    return {v["task_id"]: v for v in rows}


@pytest.fixture(scope="module")
def reviewed(smoke_repo, tmp_path_factory) -> tuple[dict, dict, dict]:
    """(task id -> defect, the verdicts before, the verdicts after) of the copy."""
    root = tmp_path_factory.mktemp("hostile-packs") / "smoke"
    shutil.copytree(smoke_repo, root, ignore=shutil.ignore_patterns("wandb"))
    paths = params_paths(root / "params.yaml")
    catalog = load_domains(paths.domains)
    before = _verdicts(paths)
    admitted = [t for t, v in before.items() if v["admitted"]]
    graphs = {g.task_id: g for group in iter_graphs(paths.graphs) for g in group}
    chosen: dict[str, str] = {}
    for name in DEFECTS:
        chosen[next(t for t in admitted if t not in chosen
                    and fits(name, graphs[t], catalog[graphs[t].domain_id]))] = name
    groups = []
    for group in iter_packs(paths.packs):
        rows: dict[str, list[dict]] = {name: [] for name in schemas.PACK_TABLES}
        for pack in group:
            if pack.task_id in chosen:
                graph = graphs[pack.task_id]
                pack = DEFECTS[chosen[pack.task_id]][0](graph, catalog[graph.domain_id], pack)
            for name, table in pack_rows(pack).items():
                rows[name] += table
        groups.append(rows)
    with write_table_set(paths.packs, schemas.PACK_TABLES) as tables:
        for rows in groups:
            tables.write(rows)
    dvc("repro", "-s", "review", cwd=root)
    after = _verdicts(paths)
    return chosen, before, after


def test_every_hand_built_defect_is_refused_by_its_review(reviewed) -> None:
    chosen, before, after = reviewed
    assert sorted(chosen.values()) == sorted(DEFECTS)
    for task_id, name in chosen.items():
        _, flag, words = DEFECTS[name]
        verdict = after[task_id]
        assert before[task_id]["admitted"] and not verdict["admitted"], name
        assert verdict[flag] is False, (name, verdict)
        assert any(words in reason for reason in verdict["reasons"]), (name, verdict)


def test_every_other_task_is_reviewed_as_before(reviewed) -> None:
    chosen, before, after = reviewed
    assert set(before) == set(after)
    for task_id, verdict in after.items():
        if task_id not in chosen:
            assert verdict == before[task_id], task_id
